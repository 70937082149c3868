//! Matrix products for GGUF's Q8_0 and Q5_0 weights (blocks of 32 values with one scale), the
//! types of most of Qwen2.5-Coder-0.5B's matrices, and for the K-quants Q4_K and Q6_K of its
//! `ffn_down` (`kquants`; on x86-64 with AVX-512 VNNI or AVX2, candle's kernels elsewhere).
//!
//! candle runs Q5_0 on its scalar path, and Q8_0 with AVX2 one block at a time; its faster
//! repacked kernels need widths that are multiples of 256, which 896 is not. Here:
//! - weights are stored in groups of 16 rows, block by block: for each block, 4 bytes of each
//!   of the 16 rows side by side for each of its 8 steps of 4 values, then the 16 scales (f16,
//!   as in the file). One AVX-512 register holds a step of all 16 rows, so one `vpdpbusd`
//!   with an activation's 4 bytes broadcast does 64 multiply-adds into the 16 rows' sums;
//! - Q5_0 stays 5-bit in memory, in exactly the file's bytes per block (decoding is bound by
//!   memory bandwidth) and is widened to 8 bits one group at a time into a small per-thread
//!   buffer that stays in L1 while every activation row uses it;
//! - activations are quantized per 32-block to i8 with an f16-rounded scale, as llama.cpp
//!   does for these types;
//! - work items are a group of rows for a chunk of activation rows: a group's weights are read
//!   from memory once per chunk, and a chunk's activations stay in L2.
//!
//! Per block and row the arithmetic is llama.cpp's reference: the exact integer dot product,
//! times the product of the two scales, added to the row's sum. The AVX-512 kernels
//! (`x86`), the AVX2 ones (`x86::avx2`) and the portable ones all compute exactly that, so
//! their results are identical.

// Kernels index rows and columns of several parallel arrays at once.
#![allow(clippy::needless_range_loop)]

use std::cell::RefCell;
use std::sync::OnceLock;

use candle_core::quantized::{GgmlDType, QTensor};

use kquants::{KBlock, KBlocks, Q4Block, Q6Block};

/// Values per quantization block.
const BLOCK: usize = 32;
/// Bytes of a GGUF Q8_0 block: f16 scale, 32 × i8.
const Q8_0_BYTES: usize = 34;
/// Bytes of a GGUF Q5_0 block: f16 scale, 32 high bits, 32 low nibbles.
const Q5_0_BYTES: usize = 22;
/// Weight rows per group: one AVX-512 register holds 4 bytes of each.
const GROUP: usize = 16;
/// Steps of 4 values per block.
const STEPS: usize = BLOCK / 4;
/// Activation rows computed together.
const COLS: usize = 8;
/// Bytes of quantized activations a work item's chunk of activation rows may span.
const CHUNK_BYTES: usize = 256 << 10;

/// One block of the 16 rows of a group, 8-bit and unsigned: weight plus the part's offset.
#[repr(C, align(32))]
#[derive(Clone, Copy)]
struct U8Block {
    /// `qs[s][r]`: values `4s..4s + 4` of row `r`.
    qs: [[[u8; 4]; GROUP]; STEPS],
    /// Scales, f16.
    d: [u16; GROUP],
}

/// One block of the 16 rows of a group, 5-bit as in GGUF: the value `q` (weight + 16) of
/// index `j` has its low 4 bits in nibble `j / 16` of file byte `j % 16` and bit 4 in bit `j` of
/// the file's 32 high bits.
#[repr(C, align(32))]
#[derive(Clone, Copy)]
struct Q5Block {
    /// `nibbles[p][r][t]`: file byte `4p + t` of row `r`, i.e. the low 4 bits of values
    /// `4p + t` (low nibble) and `16 + 4p + t` (high nibble): steps `p` and `p + 4`.
    nibbles: [[[u8; 4]; GROUP]; STEPS / 2],
    /// `high[s]`, bit `4r + t`: bit 4 of value `4s + t` of row `r`.
    high: [u64; STEPS],
    /// Scales, f16.
    d: [u16; GROUP],
}

/// Consecutive groups of one storage type; block `b` of group `g` at `[g * nb + b]`.
enum Groups {
    /// Q8_0, stored as weight + 128.
    Q8(Vec<U8Block>),
    Q5(Vec<Q5Block>),
    Q4K(Vec<Q4Block>),
    Q6K(Vec<Q6Block>),
}

