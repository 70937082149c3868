//! The decoder-only transformer of a GGUF file (architectures `qwen2` and `llama`), written on
//! candle's tensor ops and quantized matmuls.
//!
//! Not `candle_transformers::models::quantized_{qwen2,llama}`, for three reasons: those
//! dequantize the token embedding to F32 (~545 MB for Qwen2.5's 151,936 × 896 table; here rows
//! are dequantized on lookup), they grow the KV cache with a copy per token, and they expand
//! grouped KV heads with a copy per layer. Weights are shared ([`Weights`], read-only, behind
//! an `Arc`); everything that changes per request lives in a [`Session`].

use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor, ggml_file, gguf_file};
use candle_core::{D, DType, Device, Module, Tensor};
use candle_nn::kv_cache::KvCache;

use super::int8::Int8Matrix;
use super::requantize::to_cpu_friendly;

type Result<T> = candle_core::Result<T>;

/// Rotary embedding layouts: llama.cpp's GGUF conversion permutes Llama's Q/K rows so that
/// rotated pairs are adjacent; Qwen2 keeps the two halves of each head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rope {
    Interleaved,
    Halves,
}

/// The shape of the network, from `<arch>.*` metadata.
#[derive(Clone, Debug)]
pub struct ModelConfig {
        pub n_layer: usize,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    pub context_length: usize,
    pub rms_eps: f64,
    pub rope_base: f32,
    rope: Rope,
}

impl ModelConfig {
    fn from_gguf(content: &gguf_file::Content) -> std::result::Result<Self, String> {
        let md = &content.metadata;
        let arch = md
            .get("general.architecture")
            .and_then(|v| v.to_string().ok())
            .ok_or("metadata has no `general.architecture`")?
            .clone();
        let rope = match arch.as_str() {
            "qwen2" => Rope::Halves,
            "llama" => Rope::Interleaved,
            other => {
                return Err(format!(
                    "architecture `{other}` is not supported (known: qwen2, llama)"
                ));
            }
        };
        let get = |key: &str| {
            md.get(&format!("{arch}.{key}"))
                .ok_or_else(|| format!("metadata has no `{arch}.{key}`"))
        };
        let int = |key: &str| -> std::result::Result<usize, String> {
            get(key)?
                .to_u32()
                .map(|v| v as usize)
                .map_err(|e| format!("`{arch}.{key}`: {e}"))
        };
        let n_embd = int("embedding_length")?;
        let n_head = int("attention.head_count")?;
        let n_kv_head = int("attention.head_count_kv").unwrap_or(n_head);
        if n_head == 0 || n_kv_head == 0 || n_head % n_kv_head != 0 || n_embd % n_head != 0 {
            return Err(format!(
                "inconsistent head counts: {n_head} heads, {n_kv_head} KV heads, width {n_embd}"
            ));
        }
        let head_dim = n_embd / n_head;
        if let Ok(rope_dims) = int("rope.dimension_count")
            && rope_dims != head_dim
        {
            return Err(format!(
                "partial rotary embeddings ({rope_dims} of {head_dim} dims) are not supported"
            ));
        }
        let rms_eps = get("attention.layer_norm_rms_epsilon")?
            .to_f32()
            .map_err(|e| e.to_string())? as f64;
        let rope_base = get("rope.freq_base")
            .and_then(|v| v.to_f32().map_err(|e| e.to_string()))
            .unwrap_or(10_000.0);
        Ok(Self {
            n_layer: int("block_count")?,
            context_length: int("context_length")?,
            n_head,
            n_kv_head,
            head_dim,
            rms_eps,
            rope_base,
            rope,
        })
    }
}

/// A weight matrix: Q8_0 (and converted Q5_0) on our int8 kernels, other types on candle's.
enum Linear {
    Int8(Int8Matrix),
    Candle(QMatMul),
}

impl Linear {
    fn new(tensor: QTensor) -> Result<Self> {
        match Int8Matrix::from_qtensor(&tensor)? {
            Some(m) => Ok(Self::Int8(m)),
            None => Ok(Self::Candle(QMatMul::from_qtensor(tensor)?)),
        }
    }

