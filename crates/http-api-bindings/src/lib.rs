//! Remote model backends behind the `tabby-inference` traits, built from a
//! `[model.<role>.http]` config section.
//!
//! Each `kind` string names a wire protocol (llama.cpp server, Ollama, OpenAI and compatible
//! servers, Mistral, Voyage). Constructors only validate the config and build clients; they never
//! touch the network, so the server starts even when a backend is down, and a backend that is
//! down surfaces as [`ModelError::Unavailable`](tabby_inference::ModelError) on use. Every backend
//! is wrapped in the config's `rate_limit`.

mod chat;
mod completion;
mod embedding;
mod framing;
mod http;
mod ollama;
mod rate_limit;

use std::sync::Arc;

use tabby_common::config::HttpModelConfig;
use tabby_inference::{ChatCompletionStream, CompletionStream, Embedding};

use crate::rate_limit::RateLimited;

/// Kinds accepted by [`create_completion`].
pub const COMPLETION_KINDS: &[&str] = completion::KINDS;
/// Kinds accepted by [`create_chat`].
pub const CHAT_KINDS: &[&str] = chat::KINDS;
/// Kinds accepted by [`create_embedding`].
pub const EMBEDDING_KINDS: &[&str] = embedding::KINDS;

/// A config section that cannot be turned into a backend.
#[derive(Debug, thiserror::Error)]
pub enum BindingError {
    #[error("unknown {role} model kind {kind:?}; known {role} kinds: {known}")]
    UnknownKind {
        role: &'static str,
        kind: String,
        known: String,
    },
    #[error("{key} is required for kind {kind}")]
    MissingKey { key: &'static str, kind: String },
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(String),
}

impl BindingError {
    fn unknown_kind(role: &'static str, config: &HttpModelConfig, known: &[&str]) -> Self {
        BindingError::UnknownKind {
            role,
            kind: config.kind.clone(),
            known: known.join(", "),
        }
    }
}

/// A completion backend for `config`, and the prompt template the caller must render prompts
/// with: the internal FIM template for kinds that take prefix and suffix separately, otherwise
/// the config's `prompt_template`.
pub fn create_completion(
    config: &HttpModelConfig,
) -> Result<(Arc<dyn CompletionStream>, Option<String>), BindingError> {
    let (backend, template) = completion::create(config)?;
    let limited = RateLimited::new(backend, config.rate_limit.request_per_minute);
    Ok((Arc::new(limited), template))
}

/// A chat backend for `config`.
pub fn create_chat(
    config: &HttpModelConfig,
) -> Result<Arc<dyn ChatCompletionStream>, BindingError> {
    let backend = chat::create(config)?;
    Ok(Arc::new(RateLimited::new(
        backend,
        config.rate_limit.request_per_minute,
    )))
}

/// An embedding backend for `config`.
pub fn create_embedding(config: &HttpModelConfig) -> Result<Arc<dyn Embedding>, BindingError> {
    let backend = embedding::create(config)?;
    Ok(Arc::new(RateLimited::new(
        backend,
        config.rate_limit.request_per_minute,
    )))
}
