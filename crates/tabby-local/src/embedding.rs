//! Sentence embeddings with a BERT encoder (all-MiniLM-L6-v2 by default), computed the way
//! sentence-transformers does: mean of the last hidden states over the text's tokens, then L2
//! normalisation. Inputs longer than the model's `max_seq_length` are truncated.
//!
//! A call is tokenised and split into sub-batches; each sub-batch is one job on the model's
//! [`InferencePool`], queued only when the previous one is done, so concurrent calls interleave
//! sub-batch by sub-batch (a search query does not wait for a whole indexing batch). The encoder (`encoder.rs`, kernels
//! in `kernels.rs`) is ours rather than candle-transformers' `BertModel`: the same numbers
//! (a test compares them), about 2.5 times the speed on a CPU.
//!
//! The other kind of embedding model is a static token table distilled from the encoder at
//! download time (`distill.rs`, `static_table.rs`): a bag of token vectors, some hundred times
//! faster and clearly worse. [`load_any`] loads whichever a model directory holds.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

pub mod adapter;
pub mod distill;
mod encoder;
mod kernels;
pub mod static_table;

use async_trait::async_trait;
use encoder::{BertConfig, BertEncoder};
use serde::Deserialize;
use tabby_inference::{Embedding, ModelError};
use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use crate::pool::{InferencePool, PoolError};
pub use static_table::StaticEmbedding;

const WEIGHTS_FILE: &str = "model.safetensors";
const CONFIG_FILE: &str = "config.json";
const TOKENIZER_FILE: &str = "tokenizer.json";
/// sentence-transformers' settings (`max_seq_length`); optional.
const SBERT_CONFIG_FILE: &str = "sentence_bert_config.json";

/// How an embedding model runs.
#[derive(Clone, Debug)]
pub struct EmbeddingOptions {
    /// Sub-batches computed at once (threads of the model's pool).
    pub parallelism: usize,
    /// Most texts per forward pass.
    pub max_batch_size: usize,
}

impl Default for EmbeddingOptions {
    fn default() -> Self {
        Self {
            parallelism: 1,
            max_batch_size: 32,
        }
    }
}

/// A sentence encoder loaded from a model directory, behind [`Embedding`].
pub struct LocalEmbedding {
    encoder: Arc<SentenceEncoder>,
    pool: InferencePool,
    max_batch_size: usize,
    model_id: String,
}

impl LocalEmbedding {
    /// Loads `model.safetensors`, `config.json` and `tokenizer.json` (and, if present,
    /// `sentence_bert_config.json`) from `model_dir`. Blocking: reads ~90 MB.
    pub fn load(model_dir: &Path, options: EmbeddingOptions) -> Result<Self, ModelError> {
        let encoder = SentenceEncoder::load(model_dir)?;
        let model_id = format!("local:{}@{}", dir_id(model_dir), encoder.max_tokens);
        let pool = InferencePool::new("embedding", options.parallelism).map_err(|e| {
            ModelError::Unavailable(format!("cannot start the embedding threads: {e}"))
        })?;
        Ok(Self {
            encoder: Arc::new(encoder),
            pool,
            max_batch_size: options.max_batch_size.max(1),
            model_id,
        })
    }

    /// Identifies the model and the way it embeds (for index metadata): embeddings from two
    /// models with different ids are not comparable. `local:<org>/<name>@<max tokens>`.
    pub fn model_id(&self) -> String {
        self.model_id.clone()
    }

    /// Length of the vectors (384 for all-MiniLM-L6-v2).
    pub fn dimension(&self) -> usize {
        self.encoder.dimension
    }

    /// Tokens kept per input, special tokens included.
    pub fn max_tokens(&self) -> usize {
        self.encoder.max_tokens
    }
}

#[async_trait]
impl Embedding for LocalEmbedding {
    async fn embed(&self, inputs: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        if inputs.is_empty() {
            return Ok(Vec::new());
        }
        let encoder = self.encoder.clone();
        let texts = inputs.to_vec();
        let mut tokens = self
            .pool
            .run(move || encoder.tokenize(&texts))
            .await
            .map_err(pool_error)??;

        let mut vectors = Vec::with_capacity(tokens.len());
        while !tokens.is_empty() {
            let rest = tokens.split_off(self.max_batch_size.min(tokens.len()));
            let batch = std::mem::replace(&mut tokens, rest);
            let encoder = self.encoder.clone();
            let batch_vectors = self
                .pool
                .run(move || encoder.encode(&batch))
                .await
                .map_err(pool_error)??;
            vectors.extend(batch_vectors);
        }
        Ok(vectors)
    }
}

/// An embedding model loaded by [`load_any`].
pub struct LoadedEmbedding {
    pub model: Arc<dyn Embedding>,
    /// For index metadata (see [`LocalEmbedding::model_id`], [`StaticEmbedding::model_id`]).
    pub model_id: String,
    pub dimension: usize,
}

/// Loads whichever embedding `model_dir` holds: a static table (`static-embedding.json`) or a
/// BERT sentence encoder (`model.safetensors`). `options` applies to the encoder.
pub fn load_any(
    model_dir: &Path,
    options: EmbeddingOptions,
) -> Result<LoadedEmbedding, ModelError> {
    if model_dir.join(static_table::HEADER_FILE).is_file() {
        let model = StaticEmbedding::load(model_dir)?;
        return Ok(LoadedEmbedding {
            model_id: model.model_id(),
            dimension: model.dimension(),
            model: Arc::new(model),
        });
    }
    if !model_dir.join(WEIGHTS_FILE).is_file() && model_dir.join(static_table::TABLE_FILE).is_file()
    {
        // A table without its header: an interrupted distillation.
        return Err(ModelError::Unavailable(format!(
            "{} has no {}: the static embedding was not finished; run `tabby download`",
            model_dir.display(),
            static_table::HEADER_FILE
        )));
    }
    let model = LocalEmbedding::load(model_dir, options)?;
    Ok(LoadedEmbedding {
        model_id: model.model_id(),
        dimension: model.dimension(),
        model: Arc::new(model),
    })
}

