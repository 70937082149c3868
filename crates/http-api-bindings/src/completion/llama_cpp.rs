//! `llama.cpp/completion`: llama-server's native `/completion` endpoint, streamed as SSE events
//! `{content, stop}`; the stream ends at the first `stop: true`.

use async_trait::async_trait;
use futures::stream::BoxStream;
use serde_json::{Value, json};
use tabby_inference::{CompletionOptions, CompletionStream, ModelError};

use super::{Framing, Piece, text_at, text_stream};
use crate::http::with_auth;

pub(crate) struct LlamaCppCompletion {
    pub(crate) client: reqwest::Client,
    pub(crate) url: String,
    pub(crate) api_key: Option<String>,
}

#[async_trait]
impl CompletionStream for LlamaCppCompletion {
    async fn generate(
        &self,
        prompt: &str,
        options: CompletionOptions,
    ) -> BoxStream<'static, Result<String, ModelError>> {
        let body = json!({
            "seed": options.seed,
            "prompt": prompt,
            "n_predict": options.max_decoding_tokens,
            "temperature": options.sampling_temperature,
            "stream": true,
            "penalty_last_n": 0,
            "presence_penalty": options.presence_penalty,
        });
        let request = with_auth(self.client.post(&self.url), self.api_key.as_deref()).json(&body);
        text_stream(request, self.url.clone(), Framing::Sse, extract)
    }
}

fn extract(event: &Value) -> Result<Piece, String> {
    Ok(Piece {
        text: text_at(event, "/content")?,
        done: event.get("stop").and_then(Value::as_bool).unwrap_or(false),
    })
}
