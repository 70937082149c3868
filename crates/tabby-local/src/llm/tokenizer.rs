//! The tokenizer of a GGUF model, rebuilt from its metadata (GGUF files carry no
//! `tokenizer.json`): byte-level BPE over `tokenizer.ggml.tokens` / `merges`, the pre-tokenizer
//! named by `tokenizer.ggml.pre`, and control / user-defined tokens as added tokens, so that
//! `encode` gives the ids llama.cpp gives for the same file.
//!
//! Decoding does not go through the HF decoder: each id maps to its raw bytes and
//! [`StreamDecoder`] releases only complete UTF-8, which is what streaming needs.

use std::collections::HashMap;

use candle_core::quantized::gguf_file;
use tokenizers::models::bpe::{BPE, Merges, Vocab};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior, Tokenizer};

/// llama.cpp's `llama_token_type` values as stored in `tokenizer.ggml.token_type`.
const TOKEN_TYPE_NORMAL: i32 = 1;
const TOKEN_TYPE_CONTROL: i32 = 3;
const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// Qwen2's split regex (`tokenizer.ggml.pre = "qwen2"`); the same expression Qwen's own
/// `tokenizer.json` uses.
const QWEN2_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Llama 3's split regex (`llama-bpe`), numbers in groups of up to three digits.
const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A GGUF model's tokenizer: HF `Tokenizer` for encoding, a byte table for decoding.
pub struct GgufTokenizer {
    tokenizer: Tokenizer,
    /// The bytes each id stands for; empty for control tokens, which never reach the output.
    token_bytes: Vec<Vec<u8>>,
    eos: Option<u32>,
    /// The ids of the tokens whose bytes start with each byte value, built when first asked
    /// for (what a constrained step looks through).
    by_first_byte: std::sync::OnceLock<Vec<Vec<u32>>>,
}

impl GgufTokenizer {
    /// Builds the tokenizer from the GGUF metadata of `content`.
    pub(crate) fn from_gguf(content: &gguf_file::Content) -> Result<Self, String> {
        let md = &content.metadata;
        let get = |key: &str| {
            md.get(key)
                .ok_or_else(|| format!("metadata has no `{key}`"))
        };
        let model = get("tokenizer.ggml.model")?
            .to_string()
            .map_err(|e| e.to_string())?;
        if model != "gpt2" {
            return Err(format!(
                "tokenizer model `{model}` is not supported (only byte-level BPE, `gpt2`)"
            ));
        }
        let tokens: Vec<String> = string_array(get("tokenizer.ggml.tokens")?)?;
        let merges: Vec<String> = string_array(get("tokenizer.ggml.merges")?)?;
        let token_types: Vec<i32> = match md.get("tokenizer.ggml.token_type") {
            Some(v) => v
                .to_vec()
                .map_err(|e| e.to_string())?
                .iter()
                .map(|t| t.to_i32().map_err(|e| e.to_string()))
                .collect::<Result<_, _>>()?,
            None => vec![TOKEN_TYPE_NORMAL; tokens.len()],
        };
        if token_types.len() != tokens.len() {
            return Err(
                "tokenizer.ggml.token_type and tokenizer.ggml.tokens differ in length".into(),
            );
        }
        let pre = match md.get("tokenizer.ggml.pre") {
            Some(v) => v.to_string().map_err(|e| e.to_string())?.clone(),
            None => "default".to_string(),
        };
        let eos = md
            .get("tokenizer.ggml.eos_token_id")
            .and_then(|v| v.to_u32().ok());
        Self::new(&tokens, &token_types, &merges, &pre, eos)
    }

