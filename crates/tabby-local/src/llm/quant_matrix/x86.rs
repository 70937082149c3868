//! The AVX-512 kernels of `quant_matrix` (VNNI over 8-bit and widened K-quant groups, the
//! widening of 4-, 5- and 6-bit groups, the quantization of activations); `avx2` has the same
//! for CPUs without AVX-512.

// Kernels index rows and columns of several parallel arrays at once.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::kquants::{KBlock, KBlocks, Q4Block, Q6Block};
use super::{
    Activations, BLOCK, Blocks, COLS, GROUP, Q5Block, QuantizedRows, STEPS, U8Block, block_scale,
};

pub(super) mod avx2;

/// The 4 activation bytes of step `s` of block `b` of `row`, as one 32-bit lane value.
///
/// # Safety
/// `row` holds block `b`.
#[inline(always)]
pub(super) unsafe fn step_bytes(row: &[i8], b: usize, s: usize) -> i32 {
    unsafe { std::ptr::read_unaligned(row.as_ptr().add(b * BLOCK + 4 * s) as *const i32) }
}

/// Adds the products of steps `steps` of a block's 16 rows (`qs`, 8-bit unsigned) with block
/// `b` of `NC` activation rows to `dot`: one `vpdpbusd` per step and row.
///
/// # Safety
/// The CPU must support AVX512F, AVX512BW and AVX512-VNNI; the first `NC` activation rows
/// hold block `b`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn step_dots<const NC: usize>(
    qs: &[[[u8; 4]; GROUP]; STEPS],
    x: &Activations,
    b: usize,
    steps: std::ops::Range<usize>,
    dot: &mut [__m512i; NC],
) {
    for s in steps {
        unsafe {
            let wv = _mm512_loadu_si512(qs[s].as_ptr() as *const __m512i);
            for c in 0..NC {
                let xv = _mm512_set1_epi32(step_bytes(x.qs[c], b, s));
                dot[c] = _mm512_dpbusd_epi32(dot[c], wv, xv);
            }
        }
    }
}

/// Σ_b (d_w·d_x)·Σ w·x for the 16 rows of a group and `NC` activation rows.
///
/// # Safety
/// The CPU must support AVX512F, AVX512BW and AVX512-VNNI; the first `NC` activation rows
/// hold `w.blocks.len()` whole blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn u8_vnni<const NC: usize>(
    w: Blocks,
    x: &Activations,
    out: &mut [[f32; GROUP]; COLS],
) {
    let mut acc = [_mm512_setzero_ps(); NC];
    for (b, block) in w.blocks.iter().enumerate() {
        unsafe {
            // Σ(w + offset)·x − offset·Σx = Σw·x, exactly.
            let mut dot: [__m512i; NC] =
                std::array::from_fn(|c| _mm512_set1_epi32(-w.offset * x.sums[c][b]));
            step_dots(&block.qs, x, b, 0..STEPS, &mut dot);
            let dw = _mm512_cvtph_ps(_mm256_loadu_si256(block.d.as_ptr() as *const __m256i));
            for c in 0..NC {
                let scale = _mm512_mul_ps(dw, _mm512_set1_ps(*x.scales[c].get_unchecked(b)));
                acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_cvtepi32_ps(dot[c]), scale));
            }
        }
    }
    for c in 0..NC {
        unsafe { _mm512_storeu_ps(out[c].as_mut_ptr(), acc[c]) };
    }
}

