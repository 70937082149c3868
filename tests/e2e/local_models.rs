//! The out-of-the-box server: no `[model]` sections, the embedded defaults from the models
//! directory that `tabby download` fills (scripts/test.sh runs it before the tests).

use serde_json::json;

use crate::support::*;

fn models_dir() -> std::path::PathBuf {
    let dir = std::env::var_os("TABBY_TEST_MODELS_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var("HOME").unwrap()).join(".tabby/models")
        });
    assert!(
        dir.join("TabbyML/Qwen2.5-Coder-0.5B-Instruct/model.gguf")
            .is_file(),
        "the default models are missing from {}: run `tabby download` (scripts/test.sh does)",
        dir.display()
    );
    dir
}

#[tokio::test]
async fn completes_and_chats_from_the_embedded_model_with_nothing_else_running() {
    let dir = models_dir();
    let server = TabbyServer::start_with_env(
        "",
        &["--no-webserver"],
        &[("TABBY_MODEL_CACHE_ROOT", dir.to_str().unwrap())],
    );
    let (status, health) = get_json(&server.url("/v1/health")).await;
    assert_eq!(status, 200);
    assert_eq!(health["model"], "TabbyML/Qwen2.5-Coder-0.5B-Instruct");
    assert_eq!(health["models"]["completion"]["local"]["device"], "cpu");

    let (status, body) = post_json(
        &server.url("/v1/completions"),
        &json!({
            "language": "python",
            "segments": {"prefix": "def fibonacci(n):\n    if n < 2:\n        return n\n    return ", "suffix": "\n"},
            "temperature": 0.0,
            "seed": 1
        }),
    )
    .await;
    assert_eq!(status, 200, "{body}; stderr:\n{}", server.stderr());
    let text = body["choices"][0]["text"].as_str().unwrap();
    assert!(text.contains("fibonacci"), "{text:?}");

    let response = client()
        .post(server.url("/v1/chat/completions"))
        .json(&json!({"model": "", "stream": true, "max_tokens": 16,
                      "messages": [{"role": "user", "content": "Say hello."}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    assert!(body.contains("chat.completion.chunk"), "{body}");
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
}
