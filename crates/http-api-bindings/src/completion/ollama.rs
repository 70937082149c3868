//! `ollama/completion`: Ollama's `/api/generate` in raw mode (the prompt is already rendered
//! with the FIM template), streamed as newline-delimited JSON until `done: true`.

use async_trait::async_trait;
use futures::stream::{self, BoxStream};
use serde_json::{Value, json};
use tabby_inference::{CompletionOptions, CompletionStream, ModelError};

use super::{Framing, Piece, text_at, text_stream};
use crate::{http::with_auth, ollama::OllamaModel};

pub(crate) struct OllamaCompletion {
    pub(crate) client: reqwest::Client,
    pub(crate) url: String,
    pub(crate) api_key: Option<String>,
    pub(crate) model: OllamaModel,
}

#[async_trait]
impl CompletionStream for OllamaCompletion {
    async fn generate(
        &self,
        prompt: &str,
        options: CompletionOptions,
    ) -> BoxStream<'static, Result<String, ModelError>> {
        let model = match self.model.name(&self.client, self.api_key.as_deref()).await {
            Ok(model) => model,
            Err(e) => return Box::pin(stream::once(async { Err(e) })),
        };
        let body = json!({
            "model": model,
            "prompt": prompt,
            "raw": true,
            "stream": true,
            "options": {
                "num_predict": options.max_decoding_tokens,
                // Ollama decodes the seed as a signed 64-bit integer.
                "seed": options.seed & (i64::MAX as u64),
                "repeat_last_n": 0,
                "temperature": options.sampling_temperature,
            },
        });
        let request = with_auth(self.client.post(&self.url), self.api_key.as_deref()).json(&body);
        text_stream(request, self.url.clone(), Framing::Ndjson, extract)
    }
}

fn extract(event: &Value) -> Result<Piece, String> {
    Ok(Piece {
        text: text_at(event, "/response")?,
        done: event.get("done").and_then(Value::as_bool).unwrap_or(false),
    })
}
