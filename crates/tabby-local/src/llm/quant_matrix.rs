//! Matrix products for GGUF's Q8_0 and Q5_0 weights (blocks of 32 values with one scale), the
//! types of most of Qwen2.5-Coder-0.5B's matrices.
//!
//! candle runs Q5_0 on its scalar path, and Q8_0 with AVX2 one block at a time (converting two
//! f16 scales per block through a function call); its faster repacked kernels need widths that
//! are multiples of 256, which 896 is not. Here:
//! - weights are stored in tiles of four rows, each block's four rows and their f32 scales side
//!   by side, so that a tile is one sequential read that the prefetcher can run ahead of;
//! - activations are quantized per 32-block to i8, as llama.cpp does for these types;
//! - one AVX512-VNNI `vpdpbusd` multiplies 32 pairs. Q5_0 stays 5-bit in memory (decoding is
//!   bound by memory bandwidth; widening it to Q8_0 would cost a third more bytes per token) and
//!   is unpacked in registers; an AVX2 kernel and a portable one cover other CPUs, with Q5_0
//!   widened to Q8_0 (losslessly) at load.
//!
//! Per block the arithmetic is llama.cpp's: the exact integer dot product times both scales,
//! so results match up to the order of float additions.

// Kernels index rows and columns of several parallel arrays at once.
#![allow(clippy::needless_range_loop)]

use std::sync::OnceLock;

use candle_core::quantized::{GgmlDType, QTensor};

/// Values per quantization block.
const BLOCK: usize = 32;
/// Bytes of a GGUF Q8_0 block: f16 scale, 32 × i8.
const Q8_0_BYTES: usize = 34;
/// Bytes of a GGUF Q5_0 block: f16 scale, 32 high bits, 32 low nibbles.
const Q5_0_BYTES: usize = 22;
/// Weight rows per tile.
const ROWS: usize = 4;
/// Activation rows computed together while reading a prompt.
const COLS: usize = 4;

/// One block of the four rows of a tile, 8-bit: `w + 128` per weight.
#[repr(C)]
#[derive(Clone, Copy)]
struct Q8Block {
    qs: [[u8; BLOCK]; ROWS],
    d: [f32; ROWS],
}

/// One block of the four rows of a tile, 5-bit as in GGUF: weight `j` is
/// `(nibble j | bit j of qh << 4) - 16`, nibbles `j` and `j + 16` sharing byte `j % 16`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Q5Block {
    qs: [[u8; BLOCK / 2]; ROWS],
    qh: [u32; ROWS],
    d: [f32; ROWS],
}

/// Consecutive tiles of one storage type; block `b` of tile `t` at `[t * nb + b]`.
enum Tiles {
    Q8(Vec<Q8Block>),
    Q5(Vec<Q5Block>),
}

impl Tiles {
    fn count(&self, nb: usize) -> usize {
        match self {
            Tiles::Q8(v) => v.len() / nb,
            Tiles::Q5(v) => v.len() / nb,
        }
    }
}

/// An (n × k) weight matrix, row `r` producing output `r`. It may stack matrices of different
/// types (e.g. Q5_0 query and key over a Q8_0 value projection) to run them as one product;
/// each part but the last has a multiple of four rows.
pub struct QuantMatrix {
    n: usize,
    k: usize,
    parts: Vec<Tiles>,
}

/// Activations quantized for [`QuantMatrix::matmul`]: per 32-block an i8 run, its scale, and
/// the sum of the run (to remove the weights' unsigned offset from VNNI products).
struct QuantizedRows {
    qs: Vec<i8>,
    scales: Vec<f32>,
    sums: Vec<i32>,
}

impl QuantMatrix {
    /// The matrix of `tensor` if it is Q8_0 or Q5_0; `None` for other types.
    pub fn from_qtensor(tensor: &QTensor) -> candle_core::Result<Option<Self>> {
        let (n, k) = tensor.shape().dims2()?;
        if !Self::takes(tensor.dtype()) {
            return Ok(None);
        }
        Self::from_gguf_data(tensor.dtype(), n, k, &tensor.data()?).map(Some)
    }

