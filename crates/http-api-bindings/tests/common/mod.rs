//! Shared helpers for the backend tests: config builders and stream collection.

#![allow(dead_code)] // each test file uses a subset

use futures::{Stream, StreamExt};
use tabby_common::config::{HttpModelConfig, RateLimit};
use tabby_inference::{CompletionOptions, ModelError};

pub fn config(kind: &str, api_endpoint: Option<String>) -> HttpModelConfig {
    HttpModelConfig {
        kind: kind.to_string(),
        api_endpoint,
        api_key: None,
        rate_limit: RateLimit::default(),
        model_name: None,
        prompt_template: None,
        chat_template: None,
        supported_models: None,
        additional_stop_words: Vec::new(),
    }
}

pub fn options() -> CompletionOptions {
    CompletionOptions {
        max_decoding_tokens: 8,
        sampling_temperature: 0.5,
        seed: 42,
        presence_penalty: 0.25,
        first_names: None,
    }
}

/// Collects the Ok pieces and the first error, if any.
pub async fn collect<T>(
    stream: impl Stream<Item = Result<T, ModelError>>,
) -> (Vec<T>, Option<ModelError>) {
    let mut items = Vec::new();
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        match item {
            Ok(item) => items.push(item),
            Err(e) => return (items, Some(e)),
        }
    }
    (items, None)
}

/// An endpoint nothing listens on.
pub async fn closed_endpoint() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    format!("http://{addr}")
}
