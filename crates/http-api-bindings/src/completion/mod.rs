//! Completion kinds: which backend serves which `kind`, what each requires from the config, and
//! which prompt template the caller must apply.
//!
//! Kinds that speak a real FIM API (`openai/completion`, `openai/legacy_completion`,
//! `deepseek/completion`, `mistral/completion`) get the internal template
//! `{prefix}<|FIM|>{suffix}`; the backend splits the rendered prompt back into prefix and suffix.
//! All other kinds send the prompt as rendered from the config's own `prompt_template`.

mod llama_cpp;
mod mistral;
mod ollama;
mod openai;

use std::sync::Arc;

use futures::{StreamExt, stream::BoxStream};
use reqwest::RequestBuilder;
use serde_json::Value;
use tabby_common::config::HttpModelConfig;
use tabby_inference::{CompletionStream, ModelError};

use crate::{
    BindingError,
    framing::{ndjson_lines, sse_data},
    http::{
        api_key, client_for, endpoint_or, required_api_key, required_endpoint, required_model_name,
        send, stream_error,
    },
};

/// The template for backends that take prompt and suffix separately.
pub(crate) const FIM_TEMPLATE: &str = "{prefix}<|FIM|>{suffix}";
const FIM_MARKER: &str = "<|FIM|>";

const MISTRAL_DEFAULT_ENDPOINT: &str = "https://api.mistral.ai";
const MISTRAL_DEFAULT_MODEL: &str = "codestral-latest";

pub(crate) const KINDS: &[&str] = &[
    "llama.cpp/completion",
    "ollama/completion",
    "mistral/completion",
    "openai/completion",
    "openai/legacy_completion",
    "deepseek/completion",
    "openai/legacy_completion_no_fim",
    "vllm/completion",
];

/// Builds the backend for `config.kind` (no network I/O) and says which prompt template to use.
pub(crate) fn create(
    config: &HttpModelConfig,
) -> Result<(Arc<dyn CompletionStream>, Option<String>), BindingError> {
    let config_template = config.prompt_template.clone();
    let fim_template = Some(FIM_TEMPLATE.to_string());
    let (backend, template): (Arc<dyn CompletionStream>, _) = match config.kind.as_str() {
        "llama.cpp/completion" => {
            let endpoint = required_endpoint(config)?;
            let backend = llama_cpp::LlamaCppCompletion {
                client: client_for(&endpoint)?,
                url: format!("{endpoint}/completion"),
                api_key: api_key(config),
            };
            (Arc::new(backend), config_template)
        }
        "ollama/completion" => {
            let endpoint = required_endpoint(config)?;
            let backend = ollama::OllamaCompletion {
                client: client_for(&endpoint)?,
                model: crate::ollama::OllamaModel::new(&endpoint, config.model_name.clone()),
                url: format!("{endpoint}/api/generate"),
                api_key: api_key(config),
            };
            (Arc::new(backend), config_template)
        }
        "mistral/completion" => {
            let endpoint = endpoint_or(config, MISTRAL_DEFAULT_ENDPOINT);
            let backend = mistral::MistralCompletion {
                client: client_for(&endpoint)?,
                url: format!("{endpoint}/v1/fim/completions"),
                api_key: required_api_key(config)?,
                model: config
                    .model_name
                    .clone()
                    .unwrap_or_else(|| MISTRAL_DEFAULT_MODEL.to_string()),
            };
            (Arc::new(backend), fim_template)
        }
        kind @ ("openai/completion"
        | "openai/legacy_completion"
        | "deepseek/completion"
        | "openai/legacy_completion_no_fim"
        | "vllm/completion") => {
            let endpoint = required_endpoint(config)?;
            let fim = !matches!(kind, "openai/legacy_completion_no_fim" | "vllm/completion");
            let backend = openai::OpenAiCompletion {
                client: client_for(&endpoint)?,
                url: format!("{endpoint}/completions"),
                api_key: api_key(config),
                model: required_model_name(config)?,
                fim,
            };
            (
                Arc::new(backend),
                if fim { fim_template } else { config_template },
            )
        }
        _ => return Err(BindingError::unknown_kind("completion", config, KINDS)),
    };
    Ok((backend, template))
}

/// Splits a prompt rendered with [`FIM_TEMPLATE`] at the first marker; without a marker the whole
/// text is the prompt and there is no suffix.
pub(crate) fn split_fim(prompt: &str) -> (&str, Option<&str>) {
    match prompt.split_once(FIM_MARKER) {
        Some((prefix, suffix)) => (prefix, Some(suffix)),
        None => (prompt, None),
    }
}

/// How a streamed completion body is framed.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Framing {
    /// Server-sent events; a `[DONE]` payload ends the stream.
    Sse,
    /// One JSON object per line.
    Ndjson,
}

/// What one streamed JSON event contributes.
pub(crate) struct Piece {
    pub(crate) text: Option<String>,
    /// This event is the last one.
    pub(crate) done: bool,
}

/// Sends `request` when first polled and streams the text pieces that `extract` finds in each
/// JSON event. Transport, status, JSON and mid-stream upstream errors end the stream with an `Err`.
pub(crate) fn text_stream(
    request: RequestBuilder,
    url: String,
    framing: Framing,
    extract: fn(&Value) -> Result<Piece, String>,
) -> BoxStream<'static, Result<String, ModelError>> {
    Box::pin(async_stream::stream! {
        let response = match send(request, &url).await {
            Ok(response) => response,
            Err(e) => {
                yield Err(e);
                return;
            }
        };
        let mut events = match framing {
            Framing::Sse => sse_data(response, url.clone()).boxed(),
            Framing::Ndjson => ndjson_lines(response, url.clone()).boxed(),
        };
        while let Some(event) = events.next().await {
            let data = match event {
                Ok(data) => data,
                Err(e) => {
                    yield Err(e);
                    return;
                }
            };
            if matches!(framing, Framing::Sse) && data.trim() == "[DONE]" {
                return;
            }
            let value: Value = match serde_json::from_str(&data) {
                Ok(value) => value,
                Err(e) => {
                    yield Err(ModelError::Backend(format!("{url} sent an event that is not JSON ({e})")));
                    return;
                }
            };
            if let Some(error) = stream_error(&value) {
                yield Err(error);
                return;
            }
            match extract(&value) {
                Ok(piece) => {
                    if let Some(text) = piece.text.filter(|t| !t.is_empty()) {
                        yield Ok(text);
                    }
                    if piece.done {
                        return;
                    }
                }
                Err(message) => {
                    yield Err(ModelError::Backend(format!("{url} sent an unexpected event: {message}")));
                    return;
                }
            }
        }
    })
}

/// A string field of `value` at `pointer`, `None` when absent or null.
pub(crate) fn text_at(value: &Value, pointer: &str) -> Result<Option<String>, String> {
    match value.pointer(pointer) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(other) => Err(format!("{pointer} is not a string: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_fim_uses_the_first_marker() {
        assert_eq!(split_fim("a<|FIM|>b<|FIM|>c"), ("a", Some("b<|FIM|>c")));
        assert_eq!(split_fim("<|FIM|>"), ("", Some("")));
        assert_eq!(split_fim("no marker"), ("no marker", None));
    }
}
