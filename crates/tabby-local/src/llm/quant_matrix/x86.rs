//! The x86-64 kernels of `quant_matrix`: AVX512-VNNI for 8- and 5-bit tiles, AVX2 for 8-bit.

// Kernels index rows and columns of several parallel arrays at once.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{Activations, BLOCK, COLS, Q5Block, Q8Block, ROWS};

/// Bytes ahead of the block in use that the kernels ask the memory system for: a tile is
/// read once per token, straight from DRAM.
const PREFETCH_BYTES: usize = 1024;

#[target_feature(enable = "avx2,fma")]
fn hsum(v: __m256) -> f32 {
    let hi = _mm256_extractf128_ps(v, 1);
    let s = _mm_add_ps(_mm256_castps256_ps128(v), hi);
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Asks for the cache lines `PREFETCH_BYTES` past `block` (which spans `size` bytes).
#[target_feature(enable = "avx2,fma")]
fn prefetch<T>(block: &T, size: usize) {
    // Past the end of the slice is fine: a prefetch never faults.
    let p = (block as *const T as *const i8).wrapping_add(PREFETCH_BYTES);
    let mut off = 0;
    while off < size {
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off));
        off += 64;
    }
}

#[target_feature(enable = "avx2,fma")]
fn store<const NC: usize>(acc: [[__m256; NC]; ROWS], tile: &mut [[f32; COLS]; ROWS]) {
    for r in 0..ROWS {
        for ci in 0..NC {
            tile[r][ci] = hsum(acc[r][ci]);
        }
    }
}

/// Σ_b d_w·d_x·Σ w·x over 8-bit tiles, for `NC` activation rows.
///
/// # Safety
/// The CPU must support AVX512-VNNI, AVX512-VL, AVX2 and FMA; the first `NC` activation
/// rows hold `blocks.len()` whole blocks.
#[target_feature(enable = "avx512vnni,avx512vl,avx512f,avx2,fma")]
pub(super) unsafe fn q8_vnni<const NC: usize>(
    blocks: &[Q8Block],
    x: &Activations,
    tile: &mut [[f32; COLS]; ROWS],
) {
    let mut acc = [[_mm256_setzero_ps(); NC]; ROWS];
    for (b, block) in blocks.iter().enumerate() {
        prefetch(block, size_of::<Q8Block>());
        let w: [__m256i; ROWS] = std::array::from_fn(|r| unsafe {
            _mm256_loadu_si256(block.qs[r].as_ptr() as *const __m256i)
        });
        for ci in 0..NC {
            unsafe {
                let xv = _mm256_loadu_si256(x.qs[ci].as_ptr().add(b * BLOCK) as *const __m256i);
                // Σ(w + 128)·x − 128·Σx, the correction spread over the 8 lanes.
                let bias = _mm256_set1_epi32(-16 * *x.sums[ci].get_unchecked(b));
                let dx = *x.scales[ci].get_unchecked(b);
                for r in 0..ROWS {
                    let dot = _mm256_dpbusd_epi32(bias, w[r], xv);
                    let scale = _mm256_set1_ps(block.d[r] * dx);
                    acc[r][ci] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[r][ci]);
                }
            }
        }
    }
    store(acc, tile);
}

/// The same over 5-bit tiles, unpacked in registers.
///
/// # Safety
/// As [`q8_vnni`], plus AVX512-BW.
#[target_feature(enable = "avx512vnni,avx512vl,avx512bw,avx512f,avx2,fma")]
pub(super) unsafe fn q5_vnni<const NC: usize>(
    blocks: &[Q5Block],
    x: &Activations,
    tile: &mut [[f32; COLS]; ROWS],
) {
    let low = _mm_set1_epi8(0x0F);
    let high_bit = _mm256_set1_epi8(0x10);
    let mut acc = [[_mm256_setzero_ps(); NC]; ROWS];
    for (b, block) in blocks.iter().enumerate() {
        prefetch(block, size_of::<Q5Block>());
        // Unsigned 0..=31, the weight plus 16.
        let w: [__m256i; ROWS] = std::array::from_fn(|r| unsafe {
            let packed = _mm_loadu_si128(block.qs[r].as_ptr() as *const __m128i);
            let lo = _mm_and_si128(packed, low);
            let hi = _mm_and_si128(_mm_srli_epi16(packed, 4), low);
            let nibbles = _mm256_set_m128i(hi, lo);
            let bits = _mm256_maskz_mov_epi8(block.qh[r], high_bit);
            _mm256_or_si256(nibbles, bits)
        });
        for ci in 0..NC {
            unsafe {
                let xv = _mm256_loadu_si256(x.qs[ci].as_ptr().add(b * BLOCK) as *const __m256i);
                // Σ(w + 16)·x − 16·Σx, the correction spread over the 8 lanes.
                let bias = _mm256_set1_epi32(-2 * *x.sums[ci].get_unchecked(b));
                let dx = *x.scales[ci].get_unchecked(b);
                for r in 0..ROWS {
                    let dot = _mm256_dpbusd_epi32(bias, w[r], xv);
                    let scale = _mm256_set1_ps(block.d[r] * dx);
                    acc[r][ci] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[r][ci]);
                }
            }
        }
    }
    store(acc, tile);
}

/// 8-bit tiles with AVX2 only: `maddubs` needs an unsigned operand small enough that a pair
/// sum fits i16, so weights go back to signed and their sign moves onto the activations.
///
/// # Safety
/// The CPU must support AVX2 and FMA; the first `NC` activation rows hold `blocks.len()`
/// whole blocks.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn q8_avx2<const NC: usize>(
    blocks: &[Q8Block],
    x: &Activations,
    tile: &mut [[f32; COLS]; ROWS],
) {
    let flip = _mm256_set1_epi8(-128);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); NC]; ROWS];
    for (b, block) in blocks.iter().enumerate() {
        prefetch(block, size_of::<Q8Block>());
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
    store(acc, tile);
}
