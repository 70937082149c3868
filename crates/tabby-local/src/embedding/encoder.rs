//! A BERT encoder (the architecture of all-MiniLM-L6-v2) that runs a batch as one packed
//! sequence of tokens: the dense layers see every token of every text at once (no padding, big
//! matrix products), attention runs per text and head in parallel, and the result is the
//! sentence-transformers embedding (mean over the text's tokens, L2-normalised).
//!
//! Weights are read once from the safetensors file into plain `Vec<f32>`s (the query, key and
//! value projections fused into one matrix, the attention scale folded into the query). The
//! output matches candle-transformers' `BertModel` with mean pooling to float precision; a test
//! in `tests/embedding.rs` checks that.

use std::collections::HashMap;

use candle_core::{DType, Tensor};
use rayon::prelude::*;
use serde::Deserialize;

use super::kernels::{MatRef, fill_rows, gelu_erf, layer_norm, matmul, softmax_rows};

/// The fields of a Hugging Face BERT `config.json` this encoder uses.
#[derive(Clone, Debug, Deserialize)]
pub struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "default_act")]
    pub hidden_act: String,
    #[serde(default)]
    pub position_embedding_type: Option<String>,
}

fn default_eps() -> f64 {
    1e-12
}

fn default_act() -> String {
    "gelu".to_string()
}

struct LayerNorm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
}

/// `y = x · weightᵀ + bias`, weight stored `out × in` as in the checkpoint.
struct Linear {
    weight: Vec<f32>,
    bias: Vec<f32>,
    inputs: usize,
}

impl Linear {
    fn outputs(&self) -> usize {
        self.bias.len()
    }

    /// `out (rows × outputs) = (residual or 0) + bias + x · weightᵀ`.
    fn forward(&self, x: &[f32], rows: usize, residual: Option<&[f32]>, out: &mut [f32]) {
        fill_rows(out, &self.bias, residual);
        let w = MatRef::new(&self.weight, 0, self.outputs(), self.inputs, self.inputs);
        matmul(
            out,
            0,
            self.outputs(),
            MatRef::new(x, 0, rows, self.inputs, self.inputs),
            w.t(),
            true,
            true,
        );
    }
}

struct Layer {
    /// Query (pre-scaled by 1/√head_dim), key and value projections, stacked.
    qkv: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    output_norm: LayerNorm,
}

pub struct BertEncoder {
    config: BertConfig,
    eps: f32,
    word_embeddings: Vec<f32>,
    position_embeddings: Vec<f32>,
    /// Every token has token type 0 (single-text inputs).
    token_type_embedding: Vec<f32>,
    embedding_norm: LayerNorm,
    layers: Vec<Layer>,
}