    fn shared(tensor: Arc<QTensor>) -> Result<Self> {
        match Int8Matrix::from_qtensor(&tensor)? {
            Some(m) => Ok(Self::Int8(m)),
            None => Ok(Self::Candle(QMatMul::from_arc(tensor)?)),
        }
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let m = match self {
            Self::Candle(q) => return q.forward(x),
            Self::Int8(m) => m,
        };
        let k = x.dim(D::Minus1)?;
        if k != m.columns() {
            candle_core::bail!("matmul of width {k} with a matrix of width {}", m.columns());
        }
        let rows = x.elem_count() / k;
        let xs = x.flatten_all()?.to_vec1::<f32>()?;
        let mut out = vec![0f32; rows * m.rows()];
        m.matmul(&xs, rows, &mut out);
        let mut shape = x.dims().to_vec();
        *shape.last_mut().expect("at least one dim") = m.rows();
        Tensor::from_vec(out, shape, &Device::Cpu)
    }
}

/// Query, key and value projections: one matmul over the rows of all three when they share a
/// quantization type (fewer passes over the activations), else three.
enum Qkv {
    Fused { w: Linear, bias: Option<Tensor> },
    Separate([(Linear, Option<Tensor>); 3]),
}

/// The MLP's gate and up projections, fused the same way as [`Qkv`].
enum GateUp {
    Fused(Linear),
    Separate(Linear, Linear),
}

struct Layer {
    attn_norm: Tensor,
    qkv: Qkv,
    attn_output: Linear,
    ffn_norm: Tensor,
    gate_up: GateUp,
    ffn_down: Linear,
}

/// The read-only part of a model: shared by every worker.
pub struct Weights {
    pub config: ModelConfig,
    token_embd: Arc<QTensor>,
    layers: Vec<Layer>,
    output_norm: Tensor,
    output: Linear,
    cos: Tensor,
    sin: Tensor,
    /// Positions the rotary tables (and so a session) cover.
    pub max_positions: usize,
}

/// A GGUF file opened for loading: its header and a reader positioned anywhere.
pub struct GgufFile {
    pub content: gguf_file::Content,
    reader: BufReader<File>,
}

impl GgufFile {
    pub fn open(path: &Path) -> std::result::Result<Self, String> {
        let file = File::open(path).map_err(|e| format!("cannot open: {e}"))?;
        let mut reader = BufReader::new(file);
        let content =
            gguf_file::Content::read(&mut reader).map_err(|e| format!("not a GGUF file: {e}"))?;
        Ok(Self { content, reader })
    }

    fn tensor(&mut self, name: &str) -> Result<QTensor> {
        self.content.tensor(&mut self.reader, name, &Device::Cpu)
    }

    fn has(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    /// A matmul weight, Q5_0 converted to Q8_0 (see `requantize`).
    fn matmul_weight(&mut self, name: &str) -> Result<QTensor> {
        Ok(to_cpu_friendly(self.tensor(name)?)?.0)
    }

    fn vector(&mut self, name: &str) -> Result<Tensor> {
        self.tensor(name)?.dequantize(&Device::Cpu)
    }
}

impl Weights {
    /// Loads the network; `max_positions` bounds the context a session can hold.
    pub fn load(file: &mut GgufFile, max_positions: usize) -> std::result::Result<Self, String> {
        let config = ModelConfig::from_gguf(&file.content)?;
        Self::load_tensors(file, config, max_positions).map_err(|e| e.to_string())
    }

