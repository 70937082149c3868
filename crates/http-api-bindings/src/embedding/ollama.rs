//! `ollama/embedding`: one batched POST to `/api/embed` with `{model, input: [texts]}`; the
//! answer's `embeddings` are in input order.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;
use tabby_inference::{Embedding, ModelError};

use super::{expect_count, read_json};
use crate::{
    http::{send, with_auth},
    ollama::OllamaModel,
};

pub(crate) struct OllamaEmbedding {
    pub(crate) client: reqwest::Client,
    pub(crate) url: String,
    pub(crate) api_key: Option<String>,
    pub(crate) model: OllamaModel,
}

#[derive(Deserialize)]
struct EmbedResponse {
    embeddings: Vec<Vec<f32>>,
}

#[async_trait]
impl Embedding for OllamaEmbedding {
    async fn embed(&self, inputs: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        if inputs.is_empty() {
            return Ok(Vec::new());
        }
        let model = self
            .model
            .name(&self.client, self.api_key.as_deref())
            .await?;
        let body = json!({ "model": model, "input": inputs });
        let request = with_auth(self.client.post(&self.url), self.api_key.as_deref()).json(&body);
        let response = send(request, &self.url).await?;
        let answer: EmbedResponse = read_json(response, &self.url).await?;
        expect_count(&self.url, &answer.embeddings, inputs.len())?;
        Ok(answer.embeddings)
    }
}