impl BertEncoder {
    /// Builds the encoder from the checkpoint's tensors (with or without the `bert.` prefix).
    pub fn new(config: BertConfig, tensors: HashMap<String, Tensor>) -> Result<Self, String> {
        if config.hidden_act != "gelu" {
            return Err(format!(
                "hidden_act {:?} is not supported (only \"gelu\")",
                config.hidden_act
            ));
        }
        if let Some(kind) = config.position_embedding_type.as_deref()
            && kind != "absolute"
        {
            return Err(format!("position_embedding_type {kind:?} is not supported"));
        }
        let h = config.hidden_size;
        if config.num_attention_heads == 0 || !h.is_multiple_of(config.num_attention_heads) {
            return Err(format!(
                "hidden_size {h} is not a multiple of num_attention_heads {}",
                config.num_attention_heads
            ));
        }
        let weights = Weights::new(tensors);
        let norm = |prefix: &str| -> Result<LayerNorm, String> {
            let gamma = weights
                .get(&format!("{prefix}.weight"), &[h])
                .or_else(|_| weights.get(&format!("{prefix}.gamma"), &[h]))?;
            let beta = weights
                .get(&format!("{prefix}.bias"), &[h])
                .or_else(|_| weights.get(&format!("{prefix}.beta"), &[h]))?;
            Ok(LayerNorm { gamma, beta })
        };
        let linear = |prefix: &str, outputs: usize, inputs: usize| -> Result<Linear, String> {
            Ok(Linear {
                weight: weights.get(&format!("{prefix}.weight"), &[outputs, inputs])?,
                bias: weights.get(&format!("{prefix}.bias"), &[outputs])?,
                inputs,
            })
        };

        let token_types = weights.get(
            "embeddings.token_type_embeddings.weight",
            &[weights.dim0("embeddings.token_type_embeddings.weight")?, h],
        )?;
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        let scale = 1.0 / ((h / config.num_attention_heads) as f32).sqrt();
        for i in 0..config.num_hidden_layers {
            let p = format!("encoder.layer.{i}");
            let mut query = linear(&format!("{p}.attention.self.query"), h, h)?;
            query.weight.iter_mut().for_each(|w| *w *= scale);
            query.bias.iter_mut().for_each(|b| *b *= scale);
            let key = linear(&format!("{p}.attention.self.key"), h, h)?;
            let value = linear(&format!("{p}.attention.self.value"), h, h)?;
            let qkv = Linear {
                weight: [query.weight, key.weight, value.weight].concat(),
                bias: [query.bias, key.bias, value.bias].concat(),
                inputs: h,
            };
            layers.push(Layer {
                qkv,
                attention_out: linear(&format!("{p}.attention.output.dense"), h, h)?,
                attention_norm: norm(&format!("{p}.attention.output.LayerNorm"))?,
                intermediate: linear(
                    &format!("{p}.intermediate.dense"),
                    config.intermediate_size,
                    h,
                )?,
                output: linear(&format!("{p}.output.dense"), h, config.intermediate_size)?,
                output_norm: norm(&format!("{p}.output.LayerNorm"))?,
            });
        }
        Ok(Self {
            eps: config.layer_norm_eps as f32,
            word_embeddings: weights
                .get("embeddings.word_embeddings.weight", &[config.vocab_size, h])?,
            position_embeddings: weights.get(
                "embeddings.position_embeddings.weight",
                &[config.max_position_embeddings, h],
            )?,
            token_type_embedding: token_types[..h].to_vec(),
            embedding_norm: norm("embeddings.LayerNorm")?,
            layers,
            config,
        })
    }

    pub fn hidden_size(&self) -> usize {
        self.config.hidden_size
    }

    pub fn max_positions(&self) -> usize {
        self.config.max_position_embeddings
    }