impl Groups {
    fn count(&self, nb: usize) -> usize {
        match self {
            Groups::Q8(v) => v.len() / nb,
            Groups::Q5(v) => v.len() / nb,
            Groups::Q4K(v) => v.len() / nb,
            Groups::Q6K(v) => v.len() / nb,
        }
    }

    fn is_k(&self) -> bool {
        matches!(self, Groups::Q4K(_) | Groups::Q6K(_))
    }
}

/// What widened Q5_0 values hold over the weight.
const Q5_OFFSET: i32 = 16;
/// What stored Q8_0 values hold over the weight.
const Q8_OFFSET: i32 = 128;

/// An (n × k) weight matrix, row `r` producing output `r`. It may stack matrices of different
/// types (e.g. Q5_0 query and key over a Q8_0 value projection) to run them as one product;
/// each part but the last has a multiple of 16 rows.
pub struct QuantMatrix {
    n: usize,
    k: usize,
    parts: Vec<Groups>,
}

/// Activations quantized for [`QuantMatrix::matmul`]: per 32-block an i8 run, its scale, and
/// the sum of the run and of its first half (to remove the weights' unsigned offset from VNNI
/// products).
struct QuantizedRows {
    qs: Vec<i8>,
    scales: Vec<f32>,
    sums: Vec<i32>,
    halves: Vec<i32>,
}

/// One 32-block of activations and the places of its quantized values, scale, sum and the
/// sum of its first half in [`QuantizedRows`].
type QuantBlock<'a> = (
    &'a [f32],
    &'a mut [i8],
    &'a mut f32,
    &'a mut i32,
    &'a mut i32,
);

impl QuantizedRows {
    /// The blocks of `x`, which these rows are sized for, each with its places.
    fn blocks<'a>(&'a mut self, x: &'a [f32]) -> impl Iterator<Item = QuantBlock<'a>> {
        x.chunks_exact(BLOCK)
            .zip(self.qs.chunks_exact_mut(BLOCK))
            .zip(self.scales.iter_mut().zip(self.sums.iter_mut()))
            .zip(self.halves.iter_mut())
            .map(|(((x, qs), (scale, sum)), half)| (x, qs, scale, sum, half))
    }
}

/// A group widened to 8 bits, reused by the thread's next groups.
#[derive(Default)]
struct Widened {
    u8: Vec<U8Block>,
    k: Vec<KBlock>,
}

thread_local! {
    static WIDENED: RefCell<Widened> = RefCell::new(Widened::default());
}

impl QuantMatrix {
    /// The matrix of `tensor` if its type runs here (see [`Self::takes`]); `None` for others.
    pub fn from_qtensor(tensor: &QTensor) -> candle_core::Result<Option<Self>> {
        let (n, k) = tensor.shape().dims2()?;
        if !Self::takes(tensor.dtype()) {
            return Ok(None);
        }
        Self::from_gguf_data(tensor.dtype(), n, k, &tensor.data()?).map(Some)
    }

    /// Whether `dtype` runs on these kernels: Q8_0 and Q5_0 everywhere, Q4_K and Q6_K where an
    /// x86-64 kernel runs (on AVX2, ours read a prompt ~10 % faster than candle's; the portable
    /// one would be far slower than candle's).
    pub fn takes(dtype: GgmlDType) -> bool {
        match dtype {
            GgmlDType::Q8_0 | GgmlDType::Q5_0 => true,
            #[cfg(target_arch = "x86_64")]
            GgmlDType::Q4K | GgmlDType::Q6K => kernel() != Kernel::Portable,
            _ => false,
        }
    }

    /// The (n × k) matrix of type `dtype` (Q8_0, Q5_0, Q4_K or Q6_K) from its GGUF bytes.
    pub fn from_gguf_data(
        dtype: GgmlDType,
        n: usize,
        k: usize,
        data: &[u8],
    ) -> candle_core::Result<Self> {
        if !k.is_multiple_of(BLOCK) {
            candle_core::bail!("matrix width {k} is not a whole number of blocks");
        }
        let nb = k / BLOCK;
        let groups = match dtype {
            GgmlDType::Q8_0 => q8_groups(data, n, nb)?,
            GgmlDType::Q5_0 => q5_groups(data, n, nb)?,
            GgmlDType::Q4K => Groups::Q4K(kquants::q4k_groups(data, n, k)?),
            GgmlDType::Q6K => Groups::Q6K(kquants::q6k_groups(data, n, k)?),
            other => candle_core::bail!("{other:?} matrices are not supported here"),
        };
        Ok(Self {
            n,
            k,
            parts: vec![groups],
        })
    }

