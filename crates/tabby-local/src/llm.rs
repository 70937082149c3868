//! GGUF language models (Qwen2, Llama family) run in-process: FIM completion and chat behind
//! the `tabby-inference` traits.
//!
//! A model directory (as `tabby download` lays it out) holds `model.gguf` and, optionally,
//! `tabby.json` with the model's `prompt_template` (FIM) and `chat_template`. [`LocalLlm`] loads
//! it once; [`LocalCompletion`] and [`LocalChat`] are views of one loaded model, so a server that
//! completes and chats with the same model holds its weights once.
//!
//! Not here: choosing which model directory to use (the registry) and fetching weights.

mod chat;
mod engine;
mod model;
mod ops;
mod quant_matrix;
mod sampler;
#[cfg(test)]
mod tests;
mod tokenizer;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde::Deserialize;
use tabby_inference::{CompletionOptions, CompletionStream, FirstNames, ModelError};

pub use chat::LocalChat;
pub use engine::{PromptStats, loaded_prompt_stats};
pub use tokenizer::GgufTokenizer;

use engine::{Engine, Generation, Piece};
use sampler::{Sampler, SamplingParams};

/// The weights file inside a model directory.
pub const MODEL_FILE: &str = "model.gguf";
/// The optional template file inside a model directory.
pub const TEMPLATE_FILE: &str = "tabby.json";

/// Context size used unless configured: the KV cache and the prompt fit in it.
pub const DEFAULT_CONTEXT_SIZE: usize = 4096;

/// How a model is run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LlmConfig {
    /// Requests computing at the same time. Concurrent requests take turns token by token in
    /// arrival order either way; on a CPU, 1 gives every step all cores.
    pub parallelism: usize,
    /// Positions (prompt + generated tokens) a request can use; capped at the model's own.
    pub context_size: usize,
    /// Bytes of finished requests' KV caches kept so that later prompts sharing their start
    /// read only the rest (0: keep none).
    pub prompt_cache_bytes: usize,
    /// Most tokens a greedy request drafts from its own context per forward pass (0: none).
    pub draft_tokens: usize,
}

/// Drafted tokens per pass by default (chosen with the typing bench, see the README).
pub const DEFAULT_DRAFT_TOKENS: usize = 4;

/// Enough for a handful of editors: a 1.5 KB prompt's session holds 12 MiB on Qwen2.5-0.5B.
pub const DEFAULT_PROMPT_CACHE_BYTES: usize = 256 << 20;

impl Default for LlmConfig {
    fn default() -> Self {
        Self {
            parallelism: 1,
            context_size: DEFAULT_CONTEXT_SIZE,
            prompt_cache_bytes: DEFAULT_PROMPT_CACHE_BYTES,
            draft_tokens: DEFAULT_DRAFT_TOKENS,
        }
    }
}

/// Why a model directory could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("model weights not found at {}; run `tabby download` to fetch them", .0.display())]
    Missing(PathBuf),
    #[error("cannot load the model at {}: {message}", .path.display())]
    Invalid { path: PathBuf, message: String },
    #[error("the chat template of {0} is not ChatML; only ChatML models can chat locally")]
    ChatTemplate(String),
}

/// `tabby.json`: templates that come with the weights.
#[derive(Debug, Default, Deserialize)]
struct Templates {
    prompt_template: Option<String>,
    chat_template: Option<String>,
}

/// A loaded language model with the inference pool its requests run on.
pub struct LocalLlm {
    engine: Engine,
    prompt_template: Option<String>,
    chat_template: Option<String>,
    /// Ids that end a generation: EOS and the end/pad markers of FIM and ChatML.
    stop_tokens: Arc<[u32]>,
    model_id: String,
}

impl LocalLlm {
    /// Loads `model_dir/model.gguf` (and `tabby.json` if present) and starts its pool. Never
    /// panics: a missing file names `tabby download`, a broken one says what is wrong.
    pub fn load(model_dir: &Path, config: &LlmConfig) -> Result<Self, LoadError> {
        let path = model_dir.join(MODEL_FILE);
        if !path.is_file() {
            return Err(LoadError::Missing(path));
        }
        let invalid = |message: String| LoadError::Invalid {
            path: path.clone(),
            message,
        };
        let templates = read_templates(model_dir).map_err(|message| LoadError::Invalid {
            path: model_dir.join(TEMPLATE_FILE),
            message,
        })?;
        let mut file = model::GgufFile::open(&path).map_err(invalid)?;
        let tokenizer = GgufTokenizer::from_gguf(&file.content).map_err(invalid)?;
        let gguf_chat_template = file
            .content
            .metadata
            .get("tokenizer.chat_template")
            .and_then(|v| v.to_string().ok())
            .cloned();
        let weights = model::Weights::load(&mut file, config.context_size).map_err(invalid)?;
        drop(file);

        let stop_tokens: Vec<u32> = tokenizer
            .eos()
            .into_iter()
            .chain(
                [
                    "<|endoftext|>",
                    "<|im_end|>",
                    "<|fim_pad|>",
                    "<|file_sep|>",
                    "<|eot_id|>",
                ]
                .iter()
                .filter_map(|t| tokenizer.token_id(t)),
            )
            .collect();
        let model_id = model_id(model_dir);
        let engine = Engine::start(
            &model_id,
            weights,
            tokenizer,
            config.parallelism,
            config.prompt_cache_bytes,
            config.draft_tokens,
        )
        .map_err(|e| invalid(format!("cannot start worker threads: {e}")))?;
        Ok(Self {
            engine,
            prompt_template: templates.prompt_template,
            chat_template: templates.chat_template.or(gguf_chat_template),
            stop_tokens: stop_tokens.into(),
            model_id,
        })
    }

