//! GGUF's Q4_K and Q6_K weights (super-blocks of 256 values) in the 16-row groups of
//! `quant_matrix`, and their widening to 8 bits.
//!
//! Both split a super-block into sub-blocks with integer scales under one f16 scale. A Q4_K
//! sub-block holds 32 values `q` in 0..15, worth `d·sc·q − dmin·m`; a Q6_K sub-block holds 16
//! values in 0..63, worth `d·sc·(q − 32)`. So a 32-block of our layout gets, per row, a scale
//! for each of its two halves (equal for Q4_K), the value `min` subtracted from every weight
//! (zero for Q6_K) and the integer offset of its values (0 for Q4_K, 32 for Q6_K). Scales are
//! computed once here, as llama.cpp computes them (`d * sc` in f32).

use super::{BLOCK, GROUP, Group, Kernel, STEPS};

/// Values per super-block.
pub(super) const SUPER: usize = 256;
/// Bytes of a GGUF Q4_K super-block: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins,
/// 128 bytes of nibbles.
const Q4_K_BYTES: usize = 144;
/// Bytes of a GGUF Q6_K super-block: 128 bytes of low nibbles, 64 of high bit pairs, 16 i8
/// scales, f16 d.
const Q6_K_BYTES: usize = 210;
/// What Q6_K values hold over the weight.
const Q6_OFFSET: i32 = 32;

/// One 32-block of a group in Q4_K: nibbles as in `Q5Block` (values `4p + t` low and
/// `16 + 4p + t` high in byte `[p][r][t]`), a scale and a min per row.
#[repr(C, align(32))]
#[derive(Clone, Copy)]
pub(super) struct Q4Block {
    pub(super) nibbles: [[[u8; 4]; GROUP]; STEPS / 2],
    pub(super) scales: [f32; GROUP],
    pub(super) mins: [f32; GROUP],
}

/// One 32-block of a group in Q6_K: the low 4 bits as in [`Q4Block`], bits 4 and 5 as bit
/// planes (`high[i][s]`, bit `4r + t`: bit `4 + i` of value `4s + t` of row `r`), a scale per
/// row for each half.
#[repr(C, align(32))]
#[derive(Clone, Copy)]
pub(super) struct Q6Block {
    pub(super) nibbles: [[[u8; 4]; GROUP]; STEPS / 2],
    pub(super) high: [[u64; STEPS]; 2],
    pub(super) scales: [[f32; GROUP]; 2],
}

/// A K-quant block widened to 8 bits: `qs` as in `U8Block`, the scales of each row (one for
/// Q4_K, one per half for Q6_K), the min of each row (Q4_K).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub(super) struct KBlock {
    pub(super) qs: [[[u8; 4]; GROUP]; STEPS],
    pub(super) scales: [[f32; GROUP]; 2],
    pub(super) mins: [f32; GROUP],
}

impl KBlock {
    pub(super) const EMPTY: KBlock = KBlock {
        qs: [[[0; 4]; GROUP]; STEPS],
        scales: [[0.0; GROUP]; 2],
        mins: [0.0; GROUP],
    };
}

/// A group's K-quant blocks in 8 bits, each value the weight's `q` (weight / scale + offset,
/// plus min / scale for Q4_K).
#[derive(Clone, Copy)]
pub(super) struct KBlocks<'a> {
    pub(super) blocks: &'a [KBlock],
    pub(super) offset: i32,
    /// Whether each half of a block has its own scale (Q6_K; no min then).
    pub(super) split: bool,
}

fn f16(bytes: &[u8]) -> f32 {
    super::f16_to_f32(u16::from_le_bytes([bytes[0], bytes[1]]))
}

/// Puts the 32 values `q` of one block of row `r` into its nibbles (and, for 6-bit values,
/// the bit planes).
fn pack(q: &[u8], r: usize, nibbles: &mut [[[u8; 4]; GROUP]; STEPS / 2]) {
    for p in 0..STEPS / 2 {
        for t in 0..4 {
            nibbles[p][r][t] = (q[4 * p + t] & 0x0F) | ((q[16 + 4 * p + t] & 0x0F) << 4);
        }
    }
}

fn check_len(name: &str, data: &[u8], n: usize, k: usize, bytes: usize) -> candle_core::Result<()> {
    if !k.is_multiple_of(SUPER) {
        candle_core::bail!("{name} matrix width {k} is not a whole number of super-blocks");
    }
    if data.len() != n * (k / SUPER) * bytes {
        candle_core::bail!(
            "{name} data of {} bytes for {n} rows of width {k}",
            data.len()
        );
    }
    Ok(())
}

