//! Matrix products with 8-bit weights in blocks of 32 (GGUF's Q8_0, and Q5_0 which converts to
//! it without loss), the type of most of Qwen2.5-Coder-0.5B's matrices.
//!
//! candle multiplies Q8_0 with AVX2 one block at a time and converts two f16 scales per block
//! through a function call; its faster repacked kernels need widths that are multiples of 256,
//! which 896 is not. Here weights are kept as `w + 128` (u8) with f32 scales, activations are
//! quantized per 32-block to i8 as llama.cpp does for Q8_0, and one AVX512-VNNI `vpdpbusd`
//! multiplies 32 pairs; an AVX2 path and a portable one cover other CPUs. Several weight rows
//! and, while reading a prompt, several activation rows share each load.
//!
//! The arithmetic per block is the same integer dot product times the two scales as llama.cpp's
//! `q8_0 · q8_0`, so results match up to the order of float additions.

use std::sync::OnceLock;

use candle_core::quantized::{GgmlDType, QTensor};

/// Values per quantization block.
const BLOCK: usize = 32;
/// Bytes of a GGUF Q8_0 block: f16 scale + 32 × i8.
const Q8_0_BYTES: usize = 34;
/// Weight rows computed together.
const ROWS: usize = 4;
/// Activation rows computed together while reading a prompt.
const COLS: usize = 4;

/// Four weight rows' worth of one 32-block: the unit the kernels stream through, so that a
/// tile of rows is one sequential read (scales included) for the hardware prefetcher.
#[repr(C)]
#[derive(Clone, Copy)]
struct TileBlock {
    /// `w + 128` of each row.
    qs: [[u8; BLOCK]; ROWS],
    /// The scale of each row.
    d: [f32; ROWS],
}

/// An (n × k) weight matrix, row `r` producing output `r`, stored in tiles of [`ROWS`] rows:
/// tile `t`, block `b` at `blocks[t * nb + b]`. Rows past `n` are zero.
pub struct Int8Matrix {
    n: usize,
    k: usize,
    blocks: Vec<TileBlock>,
}

/// Activations quantized for [`Int8Matrix::matmul`]: per 32-block an i8 run, its scale, and
/// `-16 · Σq`: started from in each of the 8 lanes of a VNNI product, it removes the weights'
/// +128 offset (8 · 16 · Σq = 128 · Σq) at no extra cost.
struct QuantizedRows {
    qs: Vec<i8>,
    scales: Vec<f32>,
    offsets: Vec<i32>,
}

impl Int8Matrix {
    /// The matrix of `tensor` if it is Q8_0 (Q5_0 must be converted first); `None` otherwise.
    pub fn from_qtensor(tensor: &QTensor) -> candle_core::Result<Option<Self>> {
        if tensor.dtype() != GgmlDType::Q8_0 {
            return Ok(None);
        }
        let (n, k) = tensor.shape().dims2()?;
        if !k.is_multiple_of(BLOCK) {
            return Ok(None);
        }
        let data = tensor.data()?;
        let nb = k / BLOCK;
        if data.len() != n * nb * Q8_0_BYTES {
            candle_core::bail!("Q8_0 tensor of {} bytes for {n}×{k}", data.len());
        }
        let empty = TileBlock {
            qs: [[128; BLOCK]; ROWS],
            d: [0.0; ROWS],
        };
        let tiles = n.div_ceil(ROWS);
        let mut blocks = vec![empty; tiles * nb];
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
        Ok(Some(Self { n, k, blocks }))
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
        t: usize,
        cols: std::ops::Range<usize>,
    ) -> [[f32; COLS]; ROWS] {
        let (k, nb) = (self.k, self.k / BLOCK);
        let blocks = &self.blocks[t * nb..(t + 1) * nb];
        let nc = cols.len();
        let mut x = Activations {
            qs: [&[]; COLS],
            scales: [&[]; COLS],
            offsets: [&[]; COLS],
        };
        for (i, c) in cols.enumerate() {
            x.qs[i] = &xq.qs[c * k..(c + 1) * k];
            x.scales[i] = &xq.scales[c * nb..(c + 1) * nb];
            x.offsets[i] = &xq.offsets[c * nb..(c + 1) * nb];
        }
        let mut tile = [[0f32; COLS]; ROWS];
        match kernel {
            // SAFETY: `kernel()` checked the CPU features; activations are `nb` whole blocks.
            // The column count is a constant inside the kernels so that the accumulators
            // stay in registers.
            #[cfg(target_arch = "x86_64")]
            Kernel::Vnni => unsafe {
                match nc {
                    1 => x86::tile_vnni::<1>(blocks, &x, &mut tile),
                    2 => x86::tile_vnni::<2>(blocks, &x, &mut tile),
                    3 => x86::tile_vnni::<3>(blocks, &x, &mut tile),
                    _ => x86::tile_vnni::<COLS>(blocks, &x, &mut tile),
                }
            },
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe {
                match nc {
                    1 => x86::tile_avx2::<1>(blocks, &x, &mut tile),
                    2 => x86::tile_avx2::<2>(blocks, &x, &mut tile),
                    3 => x86::tile_avx2::<3>(blocks, &x, &mut tile),
                    _ => x86::tile_avx2::<COLS>(blocks, &x, &mut tile),
                }
            },
            Kernel::Portable => tile_portable(blocks, &x, nc, &mut tile),
        }
        tile
    }
}

