//! The kernels of `quant_matrix` for x86-64 CPUs with AVX2 but no AVX-512 (AMD before Zen 4,
//! Intel's client cores since Alder Lake): the same layout and the same results, bit for bit,
//! as the portable code, 8 rows per register.
//!
//! AVX2 has no `vpdpbusd`; `vpmaddubsw` multiplies unsigned by signed bytes and adds pairs into
//! saturating i16, then `vpmaddwd` with ones widens to i32. Widened Q5_0, Q4_K and Q6_K values
//! are small (under 32, 16 and 64), so their products are summed over several steps in i16
//! before widening, never reaching i16's limit: see [`unsigned_dots`]. Q8_0's values (0..255)
//! would saturate a pair, so they go back to signed and their sign moves onto the activations.

// Kernels index rows and columns of several parallel arrays at once.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::super::kquants::{KBlock, KBlocks, Q4Block, Q6Block};
use super::super::{
    Activations, Blocks, COLS, GROUP, Q5_OFFSET, Q5Block, QuantizedRows, STEPS, U8Block,
    block_scale,
};
use super::step_bytes;

/// 32 bytes, byte `i` all ones where bit `i` of `bits` is set, else zero.
#[target_feature(enable = "avx2")]
#[inline]
fn bit_bytes(bits: u32) -> __m256i {
    // Byte i takes byte i / 8 of `bits`, then keeps bit i % 8 of it.
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(bits as i32),
        _mm256_setr_epi64x(
            0,
            0x0101_0101_0101_0101,
            0x0202_0202_0202_0202,
            0x0303_0303_0303_0303,
        ),
    );
    // Byte j of each 8 has every bit but bit j.
    let others = _mm256_set1_epi64x(0x7FBF_DFEF_F7FB_FDFEu64 as i64);
    _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi8(-1))
}

/// Splits the 64 packed bytes of a step pair (`nibbles[p]`: low nibbles step `p`, high nibbles
/// step `p + 4`) into 8-bit values, adding `add(step, half)` (the high bits, as bytes) to each
/// 32-byte half, and stores them at `qs[p]` and `qs[p + 4]`.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn split_nibbles(
    nibbles: &[[[u8; 4]; GROUP]; STEPS / 2],
    qs: &mut [[[u8; 4]; GROUP]; STEPS],
    add: impl Fn(usize, usize) -> __m256i,
) {
    let low = _mm256_set1_epi8(0x0F);
    for p in 0..STEPS / 2 {
        for half in 0..2 {
            unsafe {
                let packed = _mm256_loadu_si256(
                    (nibbles[p].as_ptr() as *const u8).add(32 * half) as *const __m256i
                );
                let lo = _mm256_and_si256(packed, low);
                let hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low);
                let lo = _mm256_or_si256(lo, add(p, half));
                let hi = _mm256_or_si256(hi, add(p + 4, half));
                _mm256_storeu_si256(
                    (qs[p].as_mut_ptr() as *mut u8).add(32 * half) as *mut __m256i,
                    lo,
                );
                _mm256_storeu_si256(
                    (qs[p + 4].as_mut_ptr() as *mut u8).add(32 * half) as *mut __m256i,
                    hi,
                );
            }
        }
    }
}

/// The bytes of bit plane `plane` (a `u64` per step, bit `4r + t` for byte `[r][t]`) for half
/// `half` of a step, `value` where the bit is set.
#[target_feature(enable = "avx2")]
#[inline]
fn plane_bytes(plane: u64, half: usize, value: i8) -> __m256i {
    _mm256_and_si256(
        bit_bytes((plane >> (32 * half)) as u32),
        _mm256_set1_epi8(value),
    )
}

/// Q5_0 blocks widened to 8 bits (`q` = weight + 16).
///
/// # Safety
/// The CPU must support AVX2; `dst` is at least as long as `src`.
#[target_feature(enable = "avx2")]
pub(in super::super) unsafe fn widen_q5_avx2(src: &[Q5Block], dst: &mut [U8Block]) {
    for (s, d) in src.iter().zip(dst.iter_mut()) {
        unsafe {
            split_nibbles(&s.nibbles, &mut d.qs, |step, half| {
                plane_bytes(s.high[step], half, 16)
            })
        };
        d.d = s.d;
    }
}

