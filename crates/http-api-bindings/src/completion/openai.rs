//! The OpenAI legacy `/completions` endpoint, shared by `openai/completion`,
//! `openai/legacy_completion`, `deepseek/completion` (prompt and suffix split at the FIM marker)
//! and `openai/legacy_completion_no_fim`, `vllm/completion` (whole prompt, `suffix: null`).

use async_trait::async_trait;
use futures::stream::BoxStream;
use serde_json::{Value, json};
use tabby_inference::{CompletionOptions, CompletionStream, ModelError};

use super::{Framing, Piece, split_fim, text_at, text_stream};
use crate::http::with_auth;

pub(crate) struct OpenAiCompletion {
    pub(crate) client: reqwest::Client,
    pub(crate) url: String,
    pub(crate) api_key: Option<String>,
    pub(crate) model: String,
    /// Whether the prompt carries the FIM marker to split on.
    pub(crate) fim: bool,
}

#[async_trait]
impl CompletionStream for OpenAiCompletion {
    async fn generate(
        &self,
        prompt: &str,
        options: CompletionOptions,
    ) -> BoxStream<'static, Result<String, ModelError>> {
        let (prompt, suffix) = if self.fim {
            split_fim(prompt)
        } else {
            (prompt, None)
        };
        let body = json!({
            "model": self.model,
            "prompt": prompt,
            "suffix": suffix,
            "max_tokens": options.max_decoding_tokens,
            "temperature": options.sampling_temperature,
            "stream": true,
            "presence_penalty": options.presence_penalty,
        });
        let request = with_auth(self.client.post(&self.url), self.api_key.as_deref()).json(&body);
        text_stream(request, self.url.clone(), Framing::Sse, extract)
    }
}

fn extract(event: &Value) -> Result<Piece, String> {
    Ok(Piece {
        text: text_at(event, "/choices/0/text")?,
        done: false,
    })
}