    /// Whether `dtype` runs on these kernels.
    pub fn takes(dtype: GgmlDType) -> bool {
        matches!(dtype, GgmlDType::Q8_0 | GgmlDType::Q5_0)
    }

    /// The (n × k) matrix of type `dtype` (see [`Self::takes`]) from its GGUF bytes.
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
        let tiles = match dtype {
            GgmlDType::Q8_0 => q8_tiles(data, n, nb)?,
            GgmlDType::Q5_0 if kernel() == Kernel::Vnni => q5_tiles(data, n, nb)?,
            GgmlDType::Q5_0 => q8_tiles(&q5_0_to_q8_0(data)?, n, nb)?,
            other => candle_core::bail!("{other:?} matrices are not supported here"),
        };
        Ok(Self {
            n,
            k,
            parts: vec![tiles],
        })
    }

    /// One matrix with the rows of all `parts` in order; the parts back if their widths differ
    /// or a part other than the last has a number of rows that is not a multiple of four.
    pub fn stack_or_return(parts: Vec<QuantMatrix>) -> Result<Self, Vec<QuantMatrix>> {
        let Some(k) = parts.first().map(|p| p.k) else {
            return Err(parts);
        };
        let last = parts.len() - 1;
        if parts
            .iter()
            .enumerate()
            .any(|(i, p)| p.k != k || (i < last && !p.n.is_multiple_of(ROWS)))
        {
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
        let xq = quantize_rows(x, m, self.k);
        let kernel = kernel();
        let out_ptr = SharedOut(out.as_mut_ptr());
        let tiles = n.div_ceil(ROWS);
        let col_groups = m.div_ceil(COLS);
        let work = |range: std::ops::Range<usize>| {
            let out_ptr = &out_ptr;
            for item in range {
                // Column-group major: a worker walks weight tiles for one group of activation
                // rows, so the weights stream and the activations stay in L1.
                let (cg, t) = (item / tiles, item % tiles);
                let cols = cg * COLS..(cg * COLS + COLS).min(m);
                let tile = self.tile(kernel, &xq, t, cols.clone());
                for (ci, c) in cols.enumerate() {
                    for (ri, r) in (t * ROWS..(t * ROWS + ROWS).min(n)).enumerate() {
                        // SAFETY: every (c, r) belongs to exactly one work item.
                        unsafe { *out_ptr.0.add(c * n + r) = tile[ri][ci] };
                    }
                }
            }
        };
        candle_core::utils::barrier_pool().execute_chunked(tiles * col_groups, work);
    }

    /// Dot products of the rows of tile `t` with activation rows `cols` (at most [`COLS`]).
    fn tile(
        &self,
        kernel: Kernel,
        xq: &QuantizedRows,
        mut t: usize,
        cols: std::ops::Range<usize>,
    ) -> [[f32; COLS]; ROWS] {
        let (k, nb) = (self.k, self.k / BLOCK);
        let mut part = &self.parts[0];
        for p in &self.parts {
            part = p;
            let count = p.count(nb);
            if t < count {
                break;
            }
            t -= count;
        }
        let blocks = t * nb..(t + 1) * nb;
        let nc = cols.len();
        let mut x = Activations {
            qs: [&[]; COLS],
            scales: [&[]; COLS],
            sums: [&[]; COLS],
        };
        for (i, c) in cols.enumerate() {
            x.qs[i] = &xq.qs[c * k..(c + 1) * k];
            x.scales[i] = &xq.scales[c * nb..(c + 1) * nb];
            x.sums[i] = &xq.sums[c * nb..(c + 1) * nb];
        }
        let mut tile = [[0f32; COLS]; ROWS];
        // SAFETY (kernels): `kernel()` checked the CPU features; the activations hold `nb`
        // whole blocks. Column counts are constants inside the kernels so that the
        // accumulators stay in registers.
        match (kernel, part) {
            #[cfg(target_arch = "x86_64")]
            (Kernel::Vnni, Tiles::Q8(v)) => unsafe {
                let b = &v[blocks];
                match nc {
                    1 => x86::q8_vnni::<1>(b, &x, &mut tile),
                    2 => x86::q8_vnni::<2>(b, &x, &mut tile),
                    3 => x86::q8_vnni::<3>(b, &x, &mut tile),
                    _ => x86::q8_vnni::<COLS>(b, &x, &mut tile),
                }
            },
            #[cfg(target_arch = "x86_64")]
            (Kernel::Vnni, Tiles::Q5(v)) => unsafe {
                let b = &v[blocks];
                match nc {
                    1 => x86::q5_vnni::<1>(b, &x, &mut tile),
                    2 => x86::q5_vnni::<2>(b, &x, &mut tile),
                    3 => x86::q5_vnni::<3>(b, &x, &mut tile),
                    _ => x86::q5_vnni::<COLS>(b, &x, &mut tile),
                }
            },
            #[cfg(target_arch = "x86_64")]
            (Kernel::Avx2, Tiles::Q8(v)) => unsafe {
                let b = &v[blocks];
                match nc {
                    1 => x86::q8_avx2::<1>(b, &x, &mut tile),
                    2 => x86::q8_avx2::<2>(b, &x, &mut tile),
                    3 => x86::q8_avx2::<3>(b, &x, &mut tile),
                    _ => x86::q8_avx2::<COLS>(b, &x, &mut tile),
                }
            },
            (_, Tiles::Q8(v)) => q8_portable(&v[blocks], &x, nc, &mut tile),
            (_, Tiles::Q5(v)) => q5_portable(&v[blocks], &x, nc, &mut tile),
        }
        tile
    }
}

