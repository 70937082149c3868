//! A static embedding: one vector per token of a WordPiece vocabulary, distilled from a BERT
//! sentence encoder at download time (`distill.rs`). A text's embedding is the sum of its
//! tokens' vectors, L2-normalised (the sum and the mean have the same direction). No network,
//! no attention: the cost is tokenisation plus one vector add per token, some hundred times
//! the speed of the encoder it comes from, at a loss of quality that `tabby eval` measures.
//!
//! A model directory holds the table (`static-embedding.safetensors`: one f16 tensor
//! `embeddings`, vocabulary × dimension), the tokenizer it is indexed by (`tokenizer.json`) and
//! a header (`static-embedding.json`) that records where the table came from and how it was made.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use async_trait::async_trait;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tabby_inference::{Embedding, ModelError};
use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use super::{TOKENIZER_FILE, dir_id, distill::DistillOptions, pool_error};
use crate::pool::InferencePool;

/// The table: tensor [`TABLE_TENSOR`], vocabulary × dimension, f16.
pub const TABLE_FILE: &str = "static-embedding.safetensors";
/// The header, written last: a directory with a header holds a complete table.
pub const HEADER_FILE: &str = "static-embedding.json";
pub(crate) const TABLE_TENSOR: &str = "embeddings";
/// Bumped when the file layout or the meaning of a header field changes.
pub(crate) const FORMAT_VERSION: u32 = 1;
/// Tokens of a text that count. Generous: a static table costs nothing per token beyond the
/// tokenizer, and the indexer clips its inputs by bytes anyway.
pub const MAX_TOKENS: usize = 512;

/// `static-embedding.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TableHeader {
    pub format_version: u32,
    pub vocab_size: usize,
    pub dimension: usize,
    /// sha256 (hex) of the table file: part of the model id, so an index never mixes two tables.
    pub table_sha256: String,
    /// The model the table was distilled from and the sha256 of each of its files used.
    pub source: SourceFiles,
    pub distillation: DistillOptions,
}

/// The files of the source model a table was distilled from, by sha256.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceFiles {
    /// `<org>/<name>` of the source directory.
    pub model: String,
    pub weights_sha256: String,
    pub config_sha256: String,
    pub tokenizer_sha256: String,
}

impl TableHeader {
    pub fn load(model_dir: &Path) -> Result<Self, ModelError> {
        let path = model_dir.join(HEADER_FILE);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            ModelError::Unavailable(format!(
                "the static embedding is not built: cannot read {}: {e}; run `tabby download`",
                path.display()
            ))
        })?;
        serde_json::from_str(&text)
            .map_err(|e| ModelError::Unavailable(format!("{}: {e}", path.display())))
    }
}

/// A static token-embedding table behind [`Embedding`].
pub struct StaticEmbedding {
    table: Arc<Table>,
    pool: InferencePool,
    model_id: String,
}

struct Table {
    /// `vocab_size × dimension`, row-major.
    vectors: Vec<f32>,
    dimension: usize,
    tokenizer: Tokenizer,
}