    /// One matrix with the rows of all `parts` in order; the parts back if their widths differ,
    /// a part other than the last has a number of rows that is not a multiple of 16, or a part
    /// is a K-quant (whose kernel is another).
    pub fn stack_or_return(parts: Vec<QuantMatrix>) -> Result<Self, Vec<QuantMatrix>> {
        let Some(k) = parts.first().map(|p| p.k) else {
            return Err(parts);
        };
        let last = parts.len() - 1;
        if parts.iter().enumerate().any(|(i, p)| {
            p.k != k || (i < last && !p.n.is_multiple_of(GROUP)) || p.parts.iter().any(Groups::is_k)
        }) {
            return Err(parts);
        }
        Ok(Self {
            n: parts.iter().map(|p| p.n).sum(),
            k,
            parts: parts.into_iter().flat_map(|p| p.parts).collect(),
        })
    }

    pub fn rows(&self) -> usize {
        self.n
    }

    pub fn columns(&self) -> usize {
        self.k
    }

    /// `out (m × n) = x (m × k) · selfᵀ`, on candle's CPU thread pool.
    pub fn matmul(&self, x: &[f32], m: usize, out: &mut [f32]) {
        let n = self.n;
        assert_eq!(x.len(), m * self.k, "activation shape");
        assert_eq!(out.len(), m * n, "output shape");
        let kernel = kernel();
        let xq = quantize_rows(kernel, x, m, self.k);
        // Per run of COLS rows, built once for all groups (a chunk is a whole number of runs).
        let runs: Vec<Activations> = (0..m)
            .step_by(COLS)
            .map(|c0| xq.activations(self.k, c0..(c0 + COLS).min(m)))
            .collect();
        let out_ptr = SharedOut(out.as_mut_ptr());
        let groups = n.div_ceil(GROUP);
        let chunk = (CHUNK_BYTES / self.k).max(COLS) / COLS * COLS;
        let work = |range: std::ops::Range<usize>| {
            let out_ptr = &out_ptr;
            WIDENED.with_borrow_mut(|widened| {
                for item in range {
                    // Chunk major: the workers share a chunk's activations while each group's
                    // weights are read once for all of the chunk's rows.
                    let (ch, g) = (item / groups, item % groups);
                    let blocks = self.group(kernel, g, widened);
                    let rows = g * GROUP..(g * GROUP + GROUP).min(n);
                    let end = (ch * chunk + chunk).min(m);
                    for c0 in (ch * chunk..end).step_by(COLS) {
                        let cols = c0..(c0 + COLS).min(end);
                        let sums = product(kernel, &blocks, &runs[c0 / COLS]);
                        for (ci, c) in cols.enumerate() {
                            // SAFETY: every (c, row) belongs to exactly one work item, and the
                            // rows lie inside row c of `out`.
                            unsafe {
                                std::ptr::copy_nonoverlapping(
                                    sums.values[ci].as_ptr(),
                                    out_ptr.0.add(c * n + rows.start),
                                    rows.len(),
                                )
                            };
                        }
                    }
                }
            });
        };
        candle_core::utils::barrier_pool().execute_chunked(groups * m.div_ceil(chunk), work);
    }

    /// The 8-bit blocks of group `g` with the offset of their values, widened into `widened`
    /// unless the group is stored 8-bit.
    fn group<'a>(&'a self, kernel: Kernel, mut g: usize, widened: &'a mut Widened) -> Group<'a> {
        let nb = self.k / BLOCK;
        let mut part = &self.parts[0];
        for p in &self.parts {
            part = p;
            let count = p.count(nb);
            if g < count {
                break;
            }
            g -= count;
        }
        let range = g * nb..(g + 1) * nb;
        match part {
            Groups::Q8(v) => Group::U8(Blocks {
                blocks: &v[range],
                offset: Q8_OFFSET,
            }),
            Groups::Q5(v) => {
                widen_q5(kernel, &v[range], &mut widened.u8);
                Group::U8(Blocks {
                    blocks: &widened.u8,
                    offset: Q5_OFFSET,
                })
            }
            Groups::Q4K(v) => kquants::widen(kernel, &v[range], &mut widened.k),
            Groups::Q6K(v) => kquants::widen(kernel, &v[range], &mut widened.k),
        }
    }
}