/// Up to [`COLS`] quantized activation rows of one tile.
struct Activations<'a> {
    qs: [&'a [i8]; COLS],
    scales: [&'a [f32]; COLS],
    offsets: [&'a [i32]; COLS],
}

struct SharedOut(*mut f32);
// SAFETY: workers write disjoint elements (see `matmul`).
unsafe impl Sync for SharedOut {}

fn quantize_rows(x: &[f32], m: usize, k: usize) -> QuantizedRows {
    let nb = k / BLOCK;
    let mut qs = vec![0i8; m * k];
    let mut scales = vec![0f32; m * nb];
    let mut offsets = vec![0i32; m * nb];
    for ((block, q), (scale, offset)) in x
        .chunks_exact(BLOCK)
        .zip(qs.chunks_exact_mut(BLOCK))
        .zip(scales.iter_mut().zip(offsets.iter_mut()))
    {
        let amax = block.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = 0i32;
        for (q, v) in q.iter_mut().zip(block) {
            *q = (v * id).round() as i8;
            sum += *q as i32;
        }
        // llama.cpp keeps the activation scale as f16.
        *scale = f16_to_f32(f32_to_f16(d));
        *offset = -16 * sum;
    }
    QuantizedRows {
        qs,
        scales,
        offsets,
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

fn kernel() -> Kernel {
    static KERNEL: OnceLock<Kernel> = OnceLock::new();
    *KERNEL.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512vnni")
                && is_x86_feature_detected!("avx512vl")
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

fn tile_portable(blocks: &[TileBlock], x: &Activations, nc: usize, tile: &mut [[f32; COLS]; ROWS]) {
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

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{Activations, BLOCK, COLS, ROWS, TileBlock};

    /// Blocks ahead of the one in use that the kernels ask the memory system for: the rows of a
    /// tile are read once per token, straight from DRAM.
    const PREFETCH_AHEAD: usize = 8;

    #[target_feature(enable = "avx2,fma")]
    fn hsum(v: __m256) -> f32 {
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(_mm256_castps256_ps128(v), hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    #[target_feature(enable = "avx2,fma")]
    fn prefetch(blocks: &[TileBlock], b: usize) {
        // Past the end is fine: a prefetch never faults, and the next tile follows in memory.
        let p = blocks.as_ptr().wrapping_add(b + PREFETCH_AHEAD) as *const i8;
        _mm_prefetch::<_MM_HINT_T0>(p);
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(128));
    }

    /// Σ_b d_w·d_x·Σ w·x for every (row, column) of the tile.
    ///
    /// # Safety
    /// The CPU must support AVX512-VNNI, AVX512-VL, AVX2 and FMA; the first `NC` activation
    /// rows hold `blocks.len()` whole blocks.
    #[target_feature(enable = "avx512vnni,avx512vl,avx512f,avx2,fma")]
    pub(super) unsafe fn tile_vnni<const NC: usize>(
        blocks: &[TileBlock],
        x: &Activations,
        tile: &mut [[f32; COLS]; ROWS],
    ) {
        let mut acc = [[_mm256_setzero_ps(); NC]; ROWS];
        for (b, block) in blocks.iter().enumerate() {
            prefetch(blocks, b);
            let w: [__m256i; ROWS] = std::array::from_fn(|r| unsafe {
                _mm256_loadu_si256(block.qs[r].as_ptr() as *const __m256i)
            });
            for ci in 0..NC {
                unsafe {
                    let xq = x.qs[ci].as_ptr().add(b * BLOCK);
                    let xv = _mm256_loadu_si256(xq as *const __m256i);
                    let bias = _mm256_set1_epi32(*x.offsets[ci].get_unchecked(b));
                    let dx = *x.scales[ci].get_unchecked(b);
                    for r in 0..ROWS {
                        let dot = _mm256_dpbusd_epi32(bias, w[r], xv);
                        let scale = _mm256_set1_ps(block.d[r] * dx);
                        acc[r][ci] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[r][ci]);
                    }
                }
            }
        }
        for r in 0..ROWS {
            for ci in 0..NC {
                tile[r][ci] = hsum(acc[r][ci]);
            }
        }
    }

    /// The same products with AVX2 only: `maddubs` needs an unsigned operand of at most 127·2
    /// per pair sum, so weights go back to signed and the sign moves onto the activations.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA; the first `NC` activation rows hold `blocks.len()`
    /// whole blocks.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tile_avx2<const NC: usize>(
        blocks: &[TileBlock],
        x: &Activations,
        tile: &mut [[f32; COLS]; ROWS],
    ) {
        let flip = _mm256_set1_epi8(-128);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); NC]; ROWS];
        for (b, block) in blocks.iter().enumerate() {
            prefetch(blocks, b);
            for r in 0..ROWS {
                unsafe {
                    let wv = _mm256_loadu_si256(block.qs[r].as_ptr() as *const __m256i);
                    let wv = _mm256_xor_si256(wv, flip);
                    let aw = _mm256_sign_epi8(wv, wv);
                    for ci in 0..NC {
                        let xq = x.qs[ci].as_ptr().add(b * BLOCK);
                        let xv = _mm256_loadu_si256(xq as *const __m256i);
                        let sx = _mm256_sign_epi8(xv, wv);
                        let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones);
                        let scale = _mm256_set1_ps(block.d[r] * *x.scales[ci].get_unchecked(b));
                        acc[r][ci] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[r][ci]);
                    }
                }
            }
        }
        for r in 0..ROWS {
            for ci in 0..NC {
                tile[r][ci] = hsum(acc[r][ci]);
            }
        }
    }
}

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