/// Q4_K blocks widened to 8 bits.
///
/// # Safety
/// The CPU must support AVX2; `dst` is at least as long as `src`.
#[target_feature(enable = "avx2")]
pub(in super::super) unsafe fn widen_q4_avx2(src: &[Q4Block], dst: &mut [KBlock]) {
    for (s, d) in src.iter().zip(dst.iter_mut()) {
        unsafe { split_nibbles(&s.nibbles, &mut d.qs, |_, _| _mm256_setzero_si256()) };
        d.scales[0] = s.scales;
        d.mins = s.mins;
    }
}

/// Q6_K blocks widened to 8 bits.
///
/// # Safety
/// The CPU must support AVX2; `dst` is at least as long as `src`.
#[target_feature(enable = "avx2")]
pub(in super::super) unsafe fn widen_q6_avx2(src: &[Q6Block], dst: &mut [KBlock]) {
    for (s, d) in src.iter().zip(dst.iter_mut()) {
        unsafe {
            split_nibbles(&s.nibbles, &mut d.qs, |step, half| {
                _mm256_or_si256(
                    plane_bytes(s.high[0][step], half, 16),
                    plane_bytes(s.high[1][step], half, 32),
                )
            })
        };
        d.scales = s.scales;
        d.mins = [0.0; GROUP];
    }
}

/// Adds `Σ q·x` over `steps` of a block's 16 rows (unsigned `qs`, each below `max`) and block
/// `b` of activation row `x` to `dot` (rows 0..8, 8..16). `PER` steps are summed in i16 before
/// widening: a lane holds `2·PER` products of at most `max·127` (activations are in
/// −127..=127), which must stay under 2¹⁵ — checked at compile time.
///
/// # Safety
/// The CPU must support AVX2; `x` holds block `b`; `steps` is a whole number of `PER`s.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn unsigned_dots<const PER: usize, const MAX: i32>(
    qs: &[[[u8; 4]; GROUP]; STEPS],
    x: &[i8],
    b: usize,
    steps: std::ops::Range<usize>,
    dot: &mut [__m256i; 2],
) {
    const { assert!(2 * PER as i32 * MAX * 127 < 1 << 15) };
    let ones = _mm256_set1_epi16(1);
    for first in steps.step_by(PER) {
        let mut pairs = [_mm256_setzero_si256(); 2];
        for s in first..first + PER {
            unsafe {
                let xv = _mm256_set1_epi32(step_bytes(x, b, s));
                for h in 0..2 {
                    let wv = _mm256_loadu_si256(qs[s][8 * h..].as_ptr() as *const __m256i);
                    pairs[h] = _mm256_add_epi16(pairs[h], _mm256_maddubs_epi16(wv, xv));
                }
            }
        }
        for h in 0..2 {
            dot[h] = _mm256_add_epi32(dot[h], _mm256_madd_epi16(pairs[h], ones));
        }
    }
}

/// `Σ (q − offset)·x` over a block's 16 rows for values up to 255: back to signed weights,
/// whose sign moves onto the activations so that `maddubs` sees magnitudes.
///
/// # Safety
/// The CPU must support AVX2; `x` holds block `b`.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn signed_dots(
    qs: &[[[u8; 4]; GROUP]; STEPS],
    x: &[i8],
    b: usize,
    offset: __m256i,
) -> [__m256i; 2] {
    let ones = _mm256_set1_epi16(1);
    let mut dot = [_mm256_setzero_si256(); 2];
    for s in 0..STEPS {
        unsafe {
            let xv = _mm256_set1_epi32(step_bytes(x, b, s));
            for h in 0..2 {
                let q = qs[s][8 * h..].as_ptr() as *const __m256i;
                let wv = _mm256_sub_epi8(_mm256_loadu_si256(q), offset);
                let pairs =
                    _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
                dot[h] = _mm256_add_epi32(dot[h], _mm256_madd_epi16(pairs, ones));
            }
        }
    }
    dot
}