fn pool_error(e: PoolError) -> ModelError {
    ModelError::Backend(format!("embedding: {e}"))
}

fn backend_error(e: impl std::fmt::Display) -> ModelError {
    ModelError::Backend(format!("embedding model: {e}"))
}

/// `<org>/<name>` from the last two components of a model directory.
fn dir_id(model_dir: &Path) -> String {
    let dir = std::fs::canonicalize(model_dir).unwrap_or_else(|_| model_dir.to_path_buf());
    let mut names = dir
        .components()
        .rev()
        .filter_map(|c| c.as_os_str().to_str())
        .take(2)
        .collect::<Vec<_>>();
    names.reverse();
    names.join("/")
}

#[derive(Deserialize)]
struct SbertConfig {
    max_seq_length: Option<usize>,
}

struct SentenceEncoder {
    encoder: BertEncoder,
    tokenizer: Tokenizer,
    dimension: usize,
    max_tokens: usize,
}

impl SentenceEncoder {
    fn load(dir: &Path) -> Result<Self, ModelError> {
        let file = |name: &str| -> Result<PathBuf, ModelError> {
            let path = dir.join(name);
            if path.is_file() {
                Ok(path)
            } else {
                Err(ModelError::Unavailable(format!(
                    "the embedding model is not downloaded: {} is missing; run `tabby download` \
                     (or set model_id to a directory with {WEIGHTS_FILE}, {CONFIG_FILE} and \
                     {TOKENIZER_FILE})",
                    path.display()
                )))
            }
        };
        let read = |path: &Path| {
            std::fs::read_to_string(path).map_err(|e| {
                ModelError::Unavailable(format!("cannot read {}: {e}", path.display()))
            })
        };
        let invalid = |path: &Path, e: &dyn std::fmt::Display| {
            ModelError::Unavailable(format!("{}: {e}", path.display()))
        };
        let weights = file(WEIGHTS_FILE)?;
        let config_path = file(CONFIG_FILE)?;
        let tokenizer_path = file(TOKENIZER_FILE)?;

        let config: BertConfig =
            serde_json::from_str(&read(&config_path)?).map_err(|e| invalid(&config_path, &e))?;
        let sbert_path = dir.join(SBERT_CONFIG_FILE);
        let sbert_max = if sbert_path.is_file() {
            let sbert: SbertConfig =
                serde_json::from_str(&read(&sbert_path)?).map_err(|e| invalid(&sbert_path, &e))?;
            sbert.max_seq_length
        } else {
            None
        };
        let max_tokens = sbert_max
            .unwrap_or(config.max_position_embeddings)
            .min(config.max_position_embeddings);

        let mut tokenizer =
            Tokenizer::from_file(&tokenizer_path).map_err(|e| invalid(&tokenizer_path, &e))?;
        // tokenizer.json ships with its own truncation (128) and fixed padding: replace both.
        tokenizer
            .with_truncation(Some(TruncationParams {
                direction: TruncationDirection::Right,
                max_length: max_tokens,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
            }))
            .map_err(|e| invalid(&tokenizer_path, &e))?;
        tokenizer.with_padding(None);

        let tensors = candle_core::safetensors::load(&weights, &candle_core::Device::Cpu)
            .map_err(|e| invalid(&weights, &e))?;
        let encoder = BertEncoder::new(config, tensors).map_err(|e| invalid(&weights, &e))?;
        Ok(Self {
            dimension: encoder.hidden_size(),
            encoder,
            tokenizer,
            max_tokens,
        })
    }

    fn tokenize(&self, texts: &[String]) -> Result<Vec<Vec<u32>>, ModelError> {
        texts
            .iter()
            .map(|text| {
                self.tokenizer
                    .encode_fast(text.as_str(), true)
                    .map(|encoding| encoding.get_ids().to_vec())
                    .map_err(backend_error)
            })
            .collect()
    }

    /// One forward pass over `batch`, mean-pooled and normalised.
    fn encode(&self, batch: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, ModelError> {
        self.encoder.embed(batch).map_err(backend_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_model_is_unavailable_and_names_tabby_download() {
        let dir = tempfile::tempdir().unwrap();
        let err = LocalEmbedding::load(dir.path(), EmbeddingOptions::default())
            .err()
            .unwrap();
        assert!(matches!(err, ModelError::Unavailable(_)), "{err}");
        assert!(err.to_string().contains("tabby download"), "{err}");
    }

    #[test]
    fn corrupt_files_are_errors_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        for name in [WEIGHTS_FILE, CONFIG_FILE, TOKENIZER_FILE] {
            std::fs::write(dir.path().join(name), "garbage").unwrap();
        }
        let err = LocalEmbedding::load(dir.path(), EmbeddingOptions::default())
            .err()
            .unwrap();
        assert!(err.to_string().contains(CONFIG_FILE), "{err}");
    }

    #[test]
    fn the_id_is_made_of_the_last_two_directory_names() {
        assert_eq!(
            dir_id(Path::new(
                "/no/such/models/sentence-transformers/all-MiniLM-L6-v2"
            )),
            "sentence-transformers/all-MiniLM-L6-v2"
        );
    }
}
