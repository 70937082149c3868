//! `mistral/completion`: Mistral's FIM API `/v1/fim/completions`, which streams chat-chunk-shaped
//! events (`choices[0].delta.content`) ending with `[DONE]`.

use async_trait::async_trait;
use futures::stream::BoxStream;
use serde_json::{Value, json};
use tabby_inference::{CompletionOptions, CompletionStream, ModelError};

use super::{Framing, Piece, split_fim, text_at, text_stream};

pub(crate) struct MistralCompletion {
    pub(crate) client: reqwest::Client,
    pub(crate) url: String,
    pub(crate) api_key: String,
    pub(crate) model: String,
}

#[async_trait]
impl CompletionStream for MistralCompletion {
    async fn generate(
        &self,
        prompt: &str,
        options: CompletionOptions,
    ) -> BoxStream<'static, Result<String, ModelError>> {
        let (prompt, suffix) = split_fim(prompt);
        let body = json!({
            "prompt": prompt,
            "suffix": suffix,
            "model": self.model,
            "temperature": options.sampling_temperature,
            "max_tokens": options.max_decoding_tokens,
            "stream": true,
            "random_seed": options.seed,
        });
        let request = self
            .client
            .post(&self.url)
            .bearer_auth(&self.api_key)
            .json(&body);
        text_stream(request, self.url.clone(), Framing::Sse, extract)
    }
}

fn extract(event: &Value) -> Result<Piece, String> {
    Ok(Piece {
        text: text_at(event, "/choices/0/delta/content")?,
        done: false,
    })
}
