//! The decoder-only transformer of a GGUF file (architectures `qwen2` and `llama`), written on
//! candle's tensor ops and quantized matmuls.
//!
//! Not `candle_transformers::models::quantized_{qwen2,llama}`: those dequantize the token
//! embedding to F32 (~545 MB for Qwen2.5's 151,936 × 896 table; here rows are dequantized on
//! lookup), grow the KV cache with a copy per token, expand grouped KV heads with a copy per
//! layer, and leave Q5_0 / Q8_0 products to candle's slow paths (here they run on
//! `quant_matrix`, and so do the Q4_K / Q6_K of `ffn_down` where AVX-512 VNNI is there; other
//! types stay on candle's kernels).
//! Weights are shared ([`Weights`], read-only); everything that changes per request lives in a
//! [`Session`].

use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;

use candle_core::quantized::{QMatMul, QTensor, gguf_file};
use candle_core::{D, DType, Device, Module, Tensor};

use super::ops::{AttentionShape, causal_attention};
use super::quant_matrix::QuantMatrix;

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

/// A weight matrix as read from the file: already in our kernels' layout, or a candle tensor.
enum Weight {
    Quant(QuantMatrix),
    Other(QTensor),
}

impl Weight {
    fn rows(&self) -> Result<usize> {
        match self {
            Weight::Quant(m) => Ok(m.rows()),
            Weight::Other(t) => Ok(t.shape().dims2()?.0),
        }
    }
}

/// A weight matrix: the types `QuantMatrix::takes` on our kernels, other types on candle's.
enum Linear {
    Quant(QuantMatrix),
    Candle(QMatMul),
}

impl Linear {
    fn new(weight: Weight) -> Result<Self> {
        match weight {
            Weight::Quant(m) => Ok(Self::Quant(m)),
            Weight::Other(t) => Ok(Self::Candle(QMatMul::from_qtensor(t)?)),
        }
    }

    fn shared(tensor: Arc<QTensor>) -> Result<Self> {
        match QuantMatrix::from_qtensor(&tensor)? {
            Some(m) => Ok(Self::Quant(m)),
            None => Ok(Self::Candle(QMatMul::from_arc(tensor)?)),
        }
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let m = match self {
            Self::Candle(q) => return q.forward(x),
            Self::Quant(m) => m,
        };
        let (out, rows) = quant_product(m, x)?;
        let mut shape = x.dims().to_vec();
        *shape.last_mut().expect("at least one dim") = m.rows();
        debug_assert_eq!(shape.iter().product::<usize>(), rows * m.rows());
        Tensor::from_vec(out, shape, &Device::Cpu)
    }
}

/// `x · mᵀ` over the last dimension of `x`, with the number of rows of `x`.
fn quant_product(m: &QuantMatrix, x: &Tensor) -> Result<(Vec<f32>, usize)> {
    let k = x.dim(D::Minus1)?;
    if k != m.columns() {
        candle_core::bail!("matmul of width {k} with a matrix of width {}", m.columns());
    }
    let rows = x.elem_count() / k;
    let xs = x.flatten_all()?.to_vec1::<f32>()?;
    let mut out = vec![0f32; rows * m.rows()];
    m.matmul(&xs, rows, &mut out);
    Ok((out, rows))
}

/// Projections of the same input (query/key/value, gate/up): one product over the stacked
/// rows when our kernels take all of them (one pass over the input, one dispatch), else one
/// product each. Each part may have a bias.
struct Projections {
    fused: Option<Linear>,
    separate: Vec<Linear>,
    widths: Vec<usize>,
    biases: Vec<Option<Tensor>>,
}