fn q8_tiles(data: &[u8], n: usize, nb: usize) -> candle_core::Result<Tiles> {
    if data.len() != n * nb * Q8_0_BYTES {
        candle_core::bail!(
            "Q8_0 data of {} bytes for {n} rows of {nb} blocks",
            data.len()
        );
    }
    let empty = Q8Block {
        qs: [[128; BLOCK]; ROWS],
        d: [0.0; ROWS],
    };
    let mut blocks = vec![empty; n.div_ceil(ROWS) * nb];
    for (r, row) in data.chunks_exact(nb * Q8_0_BYTES).enumerate() {
        let (t, i) = (r / ROWS, r % ROWS);
        for (b, src) in row.chunks_exact(Q8_0_BYTES).enumerate() {
            let dst = &mut blocks[t * nb + b];
            dst.d[i] = f16_to_f32(u16::from_le_bytes([src[0], src[1]]));
            for (q, &s) in dst.qs[i].iter_mut().zip(&src[2..]) {
                *q = s ^ 0x80;
            }
        }
    }
    Ok(Tiles::Q8(blocks))
}

/// GGUF Q5_0 blocks as Q8_0 blocks holding exactly the same values: a Q5_0 block is 32 five-bit
/// `q` with one scale `d` (value `d · (q − 16)`); the Q8_0 block with the same `d` and `q − 16`
/// as i8 is the same vector.
fn q5_0_to_q8_0(data: &[u8]) -> candle_core::Result<Vec<u8>> {
    if !data.len().is_multiple_of(Q5_0_BYTES) {
        candle_core::bail!("Q5_0 data of {} bytes is not whole blocks", data.len());
    }
    let mut out = Vec::with_capacity(data.len() / Q5_0_BYTES * Q8_0_BYTES);
    for block in data.chunks_exact(Q5_0_BYTES) {
        let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
        let qs = &block[6..];
        out.extend_from_slice(&block[..2]);
        let mut values = [0u8; BLOCK];
        for j in 0..BLOCK / 2 {
            let low = (qs[j] & 0x0F) | ((((qh >> j) & 1) as u8) << 4);
            let high = (qs[j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
            values[j] = (low as i8 - 16) as u8;
            values[j + BLOCK / 2] = (high as i8 - 16) as u8;
        }
        out.extend_from_slice(&values);
    }
    Ok(out)
}

fn q5_tiles(data: &[u8], n: usize, nb: usize) -> candle_core::Result<Tiles> {
    if data.len() != n * nb * Q5_0_BYTES {
        candle_core::bail!(
            "Q5_0 data of {} bytes for {n} rows of {nb} blocks",
            data.len()
        );
    }
    let empty = Q5Block {
        qs: [[0; BLOCK / 2]; ROWS],
        qh: [0; ROWS],
        d: [0.0; ROWS],
    };
    let mut blocks = vec![empty; n.div_ceil(ROWS) * nb];
    for (r, row) in data.chunks_exact(nb * Q5_0_BYTES).enumerate() {
        let (t, i) = (r / ROWS, r % ROWS);
        for (b, src) in row.chunks_exact(Q5_0_BYTES).enumerate() {
            let dst = &mut blocks[t * nb + b];
            dst.d[i] = f16_to_f32(u16::from_le_bytes([src[0], src[1]]));
            dst.qh[i] = u32::from_le_bytes([src[2], src[3], src[4], src[5]]);
            dst.qs[i].copy_from_slice(&src[6..]);
        }
    }
    Ok(Tiles::Q5(blocks))
}

/// Up to [`COLS`] quantized activation rows of one tile.
struct Activations<'a> {
    qs: [&'a [i8]; COLS],
    scales: [&'a [f32]; COLS],
    sums: [&'a [i32]; COLS],
}

struct SharedOut(*mut f32);
// SAFETY: workers write disjoint elements (see `matmul`).
unsafe impl Sync for SharedOut {}

fn quantize_rows(x: &[f32], m: usize, k: usize) -> QuantizedRows {
    let nb = k / BLOCK;
    let mut qs = vec![0i8; m * k];
    let mut scales = vec![0f32; m * nb];
    let mut sums = vec![0i32; m * nb];
    for ((block, q), (scale, sum)) in x
        .chunks_exact(BLOCK)
        .zip(qs.chunks_exact_mut(BLOCK))
        .zip(scales.iter_mut().zip(sums.iter_mut()))
    {
        let amax = block.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        for (q, v) in q.iter_mut().zip(block) {
            *q = (v * id).round() as i8;
            *sum += *q as i32;
        }
        // llama.cpp keeps the activation scale as f16.
        *scale = f16_to_f32(f32_to_f16(d));
    }
    QuantizedRows { qs, scales, sums }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    #[cfg(target_arch = "x86_64")]
    Vnni,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Portable,
}

/// Whether products are summed with AVX2 alone (whose per-lane float rounding differs from
/// the VNNI and portable kernels'; see `qwen_greedy_fim_matches_llama_cpp`).
#[cfg(test)]
pub(crate) fn uses_avx2_kernel() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        kernel() == Kernel::Avx2
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

fn kernel() -> Kernel {
    static KERNEL: OnceLock<Kernel> = OnceLock::new();
    *KERNEL.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512vnni")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
            {
                return Kernel::Vnni;
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                return Kernel::Avx2;
            }
        }
        Kernel::Portable
    })
}

fn q8_portable(blocks: &[Q8Block], x: &Activations, nc: usize, tile: &mut [[f32; COLS]; ROWS]) {
    for (b, block) in blocks.iter().enumerate() {
        for ci in 0..nc {
            let xb = &x.qs[ci][b * BLOCK..(b + 1) * BLOCK];
            for r in 0..ROWS {
                let dot: i32 = block.qs[r]
                    .iter()
                    .zip(xb)
                    .map(|(&w, &x)| (w as i32 - 128) * x as i32)
                    .sum();
                tile[r][ci] += block.d[r] * x.scales[ci][b] * dot as f32;
            }
        }
    }
}

fn q5_portable(blocks: &[Q5Block], x: &Activations, nc: usize, tile: &mut [[f32; COLS]; ROWS]) {
    for (b, block) in blocks.iter().enumerate() {
        for ci in 0..nc {
            let xb = &x.qs[ci][b * BLOCK..(b + 1) * BLOCK];
            for r in 0..ROWS {
                let dot: i32 = (0..BLOCK)
                    .map(|j| {
                        let nibble = (block.qs[r][j % 16] >> (4 * (j / 16))) & 0x0F;
                        let high = ((block.qh[r] >> j) & 1) as u8;
                        ((nibble | (high << 4)) as i32 - 16) * xb[j] as i32
                    })
                    .sum();
                tile[r][ci] += block.d[r] * x.scales[ci][b] * dot as f32;
            }
        }
    }
}

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
    /// kernel against the portable one.
    fn check(matrix: &QuantMatrix, dequantized: &[Vec<f32>], m: usize) {
        let (n, k) = (matrix.rows(), matrix.columns());
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 104729) % 199) as f32 / 50.0 - 2.0)
            .collect();
        let mut out = vec![0f32; m * n];
        matrix.matmul(&x, m, &mut out);
        let xq = quantize_rows(&x, m, k);
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
        for t in 0..n.div_ceil(ROWS) {
            for c0 in (0..m).step_by(COLS) {
                let cols = c0..(c0 + COLS).min(m);
                let fast = matrix.tile(kernel(), &xq, t, cols.clone());
                let slow = matrix.tile(Kernel::Portable, &xq, t, cols);
                for (f, s) in fast.iter().flatten().zip(slow.iter().flatten()) {
                    assert!((f - s).abs() <= 1e-3 * s.abs().max(1.0), "{f} vs {s}");
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
        (QuantMatrix::from_qtensor(&q).unwrap().unwrap(), dequantized)
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
            ] {
                let (matrix, dequantized) = quantized(n, k, dtype);
                check(&matrix, &dequantized, m);
            }
        }
    }

    #[test]
    fn stacked_parts_of_mixed_types() {
        let (q, mut rows) = quantized(8, 64, GgmlDType::Q5_0);
        let (v, more) = quantized(6, 64, GgmlDType::Q8_0);
        rows.extend(more);
        let stacked = QuantMatrix::stack_or_return(vec![q, v]).ok().unwrap();
        assert_eq!(stacked.rows(), 14);
        check(&stacked, &rows, 1);
        check(&stacked, &rows, 6);
        let (odd, _) = quantized(6, 64, GgmlDType::Q8_0);
        let (last, _) = quantized(4, 64, GgmlDType::Q8_0);
        assert_eq!(
            QuantMatrix::stack_or_return(vec![odd, last])
                .err()
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn q5_0_widens_to_q8_0_without_loss() {
        let q5 = QTensor::quantize(&weights(4, 64), GgmlDType::Q5_0).unwrap();
        let q8 = q5_0_to_q8_0(&q5.data().unwrap()).unwrap();
        let q8 = candle_core::quantized::ggml_file::qtensor_from_ggml(
            GgmlDType::Q8_0,
            &q8,
            vec![4, 64],
            &Device::Cpu,
        )
        .unwrap();
        let dequantize = |t: &QTensor| {
            t.dequantize(&Device::Cpu)
                .unwrap()
                .to_vec2::<f32>()
                .unwrap()
        };
        assert_eq!(dequantize(&q5), dequantize(&q8));
    }

    #[test]
    fn other_types_are_not_taken() {
        let q = QTensor::quantize(&weights(4, 256), GgmlDType::Q4K).unwrap();
        assert!(QuantMatrix::from_qtensor(&q).unwrap().is_none());
    }
}
