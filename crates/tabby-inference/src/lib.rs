//! The model roles the server talks to, as traits: a FIM text completion stream, an OpenAI-style
//! chat stream and a batched embedding. Backends (remote HTTP kinds in `http-api-bindings`, the
//! embedded runtime later) implement them; services only ever see these traits.
//!
//! Also here: the per-language stop-word matcher and the prompt clipping used by every completion
//! backend, so that both behave the same whatever serves the model.

mod clip;
mod decoding;
mod names;

use async_openai::types::chat::{CreateChatCompletionRequest, CreateChatCompletionStreamResponse};
use async_trait::async_trait;
use futures::stream::BoxStream;

pub use clip::{ClippedSegments, clip_prefix_for_budget, clip_to_first_bytes, clip_to_last_bytes};
pub use decoding::{StopCondition, StopConditionFactory};
pub use names::{FirstNames, MAX_NAME_BYTES, MAX_NAMES, NameState, is_identifier_byte};

/// Sampling options for one completion request.
#[derive(Clone, Debug, PartialEq)]
pub struct CompletionOptions {
    pub max_decoding_tokens: i32,
    pub sampling_temperature: f32,
    pub seed: u64,
    pub presence_penalty: f32,
    /// The names the completion must start with (after `module.`, when the repository says
    /// every name the module offers); backends that cannot constrain their choices ignore it.
    pub first_names: Option<std::sync::Arc<FirstNames>>,
}

/// Why a model call failed. Services map these to HTTP statuses.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The model is configured but cannot serve right now (weights missing, upstream down).
    #[error("model unavailable: {0}")]
    Unavailable(String),
    /// The upstream server answered with an error.
    #[error("model backend error: {0}")]
    Backend(String),
    /// The request to the backend was invalid (bad arguments from the caller).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
}

impl ModelError {
    /// The error as a client may see it: its first line, at most 500 bytes. A backend may add a
    /// backtrace or a long upstream body; those belong in the server log only.
    pub fn client_message(&self) -> String {
        let text = self.to_string();
        let first = text.lines().next().unwrap_or_default().trim_end();
        let mut end = first.len().min(500);
        while !first.is_char_boundary(end) {
            end -= 1;
        }
        first[..end].to_string()
    }
}

/// A FIM/text completion backend: takes a fully built prompt and streams text pieces.
///
/// The stream yields pieces of generated text in order; an `Err` item ends the stream.
#[async_trait]
pub trait CompletionStream: Send + Sync {
    async fn generate(
        &self,
        prompt: &str,
        options: CompletionOptions,
    ) -> BoxStream<'static, Result<String, ModelError>>;
}

/// An OpenAI-compatible chat backend.
#[async_trait]
pub trait ChatCompletionStream: Send + Sync {
    /// Streams chat completion chunks. Errors creating the stream are returned directly;
    /// errors mid-stream arrive as `Err` items.
    async fn chat_stream(
        &self,
        request: CreateChatCompletionRequest,
    ) -> Result<
        BoxStream<'static, Result<CreateChatCompletionStreamResponse, ModelError>>,
        ModelError,
    >;
}

/// A batched text embedding backend.
#[async_trait]
pub trait Embedding: Send + Sync {
    /// Embeds each input; the result has one vector per input, in order.
    async fn embed(&self, inputs: &[String]) -> Result<Vec<Vec<f32>>, ModelError>;
}

#[cfg(test)]
mod tests {
    use super::ModelError;

    #[test]
    fn client_message_is_the_first_line_bounded() {
        let e = ModelError::Backend("boom\nstack backtrace:\n 0: candle::x at src/a.rs:1".into());
        assert_eq!(e.client_message(), "model backend error: boom");
        let long = ModelError::Backend("é".repeat(400));
        assert!(long.client_message().len() <= 500);
    }
}
