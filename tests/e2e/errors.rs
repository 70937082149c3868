//! Bad input and failing backends get clear 4xx/5xx JSON errors, never a crash.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

async fn raw_post(url: &str, content_type: Option<&str>, body: Vec<u8>) -> (u16, Value) {
    let mut request = client().post(url).body(body);
    if let Some(ct) = content_type {
        request = request.header("content-type", ct);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn assert_error(status: u16, body: &Value, expected: u16, needle: &str) {
    assert_eq!(status, expected, "{body}");
    let message = body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no JSON error: {body}"));
    assert!(
        message.to_lowercase().contains(&needle.to_lowercase()),
        "error {message:?} should mention {needle:?}"
    );
}

#[tokio::test]
async fn malformed_requests() {
    let fake = FakeServer::start(Protocol::LlamaCpp, Script::default()).await;
    let server = TabbyServer::start(&llama_completion_config(&fake.url()));
    let url = server.url("/v1/completions");

    let (s, b) = raw_post(&url, Some("application/json"), b"{not json".to_vec()).await;
    assert_error(s, &b, 400, "json");

    let (s, b) = raw_post(
        &url,
        Some("text/plain"),
        br#"{"segments":{"prefix":"x"}}"#.to_vec(),
    )
    .await;
    assert_error(s, &b, 415, "content-type");

    let (s, b) = raw_post(&url, None, br#"{"segments":{"prefix":"x"}}"#.to_vec()).await;
    assert_error(s, &b, 415, "content-type");

    let (s, b) = post_json(&url, &json!({"segments": {"suffix": "x"}})).await;
    assert_error(s, &b, 422, "prefix");

    let (s, b) = post_json(&url, &json!({"segments": {"prefix": 42}})).await;
    assert_error(s, &b, 422, "prefix");

    let (s, b) = post_json(&url, &json!({"segments": {"prefix": "x", "relevant_snippets_from_changed_files": [{"filepath": "a", "body": "b"}]}})).await;
    assert_error(s, &b, 422, "score");

    let (s, b) = post_json(&url, &json!({"language": "python"})).await;
    assert_error(s, &b, 400, "segments");

    let (s, b) = post_json(
        &url,
        &json!({"mode": "sideways", "segments": {"prefix": "x"}}),
    )
    .await;
    assert_error(s, &b, 422, "mode");

    // Invalid UTF-8 inside a JSON string.
    let mut body = br#"{"segments":{"prefix":""#.to_vec();
    body.extend_from_slice(&[0xff, 0xfe, 0xfd]);
    body.extend_from_slice(br#""}}"#);
    let (s, b) = raw_post(&url, Some("application/json"), body).await;
    assert_eq!(s, 400, "{b}");
    assert!(b["error"].is_string());

    // A body over 1 MiB.
    let big = json!({"segments": {"prefix": "y".repeat(1024 * 1024 + 10)}});
    let (s, b) = post_json(&url, &big).await;
    assert_eq!(s, 413, "{b}");
    assert!(b["error"].is_string());

    let (s, b) = post_json(
        &server.url("/v1/events"),
        &json!({"type": "launch", "completion_id": "c", "choice_index": 0}),
    )
    .await;
    assert_error(s, &b, 400, "launch");

    let (s, b) = post_json(
        &server.url("/v1/events"),
        &json!({"type": "view", "choice_index": 0}),
    )
    .await;
    assert_error(s, &b, 422, "completion_id");

    let (s, b) = post_json(
        &server.url("/v1/chat/completions"),
        &json!({"messages": "hi"}),
    )
    .await;
    assert_eq!(s, 422, "{b}");

    let (s, b) = get_json(&server.url("/v2/nothing")).await;
    assert_error(s, &b, 404, "/v2/nothing");

    // The server survived all of it.
    let (s, _) = get_json(&server.url("/v1/health")).await;
    assert_eq!(s, 200);
}

#[tokio::test]
async fn missing_default_weights_are_a_clear_503_naming_tabby_download() {
    // No [model] sections: the embedded defaults, whose weights are not in this fresh root.
    let server = TabbyServer::start("");
    let (s, b) = post_json(
        &server.url("/v1/completions"),
        &json!({"segments": {"prefix": "x"}}),
    )
    .await;
    assert_error(s, &b, 503, "tabby download");
    assert_no_internals(&b);
    let (s, b) = post_json(
        &server.url("/v1/chat/completions"),
        &json!({"model": "", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_error(s, &b, 503, "tabby download");
    assert_no_internals(&b);
    let (s, health) = get_json(&server.url("/v1/health")).await;
    assert_eq!(s, 200);
    assert_eq!(
        health["models"]["completion"],
        json!({"local": {"model_id": "TabbyML/Qwen2.5-Coder-0.5B-Instruct", "device": "cpu"}})
    );
}

#[tokio::test]
async fn slow_model_is_408() {
    let fake = FakeServer::start(
        Protocol::LlamaCpp,
        Script::default().delay(Duration::from_secs(5)),
    )
    .await;
    let config = format!(
        "[server]\ncompletion_timeout = 1\n{}",
        llama_completion_config(&fake.url())
    );
    let server = TabbyServer::start(&config);
    let (s, b) = post_json(
        &server.url("/v1/completions"),
        &json!({"segments": {"prefix": "x"}}),
    )
    .await;
    assert_error(s, &b, 408, "completion_timeout");
}

#[tokio::test]
async fn failing_or_missing_backend_is_a_gateway_error() {
    let fake = FakeServer::start(Protocol::LlamaCpp, Script::default().error_status(500)).await;
    let server = TabbyServer::start(&llama_completion_config(&fake.url()));
    let (s, b) = post_json(
        &server.url("/v1/completions"),
        &json!({"segments": {"prefix": "x"}}),
    )
    .await;
    assert_eq!(s, 502, "{b}");
    assert!(b["error"].as_str().unwrap().contains("500"), "{b}");

    // Nothing listens on this port: the model is unreachable.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let server = TabbyServer::start(&llama_completion_config(&format!(
        "http://127.0.0.1:{closed}"
    )));
    let (s, b) = post_json(
        &server.url("/v1/completions"),
        &json!({"segments": {"prefix": "x"}}),
    )
    .await;
    assert_eq!(s, 503, "{b}");
}

/// An error body names no server path and carries no backtrace.
fn assert_no_internals(body: &serde_json::Value) {
    let text = body.to_string();
    for leak in [
        "/tmp/",
        "/root/",
        ".tabby/",
        "backtrace",
        "stack backtrace",
        "src/",
        ".rs:",
    ] {
        assert!(!text.contains(leak), "{leak:?} in {text}");
    }
}