impl Projections {
    fn new(weights: Vec<Weight>, biases: Vec<Option<Tensor>>) -> Result<Self> {
        let widths = weights
            .iter()
            .map(Weight::rows)
            .collect::<Result<Vec<_>>>()?;
        if weights.iter().all(|w| matches!(w, Weight::Quant(_))) {
            let quant = weights
                .into_iter()
                .filter_map(|w| match w {
                    Weight::Quant(m) => Some(m),
                    Weight::Other(_) => None,
                })
                .collect::<Vec<_>>();
            // Parts that cannot stack (odd row counts) are rare enough to stay unfused.
            return match QuantMatrix::stack_or_return(quant) {
                Ok(stacked) => Ok(Self {
                    fused: Some(Linear::Quant(stacked)),
                    separate: Vec::new(),
                    widths,
                    biases,
                }),
                Err(parts) => Ok(Self {
                    fused: None,
                    separate: parts.into_iter().map(Linear::Quant).collect(),
                    widths,
                    biases,
                }),
            };
        }
        Ok(Self {
            fused: None,
            separate: weights
                .into_iter()
                .map(Linear::new)
                .collect::<Result<_>>()?,
            widths,
            biases,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Vec<Tensor>> {
        let parts = match &self.fused {
            Some(w) => {
                let y = w.forward(x)?;
                let mut start = 0;
                let mut parts = Vec::with_capacity(self.widths.len());
                for &width in &self.widths {
                    parts.push(y.narrow(D::Minus1, start, width)?);
                    start += width;
                }
                parts
            }
            None => self
                .separate
                .iter()
                .map(|w| w.forward(x))
                .collect::<Result<_>>()?,
        };
        parts
            .into_iter()
            .zip(&self.biases)
            .map(|(y, b)| match b {
                Some(b) => y.broadcast_add(b),
                None => Ok(y),
            })
            .collect()
    }
}

impl Projections {
    /// `silu(gate) · up` of gate/up projections: one product and one pass on the thread pool
    /// when the two are fused without biases, candle's ops otherwise.
    fn swiglu(&self, x: &Tensor) -> Result<Tensor> {
        if let (Some(Linear::Quant(m)), [None, None], &[gate, up]) =
            (&self.fused, self.biases.as_slice(), self.widths.as_slice())
            && gate == up
        {
            let (y, rows) = quant_product(m, x)?;
            let mut shape = x.dims().to_vec();
            *shape.last_mut().expect("at least one dim") = gate;
            return Tensor::from_vec(super::ops::swiglu(&y, rows, gate), shape, &Device::Cpu);
        }
        let [gate, up]: [Tensor; 2] = self
            .forward(x)?
            .try_into()
            .map_err(|_| candle_core::Error::Msg("two projections expected".into()))?;
        candle_nn::ops::silu(&gate)? * up
    }
}

struct Layer {
    attn_norm: Tensor,
    /// Query, key, value.
    qkv: Projections,
    attn_output: Linear,
    ffn_norm: Tensor,
    /// Gate, up.
    gate_up: Projections,
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
    /// Raw bytes of the tensor being converted, reused so that loading does not leave a trail
    /// of freed buffers in the heap (peak memory).
    scratch: Vec<u8>,
}

impl GgufFile {
    pub fn open(path: &Path) -> std::result::Result<Self, String> {
        let file = File::open(path).map_err(|e| format!("cannot open: {e}"))?;
        let mut reader = BufReader::new(file);
        let content =
            gguf_file::Content::read(&mut reader).map_err(|e| format!("not a GGUF file: {e}"))?;
        Ok(Self {
            content,
            reader,
            scratch: Vec::new(),
        })
    }

    fn tensor(&mut self, name: &str) -> Result<QTensor> {
        self.content.tensor(&mut self.reader, name, &Device::Cpu)
    }

    /// A matrix, converted for our kernels straight from the file's bytes when they take it.
    fn weight(&mut self, name: &str) -> Result<Weight> {
        use std::io::{Read, Seek, SeekFrom};
        let Some(info) = self.content.tensor_infos.get(name) else {
            candle_core::bail!("cannot find tensor {name}");
        };
        if !QuantMatrix::takes(info.ggml_dtype) {
            return Ok(Weight::Other(self.tensor(name)?));
        }
        let (n, k) = info.shape.dims2()?;
        let dtype = info.ggml_dtype;
        let size = n * k / dtype.block_size() * dtype.type_size();
        self.scratch.resize(size, 0);
        self.reader.seek(SeekFrom::Start(
            self.content.tensor_data_offset + info.offset,
        ))?;
        self.reader.read_exact(&mut self.scratch)?;
        Ok(Weight::Quant(QuantMatrix::from_gguf_data(
            dtype,
            n,
            k,
            &self.scratch,
        )?))
    }

    fn has(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
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

    fn load_tensors(
        file: &mut GgufFile,
        config: ModelConfig,
        max_positions: usize,
    ) -> Result<Self> {
        let token_embd = Arc::new(file.tensor("token_embd.weight")?);
        let output = if file.has("output.weight") {
            Linear::new(file.weight("output.weight")?)?
        } else {
            // Tied embeddings: the same table projects back onto the vocabulary.
            Linear::shared(token_embd.clone())?
        };
        let mut layers = Vec::with_capacity(config.n_layer);
        for i in 0..config.n_layer {
            let p = format!("blk.{i}");
            let mut weights = |names: &[&str]| -> Result<Vec<Weight>> {
                names
                    .iter()
                    .map(|n| file.weight(&format!("{p}.{n}.weight")))
                    .collect()
            };
            let qkv = weights(&["attn_q", "attn_k", "attn_v"])?;
            let gate_up = weights(&["ffn_gate", "ffn_up"])?;
            let attn_output = Linear::new(file.weight(&format!("{p}.attn_output.weight"))?)?;
            let ffn_down = Linear::new(file.weight(&format!("{p}.ffn_down.weight"))?)?;
            let mut qkv_biases = Vec::new();
            for name in ["attn_q", "attn_k", "attn_v"] {
                let name = format!("{p}.{name}.bias");
                qkv_biases.push(if file.has(&name) {
                    Some(file.vector(&name)?)
                } else {
                    None
                });
            }
            layers.push(Layer {
                attn_norm: file.vector(&format!("{p}.attn_norm.weight"))?,
                qkv: Projections::new(qkv, qkv_biases)?,
                attn_output,
                ffn_norm: file.vector(&format!("{p}.ffn_norm.weight"))?,
                gate_up: Projections::new(gate_up, vec![None, None])?,
                ffn_down,
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
        self.forward_rows(session, tokens, 1)?.flatten_all()
    }

    /// [`Self::forward`], returning the logits after each of the last `rows` tokens
    /// (`rows × vocabulary`): what checking drafted tokens needs. Each row is computed exactly
    /// as a forward pass of the tokens up to it alone would compute it (every product and
    /// attention row is independent of the others in its batch).
    pub fn forward_rows(
        &self,
        session: &mut Session,
        tokens: &[u32],
        rows: usize,
    ) -> Result<Tensor> {
        let c = &self.config;
        let t = tokens.len();
        let pos = session.tokens.len();
        if t == 0 {
            candle_core::bail!("forward needs at least one token");
        }
        if rows == 0 || rows > t {
            candle_core::bail!("{rows} rows of logits asked of a pass over {t} tokens");
        }
        if pos + t > self.max_positions {
            candle_core::bail!("context of {} positions exceeded", self.max_positions);
        }
        let ids = Tensor::new(tokens, &Device::Cpu)?;
        let mut x = self.token_embd.embedding(&ids)?.unsqueeze(0)?; // (1, t, n_embd)
        let cos = self.cos.narrow(0, pos, t)?;
        let sin = self.sin.narrow(0, pos, t)?;
        let q_width = c.n_head * c.head_dim;
        let scale = 1.0 / (c.head_dim as f64).sqrt();

        for (layer, cache) in self.layers.iter().zip(session.caches.iter_mut()) {
            let h = candle_nn::ops::rms_norm(&x, &layer.attn_norm, c.rms_eps as f32)?;
            let [q, k, v]: [Tensor; 3] = layer
                .qkv
                .forward(&h)?
                .try_into()
                .map_err(|_| candle_core::Error::Msg("three projections expected".into()))?;
            let heads = |x: Tensor, n: usize| -> Result<Tensor> {
                x.contiguous()?
                    .reshape((1, t, n, c.head_dim))?
                    .transpose(1, 2)?
                    .contiguous()
            };
            let q = self.rope(&heads(q, c.n_head)?, &cos, &sin)?;
            let k = self.rope(&heads(k, c.n_kv_head)?, &cos, &sin)?;
            let v = heads(v, c.n_kv_head)?;
            cache.append(
                c.n_kv_head,
                c.head_dim,
                &k.flatten_all()?.to_vec1::<f32>()?,
                &v.flatten_all()?.to_vec1::<f32>()?,
            );
            let shape = AttentionShape {
                n_head: c.n_head,
                n_kv_head: c.n_kv_head,
                head_dim: c.head_dim,
                t,
                pos,
                capacity: cache.capacity,
            };
            let q = q.flatten_all()?.to_vec1::<f32>()?;
            let y = causal_attention(shape, &q, &cache.keys, &cache.values, scale as f32);
            let y = Tensor::from_vec(y, (1, t, q_width), &Device::Cpu)?;
            x = (layer.attn_output.forward(&y)? + x)?;

            let h = candle_nn::ops::rms_norm(&x, &layer.ffn_norm, c.rms_eps as f32)?;
            let mlp = layer.gate_up.swiglu(&h)?;
            x = (layer.ffn_down.forward(&mlp)? + x)?;
        }
        session.tokens.extend_from_slice(tokens);
        let last = x.narrow(1, t - rows, rows)?;
        let last = candle_nn::ops::rms_norm(&last, &self.output_norm, c.rms_eps as f32)?;
        let logits = self.output.forward(&last)?;
        let vocabulary = logits.dim(D::Minus1)?;
        logits.reshape((rows, vocabulary))
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
                .map(|_| LayerCache::default())
                .collect(),
            tokens: Vec::new(),
            n_kv_head: self.config.n_kv_head,
            head_dim: self.config.head_dim,
        }
    }
}

/// KV cache growth step, in positions; a fresh session holds this many without reallocating.
const KV_CACHE_CHUNK: usize = 512;

/// One layer's keys and values, `[n_kv_head][capacity][head_dim]` each; the first `len`
/// positions of each head are valid. It can be cut back to a prefix, which is what reusing a
/// cached prompt needs.
#[derive(Default)]
struct LayerCache {
    keys: Vec<f32>,
    values: Vec<f32>,
    capacity: usize,
    len: usize,
}

impl LayerCache {
    /// Appends `[n_kv_head][t][head_dim]` keys and values.
    fn append(&mut self, n_kv_head: usize, head_dim: usize, k: &[f32], v: &[f32]) {
        let t = k.len() / (n_kv_head * head_dim);
        let row = head_dim;
        if self.len + t > self.capacity {
            let capacity = (self.len + t).div_ceil(KV_CACHE_CHUNK) * KV_CACHE_CHUNK;
            let grow = |old: &[f32]| {
                let mut grown = vec![0f32; n_kv_head * capacity * row];
                for h in 0..n_kv_head {
                    let (from, to) = (h * self.capacity * row, h * capacity * row);
                    grown[to..to + self.len * row]
                        .copy_from_slice(&old[from..from + self.len * row]);
                }
                grown
            };
            self.keys = grow(&self.keys);
            self.values = grow(&self.values);
            self.capacity = capacity;
        }
        for h in 0..n_kv_head {
            let at = (h * self.capacity + self.len) * row;
            let new = h * t * row..(h + 1) * t * row;
            self.keys[at..at + t * row].copy_from_slice(&k[new.clone()]);
            self.values[at..at + t * row].copy_from_slice(&v[new]);
        }
        self.len += t;
    }

    /// The first `len` positions, `[n_kv_head][len][head_dim]` (keys, values).
    fn prefix(&self, n_kv_head: usize, len: usize) -> (Vec<f32>, Vec<f32>) {
        let row = if self.capacity == 0 {
            0
        } else {
            self.keys.len() / (n_kv_head * self.capacity)
        };
        let take = |all: &[f32]| {
            (0..n_kv_head)
                .flat_map(|h| &all[h * self.capacity * row..(h * self.capacity + len) * row])
                .copied()
                .collect()
        };
        (take(&self.keys), take(&self.values))
    }
}

/// The state of one request: the KV cache of every layer and the tokens it holds, in order.
/// A finished request's session can serve a later prompt that starts with the same tokens:
/// [`Session::truncate`] to the shared prefix, then forward the rest.
pub struct Session {
    caches: Vec<LayerCache>,
    tokens: Vec<u32>,
    n_kv_head: usize,
    head_dim: usize,
}

impl Session {
    /// The tokens whose keys and values the session holds.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Forgets every position from `len` on.
    pub fn truncate(&mut self, len: usize) {
        let len = len.min(self.tokens.len());
        self.tokens.truncate(len);
        for cache in &mut self.caches {
            cache.len = len;
        }
    }

    /// A new session holding a copy of this one's first `len` positions (this one unchanged).
    pub fn fork(&self, len: usize) -> Result<Session> {
        let len = len.min(self.tokens.len());
        let (n_kv_head, head_dim) = (self.n_kv_head, self.head_dim);
        let caches = self
            .caches
            .iter()
            .map(|cache| {
                let mut copy = LayerCache::default();
                if len > 0 {
                    let (k, v) = cache.prefix(n_kv_head, len);
                    copy.append(n_kv_head, head_dim, &k, &v);
                }
                copy
            })
            .collect();
        Ok(Session {
            caches,
            tokens: self.tokens[..len].to_vec(),
            n_kv_head,
            head_dim,
        })
    }

    /// Bytes the caches hold (allocated, not only used).
    pub fn bytes(&self) -> usize {
        self.caches
            .iter()
            .map(|c| (c.keys.len() + c.values.len()) * size_of::<f32>())
            .sum()
    }
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