/// The products of a widened K-quant group's 16 rows with `NC` activation rows, as
/// `kquants::k_portable` computes them: per block `(s·d_x)·Σ q·x − min·(d_x·Σx)`, or with
/// `SPLIT` per half `(s_h·d_x)·(Σ_h q·x − offset·Σ_h x)`, each term fused into its sum.
///
/// # Safety
/// The CPU must support AVX512F, AVX512BW and AVX512-VNNI (and so FMA); the first `NC`
/// activation rows hold `w.blocks.len()` whole blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,fma")]
pub(super) unsafe fn k_vnni<const NC: usize, const SPLIT: bool>(
    w: KBlocks,
    x: &Activations,
    out: &mut [[f32; GROUP]; COLS],
) {
    let mut acc = [_mm512_setzero_ps(); NC];
    for (b, block) in w.blocks.iter().enumerate() {
        unsafe {
            if SPLIT {
                for h in 0..2 {
                    let mut dot: [__m512i; NC] = std::array::from_fn(|c| {
                        let lo = *x.halves[c].get_unchecked(b);
                        let sum = if h == 0 {
                            lo
                        } else {
                            *x.sums[c].get_unchecked(b) - lo
                        };
                        _mm512_set1_epi32(-w.offset * sum)
                    });
                    step_dots(
                        &block.qs,
                        x,
                        b,
                        STEPS / 2 * h..STEPS / 2 * (h + 1),
                        &mut dot,
                    );
                    let sh = _mm512_load_ps(block.scales[h].as_ptr());
                    for c in 0..NC {
                        let scale =
                            _mm512_mul_ps(sh, _mm512_set1_ps(*x.scales[c].get_unchecked(b)));
                        acc[c] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(dot[c]), acc[c]);
                    }
                }
            } else {
                let mut dot: [__m512i; NC] = std::array::from_fn(|c| {
                    _mm512_set1_epi32(-w.offset * *x.sums[c].get_unchecked(b))
                });
                step_dots(&block.qs, x, b, 0..STEPS, &mut dot);
                let s0 = _mm512_load_ps(block.scales[0].as_ptr());
                let mins = _mm512_load_ps(block.mins.as_ptr());
                for c in 0..NC {
                    let dx = *x.scales[c].get_unchecked(b);
                    let scale = _mm512_mul_ps(s0, _mm512_set1_ps(dx));
                    acc[c] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(dot[c]), acc[c]);
                    let dx_sum = _mm512_set1_ps(dx * *x.sums[c].get_unchecked(b) as f32);
                    acc[c] = _mm512_fnmadd_ps(mins, dx_sum, acc[c]);
                }
            }
        }
    }
    for c in 0..NC {
        unsafe { _mm512_storeu_ps(out[c].as_mut_ptr(), acc[c]) };
    }
}

/// Q4_K blocks widened to 8 bits.
///
/// # Safety
/// The CPU must support AVX512F and AVX512BW; `dst` is at least as long as `src`.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn widen_q4_avx512(src: &[Q4Block], dst: &mut [KBlock]) {
    let low = _mm512_set1_epi8(0x0F);
    for (s, d) in src.iter().zip(dst.iter_mut()) {
        for p in 0..STEPS / 2 {
            unsafe {
                let packed = _mm512_loadu_si512(s.nibbles[p].as_ptr() as *const __m512i);
                let lo = _mm512_and_si512(packed, low);
                let hi = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low);
                _mm512_storeu_si512(d.qs[p].as_mut_ptr() as *mut __m512i, lo);
                _mm512_storeu_si512(d.qs[p + 4].as_mut_ptr() as *mut __m512i, hi);
            }
        }
        d.scales[0] = s.scales;
        d.mins = s.mins;
    }
}