    /// The FIM template from `tabby.json`, e.g.
    /// `<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>`.
    pub fn prompt_template(&self) -> Option<&str> {
        self.prompt_template.as_deref()
    }

    /// The chat template (Jinja) from `tabby.json`, else from the GGUF.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// The model's name as reported in chat chunks: `<org>/<name>` of the directory.
    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    /// Requests that make progress at once; more wait their turn.
    pub fn parallelism(&self) -> usize {
        self.engine.parallelism()
    }

    /// Requests queued or generating right now (a dropped stream stops counting within one
    /// decoding step).
    pub fn requests_in_flight(&self) -> usize {
        self.engine.in_flight()
    }

    /// Prompt tokens computed and found in the prompt cache so far, and the cache's size.
    pub fn prompt_stats(&self) -> PromptStats {
        self.engine.prompt_stats()
    }

    /// The positions one request can use (prompt + generated tokens).
    pub fn context_size(&self) -> usize {
        self.engine.weights().max_positions
    }

    /// The tokenizer, e.g. to count tokens.
    pub fn tokenizer(&self) -> &GgufTokenizer {
        self.engine.tokenizer()
    }

    fn generate(
        &self,
        prompt: String,
        options: SamplingOptions,
    ) -> BoxStream<'static, Result<Piece, ModelError>> {
        self.generate_starting_with(prompt, options, None)
    }

    /// [`Self::generate`], the reply starting with one of `first_names` when given.
    fn generate_starting_with(
        &self,
        prompt: String,
        options: SamplingOptions,
        first_names: Option<Arc<FirstNames>>,
    ) -> BoxStream<'static, Result<Piece, ModelError>> {
        self.engine.submit(Generation {
            prompt,
            max_tokens: options.max_tokens,
            sampling: options.params(),
            stop_tokens: self.stop_tokens.clone(),
            first_names,
        })
    }
}

#[derive(Clone, Copy, Debug)]
struct SamplingOptions {
    /// `None`: until a stop token or the end of the context.
    max_tokens: Option<usize>,
    temperature: f32,
    top_p: Option<f32>,
    seed: u64,
    presence_penalty: f32,
    frequency_penalty: f32,
}

impl SamplingOptions {
    fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_p: self.top_p,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            seed: self.seed,
        }
    }

    /// The caller's mistake in these options, if any (an out-of-range parameter).
    fn check(&self) -> Result<(), ModelError> {
        Sampler::new(self.params())
            .map(drop)
            .map_err(ModelError::InvalidRequest)
    }
}

fn read_templates(model_dir: &Path) -> Result<Templates, String> {
    let path = model_dir.join(TEMPLATE_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| e.to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Templates::default()),
        Err(e) => Err(e.to_string()),
    }
}

fn model_id(model_dir: &Path) -> String {
    let mut parts: Vec<String> = model_dir
        .components()
        .rev()
        .take(2)
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.reverse();
    parts.join("/")
}

/// FIM / plain text completion from a local model. The prompt arrives fully built (the
/// completion service applies [`LocalLlm::prompt_template`]); stop words are the service's job.
#[derive(Clone)]
pub struct LocalCompletion {
    llm: Arc<LocalLlm>,
}

impl LocalCompletion {
    /// Loads the model in `model_dir`; see [`LlmConfig::parallelism`].
    pub fn new(model_dir: &Path, parallelism: usize) -> Result<Self, LoadError> {
        let config = LlmConfig {
            parallelism,
            ..LlmConfig::default()
        };
        Ok(Self::from_llm(Arc::new(LocalLlm::load(
            model_dir, &config,
        )?)))
    }

    pub fn from_llm(llm: Arc<LocalLlm>) -> Self {
        Self { llm }
    }

    pub fn llm(&self) -> &Arc<LocalLlm> {
        &self.llm
    }
}

#[async_trait]
impl CompletionStream for LocalCompletion {
    async fn generate(
        &self,
        prompt: &str,
        options: CompletionOptions,
    ) -> BoxStream<'static, Result<String, ModelError>> {
        let first_names = options.first_names.clone();
        let options = SamplingOptions {
            max_tokens: Some(options.max_decoding_tokens.max(0) as usize),
            temperature: options.sampling_temperature,
            top_p: None,
            seed: options.seed,
            presence_penalty: options.presence_penalty,
            frequency_penalty: 0.0,
        };
        self.llm
            .generate_starting_with(prompt.to_string(), options, first_names)
            .filter_map(|piece| async move {
                match piece {
                    Ok(Piece::Text(text)) => Some(Ok(text)),
                    Ok(Piece::End(_)) => None,
                    Err(e) => Some(Err(e)),
                }
            })
            .boxed()
    }
}
