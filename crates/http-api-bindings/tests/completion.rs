//! Completion kinds against fake servers: the exact request each upstream receives, the streamed
//! text, the prompt template handed back, and how failures are reported.

mod common;

use common::{closed_endpoint, collect, config, options};
use fake_model_servers::{FakeServer, OLLAMA_MODEL_NAME, Protocol, Script};
use http_api_bindings::{BindingError, COMPLETION_KINDS, create_completion};
use serde_json::{Value, json};
use tabby_common::config::HttpModelConfig;
use tabby_inference::ModelError;

const FIM: &str = "{prefix}<|FIM|>{suffix}";
const STARCODER: &str = "<fim_prefix>{prefix}<fim_suffix>{suffix}<fim_middle>";

/// Runs one completion of `prompt` and returns the text, the template and the request received.
async fn complete(
    server: &FakeServer,
    config: &HttpModelConfig,
    prompt: &str,
) -> (String, Option<String>, Value) {
    let (backend, template) = create_completion(config).expect("valid config");
    let (pieces, error) = collect(backend.generate(prompt, options()).await).await;
    assert!(error.is_none(), "{error:?}");
    let request = server.last_request().expect("a request");
    (pieces.concat(), template, request.body)
}

#[tokio::test]
async fn llama_cpp_sends_native_completion_request() {
    let server = FakeServer::start(Protocol::LlamaCpp, Script::default()).await;
    let mut config = config("llama.cpp/completion", Some(format!("{}/", server.url())));
    config.prompt_template = Some(STARCODER.into());
    config.api_key = Some("k".into());
    let (text, template, body) = complete(&server, &config, "def f(").await;
    assert_eq!(text, "hello world");
    assert_eq!(template.as_deref(), Some(STARCODER));
    assert_eq!(
        body,
        json!({
            "seed": 42, "prompt": "def f(", "n_predict": 8, "temperature": 0.5,
            "stream": true, "penalty_last_n": 0, "presence_penalty": 0.25,
        })
    );
    let request = server.last_request().expect("request");
    assert_eq!(request.path, "/completion");
    assert_eq!(request.authorization(), Some("Bearer k"));
}

#[tokio::test]
async fn fim_kinds_split_prompt_and_suffix_at_first_marker() {
    let server = FakeServer::start(Protocol::OpenAi, Script::default().pieces(["x"])).await;
    for kind in [
        "openai/completion",
        "openai/legacy_completion",
        "deepseek/completion",
    ] {
        let mut config = config(kind, Some(format!("{}/v1", server.url())));
        config.model_name = Some("m".into());
        config.prompt_template = Some(STARCODER.into());
        let (text, template, body) = complete(&server, &config, "a<|FIM|>b<|FIM|>c").await;
        assert_eq!(text, "x", "{kind}");
        assert_eq!(
            template.as_deref(),
            Some(FIM),
            "{kind}: the config template is ignored"
        );
        assert_eq!(
            body,
            json!({
                "model": "m", "prompt": "a", "suffix": "b<|FIM|>c", "max_tokens": 8,
                "temperature": 0.5, "stream": true, "presence_penalty": 0.25,
            }),
            "{kind}"
        );
        assert_eq!(
            server.last_request().expect("request").path,
            "/v1/completions"
        );
        assert_eq!(
            server.last_request().expect("request").authorization(),
            None
        );
    }
}

#[tokio::test]
async fn no_fim_kinds_send_whole_prompt_with_null_suffix() {
    let server = FakeServer::start(Protocol::OpenAi, Script::default()).await;
    for kind in ["openai/legacy_completion_no_fim", "vllm/completion"] {
        let mut config = config(kind, Some(server.url()));
        config.model_name = Some("m".into());
        config.prompt_template = Some(STARCODER.into());
        config.api_key = Some("sk".into());
        let (text, template, body) = complete(&server, &config, "a<|FIM|>b").await;
        assert_eq!(text, "hello world");
        assert_eq!(template.as_deref(), Some(STARCODER), "{kind}");
        assert_eq!(body["prompt"], "a<|FIM|>b", "{kind}");
        assert_eq!(body["suffix"], Value::Null, "{kind}");
        let request = server.last_request().expect("request");
        assert_eq!(request.path, "/completions");
        assert_eq!(request.authorization(), Some("Bearer sk"));
    }
}