/// Q6_K blocks widened to 8 bits.
///
/// # Safety
/// The CPU must support AVX512F and AVX512BW; `dst` is at least as long as `src`.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn widen_q6_avx512(src: &[Q6Block], dst: &mut [KBlock]) {
    let low = _mm512_set1_epi8(0x0F);
    let (bit4, bit5) = (_mm512_set1_epi8(16), _mm512_set1_epi8(32));
    for (s, d) in src.iter().zip(dst.iter_mut()) {
        for p in 0..STEPS / 2 {
            unsafe {
                let packed = _mm512_loadu_si512(s.nibbles[p].as_ptr() as *const __m512i);
                let lo = _mm512_and_si512(packed, low);
                let hi = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low);
                let lo = _mm512_mask_add_epi8(lo, s.high[0][p], lo, bit4);
                let lo = _mm512_mask_add_epi8(lo, s.high[1][p], lo, bit5);
                let hi = _mm512_mask_add_epi8(hi, s.high[0][p + 4], hi, bit4);
                let hi = _mm512_mask_add_epi8(hi, s.high[1][p + 4], hi, bit5);
                _mm512_storeu_si512(d.qs[p].as_mut_ptr() as *mut __m512i, lo);
                _mm512_storeu_si512(d.qs[p + 4].as_mut_ptr() as *mut __m512i, hi);
            }
        }
        d.scales = s.scales;
        d.mins = [0.0; GROUP];
    }
}

/// Q5_0 blocks widened to 8 bits (`q` = weight + 16).
///
/// # Safety
/// The CPU must support AVX512F and AVX512BW; `dst` is at least as long as `src`.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn widen_q5_avx512(src: &[Q5Block], dst: &mut [U8Block]) {
    let low = _mm512_set1_epi8(0x0F);
    let sixteen = _mm512_set1_epi8(16);
    for (s, d) in src.iter().zip(dst.iter_mut()) {
        for p in 0..STEPS / 2 {
            unsafe {
                let packed = _mm512_loadu_si512(s.nibbles[p].as_ptr() as *const __m512i);
                let lo = _mm512_and_si512(packed, low);
                let hi = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low);
                let lo = _mm512_mask_add_epi8(lo, s.high[p], lo, sixteen);
                let hi = _mm512_mask_add_epi8(hi, s.high[p + 4], hi, sixteen);
                _mm512_storeu_si512(d.qs[p].as_mut_ptr() as *mut __m512i, lo);
                _mm512_storeu_si512(d.qs[p + 4].as_mut_ptr() as *mut __m512i, hi);
            }
        }
        d.d = s.d;
    }
}

/// Quantizes `x` block by block into `rows` (sized for it), as the portable code does.
///
/// # Safety
/// The CPU must support AVX512F and AVX512BW.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn quantize_avx512(x: &[f32], rows: &mut QuantizedRows) {
    for (block, q, scale, sum, half) in rows.blocks(x) {
        unsafe {
            let a = _mm512_loadu_ps(block.as_ptr());
            let b = _mm512_loadu_ps(block.as_ptr().add(16));
            let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
            let (d, id) = block_scale(amax);
            let id = _mm512_set1_ps(id);
            let qa = _mm512_cvtps_epi32(round_away(_mm512_mul_ps(a, id)));
            let qb = _mm512_cvtps_epi32(round_away(_mm512_mul_ps(b, id)));
            _mm_storeu_si128(q.as_mut_ptr() as *mut __m128i, _mm512_cvtepi32_epi8(qa));
            _mm_storeu_si128(
                q.as_mut_ptr().add(16) as *mut __m128i,
                _mm512_cvtepi32_epi8(qb),
            );
            *half = _mm512_reduce_add_epi32(qa);
            *sum = *half + _mm512_reduce_add_epi32(qb);
            *scale = d;
        }
    }
}

/// `f32::round` per lane: to nearest, ties away from zero.
#[target_feature(enable = "avx512f")]
fn round_away(y: __m512) -> __m512 {
    let t = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(y);
    // Exact: |y − t| < 1.
    let half_or_more =
        _mm512_cmp_ps_mask::<_CMP_GE_OQ>(_mm512_abs_ps(_mm512_sub_ps(y, t)), _mm512_set1_ps(0.5));
    let sign = _mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32(i32::MIN));
    let one = _mm512_castsi512_ps(_mm512_or_si512(_mm512_set1_epi32(0x3F80_0000), sign));
    _mm512_mask_add_ps(t, half_or_more, t, one)
}