impl StaticEmbedding {
    /// Loads the table, its header and `tokenizer.json` from `model_dir`. Blocking: reads
    /// ~25 MB.
    pub fn load(model_dir: &Path) -> Result<Self, ModelError> {
        let header = TableHeader::load(model_dir)?;
        let invalid = |path: &Path, e: &dyn std::fmt::Display| {
            ModelError::Unavailable(format!("{}: {e}", path.display()))
        };
        if header.format_version != FORMAT_VERSION {
            return Err(ModelError::Unavailable(format!(
                "{}: format version {} (this build reads {FORMAT_VERSION}); run `tabby download` \
                 to rebuild it",
                model_dir.join(HEADER_FILE).display(),
                header.format_version
            )));
        }
        let file = |name: &str| -> Result<PathBuf, ModelError> {
            let path = model_dir.join(name);
            if path.is_file() {
                Ok(path)
            } else {
                Err(ModelError::Unavailable(format!(
                    "{} is missing; run `tabby download` to rebuild the static embedding",
                    path.display()
                )))
            }
        };
        let table_path = file(TABLE_FILE)?;
        let tokenizer_path = file(TOKENIZER_FILE)?;

        let tensors = candle_core::safetensors::load(&table_path, &candle_core::Device::Cpu)
            .map_err(|e| invalid(&table_path, &e))?;
        let tensor = tensors
            .get(TABLE_TENSOR)
            .ok_or_else(|| invalid(&table_path, &format!("no tensor {TABLE_TENSOR:?}")))?;
        let expected = [header.vocab_size, header.dimension];
        if tensor.dims() != expected {
            return Err(invalid(
                &table_path,
                &format!(
                    "tensor {TABLE_TENSOR:?} has shape {:?}, the header says {expected:?}",
                    tensor.dims()
                ),
            ));
        }
        let vectors = tensor
            .to_dtype(candle_core::DType::F32)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(|e| invalid(&table_path, &e))?;

        let mut tokenizer =
            Tokenizer::from_file(&tokenizer_path).map_err(|e| invalid(&tokenizer_path, &e))?;
        if tokenizer.get_vocab_size(true) > header.vocab_size {
            return Err(invalid(
                &tokenizer_path,
                &format!(
                    "{} tokens, but the table has {} rows",
                    tokenizer.get_vocab_size(true),
                    header.vocab_size
                ),
            ));
        }
        tokenizer
            .with_truncation(Some(TruncationParams {
                direction: TruncationDirection::Right,
                max_length: MAX_TOKENS,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
            }))
            .map_err(|e| invalid(&tokenizer_path, &e))?;
        tokenizer.with_padding(None);

        let pool = InferencePool::new("static-embedding", 1).map_err(|e| {
            ModelError::Unavailable(format!("cannot start the embedding thread: {e}"))
        })?;
        let model_id = format!(
            "local:{}@{MAX_TOKENS}#{}",
            dir_id(model_dir),
            &header.table_sha256[..header.table_sha256.len().min(12)]
        );
        Ok(Self {
            table: Arc::new(Table {
                vectors,
                dimension: header.dimension,
                tokenizer,
            }),
            pool,
            model_id,
        })
    }

    /// Identifies the table (for index metadata):
    /// `local:<org>/<name>@<max tokens>#<table sha256 prefix>`.
    pub fn model_id(&self) -> String {
        self.model_id.clone()
    }

    /// Length of the vectors.
    pub fn dimension(&self) -> usize {
        self.table.dimension
    }
}

impl Table {
    fn embed(&self, inputs: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        inputs.par_iter().map(|text| self.embed_one(text)).collect()
    }

    /// The normalised sum of the text's token vectors; all zeros for a text without tokens.
    fn embed_one(&self, text: &str) -> Result<Vec<f32>, ModelError> {
        let encoding = self
            .tokenizer
            .encode_fast(text, false)
            .map_err(|e| ModelError::Backend(format!("static embedding: {e}")))?;
        let d = self.dimension;
        let mut sum = vec![0f32; d];
        for &id in encoding.get_ids() {
            if let Some(row) = self.vectors.get(id as usize * d..(id as usize + 1) * d) {
                sum.iter_mut().zip(row).for_each(|(s, v)| *s += v);
            }
        }
        let norm = sum.iter().map(|v| v * v).sum::<f32>().sqrt();
        if norm > 0.0 {
            sum.iter_mut().for_each(|v| *v /= norm);
        }
        Ok(sum)
    }
}

#[async_trait]
impl Embedding for StaticEmbedding {
    async fn embed(&self, inputs: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        if inputs.is_empty() {
            return Ok(Vec::new());
        }
        let table = self.table.clone();
        let texts = inputs.to_vec();
        self.pool
            .run(move || table.embed(&texts))
            .await
            .map_err(pool_error)?
    }
}
