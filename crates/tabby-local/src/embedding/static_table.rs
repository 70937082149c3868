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

use super::{TOKENIZER_FILE, adapter::AppliedAdapter, dir_id, distill::DistillOptions, pool_error};
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
    /// The code adapter folded into the table, if one was (`adapter.rs`).
    #[serde(default)]
    pub code_adapter: Option<AppliedAdapter>,
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
    /// Token ids of words seen before, when the tokenizer works word by word (see
    /// [`WordCache`]); `None` for other tokenizers, whose texts are encoded whole.
    words: Option<WordCache>,
}

/// The pieces of `text` that BERT's pre-tokeniser keeps apart, as far as ASCII tells: runs
/// between breaks (space, tab, newline, carriage return: the ASCII whitespace BERT always
/// treats as a break; form feed and other controls are removed instead) and ASCII punctuation, and each ASCII punctuation character alone (BERT
/// splits at every punctuation character, and its normaliser leaves ASCII punctuation as it
/// is). Non-ASCII punctuation stays inside a piece, for the tokenizer to split. An `added`
/// token (each starts with ASCII punctuation) is one piece, as the tokenizer matches those in
/// the raw text first.
fn words_of<'t>(text: &'t str, added: &'t [String]) -> impl Iterator<Item = &'t str> {
    let bytes = text.as_bytes();
    let mut start = 0;
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            let b = bytes[i];
            let is_break = matches!(b, b' ' | b'\t' | b'\n' | b'\r');
            let is_punct = b.is_ascii_punctuation();
            if !is_break && !is_punct {
                i += 1;
                continue;
            }
            // A piece ends here (ASCII bytes are always char boundaries).
            if start < i {
                let piece = &text[start..i];
                start = i;
                return Some(piece);
            }
            if is_punct {
                let len = added
                    .iter()
                    .find(|t| text[i..].starts_with(t.as_str()))
                    .map_or(1, |t| t.len());
                i += len;
                start = i;
                return Some(&text[i - len..i]);
            }
            i += 1;
            start = i;
        }
        if start < bytes.len() {
            let piece = &text[start..];
            start = bytes.len();
            return Some(piece);
        }
        None
    })
}

/// Memoised token ids per word. With BERT's normaliser (character by character) and
/// pre-tokeniser (splits at whitespace and punctuation), a text's tokens are the concatenation
/// of the tokens of its pieces ([`words_of`]), so each distinct piece is tokenised once;
/// code repeats its words, and tokenising was most of the embedding's cost. Sharded to keep
/// the indexer's threads apart; a shard that fills up starts again (memory stays bounded).
type WordShard = std::sync::Mutex<std::collections::HashMap<Box<str>, Box<[u32]>>>;

struct WordCache {
    shards: Vec<WordShard>,
    /// The tokenizer's added tokens (`[UNK]`, `[CLS]`…), matched in the raw text before
    /// anything else: kept whole as pieces. Each starts with ASCII punctuation.
    added: Vec<String>,
}

const WORD_CACHE_SHARDS: usize = 16;
/// Words per shard: 16 × 8192 words, some 10 MB at most.
const WORD_CACHE_SHARD_WORDS: usize = 8192;

impl WordCache {
    /// A cache when `tokenizer` is BERT's word-by-word pipeline (normaliser and pre-tokeniser
    /// as all-MiniLM-L6-v2's), else `None`.
    fn for_tokenizer(tokenizer: &Tokenizer) -> Option<Self> {
        let kind = |v: Option<serde_json::Value>| {
            v.and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_string))
        };
        let normalizer = kind(
            tokenizer
                .get_normalizer()
                .and_then(|n| serde_json::to_value(n).ok()),
        );
        let pre = kind(
            tokenizer
                .get_pre_tokenizer()
                .and_then(|p| serde_json::to_value(p).ok()),
        );
        let mut added: Vec<String> = tokenizer
            .get_added_tokens_decoder()
            .into_values()
            .map(|t| t.content)
            .collect();
        // Longest first, so that a token that starts another is not matched in its place.
        added.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        let added_split_cleanly = added.iter().all(|t| {
            t.as_bytes().first().is_some_and(u8::is_ascii_punctuation)
                && !t.bytes().any(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        });
        let word_by_word = matches!(normalizer.as_deref(), None | Some("BertNormalizer"))
            && pre.as_deref() == Some("BertPreTokenizer")
            && added_split_cleanly;
        word_by_word.then(|| Self {
            shards: (0..WORD_CACHE_SHARDS).map(|_| Default::default()).collect(),
            added,
        })
    }

    fn shard(&self, word: &str) -> &WordShard {
        // FNV-1a: cheap, and only picks the shard.
        let hash = word.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        &self.shards[hash as usize % WORD_CACHE_SHARDS]
    }
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
                words: WordCache::for_tokenizer(&tokenizer),
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

    fn encode(&self, text: &str) -> Result<Vec<u32>, ModelError> {
        self.tokenizer
            .encode_fast(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| ModelError::Backend(format!("static embedding: {e}")))
    }

    /// The text's first [`MAX_TOKENS`] token ids, as the tokenizer gives them.
    fn token_ids(&self, text: &str) -> Result<Vec<u32>, ModelError> {
        let Some(words) = &self.words else {
            return self.encode(text);
        };
        let mut ids = Vec::new();
        for word in words_of(text, &words.added) {
            if ids.len() >= MAX_TOKENS {
                break;
            }
            let shard = words.shard(word);
            if let Some(known) = shard.lock().unwrap_or_else(|e| e.into_inner()).get(word) {
                ids.extend_from_slice(known);
                continue;
            }
            let fresh = self.encode(word)?;
            ids.extend_from_slice(&fresh);
            let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            if shard.len() >= WORD_CACHE_SHARD_WORDS {
                shard.clear();
            }
            shard.insert(word.into(), fresh.into_boxed_slice());
        }
        ids.truncate(MAX_TOKENS);
        Ok(ids)
    }

    /// The normalised sum of the text's token vectors; all zeros for a text without tokens.
    fn embed_one(&self, text: &str) -> Result<Vec<f32>, ModelError> {
        let ids = self.token_ids(text)?;
        let d = self.dimension;
        let mut sum = vec![0f32; d];
        for &id in &ids {
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

impl StaticEmbedding {
    /// The token ids the table sums for `text`, and those of the tokenizer on the whole text
    /// (truncated alike): for tests that the word cache changes nothing.
    #[doc(hidden)]
    pub fn token_ids_both_ways(&self, text: &str) -> Result<(Vec<u32>, Vec<u32>), ModelError> {
        Ok((self.table.token_ids(text)?, self.table.encode(text)?))
    }

    /// Whether texts are tokenised word by word through the cache.
    #[doc(hidden)]
    pub fn caches_words(&self) -> bool {
        self.table.words.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::words_of;

    #[test]
    fn pieces_split_at_breaks_and_ascii_punctuation() {
        let none: &[String] = &[];
        let pieces: Vec<&str> = words_of("  a(bc, dé)\n\tx\u{000C}y–z ", none).collect();
        assert_eq!(pieces, ["a", "(", "bc", ",", "dé", ")", "x\u{000C}y–z"]);
        assert_eq!(words_of("", none).count(), 0);
        assert_eq!(words_of(" \n", none).count(), 0);
        assert_eq!(words_of("::", none).collect::<Vec<_>>(), [":", ":"]);
        let added = ["[UNK]".to_string(), "[".to_string()];
        assert_eq!(
            words_of("x[UNK]y [a]", &added).collect::<Vec<_>>(),
            ["x", "[UNK]", "y", "[", "a", "]"]
        );
    }
}