/// Single → IEEE half, rounding to nearest even (for non-negative finite scales).
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
        for h in [0u16, 1, 0x3C00, 0x3555, 0x7BFF, 0x0400, 0x03FF, 0x8001] {
            assert_eq!(f32_to_f16(f16_to_f32(h).abs()), h & 0x7FFF, "{h:#x}");
        }
        assert_eq!(f16_to_f32(0x3C00), 1.0);
        assert_eq!(f32_to_f16(1.0 + 1.0 / 4096.0), 0x3C00); // below half an ulp: down
        assert_eq!(f32_to_f16(65504.0), 0x7BFF);
    }

    fn check(m: usize, n: usize, k: usize) {
        let w: Vec<f32> = (0..n * k).map(|i| ((i * 7919) % 255) as f32 / 64.0 - 2.0).collect();
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 104729) % 199) as f32 / 50.0 - 2.0).collect();
        let wt = Tensor::from_vec(w.clone(), (n, k), &Device::Cpu).unwrap();
        let q = QTensor::quantize(&wt, GgmlDType::Q8_0).unwrap();
        let matrix = Int8Matrix::from_qtensor(&q).unwrap().unwrap();
        let mut out = vec![0f32; m * n];
        matrix.matmul(&x, m, &mut out);
        // Against f32 products of the dequantized weights and activations.
        let wd = q.dequantize(&Device::Cpu).unwrap().to_vec2::<f32>().unwrap();
        let xq = quantize_rows(&x, m, k);
        let xd: Vec<f32> = (0..m * k)
            .map(|i| xq.qs[i] as f32 * xq.scales[i / BLOCK])
            .collect();
        for c in 0..m {
            for r in 0..n {
                let exact: f32 = (0..k).map(|i| wd[r][i] * xd[c * k + i]).sum();
                let got = out[c * n + r];
                assert!(
                    (got - exact).abs() <= 1e-4 * exact.abs().max(1.0),
                    "m={m} n={n} k={k} ({c},{r}): {got} vs {exact}"
                );
                // And close to the unquantized product.
                let float: f32 = (0..k).map(|i| wd[r][i] * x[c * k + i]).sum();
                assert!((got - float).abs() <= 0.01 * k as f32, "{got} vs {float}");
            }
        }
        // Every kernel gives the same numbers as the portable one.
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

    #[test]
    fn matmul_matches_f32_reference() {
        check(1, 8, 64);
        check(1, 7, 96);
        check(3, 9, 32);
        check(5, 12, 896);
        check(9, 16, 128);
    }
}