/// Σ_b (d_w·d_x)·Σ w·x for the 16 rows of an 8-bit group and `nc` activation rows, as
/// `u8_portable` computes it.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; the first `nc` activation rows hold
/// `w.blocks.len()` whole blocks; Q5_0 values (offset 16) are below 32.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in super::super) unsafe fn u8_avx2(
    w: Blocks,
    x: &Activations,
    nc: usize,
    out: &mut [[f32; GROUP]; COLS],
) {
    let offset = _mm256_set1_epi8(w.offset as u8 as i8);
    let mut acc = [[_mm256_setzero_ps(); 2]; COLS];
    for (b, block) in w.blocks.iter().enumerate() {
        unsafe {
            let dw = [
                _mm256_cvtph_ps(_mm_loadu_si128(block.d.as_ptr() as *const __m128i)),
                _mm256_cvtph_ps(_mm_loadu_si128(block.d.as_ptr().add(8) as *const __m128i)),
            ];
            for c in 0..nc {
                let dot = if w.offset == Q5_OFFSET {
                    // Σ(w + 16)·x − 16·Σx = Σw·x, exactly.
                    let mut dot = [_mm256_set1_epi32(-w.offset * *x.sums[c].get_unchecked(b)); 2];
                    unsigned_dots::<4, 31>(&block.qs, x.qs[c], b, 0..STEPS, &mut dot);
                    dot
                } else {
                    signed_dots(&block.qs, x.qs[c], b, offset)
                };
                let dx = _mm256_set1_ps(*x.scales[c].get_unchecked(b));
                for h in 0..2 {
                    let scale = _mm256_mul_ps(dw[h], dx);
                    acc[c][h] =
                        _mm256_add_ps(acc[c][h], _mm256_mul_ps(_mm256_cvtepi32_ps(dot[h]), scale));
                }
            }
        }
    }
    for c in 0..nc {
        for h in 0..2 {
            unsafe { _mm256_storeu_ps(out[c][8 * h..].as_mut_ptr(), acc[c][h]) };
        }
    }
}

/// The products of a widened K-quant group's 16 rows with `nc` activation rows, as
/// `kquants::k_portable` computes them (the same fused multiply-adds in the same order).
/// Without `SPLIT` the group is Q4_K (values below 16, offset 0), with it Q6_K (below 64).
///
/// # Safety
/// The CPU must support AVX2 and FMA; the first `nc` activation rows hold `w.blocks.len()`
/// whole blocks.
#[target_feature(enable = "avx2,fma")]
pub(in super::super) unsafe fn k_avx2<const SPLIT: bool>(
    w: KBlocks,
    x: &Activations,
    nc: usize,
    out: &mut [[f32; GROUP]; COLS],
) {
    let mut acc = [[_mm256_setzero_ps(); 2]; COLS];
    for (b, block) in w.blocks.iter().enumerate() {
        for c in 0..nc {
            unsafe {
                let dx = *x.scales[c].get_unchecked(b);
                let sum = *x.sums[c].get_unchecked(b);
                let dxv = _mm256_set1_ps(dx);
                if SPLIT {
                    let lo_sum = *x.halves[c].get_unchecked(b);
                    for h in 0..2 {
                        let half_sum = if h == 0 { lo_sum } else { sum - lo_sum };
                        let mut dot = [_mm256_set1_epi32(-w.offset * half_sum); 2];
                        let steps = STEPS / 2 * h..STEPS / 2 * (h + 1);
                        unsigned_dots::<2, 63>(&block.qs, x.qs[c], b, steps, &mut dot);
                        for rh in 0..2 {
                            let sh = _mm256_loadu_ps(block.scales[h][8 * rh..].as_ptr());
                            let scale = _mm256_mul_ps(sh, dxv);
                            acc[c][rh] =
                                _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(dot[rh]), acc[c][rh]);
                        }
                    }
                } else {
                    let mut dot = [_mm256_set1_epi32(-w.offset * sum); 2];
                    unsigned_dots::<8, 15>(&block.qs, x.qs[c], b, 0..STEPS, &mut dot);
                    let dx_sum = _mm256_set1_ps(dx * sum as f32);
                    for rh in 0..2 {
                        let s0 = _mm256_loadu_ps(block.scales[0][8 * rh..].as_ptr());
                        let scale = _mm256_mul_ps(s0, dxv);
                        acc[c][rh] =
                            _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(dot[rh]), acc[c][rh]);
                        let mins = _mm256_loadu_ps(block.mins[8 * rh..].as_ptr());
                        acc[c][rh] = _mm256_fnmadd_ps(mins, dx_sum, acc[c][rh]);
                    }
                }
            }
        }
    }
    for c in 0..nc {
        for h in 0..2 {
            unsafe { _mm256_storeu_ps(out[c][8 * h..].as_mut_ptr(), acc[c][h]) };
        }
    }
}

