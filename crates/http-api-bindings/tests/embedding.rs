//! Embedding kinds against fake servers: batching, input order, llama.cpp's tokenize-and-pad
//! dance, Ollama's model lookup, and error mapping.

mod common;

use common::{closed_endpoint, config};
use fake_model_servers::{FakeServer, OLLAMA_MODEL_NAME, Protocol, Script, fake_embedding};
use http_api_bindings::{BindingError, EMBEDDING_KINDS, create_embedding};
use serde_json::json;
use tabby_inference::ModelError;

fn texts(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn openai_embeds_a_batch_in_one_request_in_input_order() {
    let script = Script::default().embedding_dim(4).reverse_embedding_order();
    let server = FakeServer::start(Protocol::OpenAi, script).await;
    for kind in ["openai/embedding", "voyage/embedding"] {
        server.clear_requests();
        let mut config = config(kind, Some(format!("{}/v1", server.url())));
        config.model_name = Some("embed".into());
        config.api_key = Some("vk".into());
        let embedding = create_embedding(&config).expect("valid config");
        let inputs = texts(&["first", "second", "third"]);
        let vectors = embedding.embed(&inputs).await.expect("embedded");
        let expected: Vec<Vec<f32>> = inputs.iter().map(|t| fake_embedding(t, 4)).collect();
        assert_eq!(vectors, expected, "{kind}");
        let requests = server.requests();
        assert_eq!(requests.len(), 1, "{kind}: one batched request");
        assert_eq!(requests[0].path, "/v1/embeddings");
        assert_eq!(requests[0].authorization(), Some("Bearer vk"));
        assert_eq!(
            requests[0].body,
            json!({"input": ["first", "second", "third"], "model": "embed"})
        );
    }
}

#[tokio::test]
async fn llama_cpp_tokenizes_pads_short_texts_and_embeds_each() {
    let server = FakeServer::start(Protocol::LlamaCpp, Script::default()).await;
    let embedding =
        create_embedding(&config("llama.cpp/embedding", Some(server.url()))).expect("valid config");
    let inputs = texts(&["a b", "one two three four five"]);
    let vectors = embedding.embed(&inputs).await.expect("embedded");
    assert_eq!(
        vectors,
        vec![
            fake_embedding("a b\n\n", 8),
            fake_embedding("one two three four five", 8)
        ]
    );
    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(
        paths,
        ["/tokenize", "/embeddings", "/tokenize", "/embeddings"]
    );
    assert_eq!(
        server.requests_to("/tokenize")[0].body,
        json!({"content": "a b"})
    );
    assert_eq!(
        server.requests_to("/embeddings")[0].body,
        json!({"content": "a b\n\n"})
    );
}

#[tokio::test]
async fn ollama_embeds_with_the_listed_model() {
    let server = FakeServer::start(Protocol::Ollama, Script::default()).await;
    let embedding =
        create_embedding(&config("ollama/embedding", Some(server.url()))).expect("valid config");
    let inputs = texts(&["x", "y"]);
    let vectors = embedding.embed(&inputs).await.expect("embedded");
    assert_eq!(
        vectors,
        vec![fake_embedding("x", 8), fake_embedding("y", 8)]
    );
    assert_eq!(
        server.requests_to("/api/embed")[0].body,
        json!({"model": OLLAMA_MODEL_NAME, "input": ["x", "y"]})
    );
}

#[tokio::test]
async fn empty_batch_makes_no_request() {
    let server = FakeServer::start(Protocol::OpenAi, Script::default()).await;
    let embedding =
        create_embedding(&config("openai/embedding", Some(server.url()))).expect("valid config");
    assert_eq!(
        embedding.embed(&[]).await.expect("embedded"),
        Vec::<Vec<f32>>::new()
    );
    assert_eq!(server.request_count(), 0);
}

#[tokio::test]
async fn embedding_failures_are_mapped() {
    let server = FakeServer::start(Protocol::OpenAi, Script::default().error_status(429)).await;
    let embedding =
        create_embedding(&config("openai/embedding", Some(server.url()))).expect("valid config");
    match embedding.embed(&texts(&["x"])).await {
        Err(ModelError::Backend(message)) => assert!(message.contains("429"), "{message}"),
        other => panic!("expected a backend error, got {other:?}"),
    }

    let endpoint = closed_endpoint().await;
    for kind in ["llama.cpp/embedding", "openai/embedding"] {
        let embedding =
            create_embedding(&config(kind, Some(endpoint.clone()))).expect("valid config");
        let result = embedding.embed(&texts(&["x"])).await;
        assert!(
            matches!(result, Err(ModelError::Unavailable(_))),
            "{kind}: {result:?}"
        );
    }
}

#[test]
fn embedding_config_errors() {
    let Err(error) = create_embedding(&config("llama.cpp/completion", Some("http://x".into())))
    else {
        panic!("not an embedding kind");
    };
    assert!(matches!(error, BindingError::UnknownKind { .. }));
    for kind in EMBEDDING_KINDS {
        assert!(error.to_string().contains(kind));
    }
    let Err(error) = create_embedding(&config("voyage/embedding", None)) else {
        panic!("voyage needs a model name");
    };
    assert_eq!(
        error.to_string(),
        "model_name is required for kind voyage/embedding"
    );
    let Err(error) = create_embedding(&config("llama.cpp/embedding", None)) else {
        panic!("llama.cpp needs an endpoint");
    };
    assert_eq!(
        error.to_string(),
        "api_endpoint is required for kind llama.cpp/embedding"
    );
}
