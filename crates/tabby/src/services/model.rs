//! Turns the `[model.*]` config sections into backends. Remote (`http`) models come from
//! `http-api-bindings`; `local` models (and every role the config leaves unset) run in the
//! embedded runtime (`tabby-local`) from `$TABBY_ROOT/models`. A local model whose weights are
//! missing does not stop the server: its routes answer 503 with a message naming
//! `tabby download`.

use std::{collections::HashMap, path::Path, sync::Arc};

use async_openai::types::chat::{CreateChatCompletionRequest, CreateChatCompletionStreamResponse};
use async_trait::async_trait;
use futures::stream::BoxStream;
use tabby_common::config::{LocalModelConfig, ModelConfig, ModelConfigGroup};
use tabby_inference::{
    ChatCompletionStream, CompletionOptions, CompletionStream, Embedding, ModelError,
};
use tabby_local::{
    llm::{LlmConfig, LoadError, LocalChat, LocalCompletion, LocalLlm},
    registry::{self, ResolveError},
};
use tracing::warn;

use super::completion::{CompletionModel, prompt::PromptTemplate};

#[derive(Debug, thiserror::Error)]
pub enum ModelLoadError {
    #[error("[model.{role}.http]: {source}")]
    Binding {
        role: &'static str,
        source: http_api_bindings::BindingError,
    },
    #[error("[model.{role}] prompt_template: {message}")]
    Template { role: &'static str, message: String },
    #[error("[model.{role}.local] {message}")]
    Local { role: &'static str, message: String },
}

pub struct Models {
    pub completion: Option<CompletionModel>,
    pub chat: Option<Arc<dyn ChatCompletionStream>>,
    /// Whether `chat` can answer: false for a local model whose weights are missing (its
    /// stand-in only reports that).
    pub chat_loaded: bool,
}

/// The config's model sections with the embedded defaults filled in for unset roles.
pub fn with_local_defaults(config: &ModelConfigGroup) -> ModelConfigGroup {
    let local = |id: &str| {
        Some(ModelConfig::Local(LocalModelConfig {
            model_id: id.to_string(),
            parallelism: 1,
            num_gpu_layers: 0,
            enable_fast_attention: None,
            context_size: 4096,
            prompt_cache_mib: tabby_common::config::DEFAULT_PROMPT_CACHE_MIB,
            draft_tokens: tabby_common::config::DEFAULT_DRAFT_TOKENS,
            prompt_template: None,
            additional_stop_words: vec![],
        }))
    };
    ModelConfigGroup {
        completion: config
            .completion
            .clone()
            .or_else(|| local(registry::DEFAULT_COMPLETION_MODEL)),
        chat: config
            .chat
            .clone()
            .or_else(|| local(registry::DEFAULT_CHAT_MODEL)),
        // The static table distilled from MiniLM: `tabby eval` on click puts its fused recall
        // close to MiniLM's (completion better, nl worse) at ~370x the indexing speed, which is
        // what makes indexing a real repository practical on a CPU (README, Retrieval quality).
        embedding: config
            .embedding
            .clone()
            .or_else(|| local(registry::STATIC_EMBEDDING_MODEL)),
    }
}

/// Loads local language models once per directory, so completion and chat share one copy.
struct LocalLlms<'a> {
    models_dir: &'a Path,
    loaded: HashMap<std::path::PathBuf, Arc<LocalLlm>>,
}

enum LocalLoad {
    Ready(Arc<LocalLlm>),
    /// Weights missing: the message says how to get them.
    Missing(String),
}

impl LocalLlms<'_> {
    fn load(
        &mut self,
        role: &'static str,
        local: &LocalModelConfig,
    ) -> Result<LocalLoad, ModelLoadError> {
        let dir = match registry::resolve_model_dir(self.models_dir, &local.model_id) {
            Ok(dir) => dir,
            Err(e @ ResolveError::NotDownloaded { .. }) => {
                warn!("{e}");
                return Ok(LocalLoad::Missing(missing_message(role, &local.model_id)));
            }
            Err(e) => {
                return Err(ModelLoadError::Local {
                    role,
                    message: e.to_string(),
                });
            }
        };
        if let Some(llm) = self.loaded.get(&dir) {
            return Ok(LocalLoad::Ready(llm.clone()));
        }
        let config = LlmConfig {
            parallelism: (local.parallelism as usize).max(1),
            context_size: local.context_size.max(256),
            prompt_cache_bytes: local.prompt_cache_mib << 20,
            draft_tokens: local.draft_tokens,
        };
        match LocalLlm::load(&dir, &config) {
            Ok(llm) => {
                let llm = Arc::new(llm);
                self.loaded.insert(dir, llm.clone());
                Ok(LocalLoad::Ready(llm))
            }
            Err(e @ LoadError::Missing(_)) => {
                warn!("{e}");
                Ok(LocalLoad::Missing(missing_message(role, &local.model_id)))
            }
            Err(e) => Err(ModelLoadError::Local {
                role,
                message: e.to_string(),
            }),
        }
    }
}

/// What a client is told about a local model whose weights are missing: how to fix it, without
/// the server's paths (those go to the log).
fn missing_message(role: &str, model_id: &str) -> String {
    format!(
        "the {role} model {model_id} is not downloaded on this server; an admin can run `tabby download`"
    )
}

/// Stands in for a local model whose weights are not downloaded.
struct MissingModel {
    message: String,
}