/// The sum of the eight lanes.
#[target_feature(enable = "avx2")]
#[inline]
fn sum_lanes(v: __m256i) -> i32 {
    let v = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let v = _mm_add_epi32(v, _mm_shuffle_epi32::<0b01_00_11_10>(v));
    let v = _mm_add_epi32(v, _mm_shuffle_epi32::<0b10_11_00_01>(v));
    _mm_cvtsi128_si32(v)
}

/// The largest of the eight lanes.
#[target_feature(enable = "avx2")]
#[inline]
fn max_lanes(v: __m256) -> f32 {
    let v = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let v = _mm_max_ps(v, _mm_movehl_ps(v, v));
    let v = _mm_max_ss(v, _mm_shuffle_ps::<0b01>(v, v));
    _mm_cvtss_f32(v)
}

/// `f32::round` per lane: to nearest, ties away from zero.
#[target_feature(enable = "avx2")]
#[inline]
fn round_away(y: __m256) -> __m256 {
    let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(y);
    let sign = _mm256_and_ps(y, _mm256_set1_ps(-0.0));
    // Exact: |y − t| < 1.
    let half_or_more = _mm256_cmp_ps::<_CMP_GE_OQ>(
        _mm256_andnot_ps(_mm256_set1_ps(-0.0), _mm256_sub_ps(y, t)),
        _mm256_set1_ps(0.5),
    );
    let one = _mm256_or_ps(_mm256_set1_ps(1.0), sign);
    _mm256_add_ps(t, _mm256_and_ps(one, half_or_more))
}

/// Quantizes `x` block by block into `rows` (sized for it), as the portable code does.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(in super::super) unsafe fn quantize_avx2(x: &[f32], rows: &mut QuantizedRows) {
    let magnitude = |v| _mm256_andnot_ps(_mm256_set1_ps(-0.0), v);
    for (block, q, scale, sum, half) in rows.blocks(x) {
        unsafe {
            let v: [__m256; 4] =
                std::array::from_fn(|i| _mm256_loadu_ps(block.as_ptr().add(8 * i)));
            let amax = max_lanes(_mm256_max_ps(
                _mm256_max_ps(magnitude(v[0]), magnitude(v[1])),
                _mm256_max_ps(magnitude(v[2]), magnitude(v[3])),
            ));
            let (d, id) = block_scale(amax);
            let id = _mm256_set1_ps(id);
            let r: [__m256i; 4] =
                std::array::from_fn(|i| _mm256_cvtps_epi32(round_away(_mm256_mul_ps(v[i], id))));
            // Packing works within 128-bit lanes: dwords come out as 0, 4, 1, 5, 2, 6, 3, 7.
            let bytes = _mm256_packs_epi16(
                _mm256_packs_epi32(r[0], r[1]),
                _mm256_packs_epi32(r[2], r[3]),
            );
            let bytes =
                _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256(q.as_mut_ptr() as *mut __m256i, bytes);
            *half = sum_lanes(_mm256_add_epi32(r[0], r[1]));
            *sum = *half + sum_lanes(_mm256_add_epi32(r[2], r[3]));
            *scale = d;
        }
    }
}
