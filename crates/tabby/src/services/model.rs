//! Turns the `[model.*]` config sections into backends. Remote (`http`) models come from
//! `http-api-bindings`; the embedded runtime (`local`) is not part of this build yet, so a local
//! model is a clear start-up error rather than a silent fallback.

use std::sync::Arc;

use tabby_common::config::{ModelConfig, ModelConfigGroup};
use tabby_inference::{ChatCompletionStream, Embedding};

use super::completion::{CompletionModel, prompt::PromptTemplate};

#[derive(Debug, thiserror::Error)]
pub enum ModelLoadError {
    #[error("[model.{role}.http]: {source}")]
    Binding {
        role: &'static str,
        source: http_api_bindings::BindingError,
    },
    #[error("[model.{role}.http] prompt_template: {message}")]
    Template { role: &'static str, message: String },
    #[error(
        "[model.{role}.local] model_id = {model_id:?}: the embedded model runtime is not available \
         in this build yet; configure a remote model with [model.{role}.http] instead"
    )]
    LocalUnavailable {
        role: &'static str,
        model_id: String,
    },
}

pub struct Models {
    pub completion: Option<CompletionModel>,
    pub chat: Option<Arc<dyn ChatCompletionStream>>,
    pub embedding: Option<Arc<dyn Embedding>>,
}

pub fn load_models(config: &ModelConfigGroup) -> Result<Models, ModelLoadError> {
    let completion = match &config.completion {
        None => None,
        Some(ModelConfig::Http(http)) => {
            let (engine, template) =
                http_api_bindings::create_completion(http).map_err(|source| {
                    ModelLoadError::Binding {
                        role: "completion",
                        source,
                    }
                })?;
            let prompt_template = template
                .map(|t| PromptTemplate::new(&t))
                .transpose()
                .map_err(|message| ModelLoadError::Template {
                    role: "completion",
                    message,
                })?;
            Some(CompletionModel {
                engine,
                prompt_template,
                additional_stop_words: http.additional_stop_words.clone(),
            })
        }
        Some(ModelConfig::Local(local)) => {
            return Err(ModelLoadError::LocalUnavailable {
                role: "completion",
                model_id: local.model_id.clone(),
            });
        }
    };
    let chat = match &config.chat {
        None => None,
        Some(ModelConfig::Http(http)) => {
            Some(http_api_bindings::create_chat(http).map_err(|source| {
                ModelLoadError::Binding {
                    role: "chat",
                    source,
                }
            })?)
        }
        Some(ModelConfig::Local(local)) => {
            return Err(ModelLoadError::LocalUnavailable {
                role: "chat",
                model_id: local.model_id.clone(),
            });
        }
    };
    let embedding = match &config.embedding {
        None => None,
        Some(ModelConfig::Http(http)) => {
            Some(http_api_bindings::create_embedding(http).map_err(|source| {
                ModelLoadError::Binding {
                    role: "embedding",
                    source,
                }
            })?)
        }
        Some(ModelConfig::Local(local)) => {
            return Err(ModelLoadError::LocalUnavailable {
                role: "embedding",
                model_id: local.model_id.clone(),
            });
        }
    };
    Ok(Models {
        completion,
        chat,
        embedding,
    })
}