    /// The normalised mean-pooled embedding of each token sequence (special tokens included).
    pub fn embed(&self, sequences: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, String> {
        let h = self.config.hidden_size;
        let (x, offsets) = self.forward(sequences)?;
        Ok(sequences
            .iter()
            .zip(&offsets)
            .map(|(tokens, &offset)| {
                let mut mean = vec![0f32; h];
                for row in x[offset * h..(offset + tokens.len()) * h].chunks(h) {
                    mean.iter_mut().zip(row).for_each(|(m, v)| *m += v);
                }
                let norm = mean.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
                mean.iter_mut().for_each(|v| *v /= norm);
                mean
            })
            .collect())
    }

    /// The last hidden states of each token sequence: `len × hidden_size` per sequence.
    pub fn last_hidden_states(&self, sequences: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, String> {
        let h = self.config.hidden_size;
        let (x, offsets) = self.forward(sequences)?;
        Ok(sequences
            .iter()
            .zip(&offsets)
            .map(|(tokens, &offset)| x[offset * h..(offset + tokens.len()) * h].to_vec())
            .collect())
    }

    /// The packed last hidden states of all sequences (`total tokens × hidden_size`) and the
    /// first row of each sequence.
    fn forward(&self, sequences: &[Vec<u32>]) -> Result<(Vec<f32>, Vec<usize>), String> {
        let h = self.config.hidden_size;
        let heads = self.config.num_attention_heads;
        let head_dim = h / heads;
        let mut offsets = Vec::with_capacity(sequences.len());
        let mut total = 0;
        for tokens in sequences {
            if tokens.is_empty() || tokens.len() > self.max_positions() {
                return Err(format!(
                    "a sequence of {} tokens (the model takes 1 to {})",
                    tokens.len(),
                    self.max_positions()
                ));
            }
            offsets.push(total);
            total += tokens.len();
        }
        if total == 0 {
            return Ok((Vec::new(), offsets));
        }

        let mut x = vec![0f32; total * h];
        for (tokens, &offset) in sequences.iter().zip(&offsets) {
            for (position, &id) in tokens.iter().enumerate() {
                let id = id as usize;
                if id >= self.config.vocab_size {
                    return Err(format!("token id {id} is outside the vocabulary"));
                }
                let word = &self.word_embeddings[id * h..][..h];
                let pos = &self.position_embeddings[position * h..][..h];
                let row = &mut x[(offset + position) * h..][..h];
                for (((out, w), p), t) in row
                    .iter_mut()
                    .zip(word)
                    .zip(pos)
                    .zip(&self.token_type_embedding)
                {
                    *out = w + p + t;
                }
            }
        }
        let norm = &self.embedding_norm;
        layer_norm(&mut x, &norm.gamma, &norm.beta, self.eps);

        let mut qkv = vec![0f32; total * 3 * h];
        let mut context = vec![0f32; total * h];
        let mut y = vec![0f32; total * h];
        let mut inner = vec![0f32; total * self.config.intermediate_size];
        let tasks: Vec<(usize, usize)> = (0..sequences.len())
            .flat_map(|s| (0..heads).map(move |head| (s, head)))
            .collect();
        for layer in &self.layers {
            layer.qkv.forward(&x, total, None, &mut qkv);

            let head_outputs: Vec<Vec<f32>> = tasks
                .par_iter()
                .map(|&(s, head)| {
                    attend(
                        &qkv,
                        offsets[s],
                        sequences[s].len(),
                        h,
                        head * head_dim,
                        head_dim,
                    )
                })
                .collect();
            for (&(s, head), out) in tasks.iter().zip(&head_outputs) {
                for (r, row) in out.chunks(head_dim).enumerate() {
                    context[(offsets[s] + r) * h + head * head_dim..][..head_dim]
                        .copy_from_slice(row);
                }
            }

            layer
                .attention_out
                .forward(&context, total, Some(&x), &mut y);
            let norm = &layer.attention_norm;
            layer_norm(&mut y, &norm.gamma, &norm.beta, self.eps);
            std::mem::swap(&mut x, &mut y);

            layer.intermediate.forward(&x, total, None, &mut inner);
            gelu_erf(&mut inner);
            layer.output.forward(&inner, total, Some(&x), &mut y);
            let norm = &layer.output_norm;
            layer_norm(&mut y, &norm.gamma, &norm.beta, self.eps);
            std::mem::swap(&mut x, &mut y);
        }
        Ok((x, offsets))
    }
}

/// Self-attention of one head over one sequence (`len` rows from `offset` of the packed
/// `qkv`): `softmax(q · kᵀ) · v`, as `len × head_dim`. The query is pre-scaled.
fn attend(
    qkv: &[f32],
    offset: usize,
    len: usize,
    hidden: usize,
    column: usize,
    head_dim: usize,
) -> Vec<f32> {
    let stride = 3 * hidden;
    let base = offset * stride + column;
    let q = MatRef::new(qkv, base, len, head_dim, stride);
    let k = MatRef::new(qkv, base + hidden, len, head_dim, stride);
    let v = MatRef::new(qkv, base + 2 * hidden, len, head_dim, stride);
    let mut scores = vec![0f32; len * len];
    matmul(&mut scores, 0, len, q, k.t(), false, false);
    softmax_rows(&mut scores, len);
    let mut out = vec![0f32; len * head_dim];
    matmul(
        &mut out,
        0,
        head_dim,
        MatRef::new(&scores, 0, len, len, len),
        v,
        false,
        false,
    );
    out
}

/// The checkpoint's tensors, looked up with or without the `bert.` prefix.
struct Weights {
    tensors: HashMap<String, Tensor>,
    prefix: &'static str,
}

impl Weights {
    fn new(tensors: HashMap<String, Tensor>) -> Self {
        let prefix = if tensors.contains_key("bert.embeddings.word_embeddings.weight") {
            "bert."
        } else {
            ""
        };
        Self { tensors, prefix }
    }

    fn tensor(&self, name: &str) -> Result<&Tensor, String> {
        self.tensors
            .get(&format!("{}{name}", self.prefix))
            .ok_or_else(|| format!("the weights have no tensor {}{name}", self.prefix))
    }

    fn dim0(&self, name: &str) -> Result<usize, String> {
        self.tensor(name)?
            .dims()
            .first()
            .copied()
            .ok_or_else(|| format!("tensor {name} is a scalar"))
    }

    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, String> {
        let tensor = self.tensor(name)?;
        if tensor.dims() != shape {
            return Err(format!(
                "tensor {name} has shape {:?}, expected {shape:?}",
                tensor.dims()
            ));
        }
        tensor
            .to_dtype(DType::F32)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(|e| format!("tensor {name}: {e}"))
    }
}
