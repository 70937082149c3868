//! `openai/embedding` and `voyage/embedding`: one batched POST to `/embeddings` with
//! `{input: [texts], model}`; the answer's `data[].index` puts the vectors back in input order.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;
use tabby_inference::{Embedding, ModelError};

use super::{expect_count, read_json};
use crate::http::{send, with_auth};

pub(crate) struct OpenAiEmbedding {
    pub(crate) client: reqwest::Client,
    pub(crate) url: String,
    pub(crate) api_key: Option<String>,
    pub(crate) model: String,
}

#[derive(Deserialize)]
struct EmbeddingList {
    data: Vec<EmbeddingItem>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    index: Option<usize>,
    embedding: Vec<f32>,
}

#[async_trait]
impl Embedding for OpenAiEmbedding {
    async fn embed(&self, inputs: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        if inputs.is_empty() {
            return Ok(Vec::new());
        }
        let body = json!({ "input": inputs, "model": self.model });
        let request = with_auth(self.client.post(&self.url), self.api_key.as_deref()).json(&body);
        let response = send(request, &self.url).await?;
        let mut list: EmbeddingList = read_json(response, &self.url).await?;
        // Without indices, the listed order is the input order.
        if list.data.iter().all(|item| item.index.is_some()) {
            list.data.sort_by_key(|item| item.index);
        }
        let vectors: Vec<Vec<f32>> = list.data.into_iter().map(|item| item.embedding).collect();
        expect_count(&self.url, &vectors, inputs.len())?;
        Ok(vectors)
    }
}
