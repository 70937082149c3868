//! Element-wise and attention work of a forward pass, run on candle's CPU thread pool (the
//! one `quant_matrix` uses): candle runs these ops on one thread or on rayon's pool, which on
//! a 2-core machine leaves a core idle or makes the two pools fight for the cores.

use super::quant_matrix::SharedOut;

/// `silu(gate) · up` per row of `gate_up` (`rows` rows of `[gate | up]`, `width` values
/// each), with candle's formula (`v / (1 + e^−v)`), so that results are the same bits.
pub fn swiglu(gate_up: &[f32], rows: usize, width: usize) -> Vec<f32> {
    assert_eq!(gate_up.len(), rows * 2 * width, "gate/up shape");
    let mut out = vec![0f32; rows * width];
    let out_ptr = SharedOut(out.as_mut_ptr());
    // Items of about 16 Ki values: enough work per item, enough items to balance.
    let per_item = (16 << 10) / width.max(1);
    let (items, rows_per_item) = if per_item == 0 {
        (rows, 1)
    } else {
        (rows.div_ceil(per_item), per_item)
    };
    candle_core::utils::barrier_pool().execute_chunked(items, |range| {
        let out_ptr = &out_ptr;
        for item in range {
            for r in item * rows_per_item..((item + 1) * rows_per_item).min(rows) {
                let src = &gate_up[r * 2 * width..(r + 1) * 2 * width];
                let (gate, up) = src.split_at(width);
                // SAFETY: row r of `out` belongs to this item alone.
                let dst =
                    unsafe { std::slice::from_raw_parts_mut(out_ptr.0.add(r * width), width) };
                for ((d, &g), &u) in dst.iter_mut().zip(gate).zip(up) {
                    *d = g / (1.0 + (-g).exp()) * u;
                }
            }
        }
    });
    out
}

/// Shapes of one layer's attention step.
#[derive(Clone, Copy, Debug)]
pub struct AttentionShape {
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    /// New positions (queries).
    pub t: usize,
    /// Positions cached before them.
    pub pos: usize,
    /// Positions each head of the caches has room for.
    pub capacity: usize,
}

/// Query rows per work item.
const QUERY_ROWS: usize = 16;

/// Causal attention of `t` new queries at positions `pos..pos + t`: `q` is `[n_head][t][hd]`
/// (rotated, not yet scaled), `keys` and `values` `[n_kv_head][capacity][hd]` with the first
/// `pos + t` positions valid. Query heads `h` use KV head `h / (n_head / n_kv_head)`. Returns
/// `[t][n_head][hd]`. Per query row: scores `(q · scale) · k`, softmax over the positions it
/// may see (the others would weigh exactly 0), the weighted sum of values.
pub fn causal_attention(
    shape: AttentionShape,
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    scale: f32,
) -> Vec<f32> {
    attention_with(Simd::detect(), shape, q, keys, values, scale)
}

fn attention_with(
    simd: Simd,
    shape: AttentionShape,
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    scale: f32,
) -> Vec<f32> {
    let AttentionShape {
        n_head,
        n_kv_head,
        head_dim: hd,
        t,
        pos,
        capacity,
    } = shape;
    assert_eq!(q.len(), n_head * t * hd, "query shape");
    assert!(pos + t <= capacity && keys.len() == n_kv_head * capacity * hd);
    assert_eq!(keys.len(), values.len(), "value shape");
    let n_rep = n_head / n_kv_head;
    let mut out = vec![0f32; t * n_head * hd];
    let out_ptr = SharedOut(out.as_mut_ptr());
    let chunks = t.div_ceil(QUERY_ROWS);
    candle_core::utils::barrier_pool().execute_chunked(n_head * chunks, |range| {
        let out_ptr = &out_ptr;
        let mut scores = Vec::with_capacity(pos + t);
        let mut scaled = vec![0f32; hd];
        for item in range {
            // Later query rows see more positions: take them first so the tail balances.
            let (chunk, h) = (chunks - 1 - item / n_head, item % n_head);
            let kv = h / n_rep;
            let keys = &keys[kv * capacity * hd..(kv + 1) * capacity * hd];
            let values = &values[kv * capacity * hd..(kv + 1) * capacity * hd];
            for i in chunk * QUERY_ROWS..((chunk + 1) * QUERY_ROWS).min(t) {
                let seen = pos + i + 1;
                let query = &q[(h * t + i) * hd..(h * t + i + 1) * hd];
                for (s, &v) in scaled.iter_mut().zip(query) {
                    *s = v * scale;
                }
                // SAFETY: row i of head h belongs to this item alone.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(out_ptr.0.add((i * n_head + h) * hd), hd)
                };
                let (keys, values) = (&keys[..seen * hd], &values[..seen * hd]);
                simd.attend_row(&scaled, keys, values, &mut scores, dst);
            }
        }
    });
    out
}

