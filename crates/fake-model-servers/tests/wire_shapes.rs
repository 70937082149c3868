//! Each fake answers with the real wire shape of its protocol, records what it received, and
//! follows its script (error status, delay, instant mode, embedding dimension).

use std::time::{Duration, Instant};

use fake_model_servers::{FakeServer, OLLAMA_MODEL_NAME, Protocol, Script, fake_embedding};
use serde_json::{Value, json};

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("reqwest client")
}

async fn post(server: &FakeServer, path: &str, body: Value) -> (u16, String) {
    let response = client()
        .post(format!("{}{path}", server.url()))
        .bearer_auth("secret")
        .json(&body)
        .send()
        .await
        .expect("request sent");
    let status = response.status().as_u16();
    (status, response.text().await.expect("body read"))
}

/// The JSON payloads of `data:` lines, with `[DONE]` kept as a string.
fn sse_data(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap_or_else(|_| Value::String(data.into())))
        .collect()
}

#[tokio::test]
async fn openai_streams_text_completion_chunks_then_done() {
    let server = FakeServer::start(Protocol::OpenAi, Script::default().pieces(["a", "b"])).await;
    for path in ["/v1/completions", "/completions"] {
        let (status, text) = post(
            &server,
            path,
            json!({"model": "m", "prompt": "p", "stream": true}),
        )
        .await;
        assert_eq!(status, 200);
        let events = sse_data(&text);
        assert_eq!(events.len(), 4, "{text}");
        assert_eq!(events[0]["object"], "text_completion");
        assert_eq!(events[0]["model"], "m");
        assert_eq!(events[0]["choices"][0]["text"], "a");
        assert_eq!(events[0]["choices"][0]["finish_reason"], Value::Null);
        assert_eq!(events[1]["choices"][0]["text"], "b");
        assert_eq!(events[2]["choices"][0]["finish_reason"], "stop");
        assert_eq!(events[3], json!("[DONE]"));
    }
    let recorded = server.last_request().expect("recorded");
    assert_eq!(recorded.path, "/completions");
    assert_eq!(recorded.method, "POST");
    assert_eq!(recorded.authorization(), Some("Bearer secret"));
    assert_eq!(
        recorded.body,
        json!({"model": "m", "prompt": "p", "stream": true})
    );
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn openai_answers_non_streaming_completion_as_one_json() {
    let server = FakeServer::start(Protocol::OpenAi, Script::default()).await;
    let (_, text) = post(
        &server,
        "/v1/completions",
        json!({"model": "m", "prompt": "p"}),
    )
    .await;
    let body: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(body["choices"][0]["text"], "hello world");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn openai_streams_chat_chunks() {
    let server = FakeServer::start(Protocol::OpenAi, Script::default().pieces(["x", "y"])).await;
    let (status, text) = post(
        &server,
        "/v1/chat/completions",
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true}),
    )
    .await;
    assert_eq!(status, 200);
    let events = sse_data(&text);
    assert_eq!(events.len(), 5, "{text}");
    assert_eq!(events[0]["object"], "chat.completion.chunk");
    assert_eq!(events[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(events[1]["choices"][0]["delta"]["content"], "x");
    assert_eq!(events[2]["choices"][0]["delta"]["content"], "y");
    assert_eq!(events[3]["choices"][0]["finish_reason"], "stop");
    assert_eq!(events[4], json!("[DONE]"));
}

#[tokio::test]
async fn openai_embeddings_are_deterministic_and_indexed() {
    let server = FakeServer::start(Protocol::OpenAi, Script::default().embedding_dim(4)).await;
    let (_, text) = post(
        &server,
        "/v1/embeddings",
        json!({"model": "e", "input": ["one", "two"]}),
    )
    .await;
    let body: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(body["object"], "list");
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": 0, "total_tokens": 0})
    );
    assert_eq!(body["data"][1]["index"], 1);
    assert_eq!(body["data"][1]["object"], "embedding");
    let second: Vec<f32> =
        serde_json::from_value(body["data"][1]["embedding"].clone()).expect("floats");
    assert_eq!(second, fake_embedding("two", 4));
    assert_ne!(fake_embedding("one", 4), fake_embedding("two", 4));
    let norm: f32 = second.iter().map(|x| x * x).sum();
    assert!((norm - 1.0).abs() < 1e-5);

    server.update_script(|s| s.reverse_embedding_order = true);
    let (_, text) = post(
        &server,
        "/embeddings",
        json!({"model": "e", "input": ["one", "two"]}),
    )
    .await;
    let body: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(body["data"][0]["index"], 1);
    assert_eq!(body["data"][1]["index"], 0);
}

#[tokio::test]
async fn llama_cpp_speaks_completion_tokenize_embeddings_and_health() {
    let server = FakeServer::start(Protocol::LlamaCpp, Script::default()).await;
    let (_, text) = post(
        &server,
        "/completion",
        json!({"prompt": "p", "stream": true}),
    )
    .await;
    assert_eq!(
        sse_data(&text),
        vec![
            json!({"content": "hello", "stop": false}),
            json!({"content": " world", "stop": false}),
            json!({"content": "", "stop": true}),
        ]
    );
    let (_, text) = post(&server, "/tokenize", json!({"content": "fn main ( )"})).await;
    let body: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(body["tokens"].as_array().map(Vec::len), Some(4));
    let (_, text) = post(&server, "/embeddings", json!({"content": "abc"})).await;
    let body: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(body[0]["index"], 0);
    let vector: Vec<f32> = serde_json::from_value(body[0]["embedding"][0].clone()).expect("floats");
    assert_eq!(vector, fake_embedding("abc", 8));
    let health = client()
        .get(format!("{}/health", server.url()))
        .send()
        .await
        .expect("health");
    assert_eq!(health.status().as_u16(), 200);
}

#[tokio::test]
async fn ollama_streams_ndjson_and_lists_its_model() {
    let server = FakeServer::start(Protocol::Ollama, Script::default().pieces(["a"])).await;
    let (_, text) = post(
        &server,
        "/api/generate",
        json!({"model": "m", "prompt": "p", "raw": true}),
    )
    .await;
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["response"], "a");
    assert_eq!(lines[0]["done"], false);
    assert_eq!(lines[1]["done"], true);
    let tags: Value = client()
        .get(format!("{}/api/tags", server.url()))
        .send()
        .await
        .expect("tags")
        .json()
        .await
        .expect("json");
    assert_eq!(tags["models"][0]["name"], OLLAMA_MODEL_NAME);
    let (_, text) = post(&server, "/api/embed", json!({"model": "m", "input": ["q"]})).await;
    let body: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(body["model"], "m");
    let vector: Vec<f32> = serde_json::from_value(body["embeddings"][0].clone()).expect("floats");
    assert_eq!(vector, fake_embedding("q", 8));
}