#[async_trait]
impl CompletionStream for MissingModel {
    async fn generate(
        &self,
        _prompt: &str,
        _options: CompletionOptions,
    ) -> BoxStream<'static, Result<String, ModelError>> {
        let error = ModelError::Unavailable(self.message.clone());
        Box::pin(futures::stream::once(async move { Err(error) }))
    }
}

#[async_trait]
impl ChatCompletionStream for MissingModel {
    async fn chat_stream(
        &self,
        _request: CreateChatCompletionRequest,
    ) -> Result<
        BoxStream<'static, Result<CreateChatCompletionStreamResponse, ModelError>>,
        ModelError,
    > {
        Err(ModelError::Unavailable(self.message.clone()))
    }
}

fn template(
    role: &'static str,
    template: Option<&str>,
) -> Result<Option<PromptTemplate>, ModelLoadError> {
    template
        .map(PromptTemplate::new)
        .transpose()
        .map_err(|message| ModelLoadError::Template { role, message })
}

/// Builds the completion and chat backends of `config` (defaults already filled in).
pub fn load_models(config: &ModelConfigGroup, models_dir: &Path) -> Result<Models, ModelLoadError> {
    let mut locals = LocalLlms {
        models_dir,
        loaded: HashMap::new(),
    };
    let completion =
        match &config.completion {
            None => None,
            Some(ModelConfig::Http(http)) => {
                let (engine, prompt_template) = http_api_bindings::create_completion(http)
                    .map_err(|source| ModelLoadError::Binding {
                        role: "completion",
                        source,
                    })?;
                Some(CompletionModel {
                    engine,
                    prompt_template: template("completion.http", prompt_template.as_deref())?,
                    additional_stop_words: http.additional_stop_words.clone(),
                })
            }
            Some(ModelConfig::Local(local)) => Some(match locals.load("completion", local)? {
                LocalLoad::Ready(llm) => CompletionModel {
                    prompt_template: template(
                        "completion.local",
                        local.prompt_template.as_deref().or(llm.prompt_template()),
                    )?,
                    engine: Arc::new(LocalCompletion::from_llm(llm)),
                    additional_stop_words: local.additional_stop_words.clone(),
                },
                LocalLoad::Missing(message) => {
                    warn!("completion model unavailable: {message}");
                    CompletionModel {
                        engine: Arc::new(MissingModel { message }),
                        prompt_template: None,
                        additional_stop_words: vec![],
                    }
                }
            }),
        };
    let mut chat_missing = false;
    let chat: Option<Arc<dyn ChatCompletionStream>> = match &config.chat {
        None => None,
        Some(ModelConfig::Http(http)) => {
            Some(http_api_bindings::create_chat(http).map_err(|source| {
                ModelLoadError::Binding {
                    role: "chat",
                    source,
                }
            })?)
        }
        Some(ModelConfig::Local(local)) => Some(match locals.load("chat", local)? {
            LocalLoad::Ready(llm) => {
                Arc::new(LocalChat::from_llm(llm).map_err(|e| ModelLoadError::Local {
                    role: "chat",
                    message: e.to_string(),
                })?)
            }
            LocalLoad::Missing(message) => {
                warn!("chat model unavailable: {message}");
                chat_missing = true;
                Arc::new(MissingModel { message })
            }
        }),
    };
    Ok(Models {
        completion,
        chat_loaded: chat.is_some() && !chat_missing,
        chat,
    })
}

/// An embedding backend and its id (for index metadata).
pub type LoadedEmbedding = (Arc<dyn Embedding>, String);

/// The embedding backend of an effective config, with its id for index metadata. `None` when
/// the local default is not downloaded (retrieval then uses its BM25 leg only).
pub fn load_embedding(
    config: &ModelConfigGroup,
    models_dir: &Path,
) -> Result<Option<LoadedEmbedding>, ModelLoadError> {
    match &config.embedding {
        None => Ok(None),
        Some(ModelConfig::Http(http)) => {
            let model = http_api_bindings::create_embedding(http).map_err(|source| {
                ModelLoadError::Binding {
                    role: "embedding",
                    source,
                }
            })?;
            let id = format!(
                "{}:{}@{}",
                http.kind,
                http.model_name.as_deref().unwrap_or(""),
                http.api_endpoint.as_deref().unwrap_or("")
            );
            Ok(Some((model, id)))
        }
        Some(ModelConfig::Local(local)) => {
            let dir = match registry::resolve_model_dir(models_dir, &local.model_id) {
                Ok(dir) => dir,
                Err(e @ ResolveError::NotDownloaded { .. }) => {
                    warn!("embedding model unavailable ({e}); code search uses BM25 only");
                    return Ok(None);
                }
                Err(e) => {
                    return Err(ModelLoadError::Local {
                        role: "embedding",
                        message: e.to_string(),
                    });
                }
            };
            let options = tabby_local::embedding::EmbeddingOptions {
                parallelism: (local.parallelism as usize).max(1),
                ..Default::default()
            };
            match tabby_local::embedding::load_any(&dir, options) {
                Ok(loaded) => Ok(Some((loaded.model, loaded.model_id))),
                Err(ModelError::Unavailable(message)) => {
                    warn!("embedding model unavailable ({message}); code search uses BM25 only");
                    Ok(None)
                }
                Err(e) => Err(ModelLoadError::Local {
                    role: "embedding",
                    message: e.to_string(),
                }),
            }
        }
    }
}
