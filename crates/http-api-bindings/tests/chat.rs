//! Chat kinds against fake servers: the streamed chunks and the request as the upstream saw it.

mod common;

use async_openai::types::chat::CreateChatCompletionRequest;
use common::{closed_endpoint, collect, config};
use fake_model_servers::{FakeServer, Protocol, Script};
use http_api_bindings::{BindingError, CHAT_KINDS, create_chat};
use serde_json::json;
use tabby_inference::ModelError;

fn request(model: &str) -> CreateChatCompletionRequest {
    serde_json::from_value(json!({
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
        "presence_penalty": 0.5,
        "user": "alice",
        "stream_options": {"include_usage": false},
    }))
    .expect("valid request")
}

#[tokio::test]
async fn openai_chat_streams_chunks_with_configured_model_and_key() {
    let server = FakeServer::start(Protocol::OpenAi, Script::default()).await;
    let mut config = config("openai/chat", Some(format!("{}/v1/", server.url())));
    config.model_name = Some("gpt".into());
    config.api_key = Some("sk".into());
    let chat = create_chat(&config).expect("valid config");
    let stream = chat.chat_stream(request("")).await.expect("stream created");
    let (chunks, error) = collect(stream).await;
    assert!(error.is_none(), "{error:?}");
    let text: String = chunks
        .iter()
        .filter_map(|c| c.choices.first()?.delta.content.clone())
        .collect();
    assert_eq!(text, "hello world");
    let received = server.last_request().expect("request");
    assert_eq!(received.path, "/v1/chat/completions");
    assert_eq!(received.authorization(), Some("Bearer sk"));
    assert_eq!(received.body["model"], "gpt");
    assert_eq!(received.body["stream"], true);
    assert_eq!(received.body["presence_penalty"], 0.5);
}

#[tokio::test]
async fn mistral_chat_drops_unsupported_fields() {
    let server = FakeServer::start(Protocol::Mistral, Script::default()).await;
    let mut config = config("mistral/chat", Some(format!("{}/v1", server.url())));
    config.model_name = Some("mistral-large".into());
    let chat = create_chat(&config).expect("valid config");
    let (_, error) = collect(chat.chat_stream(request("")).await.expect("stream created")).await;
    assert!(error.is_none(), "{error:?}");
    let body = server.last_request().expect("request").body;
    assert_eq!(body["model"], "mistral-large");
    for dropped in ["presence_penalty", "user", "stream_options"] {
        assert!(body.get(dropped).is_none(), "{dropped} in {body}");
    }
}

#[tokio::test]
async fn chat_upstream_error_and_unreachable_are_mapped() {
    let server = FakeServer::start(Protocol::OpenAi, Script::default().error_status(500)).await;
    let mut config = config("openai/chat", Some(server.url()));
    config.model_name = Some("gpt".into());
    let chat = create_chat(&config).expect("valid config");
    match chat.chat_stream(request("")).await {
        Err(ModelError::Backend(message)) => assert!(message.contains("500"), "{message}"),
        Err(other) => panic!("expected a backend error, got {other:?}"),
        Ok(_) => panic!("expected an error"),
    }
    // async-openai retries server errors three times before giving up.
    assert_eq!(server.request_count(), 4);

    config.api_endpoint = Some(closed_endpoint().await);
    let chat = create_chat(&config).expect("valid config");
    assert!(matches!(
        chat.chat_stream(request("")).await,
        Err(ModelError::Unavailable(_))
    ));
}

#[test]
fn chat_config_errors() {
    let Err(error) = create_chat(&config("azure/chat", Some("http://x".into()))) else {
        panic!("azure/chat is not supported");
    };
    assert!(matches!(error, BindingError::UnknownKind { .. }));
    for kind in CHAT_KINDS {
        assert!(error.to_string().contains(kind));
    }
    let Err(error) = create_chat(&config("openai/chat", None)) else {
        panic!("endpoint is required");
    };
    assert_eq!(
        error.to_string(),
        "api_endpoint is required for kind openai/chat"
    );
    let Err(error) = create_chat(&config("mistral/chat", Some("http://x".into()))) else {
        panic!("model_name is required");
    };
    assert_eq!(
        error.to_string(),
        "model_name is required for kind mistral/chat"
    );
}