pub(super) fn q4k_groups(data: &[u8], n: usize, k: usize) -> candle_core::Result<Vec<Q4Block>> {
    check_len("Q4_K", data, n, k, Q4_K_BYTES)?;
    let nb = k / BLOCK;
    // Padding rows: scale and min 0.
    let empty = Q4Block {
        nibbles: [[[0; 4]; GROUP]; STEPS / 2],
        scales: [0.0; GROUP],
        mins: [0.0; GROUP],
    };
    let mut blocks = vec![empty; n.div_ceil(GROUP) * nb];
    let mut q = [0u8; BLOCK];
    for (row, bytes) in data.chunks_exact(k / SUPER * Q4_K_BYTES).enumerate() {
        let (g, r) = (row / GROUP, row % GROUP);
        for (sb, src) in bytes.chunks_exact(Q4_K_BYTES).enumerate() {
            let (d, dmin) = (f16(&src[0..2]), f16(&src[2..4]));
            let scales = &src[4..16];
            let qs = &src[16..];
            for j in 0..SUPER / BLOCK {
                let (sc, m) = scale_min_k4(j, scales);
                // Sub-blocks 2i and 2i + 1 are the low and high nibbles of bytes 32i..32i + 32.
                let bytes = &qs[32 * (j / 2)..32 * (j / 2) + 32];
                for (v, &byte) in q.iter_mut().zip(bytes) {
                    *v = if j % 2 == 0 { byte & 0x0F } else { byte >> 4 };
                }
                let dst = &mut blocks[g * nb + sb * (SUPER / BLOCK) + j];
                pack(&q, r, &mut dst.nibbles);
                dst.scales[r] = d * sc as f32;
                dst.mins[r] = dmin * m as f32;
            }
        }
    }
    Ok(blocks)
}

/// Scale and min of sub-block `j` from Q4_K's 12 packed bytes (6 bits each).
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

pub(super) fn q6k_groups(data: &[u8], n: usize, k: usize) -> candle_core::Result<Vec<Q6Block>> {
    check_len("Q6_K", data, n, k, Q6_K_BYTES)?;
    let nb = k / BLOCK;
    let empty = Q6Block {
        nibbles: [[[0; 4]; GROUP]; STEPS / 2],
        high: [[0; STEPS]; 2],
        scales: [[0.0; GROUP]; 2],
    };
    let mut blocks = vec![empty; n.div_ceil(GROUP) * nb];
    let mut values = [0u8; SUPER];
    for (row, bytes) in data.chunks_exact(k / SUPER * Q6_K_BYTES).enumerate() {
        let (g, r) = (row / GROUP, row % GROUP);
        for (sb, src) in bytes.chunks_exact(Q6_K_BYTES).enumerate() {
            let (ql, qh, sc) = (&src[..128], &src[128..192], &src[192..208]);
            let d = f16(&src[208..210]);
            // Each half of 128 values takes 64 bytes of ql and 32 of qh: value l (< 32) and
            // l + 64 share ql[l], l + 32 and l + 96 share ql[l + 32], all four share qh[l].
            for half in 0..2 {
                let (ql, qh) = (&ql[64 * half..], &qh[32 * half..]);
                let v = &mut values[128 * half..];
                for l in 0..32 {
                    v[l] = (ql[l] & 0x0F) | ((qh[l] & 3) << 4);
                    v[l + 32] = (ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4);
                    v[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                    v[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                }
            }
            for j in 0..SUPER / BLOCK {
                let q = &values[BLOCK * j..BLOCK * (j + 1)];
                let dst = &mut blocks[g * nb + sb * (SUPER / BLOCK) + j];
                pack(q, r, &mut dst.nibbles);
                for s in 0..STEPS {
                    for t in 0..4 {
                        let v = q[4 * s + t] as u64;
                        dst.high[0][s] |= ((v >> 4) & 1) << (4 * r + t);
                        dst.high[1][s] |= ((v >> 5) & 1) << (4 * r + t);
                    }
                }
                for h in 0..2 {
                    dst.scales[h][r] = d * (sc[2 * j + h] as i8) as f32;
                }
            }
        }
    }
    Ok(blocks)
}

/// A stored K-quant block type: how its values are offset and scaled, and its widening.
pub(super) trait Storage: Sized {
    const OFFSET: i32;
    const SPLIT: bool;
    fn widen(kernel: Kernel, src: &[Self], dst: &mut [KBlock]);
}

impl Storage for Q4Block {
    const OFFSET: i32 = 0;
    const SPLIT: bool = false;
    fn widen(kernel: Kernel, src: &[Self], dst: &mut [KBlock]) {
        match kernel {
            // SAFETY: `kernel()` checked the CPU features.
            #[cfg(target_arch = "x86_64")]
            Kernel::Vnni => unsafe { super::x86::widen_q4_avx512(src, dst) },
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { super::x86::avx2::widen_q4_avx2(src, dst) },
            Kernel::Portable => widen_q4_portable(src, dst),
        }
    }
}

impl Storage for Q6Block {
    const OFFSET: i32 = Q6_OFFSET;
    const SPLIT: bool = true;
    fn widen(kernel: Kernel, src: &[Self], dst: &mut [KBlock]) {
        match kernel {
            // SAFETY: `kernel()` checked the CPU features.
            #[cfg(target_arch = "x86_64")]
            Kernel::Vnni => unsafe { super::x86::widen_q6_avx512(src, dst) },
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { super::x86::avx2::widen_q6_avx2(src, dst) },
            Kernel::Portable => widen_q6_portable(src, dst),
        }
    }
}

/// A group's blocks widened into `widened`.
pub(super) fn widen<'a, T: Storage>(
    kernel: Kernel,
    src: &[T],
    widened: &'a mut Vec<KBlock>,
) -> Group<'a> {
    widened.resize(src.len(), KBlock::EMPTY);
    T::widen(kernel, src, widened);
    Group::K(KBlocks {
        blocks: widened,
        offset: T::OFFSET,
        split: T::SPLIT,
    })
}

