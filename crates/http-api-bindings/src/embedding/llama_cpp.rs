//! `llama.cpp/embedding`: llama-server embeds one text per request. Each text is first
//! tokenized; texts of fewer than 4 tokens are padded with newlines (very short inputs embed
//! poorly or are rejected), then `/embeddings` answers `[{index, embedding: [[f32]]}]`.
//! Connection failures are retried a few times, since a freshly spawned or busy llama-server
//! drops connections now and then.

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use tabby_inference::{Embedding, ModelError};

use super::read_json;
use crate::http::{send, with_auth};

const MIN_TOKENS: usize = 4;
const RETRIES: u32 = 3;
const RETRY_PAUSE: Duration = Duration::from_millis(100);

pub(crate) struct LlamaCppEmbedding {
    pub(crate) client: reqwest::Client,
    pub(crate) tokenize_url: String,
    pub(crate) embeddings_url: String,
    pub(crate) api_key: Option<String>,
}

#[derive(Deserialize)]
struct Tokens {
    tokens: Vec<Value>,
}

/// `embedding` is `[[f32]]` (one row per pooled sequence) on current servers; a flat `[f32]` is
/// accepted too.
#[derive(Deserialize)]
#[serde(untagged)]
enum Vector {
    Nested(Vec<Vec<f32>>),
    Flat(Vec<f32>),
}

#[derive(Deserialize)]
struct EmbeddingItem {
    embedding: Vector,
}

impl LlamaCppEmbedding {
    /// POSTs `body` to `url`, retrying when the connection fails.
    async fn post(&self, url: &str, body: &Value) -> Result<reqwest::Response, ModelError> {
        let mut attempt = 0;
        loop {
            let request = with_auth(self.client.post(url), self.api_key.as_deref()).json(body);
            match send(request, url).await {
                Err(ModelError::Unavailable(message)) if attempt < RETRIES => {
                    attempt += 1;
                    tracing::debug!("retrying ({attempt}/{RETRIES}): {message}");
                    tokio::time::sleep(RETRY_PAUSE * attempt).await;
                }
                result => return result,
            }
        }
    }

    async fn embed_one(&self, text: &str) -> Result<Vec<f32>, ModelError> {
        let response = self
            .post(&self.tokenize_url, &json!({ "content": text }))
            .await?;
        let tokens: Tokens = read_json(response, &self.tokenize_url).await?;
        let mut content = text.to_string();
        if tokens.tokens.len() < MIN_TOKENS {
            content.push_str(&"\n".repeat(MIN_TOKENS - tokens.tokens.len()));
        }
        let response = self
            .post(&self.embeddings_url, &json!({ "content": content }))
            .await?;
        let items: Vec<EmbeddingItem> = read_json(response, &self.embeddings_url).await?;
        let vector = items
            .into_iter()
            .next()
            .and_then(|item| match item.embedding {
                Vector::Nested(rows) => rows.into_iter().next(),
                Vector::Flat(vector) => Some(vector),
            });
        vector.ok_or_else(|| {
            ModelError::Backend(format!("{} returned no embedding", self.embeddings_url))
        })
    }
}

#[async_trait]
impl Embedding for LlamaCppEmbedding {
    async fn embed(&self, inputs: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        let mut vectors = Vec::with_capacity(inputs.len());
        for text in inputs {
            vectors.push(self.embed_one(text).await?);
        }
        Ok(vectors)
    }
}