/// The vector instructions this CPU has for [`causal_attention`].
#[derive(Clone, Copy)]
enum Simd {
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Portable,
}

impl Simd {
    fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            return Simd::Avx2;
        }
        Simd::Portable
    }

    /// `dst = softmax(query · keysᵀ) · values` for one query row over `hd`-wide rows.
    fn attend_row(
        self,
        query: &[f32],
        keys: &[f32],
        values: &[f32],
        scores: &mut Vec<f32>,
        dst: &mut [f32],
    ) {
        match self {
            // SAFETY: the CPU has the features.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => unsafe { x86::attend_row(query, keys, values, scores, dst) },
            Simd::Portable => {
                let hd = query.len();
                scores.clear();
                scores.extend(
                    keys.chunks_exact(hd)
                        .map(|k| query.iter().zip(k).map(|(x, y)| x * y).sum::<f32>()),
                );
                let sum = softmax_weights(scores);
                for (s, v) in scores.iter().zip(values.chunks_exact(hd)) {
                    let a = *s / sum;
                    for (y, x) in dst.iter_mut().zip(v) {
                        *y += a * x;
                    }
                }
            }
        }
    }
}

/// `e^(s − max)` in place of each score; returns their sum.
fn softmax_weights(scores: &mut [f32]) -> f32 {
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    sum
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// [`super::Simd::attend_row`] with AVX2 and FMA: scores four keys at a time (one pass
    /// over the query per four keys, one horizontal sum per four scores), and for rows of 64
    /// the weighted sum of values in registers.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn attend_row(
        query: &[f32],
        keys: &[f32],
        values: &[f32],
        scores: &mut Vec<f32>,
        dst: &mut [f32],
    ) {
        let hd = query.len();
        let n = keys.len() / hd;
        scores.clear();
        if hd.is_multiple_of(8) {
            let mut j = 0;
            while j + 4 <= n {
                let four = dots4(query, &keys[j * hd..(j + 4) * hd]);
                scores.extend_from_slice(&four);
                j += 4;
            }
            scores.extend(keys[j * hd..].chunks_exact(hd).map(|k| dot(query, k)));
        } else {
            scores.extend(keys.chunks_exact(hd).map(|k| dot(query, k)));
        }
        let sum = softmax_weights(scores);
        if hd == 64 {
            weighted_sum_64(scores, 1.0 / sum, values, dst);
        } else {
            for (s, v) in scores.iter().zip(values.chunks_exact(hd)) {
                axpy(*s / sum, v, dst);
            }
        }
    }

    /// [`super::softmax_weights`] eight scores at a time.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn softmax_weights(scores: &mut [f32]) -> f32 {
        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let maxv = _mm256_set1_ps(max);
        let mut sum = _mm256_setzero_ps();
        let mut chunks = scores.chunks_exact_mut(8);
        for chunk in &mut chunks {
            // SAFETY: the chunk holds eight floats.
            unsafe {
                let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(chunk.as_ptr()), maxv));
                _mm256_storeu_ps(chunk.as_mut_ptr(), e);
                sum = _mm256_add_ps(sum, e);
            }
        }
        let mut lanes = [0f32; 8];
        // SAFETY: lanes holds eight floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
        let mut total: f32 = lanes.iter().sum();
        for s in chunks.into_remainder() {
            *s = (*s - max).exp();
            total += *s;
        }
        total
    }

    /// `e^x` per lane for x ≤ 0 (what softmax needs), within a few ulps of `f32::exp`: x =
    /// n·ln 2 + r with |r| ≤ ln 2 / 2 (ln 2 in two parts, so that r is exact), a degree-7
    /// polynomial for e^r (Cephes' `expf` coefficients), times 2^n. Below −87.3, where e^x is
    /// under f32's smallest normal, the result is e^−87.3 (≈ 1e−38) instead of a subnormal.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn exp8(x: __m256) -> __m256 {
        let x = _mm256_max_ps(x, _mm256_set1_ps(-87.336_55));
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
        );
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
        let mut p = _mm256_set1_ps(1.987_569_1e-4);
        for c in [
            1.398_199_9e-3,
            8.333_452e-3,
            4.166_579_6e-2,
            0.166_666_65,
            0.5,
        ] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        let y = _mm256_add_ps(
            _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r),
            _mm256_set1_ps(1.0),
        );
        let bits = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        ));
        _mm256_mul_ps(y, _mm256_castsi256_ps(bits))
    }

    /// The dot products of `q` with the four rows of `keys` (width a multiple of 8).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn dots4(q: &[f32], keys: &[f32]) -> [f32; 4] {
        let hd = q.len();
        assert!(keys.len() == 4 * hd && hd.is_multiple_of(8));
        let mut acc = [_mm256_setzero_ps(); 4];
        for i in (0..hd).step_by(8) {
            // SAFETY: i + 8 ≤ hd, and each of the four rows is hd long.
            unsafe {
                let qv = _mm256_loadu_ps(q.as_ptr().add(i));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let k = _mm256_loadu_ps(keys.as_ptr().add(r * hd + i));
                    *acc = _mm256_fmadd_ps(qv, k, *acc);
                }
            }
        }
        // [a0+a1 pairs, b0+b1 pairs, a.., b..] twice, then the two 128-bit halves added.
        let ab = _mm256_hadd_ps(acc[0], acc[1]);
        let cd = _mm256_hadd_ps(acc[2], acc[3]);
        let abcd = _mm256_hadd_ps(ab, cd);
        let sums = _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
        let mut out = [0f32; 4];
        // SAFETY: out holds four floats.
        unsafe { _mm_storeu_ps(out.as_mut_ptr(), sums) };
        out
    }

    /// `dst += Σ_j (weights[j]·scale)·values[j]` for rows of 64, the sums kept in registers.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn weighted_sum_64(weights: &[f32], scale: f32, values: &[f32], dst: &mut [f32]) {
        assert!(dst.len() == 64 && values.len() >= weights.len() * 64);
        let mut acc = [_mm256_setzero_ps(); 8];
        for (j, &w) in weights.iter().enumerate() {
            let wv = _mm256_set1_ps(w * scale);
            for (l, acc) in acc.iter_mut().enumerate() {
                // SAFETY: row j holds 64 values.
                unsafe {
                    let v = _mm256_loadu_ps(values.as_ptr().add(j * 64 + 8 * l));
                    *acc = _mm256_fmadd_ps(wv, v, *acc);
                }
            }
        }
        for (l, acc) in acc.iter().enumerate() {
            // SAFETY: dst holds 64 floats.
            unsafe {
                let p = dst.as_mut_ptr().add(8 * l);
                _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), *acc));
            }
        }
    }

    /// `a · b` (equal lengths).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let mut acc = [_mm256_setzero_ps(); 2];
        let mut i = 0;
        while i + 16 <= n {
            for (l, acc) in acc.iter_mut().enumerate() {
                // SAFETY: i + 8l + 8 ≤ n.
                unsafe {
                    let x = _mm256_loadu_ps(a.as_ptr().add(i + 8 * l));
                    let y = _mm256_loadu_ps(b.as_ptr().add(i + 8 * l));
                    *acc = _mm256_fmadd_ps(x, y, *acc);
                }
            }
            i += 16;
        }
        let v = _mm256_add_ps(acc[0], acc[1]);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(_mm256_castps256_ps128(v), hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        let mut total = _mm_cvtss_f32(s);
        for j in i..n {
            total += a[j] * b[j];
        }
        total
    }

    /// `y += a · x` (equal lengths).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
        let n = x.len().min(y.len());
        let av = _mm256_set1_ps(a);
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 ≤ n.
            unsafe {
                let p = y.as_mut_ptr().add(i);
                let v = _mm256_fmadd_ps(av, _mm256_loadu_ps(x.as_ptr().add(i)), _mm256_loadu_ps(p));
                _mm256_storeu_ps(p, v);
            }
            i += 8;
        }
        for j in i..n {
            y[j] += a * x[j];
        }
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    #[test]
    fn swiglu_is_candles_silu_times_up() {
        let (rows, width) = (37, 300);
        let gate_up: Vec<f32> = (0..rows * 2 * width)
            .map(|i| ((i * 7919) % 1000) as f32 / 100.0 - 5.0)
            .collect();
        let ours = super::swiglu(&gate_up, rows, width);
        let t = Tensor::from_vec(gate_up, (rows, 2 * width), &Device::Cpu).unwrap();
        let gate = t.narrow(1, 0, width).unwrap();
        let up = t.narrow(1, width, width).unwrap();
        let theirs = (candle_nn::ops::silu(&gate).unwrap() * up)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert_eq!(ours, theirs);
    }

    /// Against candle's ops on the same inputs: masked softmax of `(q · scale) kᵀ`, times v,
    /// with grouped KV heads, cached positions and a cache larger than what is used.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn vector_exp_is_within_a_few_ulps_of_std() {
        use std::arch::x86_64::*;
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            return;
        }
        let xs: Vec<f32> = (0..=80_000).map(|i| -(i as f32) / 1000.0).collect();
        for chunk in xs.chunks(8).filter(|c| c.len() == 8) {
            let mut out = [0f32; 8];
            // SAFETY: the CPU has the features; both hold eight floats.
            unsafe {
                let e = super::x86::exp8(_mm256_loadu_ps(chunk.as_ptr()));
                _mm256_storeu_ps(out.as_mut_ptr(), e);
            }
            for (&x, &got) in chunk.iter().zip(&out) {
                let want = x.exp();
                assert!(
                    (got - want).abs() <= 4.0 * f32::EPSILON * want,
                    "e^{x}: {got} vs {want}"
                );
            }
        }
        // The softmax weights: the largest score gets 1, their sum is returned.
        let mut scores: Vec<f32> = (0..29).map(|i| (i as f32 * 0.37).sin() * 9.0).collect();
        let mut reference = scores.clone();
        let sum = unsafe { super::x86::softmax_weights(&mut scores) };
        let want = super::softmax_weights(&mut reference);
        assert!((sum - want).abs() <= 1e-5 * want);
        for (a, b) in scores.iter().zip(&reference) {
            assert!(
                (a - b).abs() <= 4.0 * f32::EPSILON * b.max(1e-30),
                "{a} vs {b}"
            );
        }
    }

    #[test]
    fn causal_attention_matches_candle_ops() {
        // Widths with no fast path, with the 4-key scores only, with both; positions that are
        // not a multiple of four keys.
        for hd in [20, 24, 64, 128] {
            attention_matches_candle_ops(hd);
        }
    }

    fn attention_matches_candle_ops(hd: usize) {
        let (n_head, n_kv_head, t, pos, capacity) = (6, 2, 21, 10, 40);
        let value = |i: usize, m: usize| ((i * m) % 997) as f32 / 250.0 - 2.0;
        let q: Vec<f32> = (0..n_head * t * hd).map(|i| value(i, 7919)).collect();
        let keys: Vec<f32> = (0..n_kv_head * capacity * hd)
            .map(|i| value(i, 104729))
            .collect();
        let values: Vec<f32> = (0..n_kv_head * capacity * hd)
            .map(|i| value(i, 613))
            .collect();
        let scale = 1.0 / (hd as f32).sqrt();
        let shape = super::AttentionShape {
            n_head,
            n_kv_head,
            head_dim: hd,
            t,
            pos,
            capacity,
        };
        let mut variants = vec![super::Simd::Portable];
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            variants.push(super::Simd::Avx2);
        }
        let runs: Vec<Vec<f32>> = variants
            .into_iter()
            .map(|simd| super::attention_with(simd, shape, &q, &keys, &values, scale))
            .collect();

        let total = pos + t;
        let dev = &Device::Cpu;
        let qt = Tensor::from_vec(q, (n_head, t, hd), dev).unwrap();
        let kt = Tensor::from_vec(keys, (n_kv_head, capacity, hd), dev).unwrap();
        let vt = Tensor::from_vec(values, (n_kv_head, capacity, hd), dev).unwrap();
        let mask: Vec<f32> = (0..t)
            .flat_map(|i| {
                (0..total).map(move |j| if j > pos + i { f32::NEG_INFINITY } else { 0.0 })
            })
            .collect();
        let mask = Tensor::from_vec(mask, (t, total), dev).unwrap();
        for h in 0..n_head {
            let kv = h / (n_head / n_kv_head);
            let k = kt.get(kv).unwrap().narrow(0, 0, total).unwrap();
            let v = vt.get(kv).unwrap().narrow(0, 0, total).unwrap();
            let att = (qt.get(h).unwrap() * scale as f64)
                .unwrap()
                .matmul(&k.t().unwrap())
                .unwrap()
                .broadcast_add(&mask)
                .unwrap();
            let att = candle_nn::ops::softmax_last_dim(&att).unwrap();
            let y = att.matmul(&v).unwrap().to_vec2::<f32>().unwrap();
            for (i, d, ours) in (0..t)
                .flat_map(|i| (0..hd).map(move |d| (i, d)))
                .flat_map(|(i, d)| runs.iter().map(move |r| (i, d, r)))
            {
                {
                    let got = ours[(i * n_head + h) * hd + d];
                    assert!(
                        (got - y[i][d]).abs() <= 1e-5 * y[i][d].abs().max(1.0),
                        "head {h} row {i} dim {d}: {got} vs {}",
                        y[i][d]
                    );
                }
            }
        }
    }
}