fn widen_q4_portable(src: &[Q4Block], dst: &mut [KBlock]) {
    for (s, d) in src.iter().zip(dst.iter_mut()) {
        for p in 0..STEPS / 2 {
            for r in 0..GROUP {
                for t in 0..4 {
                    let byte = s.nibbles[p][r][t];
                    d.qs[p][r][t] = byte & 0x0F;
                    d.qs[p + 4][r][t] = byte >> 4;
                }
            }
        }
        d.scales[0] = s.scales;
        d.mins = s.mins;
    }
}

fn widen_q6_portable(src: &[Q6Block], dst: &mut [KBlock]) {
    for (s, d) in src.iter().zip(dst.iter_mut()) {
        for p in 0..STEPS / 2 {
            for r in 0..GROUP {
                for t in 0..4 {
                    let byte = s.nibbles[p][r][t];
                    let bits = |step: usize| {
                        let bit =
                            |i: usize| (((s.high[i][step] >> (4 * r + t)) & 1) as u8) << (4 + i);
                        bit(0) | bit(1)
                    };
                    d.qs[p][r][t] = (byte & 0x0F) | bits(p);
                    d.qs[p + 4][r][t] = (byte >> 4) | bits(p + 4);
                }
            }
        }
        d.scales = s.scales;
        d.mins = [0.0; GROUP];
    }
}

/// The products of `x86::k_vnni`, with the same float operations in the same order (fused
/// multiply-adds).
pub(super) fn k_portable(
    w: KBlocks,
    x: &super::Activations,
    nc: usize,
    out: &mut [[f32; GROUP]; super::COLS],
) {
    for (b, block) in w.blocks.iter().enumerate() {
        for c in 0..nc {
            let xb = &x.qs[c][b * BLOCK..(b + 1) * BLOCK];
            let dx = x.scales[c][b];
            let (sum, lo_sum) = (x.sums[c][b], x.halves[c][b]);
            for r in 0..GROUP {
                let dot = |steps: std::ops::Range<usize>, init: i32| {
                    let mut dot = init;
                    for s in steps {
                        for t in 0..4 {
                            dot += block.qs[s][r][t] as i32 * xb[4 * s + t] as i32;
                        }
                    }
                    dot as f32
                };
                if w.split {
                    let lo = dot(0..STEPS / 2, -w.offset * lo_sum);
                    out[c][r] = (block.scales[0][r] * dx).mul_add(lo, out[c][r]);
                    let hi = dot(STEPS / 2..STEPS, -w.offset * (sum - lo_sum));
                    out[c][r] = (block.scales[1][r] * dx).mul_add(hi, out[c][r]);
                } else {
                    let all = dot(0..STEPS, -w.offset * sum);
                    out[c][r] = (block.scales[0][r] * dx).mul_add(all, out[c][r]);
                    out[c][r] = (-block.mins[r]).mul_add(dx * sum as f32, out[c][r]);
                }
            }
        }
    }
}
