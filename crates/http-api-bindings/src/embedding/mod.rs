//! Embedding kinds: which backend serves which `kind` and what each requires from the config.
//! Every backend returns one vector per input, in input order.

mod llama_cpp;
mod ollama;
mod openai;

use std::sync::Arc;

use tabby_common::config::HttpModelConfig;
use tabby_inference::{Embedding, ModelError};

use crate::{
    BindingError,
    http::{api_key, client_for, endpoint_or, required_endpoint, required_model_name},
};

pub(crate) const KINDS: &[&str] = &[
    "llama.cpp/embedding",
    "openai/embedding",
    "voyage/embedding",
    "ollama/embedding",
];

const VOYAGE_DEFAULT_ENDPOINT: &str = "https://api.voyageai.com/v1";

/// Builds the backend for `config.kind`; no network I/O.
pub(crate) fn create(config: &HttpModelConfig) -> Result<Arc<dyn Embedding>, BindingError> {
    let backend: Arc<dyn Embedding> = match config.kind.as_str() {
        "llama.cpp/embedding" => {
            let endpoint = required_endpoint(config)?;
            Arc::new(llama_cpp::LlamaCppEmbedding {
                client: client_for(&endpoint)?,
                tokenize_url: format!("{endpoint}/tokenize"),
                embeddings_url: format!("{endpoint}/embeddings"),
                api_key: api_key(config),
            })
        }
        "openai/embedding" => {
            let endpoint = required_endpoint(config)?;
            Arc::new(openai::OpenAiEmbedding {
                client: client_for(&endpoint)?,
                url: format!("{endpoint}/embeddings"),
                api_key: api_key(config),
                model: config.model_name.clone().unwrap_or_default(),
            })
        }
        "voyage/embedding" => {
            let endpoint = endpoint_or(config, VOYAGE_DEFAULT_ENDPOINT);
            Arc::new(openai::OpenAiEmbedding {
                client: client_for(&endpoint)?,
                url: format!("{endpoint}/embeddings"),
                api_key: api_key(config),
                model: required_model_name(config)?,
            })
        }
        "ollama/embedding" => {
            let endpoint = required_endpoint(config)?;
            Arc::new(ollama::OllamaEmbedding {
                client: client_for(&endpoint)?,
                url: format!("{endpoint}/api/embed"),
                api_key: api_key(config),
                model: crate::ollama::OllamaModel::new(&endpoint, config.model_name.clone()),
            })
        }
        _ => return Err(BindingError::unknown_kind("embedding", config, KINDS)),
    };
    Ok(backend)
}

/// Checks that the upstream answered one vector per input.
fn expect_count(url: &str, vectors: &[Vec<f32>], inputs: usize) -> Result<(), ModelError> {
    if vectors.len() == inputs {
        Ok(())
    } else {
        Err(ModelError::Backend(format!(
            "{url} returned {} embeddings for {inputs} inputs",
            vectors.len()
        )))
    }
}

/// Reads a JSON response body into `T`, naming the URL on failure.
async fn read_json<T: serde::de::DeserializeOwned>(
    response: reqwest::Response,
    url: &str,
) -> Result<T, ModelError> {
    response
        .json()
        .await
        .map_err(|e| ModelError::Backend(format!("{url} sent an unexpected body: {e}")))
}