    fn load_tensors(file: &mut GgufFile, config: ModelConfig, max_positions: usize) -> Result<Self> {
        let token_embd = Arc::new(file.tensor("token_embd.weight")?);
        let output = if file.has("output.weight") {
            Linear::new(file.matmul_weight("output.weight")?)?
        } else {
            // Tied embeddings: the same table projects back onto the vocabulary.
            match token_embd.dtype() {
                GgmlDType::Q5_0 => Linear::new(file.matmul_weight("token_embd.weight")?)?,
                _ => Linear::shared(token_embd.clone())?,
            }
        };
        let mut layers = Vec::with_capacity(config.n_layer);
        for i in 0..config.n_layer {
            let p = format!("blk.{i}");
            let bias = |file: &mut GgufFile, name: &str| -> Result<Option<Tensor>> {
                let name = format!("{p}.{name}.bias");
                if file.has(&name) {
                    Ok(Some(file.vector(&name)?))
                } else {
                    Ok(None)
                }
            };
            let q = file.matmul_weight(&format!("{p}.attn_q.weight"))?;
            let k = file.matmul_weight(&format!("{p}.attn_k.weight"))?;
            let v = file.matmul_weight(&format!("{p}.attn_v.weight"))?;
            let (bq, bk, bv) = (bias(file, "attn_q")?, bias(file, "attn_k")?, bias(file, "attn_v")?);
            let qkv = match concat_rows(&[&q, &k, &v])? {
                Some(w) => {
                    let bias = match (bq, bk, bv) {
                        (Some(bq), Some(bk), Some(bv)) => Some(Tensor::cat(&[bq, bk, bv], 0)?),
                        (None, None, None) => None,
                        _ => candle_core::bail!("{p}: only some of q/k/v have a bias"),
                    };
                    Qkv::Fused { w: Linear::new(w)?, bias }
                }
                None => Qkv::Separate([
                    (Linear::new(q)?, bq),
                    (Linear::new(k)?, bk),
                    (Linear::new(v)?, bv),
                ]),
            };
            let gate = file.matmul_weight(&format!("{p}.ffn_gate.weight"))?;
            let up = file.matmul_weight(&format!("{p}.ffn_up.weight"))?;
            let gate_up = match concat_rows(&[&gate, &up])? {
                Some(w) => GateUp::Fused(Linear::new(w)?),
                None => GateUp::Separate(Linear::new(gate)?, Linear::new(up)?),
            };
            layers.push(Layer {
                attn_norm: file.vector(&format!("{p}.attn_norm.weight"))?,
                qkv,
                attn_output: Linear::new(file.matmul_weight(&format!("{p}.attn_output.weight"))?)?,
                ffn_norm: file.vector(&format!("{p}.ffn_norm.weight"))?,
                gate_up,
                ffn_down: Linear::new(file.matmul_weight(&format!("{p}.ffn_down.weight"))?)?,
            });
        }
        let max_positions = max_positions.clamp(1, config.context_length.max(1));
        let (cos, sin) = rope_tables(config.head_dim, config.rope_base, max_positions)?;
        Ok(Self {
            output_norm: file.vector("output_norm.weight")?,
            token_embd,
            layers,
            output,
            cos,
            sin,
            max_positions,
            config,
        })
    }

    /// Runs `tokens` (the continuation of what `session` holds) through the network and returns
    /// the logits for the next token.
    pub fn forward(&self, session: &mut Session, tokens: &[u32]) -> Result<Tensor> {
        let c = &self.config;
        let t = tokens.len();
        let pos = session.len;
        if t == 0 {
            candle_core::bail!("forward needs at least one token");
        }
        if pos + t > self.max_positions {
            candle_core::bail!("context of {} positions exceeded", self.max_positions);
        }
        let ids = Tensor::new(tokens, &Device::Cpu)?;
        let mut x = self.token_embd.embedding(&ids)?.unsqueeze(0)?; // (1, t, n_embd)
        let mask = (t > 1).then(|| causal_mask(t, pos)).transpose()?;
        let cos = self.cos.narrow(0, pos, t)?;
        let sin = self.sin.narrow(0, pos, t)?;
        let n_rep = c.n_head / c.n_kv_head;
        let (q_width, kv_width) = (c.n_head * c.head_dim, c.n_kv_head * c.head_dim);
        let scale = 1.0 / (c.head_dim as f64).sqrt();

        for (layer, cache) in self.layers.iter().zip(session.caches.iter_mut()) {
            let h = candle_nn::ops::rms_norm(&x, &layer.attn_norm, c.rms_eps as f32)?;
            let (q, k, v) = match &layer.qkv {
                Qkv::Fused { w, bias } => {
                    let mut qkv = w.forward(&h)?;
                    if let Some(b) = bias {
                        qkv = qkv.broadcast_add(b)?;
                    }
                    (
                        qkv.narrow(D::Minus1, 0, q_width)?,
                        qkv.narrow(D::Minus1, q_width, kv_width)?,
                        qkv.narrow(D::Minus1, q_width + kv_width, kv_width)?,
                    )
                }
                Qkv::Separate(parts) => {
                    let project = |(w, b): &(Linear, Option<Tensor>)| -> Result<Tensor> {
                        let y = w.forward(&h)?;
                        match b {
                            Some(b) => y.broadcast_add(b),
                            None => Ok(y),
                        }
                    };
                    (project(&parts[0])?, project(&parts[1])?, project(&parts[2])?)
                }
            };
            let heads = |x: Tensor, n: usize| -> Result<Tensor> {
                x.contiguous()?
                    .reshape((1, t, n, c.head_dim))?
                    .transpose(1, 2)?
                    .contiguous()
            };
            let q = self.rope(&heads(q, c.n_head)?, &cos, &sin)?;
            let k = self.rope(&heads(k, c.n_kv_head)?, &cos, &sin)?;
            let v = heads(v, c.n_kv_head)?;
            let (k, v) = cache.append(&k, &v)?; // (1, n_kv_head, pos + t, head_dim)

            // Grouped-query attention without copying K/V: the query heads that share a KV
            // head are consecutive, so they become extra rows of that head's product.
            let q = (q * scale)?.reshape((1, c.n_kv_head, n_rep * t, c.head_dim))?;
            let att = q.matmul(&k.t()?)?; // (1, n_kv_head, n_rep * t, pos + t)
            let att = match &mask {
                Some(mask) => att
                    .reshape((1, c.n_kv_head, n_rep, t, pos + t))?
                    .broadcast_add(mask)?
                    .reshape((1, c.n_kv_head, n_rep * t, pos + t))?,
                None => att,
            };
            let att = candle_nn::ops::softmax_last_dim(&att)?;
            // The cache view is strided only between heads, which matmul takes as is.
            let y = att.matmul(&v)?; // (1, n_kv_head, n_rep * t, head_dim)
            let y = y
                .reshape((1, c.n_head, t, c.head_dim))?
                .transpose(1, 2)?
                .reshape((1, t, q_width))?;
            x = (layer.attn_output.forward(&y)? + x)?;

            let h = candle_nn::ops::rms_norm(&x, &layer.ffn_norm, c.rms_eps as f32)?;
            let mlp = match &layer.gate_up {
                GateUp::Fused(w) => {
                    let gu = w.forward(&h)?;
                    let width = gu.dim(D::Minus1)? / 2;
                    let gate = gu.narrow(D::Minus1, 0, width)?;
                    let up = gu.narrow(D::Minus1, width, width)?;
                    (candle_nn::ops::silu(&gate)? * up)?
                }
                GateUp::Separate(gate, up) => {
                    (candle_nn::ops::silu(&gate.forward(&h)?)? * up.forward(&h)?)?
                }
            };
            x = (layer.ffn_down.forward(&mlp)? + x)?;
        }
        session.len += t;
        let last = x.narrow(1, t - 1, 1)?;
        let last = candle_nn::ops::rms_norm(&last, &self.output_norm, c.rms_eps as f32)?;
        self.output.forward(&last)?.flatten_all()
    }

