//! Chat kinds `openai/chat` and `mistral/chat`: an OpenAI-compatible `/chat/completions` stream
//! through async-openai, with the per-kind request adjustments upstream servers need (some reject
//! parameters they do not support).
//!
//! async-openai's client retries 429, 5xx and connection failures up to three times with
//! exponential backoff from 100 ms (or the upstream's `Retry-After`) before an error surfaces.

use std::sync::Arc;

use async_openai::{
    Client,
    config::OpenAIConfig,
    error::OpenAIError,
    types::chat::{CreateChatCompletionRequest, CreateChatCompletionStreamResponse},
};
use async_trait::async_trait;
use futures::{StreamExt, stream::BoxStream};
use tabby_common::config::HttpModelConfig;
use tabby_inference::{ChatCompletionStream, ModelError};

use crate::{
    BindingError,
    http::{api_key, client_for, error_chain, excerpt, required_endpoint, required_model_name},
};

pub(crate) const KINDS: &[&str] = &["openai/chat", "mistral/chat"];

/// Which upstream quirks to work around.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flavor {
    OpenAi,
    Mistral,
}

pub(crate) fn create(
    config: &HttpModelConfig,
) -> Result<Arc<dyn ChatCompletionStream>, BindingError> {
    let flavor = match config.kind.as_str() {
        "openai/chat" => Flavor::OpenAi,
        "mistral/chat" => Flavor::Mistral,
        _ => return Err(BindingError::unknown_kind("chat", config, KINDS)),
    };
    let endpoint = required_endpoint(config)?;
    let model_name = required_model_name(config)?;
    let openai_config = OpenAIConfig::new()
        .with_api_base(&endpoint)
        .with_api_key(api_key(config).unwrap_or_default());
    Ok(Arc::new(OpenAiChat {
        client: Client::build(client_for(&endpoint)?, openai_config),
        flavor,
        model_name,
        supported_models: config.supported_models.clone(),
    }))
}

struct OpenAiChat {
    client: Client<OpenAIConfig>,
    flavor: Flavor,
    model_name: String,
    supported_models: Option<Vec<String>>,
}

impl OpenAiChat {
    /// The request as this upstream accepts it.
    #[allow(deprecated)] // `user` is deprecated upstream but clients still send it.
    fn adjust(&self, mut request: CreateChatCompletionRequest) -> CreateChatCompletionRequest {
        if request.model.is_empty() {
            request.model = self.model_name.clone();
        } else if let Some(supported) = &self.supported_models
            && !supported.contains(&request.model)
        {
            tracing::warn!(
                "chat model {:?} is not in supported_models {supported:?}; using {:?}",
                request.model,
                self.model_name
            );
            request.model = self.model_name.clone();
        }
        match self.flavor {
            Flavor::Mistral => {
                request.presence_penalty = None;
                request.user = None;
                request.stream_options = None;
            }
            Flavor::OpenAi => {
                if request.model.starts_with("o1") || request.model.starts_with("o3-mini") {
                    request.presence_penalty = None;
                    request.frequency_penalty = None;
                }
            }
        }
        request.stream = Some(true);
        request
    }
}

#[async_trait]
impl ChatCompletionStream for OpenAiChat {
    async fn chat_stream(
        &self,
        request: CreateChatCompletionRequest,
    ) -> Result<
        BoxStream<'static, Result<CreateChatCompletionStreamResponse, ModelError>>,
        ModelError,
    > {
        let request = self.adjust(request);
        let stream = self
            .client
            .chat()
            .create_stream(request)
            .await
            .map_err(model_error)?;
        Ok(stream.map(|item| item.map_err(model_error)).boxed())
    }
}

fn model_error(error: OpenAIError) -> ModelError {
    match error {
        OpenAIError::Reqwest(e) if e.is_connect() || e.is_timeout() => {
            ModelError::Unavailable(format!("cannot reach chat backend: {}", error_chain(&e)))
        }
        OpenAIError::Reqwest(e) => {
            ModelError::Backend(format!("chat backend request failed: {}", error_chain(&e)))
        }
        OpenAIError::ApiError(response) => ModelError::Backend(format!(
            "chat backend answered {}: {}",
            response.status_code,
            excerpt(&response.api_error.to_string())
        )),
        OpenAIError::InvalidArgument(message) => ModelError::InvalidRequest(message),
        other => ModelError::Backend(format!("chat backend: {}", excerpt(&other.to_string()))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn chat(kind: &str, supported: Option<&[&str]>) -> OpenAiChat {
        OpenAiChat {
            client: Client::with_config(OpenAIConfig::new()),
            flavor: if kind == "mistral/chat" {
                Flavor::Mistral
            } else {
                Flavor::OpenAi
            },
            model_name: "configured".into(),
            supported_models: supported.map(|s| s.iter().map(|m| m.to_string()).collect()),
        }
    }

    fn adjusted(chat: &OpenAiChat, request: Value) -> Value {
        let request: CreateChatCompletionRequest =
            serde_json::from_value(request).expect("valid request");
        serde_json::to_value(chat.adjust(request)).expect("serializable")
    }

    fn request(model: &str) -> Value {
        json!({
            "model": model,
            "messages": [{"role": "user", "content": "hi"}],
            "presence_penalty": 0.5,
            "frequency_penalty": 0.25,
            "user": "alice",
            "stream_options": {"include_usage": true},
            "stream": false,
        })
    }

    #[test]
    fn empty_model_becomes_the_configured_one() {
        let got = adjusted(&chat("openai/chat", None), request(""));
        assert_eq!(got["model"], "configured");
        assert_eq!(got["stream"], true);
    }

    #[test]
    fn unsupported_model_falls_back_to_the_configured_one() {
        let chat = chat("openai/chat", Some(&["configured", "other"]));
        assert_eq!(adjusted(&chat, request("other"))["model"], "other");
        assert_eq!(adjusted(&chat, request("unknown"))["model"], "configured");
    }

    #[test]
    fn mistral_drops_unsupported_fields() {
        let got = adjusted(&chat("mistral/chat", None), request("m"));
        assert_eq!(got.get("presence_penalty"), None);
        assert_eq!(got.get("user"), None);
        assert_eq!(got.get("stream_options"), None);
        assert_eq!(got["frequency_penalty"], 0.25);
    }

    #[test]
    fn openai_reasoning_models_drop_penalties() {
        let chat = chat("openai/chat", None);
        for model in ["o1-preview", "o3-mini"] {
            let got = adjusted(&chat, request(model));
            assert_eq!(got.get("presence_penalty"), None, "{model}");
            assert_eq!(got.get("frequency_penalty"), None, "{model}");
            assert_eq!(got["user"], "alice");
        }
        let got = adjusted(&chat, request("gpt-4o"));
        assert_eq!(got["presence_penalty"], 0.5);
    }
}