/// A group's blocks in 8 bits, for the kernel of its type.
enum Group<'a> {
    U8(Blocks<'a>),
    K(KBlocks<'a>),
}

/// A group's blocks in 8 bits, each value the weight plus `offset`.
#[derive(Clone, Copy)]
struct Blocks<'a> {
    blocks: &'a [U8Block],
    offset: i32,
}

/// A group's sums for up to [`COLS`] activation rows: `values[c][r]`.
#[repr(C, align(64))]
struct GroupSums {
    values: [[f32; GROUP]; COLS],
}

/// Dot products of a group's 16 rows with activation rows `cols` (at most [`COLS`]).
fn product(kernel: Kernel, w: &Group, x: &Activations) -> GroupSums {
    let nc = x.count;
    let mut sums = GroupSums {
        values: [[0f32; GROUP]; COLS],
    };
    let out = &mut sums.values;
    // SAFETY (kernels): `kernel()` checked the CPU features; the activations hold `nb`
    // whole blocks. Column counts are constants inside the AVX-512 kernel so that the
    // accumulators stay in registers.
    let w = match *w {
        Group::U8(w) => w,
        Group::K(w) => {
            match kernel {
                #[cfg(target_arch = "x86_64")]
                Kernel::Vnni => unsafe {
                    macro_rules! run {
                        ($split:literal) => {
                            match nc {
                                1 => x86::k_vnni::<1, $split>(w, x, out),
                                2 => x86::k_vnni::<2, $split>(w, x, out),
                                3 => x86::k_vnni::<3, $split>(w, x, out),
                                4 => x86::k_vnni::<4, $split>(w, x, out),
                                5 => x86::k_vnni::<5, $split>(w, x, out),
                                6 => x86::k_vnni::<6, $split>(w, x, out),
                                7 => x86::k_vnni::<7, $split>(w, x, out),
                                _ => x86::k_vnni::<COLS, $split>(w, x, out),
                            }
                        };
                    }
                    if w.split { run!(true) } else { run!(false) }
                },
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx2 => unsafe {
                    if w.split {
                        x86::avx2::k_avx2::<true>(w, x, nc, out)
                    } else {
                        x86::avx2::k_avx2::<false>(w, x, nc, out)
                    }
                },
                Kernel::Portable => kquants::k_portable(w, x, nc, out),
            }
            return sums;
        }
    };
    match kernel {
        #[cfg(target_arch = "x86_64")]
        Kernel::Vnni => unsafe {
            match nc {
                1 => x86::u8_vnni::<1>(w, x, out),
                2 => x86::u8_vnni::<2>(w, x, out),
                3 => x86::u8_vnni::<3>(w, x, out),
                4 => x86::u8_vnni::<4>(w, x, out),
                5 => x86::u8_vnni::<5>(w, x, out),
                6 => x86::u8_vnni::<6>(w, x, out),
                7 => x86::u8_vnni::<7>(w, x, out),
                _ => x86::u8_vnni::<COLS>(w, x, out),
            }
        },
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => unsafe { x86::avx2::u8_avx2(w, x, nc, out) },
        Kernel::Portable => u8_portable(w, x, nc, out),
    }
    sums
}

fn q8_groups(data: &[u8], n: usize, nb: usize) -> candle_core::Result<Groups> {
    if data.len() != n * nb * Q8_0_BYTES {
        candle_core::bail!(
            "Q8_0 data of {} bytes for {n} rows of {nb} blocks",
            data.len()
        );
    }
    // Padding rows: value 0 (stored 128), scale 0.
    let empty = U8Block {
        qs: [[[128; 4]; GROUP]; STEPS],
        d: [0; GROUP],
    };
    let mut blocks = vec![empty; n.div_ceil(GROUP) * nb];
    for (r, row) in data.chunks_exact(nb * Q8_0_BYTES).enumerate() {
        let (g, i) = (r / GROUP, r % GROUP);
        for (b, src) in row.chunks_exact(Q8_0_BYTES).enumerate() {
            let dst = &mut blocks[g * nb + b];
            dst.d[i] = u16::from_le_bytes([src[0], src[1]]);
            for (j, &q) in src[2..].iter().enumerate() {
                dst.qs[j / 4][i][j % 4] = q ^ 0x80;
            }
        }
    }
    Ok(Groups::Q8(blocks))
}