#[tokio::test]
async fn mistral_sends_fim_request_with_bearer_key() {
    let server = FakeServer::start(Protocol::Mistral, Script::default()).await;
    let mut config = config("mistral/completion", Some(server.url()));
    config.api_key = Some("mk".into());
    let (text, template, body) = complete(&server, &config, "pre<|FIM|>suf").await;
    assert_eq!(text, "hello world");
    assert_eq!(template.as_deref(), Some(FIM));
    assert_eq!(
        body,
        json!({
            "prompt": "pre", "suffix": "suf", "model": "codestral-latest", "temperature": 0.5,
            "max_tokens": 8, "stream": true, "random_seed": 42,
        })
    );
    let request = server.last_request().expect("request");
    assert_eq!(request.path, "/v1/fim/completions");
    assert_eq!(request.authorization(), Some("Bearer mk"));
}

#[tokio::test]
async fn ollama_uses_raw_mode_and_resolves_the_model_once() {
    let server = FakeServer::start(Protocol::Ollama, Script::default()).await;
    let config = config("ollama/completion", Some(server.url()));
    let (backend, template) = create_completion(&config).expect("valid config");
    assert_eq!(template, None);
    assert_eq!(server.request_count(), 0, "no network I/O at construction");
    for _ in 0..2 {
        let (pieces, error) = collect(backend.generate("p", options()).await).await;
        assert!(error.is_none(), "{error:?}");
        assert_eq!(pieces.concat(), "hello world");
    }
    assert_eq!(
        server.requests_to("/api/tags").len(),
        1,
        "model lookup is cached"
    );
    assert_eq!(
        server.requests_to("/api/generate")[0].body,
        json!({
            "model": OLLAMA_MODEL_NAME, "prompt": "p", "raw": true, "stream": true,
            "options": { "num_predict": 8, "seed": 42, "repeat_last_n": 0, "temperature": 0.5 },
        })
    );
}

#[tokio::test]
async fn ollama_with_model_name_skips_the_lookup() {
    let server = FakeServer::start(Protocol::Ollama, Script::default()).await;
    let mut config = config("ollama/completion", Some(server.url()));
    config.model_name = Some("qwen".into());
    let (_, _, body) = complete(&server, &config, "p").await;
    assert_eq!(body["model"], "qwen");
    assert!(server.requests_to("/api/tags").is_empty());
}

#[tokio::test]
async fn upstream_error_status_becomes_backend_error() {
    let server = FakeServer::start(Protocol::LlamaCpp, Script::default().error_status(503)).await;
    let config = config("llama.cpp/completion", Some(server.url()));
    let (backend, _) = create_completion(&config).expect("valid config");
    let (pieces, error) = collect(backend.generate("p", options()).await).await;
    assert!(pieces.is_empty());
    match error {
        Some(ModelError::Backend(message)) => {
            assert!(message.contains("503"), "{message}");
            assert!(message.contains("fake error"), "{message}");
        }
        other => panic!("expected a backend error, got {other:?}"),
    }
}

#[tokio::test]
async fn unreachable_upstream_is_unavailable() {
    let endpoint = closed_endpoint().await;
    for kind in [
        "llama.cpp/completion",
        "openai/completion",
        "ollama/completion",
    ] {
        let mut config = config(kind, Some(endpoint.clone()));
        config.model_name = Some("m".into());
        let (backend, _) = create_completion(&config).expect("construction does no I/O");
        let (_, error) = collect(backend.generate("p", options()).await).await;
        assert!(
            matches!(error, Some(ModelError::Unavailable(_))),
            "{kind}: {error:?}"
        );
    }
}

#[test]
fn unknown_kind_lists_the_completion_kinds() {
    let Err(error) = create_completion(&config("openai/chat", Some("http://x".into()))) else {
        panic!("openai/chat is not a completion kind");
    };
    assert!(matches!(error, BindingError::UnknownKind { .. }));
    let message = error.to_string();
    assert!(message.contains("\"openai/chat\""), "{message}");
    for kind in COMPLETION_KINDS {
        assert!(message.contains(kind), "{message} should list {kind}");
    }
}

#[test]
fn missing_keys_are_named() {
    let cases = [
        (
            config("llama.cpp/completion", None),
            "api_endpoint is required for kind llama.cpp/completion",
        ),
        (
            config("ollama/completion", None),
            "api_endpoint is required for kind ollama/completion",
        ),
        (
            config("openai/completion", Some("http://x".into())),
            "model_name is required for kind openai/completion",
        ),
        (
            config("vllm/completion", Some("http://x".into())),
            "model_name is required for kind vllm/completion",
        ),
        (
            config("mistral/completion", None),
            "api_key is required for kind mistral/completion",
        ),
    ];
    for (config, expected) in cases {
        match create_completion(&config) {
            Err(error) => assert_eq!(error.to_string(), expected),
            Ok(_) => panic!("{} should need a key", config.kind),
        }
    }
}