    fn rope(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        match self.config.rope {
            Rope::Interleaved => candle_nn::rotary_emb::rope_i(x, cos, sin),
            Rope::Halves => candle_nn::rotary_emb::rope(x, cos, sin),
        }
    }

    pub fn new_session(&self) -> Session {
        Session {
            caches: (0..self.layers.len())
                .map(|_| KvCache::new(2, KV_CACHE_CHUNK))
                .collect(),
            len: 0,
        }
    }
}

/// KV cache growth step, in positions; a fresh session holds this many without reallocating.
const KV_CACHE_CHUNK: usize = 512;

/// The state of one request: the KV cache of every layer and the number of positions it holds.
pub struct Session {
    caches: Vec<KvCache>,
    len: usize,
}

/// Stacks the rows of same-typed matrices with the same input width into one matrix; `None`
/// when their types or widths differ. Quantized rows are independent runs of blocks, so this is
/// a byte concatenation.
fn concat_rows(parts: &[&QTensor]) -> Result<Option<QTensor>> {
    let dtype = parts[0].dtype();
    let (_, k) = parts[0].shape().dims2()?;
    let mut rows = 0;
    for p in parts {
        let (n, pk) = p.shape().dims2()?;
        if p.dtype() != dtype || pk != k {
            return Ok(None);
        }
        rows += n;
    }
    if matches!(dtype, GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16) {
        return Ok(None);
    }
    let mut data = Vec::new();
    for p in parts {
        data.extend_from_slice(&p.data()?);
    }
    Ok(Some(ggml_file::qtensor_from_ggml(
        dtype,
        &data,
        vec![rows, k],
        &Device::Cpu,
    )?))
}

fn rope_tables(head_dim: usize, base: f32, positions: usize) -> Result<(Tensor, Tensor)> {
    let inv_freq: Vec<f32> = (0..head_dim)
        .step_by(2)
        .map(|i| 1.0 / base.powf(i as f32 / head_dim as f32))
        .collect();
    let inv_freq = Tensor::new(inv_freq.as_slice(), &Device::Cpu)?.unsqueeze(0)?;
    let positions = Tensor::arange(0, positions as u32, &Device::Cpu)?
        .to_dtype(DType::F32)?
        .unsqueeze(1)?;
    let angles = positions.broadcast_mul(&inv_freq)?;
    Ok((angles.cos()?, angles.sin()?))
}

/// (t, pos + t) additive mask: new token i sees every cached position and new tokens ≤ i.
fn causal_mask(t: usize, pos: usize) -> Result<Tensor> {
    let total = pos + t;
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| (0..total).map(move |j| if j > pos + i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    Tensor::from_vec(mask, (t, total), &Device::Cpu)
}