fn q5_groups(data: &[u8], n: usize, nb: usize) -> candle_core::Result<Groups> {
    if data.len() != n * nb * Q5_0_BYTES {
        candle_core::bail!(
            "Q5_0 data of {} bytes for {n} rows of {nb} blocks",
            data.len()
        );
    }
    // Padding rows: scale 0.
    let empty = Q5Block {
        nibbles: [[[0; 4]; GROUP]; STEPS / 2],
        high: [0; STEPS],
        d: [0; GROUP],
    };
    let mut blocks = vec![empty; n.div_ceil(GROUP) * nb];
    for (r, row) in data.chunks_exact(nb * Q5_0_BYTES).enumerate() {
        let (g, i) = (r / GROUP, r % GROUP);
        for (b, src) in row.chunks_exact(Q5_0_BYTES).enumerate() {
            let dst = &mut blocks[g * nb + b];
            dst.d[i] = u16::from_le_bytes([src[0], src[1]]);
            let qh = u32::from_le_bytes([src[2], src[3], src[4], src[5]]);
            for (j, &byte) in src[6..].iter().enumerate() {
                dst.nibbles[j / 4][i][j % 4] = byte;
            }
            for s in 0..STEPS {
                let bits = ((qh >> (4 * s)) & 0xF) as u64;
                dst.high[s] |= bits << (4 * i);
            }
        }
    }
    Ok(Groups::Q5(blocks))
}

/// Q5_0 blocks as 8-bit blocks holding `q` = weight + 16.
fn widen_q5(kernel: Kernel, src: &[Q5Block], dst: &mut Vec<U8Block>) {
    dst.resize(
        src.len(),
        U8Block {
            qs: [[[0; 4]; GROUP]; STEPS],
            d: [0; GROUP],
        },
    );
    match kernel {
        // SAFETY: `kernel()` checked the CPU features.
        #[cfg(target_arch = "x86_64")]
        Kernel::Vnni => unsafe { x86::widen_q5_avx512(src, dst) },
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => unsafe { x86::avx2::widen_q5_avx2(src, dst) },
        Kernel::Portable => widen_q5_portable(src, dst),
    }
}

fn widen_q5_portable(src: &[Q5Block], dst: &mut [U8Block]) {
    for (s, d) in src.iter().zip(dst.iter_mut()) {
        for p in 0..STEPS / 2 {
            for r in 0..GROUP {
                for t in 0..4 {
                    let byte = s.nibbles[p][r][t];
                    let bit = |step: usize| (((s.high[step] >> (4 * r + t)) & 1) as u8) << 4;
                    d.qs[p][r][t] = (byte & 0x0F) | bit(p);
                    d.qs[p + 4][r][t] = (byte >> 4) | bit(p + 4);
                }
            }
        }
        d.d = s.d;
    }
}