#[tokio::test]
async fn mistral_streams_fim_as_chat_chunks() {
    let server = FakeServer::start(Protocol::Mistral, Script::default().pieces(["z"])).await;
    let (_, text) = post(
        &server,
        "/v1/fim/completions",
        json!({"model": "codestral-latest", "prompt": "a", "suffix": "b", "stream": true}),
    )
    .await;
    let events = sse_data(&text);
    assert_eq!(events[1]["choices"][0]["delta"]["content"], "z");
    assert_eq!(events.last(), Some(&json!("[DONE]")));
}

#[tokio::test]
async fn error_status_and_delay_are_scripted() {
    let server = FakeServer::start(Protocol::OpenAi, Script::default().error_status(503)).await;
    let (status, text) = post(&server, "/v1/completions", json!({"prompt": "p"})).await;
    assert_eq!(status, 503);
    assert!(text.contains("fake error"), "{text}");
    assert_eq!(server.request_count(), 1, "errors are recorded too");

    server.update_script(|s| {
        s.error_status = None;
        s.delay = Some(Duration::from_millis(150));
    });
    let started = Instant::now();
    let (status, _) = post(&server, "/v1/completions", json!({"prompt": "p"})).await;
    assert_eq!(status, 200);
    assert!(started.elapsed() >= Duration::from_millis(150));
}

#[tokio::test]
async fn instant_mode_removes_delays() {
    let script = Script::default().delay(Duration::from_secs(30)).instant();
    assert_eq!(script.delay, None);
    assert_eq!(script.piece_interval, Duration::ZERO);
    let server = FakeServer::start(Protocol::LlamaCpp, script).await;
    let (_, text) = post(
        &server,
        "/completion",
        json!({"prompt": "p", "stream": true}),
    )
    .await;
    assert_eq!(sse_data(&text).len(), 3);
}
