//! `/v1/chat/completions` streams OpenAI chunk JSON as server-sent events.

use serde_json::{Value, json};

use crate::support::*;

fn chat_config(endpoint: &str, kind: &str) -> String {
    format!(
        r#"
[model.chat.http]
kind = "{kind}"
api_endpoint = "{endpoint}/v1"
api_key = "sk-chat"
model_name = "chat-model"
supported_models = ["chat-model", "other-model"]
"#
    )
}

/// Reads an SSE body into its `data:` payloads.
fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| {
                    l.strip_prefix("data:")
                        .map(|d| d.strip_prefix(' ').unwrap_or(d))
                })
                .collect();
            (!data.is_empty()).then(|| data.join("\n"))
        })
        .collect()
}

#[tokio::test]
async fn streams_chunks_for_both_paths_and_fills_the_model() {
    let fake = FakeServer::start(
        Protocol::OpenAi,
        Script::default().pieces(["Hel", "lo", "!"]),
    )
    .await;
    let mut server = TabbyServer::start(&chat_config(&fake.url(), "openai/chat"));
    for path in ["/v1/chat/completions", "/v1beta/chat/completions"] {
        let response = client()
            .post(server.url(path))
            .header("x-tabby-user", "bob")
            .json(&json!({"model": "", "stream": true, "messages": [{"role": "user", "content": "Say hello"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream"),
            "{path}"
        );
        let body = response.text().await.unwrap();
        let data = sse_data(&body);
        assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{body}");
        let mut content = String::new();
        for payload in &data[..data.len() - 1] {
            let chunk: Value = serde_json::from_str(payload).expect("chunk is JSON");
            assert_eq!(chunk["object"], "chat.completion.chunk");
            if let Some(piece) = chunk["choices"][0]["delta"]["content"].as_str() {
                content.push_str(piece);
            }
        }
        assert_eq!(content, "Hello!", "{path}");
    }
    let request = fake
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with("/chat/completions"))
        .unwrap();
    assert_eq!(request.body["model"], "chat-model");
    assert_eq!(request.body["stream"], true);
    assert_eq!(request.body["user"], "bob");
    assert_eq!(request.authorization(), Some("Bearer sk-chat"));

    // One chat_completion event per stream.
    server.terminate();
    let events = read_events(server.root());
    let chats = events
        .iter()
        .filter(|e| e["event"] == json!({"chat_completion": {}}))
        .count();
    assert_eq!(chats, 2, "{events:#?}");
}

#[tokio::test]
async fn unsupported_model_falls_back_and_mistral_drops_fields() {
    let fake = FakeServer::start(Protocol::Mistral, Script::default().pieces(["ok"])).await;
    let server = TabbyServer::start(&chat_config(&fake.url(), "mistral/chat"));
    let response = client()
        .post(server.url("/v1/chat/completions"))
        .json(
            &json!({"model": "gpt-unknown", "stream": true, "presence_penalty": 0.5,
                      "messages": [{"role": "user", "content": "hi"}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let _ = response.text().await.unwrap();
    let request = fake
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with("/chat/completions"))
        .unwrap();
    assert_eq!(request.body["model"], "chat-model");
    assert!(
        request
            .body
            .get("presence_penalty")
            .is_none_or(Value::is_null),
        "{}",
        request.body
    );
}

#[tokio::test]
async fn upstream_error_is_reported_not_streamed_empty() {
    let fake = FakeServer::start(Protocol::OpenAi, Script::default().error_status(503)).await;
    let server = TabbyServer::start(&chat_config(&fake.url(), "openai/chat"));
    let response = client()
        .post(server.url("/v1/chat/completions"))
        .json(&json!({"model": "", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.text().await.unwrap();
    // Either the stream could not be created (a gateway error), or it carries an error event.
    if status == 200 {
        assert!(body.contains("\"error\""), "{body}");
    } else {
        assert!(status == 502 || status == 503, "{status} {body}");
    }
}