    fn new(
        tokens: &[String],
        token_types: &[i32],
        merges: &[String],
        pre: &str,
        eos: Option<u32>,
    ) -> Result<Self, String> {
        let mut vocab = Vocab::default();
        for (id, token) in tokens.iter().enumerate() {
            vocab.entry(token.clone()).or_insert(id as u32);
        }
        let merges: Merges = merges
            .iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .ok_or_else(|| format!("malformed merge `{m}`"))
            })
            .collect::<Result<_, _>>()?;
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| format!("cannot build the BPE model: {e}"))?;

        let mut tokenizer = Tokenizer::new(bpe);
        tokenizer.with_pre_tokenizer(Some(pre_tokenizer(pre)?));

        let (mut special, mut user_defined) = (Vec::new(), Vec::new());
        for (token, &kind) in tokens.iter().zip(token_types) {
            match kind {
                TOKEN_TYPE_CONTROL => special.push(AddedToken::from(token.clone(), true)),
                TOKEN_TYPE_USER_DEFINED => {
                    user_defined.push(AddedToken::from(token.clone(), false))
                }
                _ => {}
            }
        }
        let added = |e: tokenizers::Error| format!("cannot add special tokens: {e}");
        tokenizer
            .add_special_tokens(special.into_iter().map(|t| t.normalized(false)))
            .map_err(added)?;
        tokenizer
            .add_tokens(user_defined.into_iter().map(|t| t.normalized(false)))
            .map_err(added)?;

        let char_to_byte = byte_level_decoding_table();
        let token_bytes = tokens
            .iter()
            .zip(token_types)
            .map(|(token, &kind)| match kind {
                TOKEN_TYPE_CONTROL => Vec::new(),
                TOKEN_TYPE_USER_DEFINED => token.as_bytes().to_vec(),
                _ => token
                    .chars()
                    .map(|c| {
                        char_to_byte.get(&c).copied().unwrap_or_else(|| {
                            // Not a byte-level symbol: keep the character as it is.
                            let mut buf = [0; 4];
                            c.encode_utf8(&mut buf);
                            buf[0]
                        })
                    })
                    .collect(),
            })
            .collect();
        Ok(Self {
            tokenizer,
            token_bytes,
            eos,
            by_first_byte: std::sync::OnceLock::new(),
        })
    }

    /// Token ids of `text`; special tokens written in the text (`<|fim_prefix|>`) are parsed
    /// as such. No BOS is added.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        self.tokenizer
            .encode_fast(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| format!("cannot tokenize the prompt: {e}"))
    }

    /// The id of a token by its exact text, e.g. `<|endoftext|>`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.tokenizer.token_to_id(text)
    }

    /// The GGUF's end-of-sequence id (`tokenizer.ggml.eos_token_id`).
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// The raw bytes of `id`; empty for control tokens and ids out of range.
    pub(crate) fn bytes(&self, id: u32) -> &[u8] {
        self.token_bytes
            .get(id as usize)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The ids of the tokens whose bytes start with each byte value (256 lists; control
    /// tokens, which have no bytes, are in none).
    pub(crate) fn ids_by_first_byte(&self) -> &[Vec<u32>] {
        self.by_first_byte.get_or_init(|| {
            let mut lists = vec![Vec::new(); 256];
            for (id, bytes) in self.token_bytes.iter().enumerate() {
                if let Some(&first) = bytes.first() {
                    lists[first as usize].push(id as u32);
                }
            }
            lists
        })
    }

    /// Decodes a whole id sequence (lossy at broken UTF-8).
    pub fn decode(&self, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids.iter().flat_map(|&id| self.bytes(id)).copied().collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// The pre-tokenizer for llama.cpp's `tokenizer.ggml.pre` name.
///
/// No normalizer: Qwen's own `tokenizer.json` applies NFC, llama.cpp does not, and matching
/// llama.cpp (what upstream Tabby runs) keeps greedy output identical token for token. The two
/// differ only on text in decomposed Unicode form.
fn pre_tokenizer(pre: &str) -> Result<PreTokenizerWrapper, String> {
    let byte_level =
        |use_regex| PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, false, use_regex));
    let split = |pattern: &str| -> Result<PreTokenizerWrapper, String> {
        Split::new(
            SplitPattern::Regex(pattern.to_string()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map(PreTokenizerWrapper::Split)
        .map_err(|e| format!("cannot build the pre-tokenizer regex: {e}"))
    };
    let sequence = |parts| PreTokenizerWrapper::Sequence(Sequence::new(parts));
    match pre {
        "qwen2" | "deepseek-r1-qwen" => {
            Ok(sequence(vec![split(QWEN2_PATTERN)?, byte_level(false)]))
        }
        "llama3" | "llama-v3" | "llama-bpe" => {
            Ok(sequence(vec![split(LLAMA3_PATTERN)?, byte_level(false)]))
        }
        // StarCoder-style: every digit on its own, then GPT-2's split.
        "smollm" | "starcoder" | "refact" => Ok(sequence(vec![
            PreTokenizerWrapper::Digits(Digits::new(true)),
            byte_level(true),
        ])),
        "default" | "gpt2" | "gpt-2" => Ok(byte_level(true)),
        other => Err(format!(
            "pre-tokenizer `{other}` is not supported (known: qwen2, llama-bpe, smollm, starcoder, gpt2)"
        )),
    }
}

/// GPT-2's byte-level alphabet, reversed: the printable character each byte was mapped to,
/// back to the byte.
fn byte_level_decoding_table() -> HashMap<char, u8> {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut table = HashMap::with_capacity(256);
    let mut shifted = 0u32;
    for b in 0..=255u8 {
        let c = if printable(b) {
            char::from(b)
        } else {
            shifted += 1;
            char::from_u32(255 + shifted).expect("valid code point")
        };
        table.insert(c, b);
    }
    table
}

fn string_array(value: &gguf_file::Value) -> Result<Vec<String>, String> {
    value
        .to_vec()
        .map_err(|e| e.to_string())?
        .iter()
        .map(|v| v.to_string().cloned().map_err(|e| e.to_string()))
        .collect()
}

/// Turns generated ids into text pieces that never split a UTF-8 character.
pub struct StreamDecoder {
    pending: Vec<u8>,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self {
            pending: Vec::new(),
        }
    }

    /// Adds the bytes of one token; returns the text that is now complete, if any.
    pub fn push(&mut self, bytes: &[u8]) -> Option<String> {
        self.pending.extend_from_slice(bytes);
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(s) => s.len(),
            // A sequence that can never become valid is replaced rather than held forever.
            Err(e) if e.error_len().is_some() => {
                let text = String::from_utf8_lossy(&self.pending).into_owned();
                self.pending.clear();
                return Some(text);
            }
            Err(e) => e.valid_up_to(),
        };
        if valid == 0 {
            return None;
        }
        let rest = self.pending.split_off(valid);
        let text = String::from_utf8(std::mem::replace(&mut self.pending, rest))
            .expect("checked to be UTF-8");
        Some(text)
    }

    /// Whatever is left at the end of generation (an incomplete character), replaced lossily.
    pub fn finish(&mut self) -> Option<String> {
        if self.pending.is_empty() {
            return None;
        }
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        Some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_decoder_holds_partial_characters() {
        let crab = "🦀".as_bytes();
        let mut d = StreamDecoder::new();
        assert_eq!(d.push(&crab[..1]), None);
        assert_eq!(d.push(&crab[1..3]), None);
        assert_eq!(d.push(&[crab[3], b'a']), Some("🦀a".to_string()));
        assert_eq!(d.push(b"bc"), Some("bc".to_string()));
        assert_eq!(d.push(&crab[..2]), None);
        assert_eq!(d.finish(), Some("\u{FFFD}".to_string()));
    }

    #[test]
    fn stream_decoder_replaces_invalid_bytes() {
        let mut d = StreamDecoder::new();
        assert_eq!(d.push(&[b'x', 0xFF]), Some("x\u{FFFD}".to_string()));
        assert_eq!(d.finish(), None);
    }

    #[test]
    fn byte_level_table_covers_every_byte() {
        let table = byte_level_decoding_table();
        assert_eq!(table.len(), 256);
        assert_eq!(table[&'Ġ'], b' ');
        assert_eq!(table[&'Ċ'], b'\n');
        assert_eq!(table[&'a'], b'a');
    }
}