/// Up to [`COLS`] quantized activation rows.
struct Activations<'a> {
    qs: [&'a [i8]; COLS],
    scales: [&'a [f32]; COLS],
    sums: [&'a [i32]; COLS],
    /// The sums of the first 16 values of each block.
    halves: [&'a [i32]; COLS],
    /// How many rows are set.
    count: usize,
}

impl QuantizedRows {
    /// Rows `cols` (at most [`COLS`]) of activations of width `k`.
    fn activations(&self, k: usize, cols: std::ops::Range<usize>) -> Activations<'_> {
        let nb = k / BLOCK;
        let mut x = Activations {
            qs: [&[]; COLS],
            scales: [&[]; COLS],
            sums: [&[]; COLS],
            halves: [&[]; COLS],
            count: cols.len(),
        };
        for (i, c) in cols.enumerate() {
            x.qs[i] = &self.qs[c * k..(c + 1) * k];
            x.scales[i] = &self.scales[c * nb..(c + 1) * nb];
            x.sums[i] = &self.sums[c * nb..(c + 1) * nb];
            x.halves[i] = &self.halves[c * nb..(c + 1) * nb];
        }
        x
    }
}

/// An output buffer that the thread pool's workers write at disjoint elements.
pub(super) struct SharedOut(pub(super) *mut f32);
// SAFETY: every user has its workers write disjoint elements (see `matmul`).
unsafe impl Sync for SharedOut {}

fn quantize_rows(kernel: Kernel, x: &[f32], m: usize, k: usize) -> QuantizedRows {
    let nb = k / BLOCK;
    let mut rows = QuantizedRows {
        qs: vec![0i8; m * k],
        scales: vec![0f32; m * nb],
        sums: vec![0i32; m * nb],
        halves: vec![0i32; m * nb],
    };
    match kernel {
        // SAFETY: `kernel()` checked the CPU features; the buffers hold `x`'s blocks.
        #[cfg(target_arch = "x86_64")]
        Kernel::Vnni => unsafe { x86::quantize_avx512(x, &mut rows) },
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => unsafe { x86::avx2::quantize_avx2(x, &mut rows) },
        Kernel::Portable => quantize_portable(x, &mut rows),
    }
    rows
}

/// The f16-rounded scale of a block whose largest magnitude is `amax` (llama.cpp keeps the
/// activation scale as f16), and the factor that quantizes it.
fn block_scale(amax: f32) -> (f32, f32) {
    let d = amax / 127.0;
    let id = if d > 0.0 { 1.0 / d } else { 0.0 };
    (f16_to_f32(f32_to_f16(d)), id)
}

fn quantize_portable(x: &[f32], rows: &mut QuantizedRows) {
    for (block, q, scale, sum, half) in rows.blocks(x) {
        let amax = block.iter().fold(0f32, |a, v| a.max(v.abs()));
        let (d, id) = block_scale(amax);
        for (i, (q, v)) in q.iter_mut().zip(block).enumerate() {
            // Rounded to nearest, ties away from zero: on the near tie that
            // `qwen_greedy_fim_matches_llama_cpp` holds, ties to even picks the other token.
            *q = (v * id).round() as i8;
            *sum += *q as i32;
            if i < BLOCK / 2 {
                *half += *q as i32;
            }
        }
        *scale = d;
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    #[cfg(target_arch = "x86_64")]
    Vnni,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Portable,
}

/// The kernels this CPU can run, fastest first.
fn kernels() -> Vec<Kernel> {
    let mut all = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512vnni")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("fma")
        {
            all.push(Kernel::Vnni);
        }
        if is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
        {
            all.push(Kernel::Avx2);
        }
    }
    all.push(Kernel::Portable);
    all
}

fn kernel() -> Kernel {
    static KERNEL: OnceLock<Kernel> = OnceLock::new();
    *KERNEL.get_or_init(|| kernels()[0])
}

fn u8_portable(w: Blocks, x: &Activations, nc: usize, out: &mut [[f32; GROUP]; COLS]) {
    for (b, block) in w.blocks.iter().enumerate() {
        for c in 0..nc {
            let xb = &x.qs[c][b * BLOCK..(b + 1) * BLOCK];
            let dx = x.scales[c][b];
            let bias = -w.offset * x.sums[c][b];
            for r in 0..GROUP {
                let mut dot = bias;
                for s in 0..STEPS {
                    for t in 0..4 {
                        dot += block.qs[s][r][t] as i32 * xb[4 * s + t] as i32;
                    }
                }
                out[c][r] += (f16_to_f32(block.d[r]) * dx) * dot as f32;
            }
        }
    }
}

mod kquants;
#[cfg(target_arch = "x86_64")]
mod x86;

/// IEEE half → single, exact.
fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let exp = ((h >> 10) & 0x1F) as u32;
    let mant = (h & 0x3FF) as u32;
    let bits = match (exp, mant) {
        (0, 0) => sign,
        (0, _) => {
            // Subnormal: normalize.
            let shift = mant.leading_zeros() - 21;
            let mant = (mant << shift) & 0x3FF;
            sign | ((113 - shift) << 23) | (mant << 13)
        }
        (0x1F, _) => sign | 0x7F80_0000 | (mant << 13),
        _ => sign | ((exp + 112) << 23) | (mant << 13),
    };
    f32::from_bits(bits)
}

/// Single → IEEE half, rounding to nearest even.
fn f32_to_f16(v: f32) -> u16 {
    let bits = v.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xFF) as i32;
    let mant = bits & 0x7F_FFFF;
    if exp == 0xFF {
        return sign | 0x7C00 | if mant != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1F {
        return sign | 0x7C00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let mant = mant | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = mant >> shift;
        let rem = mant & ((1 << shift) - 1);
        let mid = 1 << (shift - 1);
        let round = rem > mid || (rem == mid && half & 1 == 1);
        return sign | (half + round as u32) as u16;
    }
    let half = ((e as u32) << 10) | (mant >> 13);
    let rem = mant & 0x1FFF;
    let round = rem > 0x1000 || (rem == 0x1000 && half & 1 == 1);
    sign | (half + round as u32) as u16
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    use super::*;

    #[test]
    fn half_conversions_round_trip() {
        for h in [0u16, 1, 0x3C00, 0x3555, 0x7BFF, 0x0400, 0x03FF] {
            assert_eq!(f32_to_f16(f16_to_f32(h)), h, "{h:#x}");
        }
        assert_eq!(f16_to_f32(0x3C00), 1.0);
        assert_eq!(f16_to_f32(0xC000), -2.0);
        assert_eq!(f32_to_f16(1.0 + 1.0 / 4096.0), 0x3C00); // below half an ulp: down
        assert_eq!(f32_to_f16(65504.0), 0x7BFF);
    }

    fn weights(n: usize, k: usize) -> Tensor {
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 7919) % 255) as f32 / 64.0 - 2.0)
            .collect();
        Tensor::from_vec(w, (n, k), &Device::Cpu).unwrap()
    }

    /// `matrix · x` against f32 products of the dequantized weights and activations, and every
    /// kernel this CPU has against the portable one, bit for bit.
    fn check(matrix: &QuantMatrix, dequantized: &[Vec<f32>], m: usize) {
        let (n, k) = (matrix.rows(), matrix.columns());
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 104729) % 199) as f32 / 50.0 - 2.0)
            .collect();
        let mut out = vec![0f32; m * n];
        matrix.matmul(&x, m, &mut out);
        let xq = quantize_rows(Kernel::Portable, &x, m, k);
        let xd: Vec<f32> = (0..m * k)
            .map(|i| xq.qs[i] as f32 * xq.scales[i / BLOCK])
            .collect();
        for c in 0..m {
            for r in 0..n {
                let exact: f32 = (0..k).map(|i| dequantized[r][i] * xd[c * k + i]).sum();
                let got = out[c * n + r];
                assert!(
                    (got - exact).abs() <= 1e-4 * exact.abs().max(1.0),
                    "m={m} n={n} k={k} ({c},{r}): {got} vs {exact}"
                );
                let float: f32 = (0..k).map(|i| dequantized[r][i] * x[c * k + i]).sum();
                assert!((got - float).abs() <= 0.01 * k as f32, "{got} vs {float}");
            }
        }
        for kernel in kernels() {
            let q = quantize_rows(kernel, &x, m, k);
            assert_eq!(
                (&q.qs, &q.scales, &q.sums, &q.halves),
                (&xq.qs, &xq.scales, &xq.sums, &xq.halves)
            );
            let (mut fast, mut slow) = (Widened::default(), Widened::default());
            for g in 0..n.div_ceil(GROUP) {
                for c0 in (0..m).step_by(COLS) {
                    let cols = c0..(c0 + COLS).min(m);
                    let w = matrix.group(kernel, g, &mut fast);
                    let x = xq.activations(k, cols);
                    let f = product(kernel, &w, &x);
                    let w = matrix.group(Kernel::Portable, g, &mut slow);
                    let s = product(Kernel::Portable, &w, &x);
                    assert_eq!(f.values, s.values, "{kernel:?} m={m} n={n} k={k} group {g}");
                }
            }
        }
    }

    fn quantized(n: usize, k: usize, dtype: GgmlDType) -> (QuantMatrix, Vec<Vec<f32>>) {
        let q = QTensor::quantize(&weights(n, k), dtype).unwrap();
        let dequantized = q
            .dequantize(&Device::Cpu)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        let (n, k) = q.shape().dims2().unwrap();
        let matrix = QuantMatrix::from_gguf_data(dtype, n, k, &q.data().unwrap()).unwrap();
        (matrix, dequantized)
    }

    /// Weights with mins, negative scales and the whole range of 6-bit values.
    #[test]
    fn q4_k_and_q6_k_products() {
        for dtype in [GgmlDType::Q4K, GgmlDType::Q6K] {
            for (m, n, k) in [(1, 8, 256), (3, 17, 512), (9, 16, 256), (17, 40, 768)] {
                let (matrix, dequantized) = quantized(n, k, dtype);
                check(&matrix, &dequantized, m);
            }
        }
        // Every stored value and scale agrees with candle's dequantization.
        let w: Vec<f32> = (0..16 * 512)
            .map(|i| (((i * 2654435761usize) >> 7) % 1000) as f32 / 100.0 - 7.0)
            .collect();
        let w = Tensor::from_vec(w, (16, 512), &Device::Cpu).unwrap();
        for dtype in [GgmlDType::Q4K, GgmlDType::Q6K] {
            let q = QTensor::quantize(&w, dtype).unwrap();
            let expected = q
                .dequantize(&Device::Cpu)
                .unwrap()
                .to_vec2::<f32>()
                .unwrap();
            let matrix = QuantMatrix::from_gguf_data(dtype, 16, 512, &q.data().unwrap()).unwrap();
            let mut widened = Widened::default();
            let Group::K(blocks) = matrix.group(Kernel::Portable, 0, &mut widened) else {
                panic!("{dtype:?} is a K-quant");
            };
            for (b, block) in blocks.blocks.iter().enumerate() {
                for r in 0..GROUP {
                    for i in 0..BLOCK {
                        let q = block.qs[i / 4][r][i % 4] as i32 - blocks.offset;
                        let scale = block.scales[if blocks.split { i / 16 } else { 0 }][r];
                        let value = scale * q as f32 - block.mins[r];
                        let want = expected[r][b * BLOCK + i];
                        assert!((value - want).abs() <= 1e-5, "{dtype:?} ({r}, {b}, {i})");
                    }
                }
            }
        }
    }

    #[test]
    fn k_quants_do_not_stack() {
        let (a, _) = quantized(16, 256, GgmlDType::Q4K);
        let (b, _) = quantized(16, 256, GgmlDType::Q5_0);
        assert_eq!(
            QuantMatrix::stack_or_return(vec![a, b])
                .err()
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn q8_0_and_q5_0_products() {
        for dtype in [GgmlDType::Q8_0, GgmlDType::Q5_0] {
            for (m, n, k) in [
                (1, 8, 64),
                (1, 7, 96),
                (3, 9, 32),
                (5, 12, 896),
                (9, 16, 128),
                (17, 40, 96),
            ] {
                let (matrix, dequantized) = quantized(n, k, dtype);
                check(&matrix, &dequantized, m);
            }
        }
    }

    /// More activation rows than one work item's chunk takes.
    #[test]
    fn products_over_several_chunks() {
        let k = 4096;
        let m = CHUNK_BYTES / k + 3;
        let (matrix, dequantized) = quantized(20, k, GgmlDType::Q5_0);
        check(&matrix, &dequantized, m);
    }

    #[test]
    fn stacked_parts_of_mixed_types() {
        let (q, mut rows) = quantized(16, 64, GgmlDType::Q5_0);
        let (v, more) = quantized(6, 64, GgmlDType::Q8_0);
        rows.extend(more);
        let stacked = QuantMatrix::stack_or_return(vec![q, v]).ok().unwrap();
        assert_eq!(stacked.rows(), 22);
        check(&stacked, &rows, 1);
        check(&stacked, &rows, 6);
        let (odd, _) = quantized(12, 64, GgmlDType::Q8_0);
        let (last, _) = quantized(4, 64, GgmlDType::Q8_0);
        assert_eq!(
            QuantMatrix::stack_or_return(vec![odd, last])
                .err()
                .unwrap()
                .len(),
            2
        );
    }

    /// Values that quantize to ±127 and to ties stay as the portable quantizer makes them.
    #[test]
    fn activation_quantization_agrees_across_kernels() {
        let mut x: Vec<f32> = (0..256).map(|i| (i as f32 - 128.0) / 8.0).collect();
        x[32..64].fill(0.0);
        x[64] = 127.0;
        x[65] = 0.5;
        x[66] = 2.5;
        x[67] = -2.5;
        x[68] = 0.49999997;
        x[69] = -126.5;
        let reference = quantize_rows(Kernel::Portable, &x, 1, 256);
        assert_eq!(&reference.qs[64..70], &[127, 1, 3, -3, 0, -127]);
        assert_eq!(reference.sums[1], 0);
        for kernel in kernels() {
            let q = quantize_rows(kernel, &x, 1, 256);
            assert_eq!(q.qs, reference.qs, "{kernel:?}");
            assert_eq!(q.scales, reference.scales, "{kernel:?}");
            assert_eq!(q.sums, reference.sums, "{kernel:?}");
        }
    }

    #[test]
    fn other_types_are_not_taken() {
        let q = QTensor::quantize(&weights(4, 256), GgmlDType::Q2K).unwrap();
        assert!(QuantMatrix::from_qtensor(&q).unwrap().is_none());
    }
}
