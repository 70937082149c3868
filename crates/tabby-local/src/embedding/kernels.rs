//! The numeric kernels of the sentence encoder, on plain `f32` slices: a bounds-checked wrapper
//! around the `gemm` crate (the same matrix kernels candle uses), and fused element-wise passes
//! (bias, residual, layer norm, GELU, softmax) with an `exp` that the compiler can vectorise.
//!
//! Why not candle's tensor ops: for MiniLM most of candle's time went to element-wise ops
//! (generic softmax, erf GELU, broadcast adds), each a separate allocation and pass; here they
//! are one pass each, in place.

use rayon::prelude::*;

/// A row-major view of a matrix inside a slice: element (r, c) is `data[offset + r * row_stride + c]`.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a> {
    pub data: &'a [f32],
    pub offset: usize,
    pub rows: usize,
    pub cols: usize,
    pub row_stride: usize,
    /// Read the view transposed (as `cols × rows`).
    pub transposed: bool,
}

impl<'a> MatRef<'a> {
    pub fn new(
        data: &'a [f32],
        offset: usize,
        rows: usize,
        cols: usize,
        row_stride: usize,
    ) -> Self {
        Self {
            data,
            offset,
            rows,
            cols,
            row_stride,
            transposed: false,
        }
    }

    pub fn t(self) -> Self {
        Self {
            transposed: !self.transposed,
            ..self
        }
    }

    /// Shape as used in a product: `(rows, cols)` after the optional transposition.
    fn shape(&self) -> (usize, usize) {
        if self.transposed {
            (self.cols, self.rows)
        } else {
            (self.rows, self.cols)
        }
    }

    /// (row stride, column stride) of the view as used in a product.
    fn strides(&self) -> (isize, isize) {
        if self.transposed {
            (1, self.row_stride as isize)
        } else {
            (self.row_stride as isize, 1)
        }
    }

    fn assert_in_bounds(&self) {
        if self.rows == 0 || self.cols == 0 {
            return;
        }
        assert!(
            self.cols <= self.row_stride || self.rows == 1,
            "overlapping rows"
        );
        let last = self.offset + (self.rows - 1) * self.row_stride + (self.cols - 1);
        assert!(last < self.data.len(), "matrix view out of bounds");
    }
}

/// `dst[offset..] (m × n, row stride dst_stride) = (accumulate ? dst : 0) + a · b`.
///
/// Panics (never reads or writes out of bounds) when the shapes or views do not fit.
pub fn matmul(
    dst: &mut [f32],
    dst_offset: usize,
    dst_stride: usize,
    a: MatRef<'_>,
    b: MatRef<'_>,
    accumulate: bool,
    parallel: bool,
) {
    let (m, k) = a.shape();
    let (k2, n) = b.shape();
    assert_eq!(k, k2, "inner dimensions differ");
    a.assert_in_bounds();
    b.assert_in_bounds();
    if m == 0 || n == 0 {
        return;
    }
    assert!(n <= dst_stride || m == 1, "overlapping output rows");
    assert!(
        dst_offset + (m - 1) * dst_stride + (n - 1) < dst.len(),
        "output out of bounds"
    );
    if k == 0 {
        if !accumulate {
            for r in 0..m {
                dst[dst_offset + r * dst_stride..][..n].fill(0.0);
            }
        }
        return;
    }
    let (a_rs, a_cs) = a.strides();
    let (b_rs, b_cs) = b.strides();
    let parallelism = if parallel {
        gemm::Parallelism::Rayon(rayon::current_num_threads())
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: every index gemm touches is inside the three slices (checked above: all strides
    // are non-negative and the last element of each view is in bounds), `dst` is borrowed
    // mutably so it cannot alias `a` or `b`, and `read_dst = false` never reads `dst`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr().add(dst_offset),
            1,
            dst_stride as isize,
            accumulate,
            a.data.as_ptr().add(a.offset),
            a_cs,
            a_rs,
            b.data.as_ptr().add(b.offset),
            b_cs,
            b_rs,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// Fills every `row.len()`-wide row of `out` with `row` (+ the matching row of `add`, if any).
pub fn fill_rows(out: &mut [f32], row: &[f32], add: Option<&[f32]>) {
    let width = row.len();
    match add {
        None => out
            .par_chunks_mut(width * 64)
            .for_each(|block| block.chunks_mut(width).for_each(|r| r.copy_from_slice(row))),
        Some(add) => {
            assert_eq!(add.len(), out.len());
            out.par_chunks_mut(width * 64)
                .zip(add.par_chunks(width * 64))
                .for_each(|(block, add)| {
                    for (r, a) in block.chunks_mut(width).zip(add.chunks(width)) {
                        for ((o, b), a) in r.iter_mut().zip(row).zip(a) {
                            *o = b + a;
                        }
                    }
                })
        }
    }
}

/// Layer normalisation of each `gamma.len()`-wide row, in place.
pub fn layer_norm(x: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
    let width = gamma.len();
    x.par_chunks_mut(width * 16).for_each(|block| {
        for row in block.chunks_mut(width) {
            let mean = lanes(row, 0.0, |a, b| a + b, |a, b| a + b) / width as f32;
            let var =
                lanes(row, 0.0, |a, v| a + (v - mean) * (v - mean), |a, b| a + b) / width as f32;
            let inv = 1.0 / (var + eps).sqrt();
            for ((v, g), b) in row.iter_mut().zip(gamma).zip(beta) {
                *v = (*v - mean) * inv * g + b;
            }
        }
    });
}

/// GELU with the exact (erf) form, in place.
pub fn gelu_erf(x: &mut [f32]) {
    x.par_chunks_mut(4096)
        .for_each(|block| block.iter_mut().for_each(|v| *v = gelu(*v)));
}

#[inline(always)]
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// erf, Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7), branch-free.
#[inline(always)]
fn erf(x: f32) -> f32 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * z);
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_8 + t * (-1.453_152 + t * 1.061_405_4))));
    let y = 1.0 - poly * exp(-z * z);
    y.copysign(x)
}

/// Softmax of each `width`-wide row, in place.
pub fn softmax_rows(x: &mut [f32], width: usize) {
    for row in x.chunks_mut(width) {
        let max = lanes(row, f32::NEG_INFINITY, f32::max, f32::max);
        // Separate passes, each free of a loop-carried float dependency, so each vectorises.
        row.iter_mut().for_each(|v| *v = exp(*v - max));
        let inv = 1.0 / lanes(row, 0.0, |a, b| a + b, |a, b| a + b);
        row.iter_mut().for_each(|v| *v *= inv);
    }
}

/// Folds `xs` with `step` over 8 independent lanes, then merges them with `combine` (eight
/// accumulators stay in SIMD registers; a single one would force a sequential reduction).
#[inline(always)]
fn lanes(
    xs: &[f32],
    init: f32,
    step: impl Fn(f32, f32) -> f32,
    combine: impl Fn(f32, f32) -> f32,
) -> f32 {
    let mut acc = [init; 8];
    let chunks = xs.chunks_exact(8);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (a, v) in acc.iter_mut().zip(chunk) {
            *a = step(*a, *v);
        }
    }
    let total = rest.iter().fold(init, |a, v| step(a, *v));
    acc.into_iter().fold(total, combine)
}

/// e^x, relative error ~2e-7 for x in [-87, 88] (0 below, e^88 above): the Cephes `expf`
/// polynomial with a float-only rounding step, so that loops over it vectorise.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer in the low bits.
    let underflow = x < -87.0;
    let x = x.clamp(-87.0, 88.0);
    let shifted = x * std::f32::consts::LOG2_E + ROUND;
    let n = shifted - ROUND;
    let r = x - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let p = 1.987_569_1e-4;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 0.5;
    let e_r = p * r * r + r + 1.0;
    let pow2 =
        f32::from_bits(((shifted.to_bits() as i32 - ROUND.to_bits() as i32 + 127) << 23) as u32);
    if underflow { 0.0 } else { e_r * pow2 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        out
    }

    #[test]
    fn matmul_matches_the_naive_product_with_strides_and_transposes() {
        let (m, k, n) = (5, 7, 3);
        let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.11).cos()).collect();
        let expected = naive(&a, &b, m, k, n);
        let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
        for parallel in [false, true] {
            let mut out = vec![9.0; m * n];
            matmul(
                &mut out,
                0,
                n,
                MatRef::new(&a, 0, m, k, k),
                MatRef::new(&bt, 0, n, k, k).t(),
                false,
                parallel,
            );
            for (x, y) in out.iter().zip(&expected) {
                assert!((x - y).abs() < 1e-5, "{x} vs {y}");
            }
        }
        // Accumulating into a strided window of a wider buffer.
        let mut wide = vec![1.0; m * 10];
        matmul(
            &mut wide,
            2,
            10,
            MatRef::new(&a, 0, m, k, k),
            MatRef::new(&b, 0, k, n, n),
            true,
            false,
        );
        for i in 0..m {
            assert_eq!(wide[i * 10], 1.0);
            for j in 0..n {
                let got = wide[i * 10 + 2 + j];
                assert!((got - 1.0 - expected[i * n + j]).abs() < 1e-5);
            }
        }
    }

    #[test]
    fn matmul_refuses_views_out_of_bounds() {
        let a = vec![0.0; 6];
        let result = std::panic::catch_unwind(|| {
            let mut out = vec![0.0; 4];
            matmul(
                &mut out,
                0,
                2,
                MatRef::new(&a, 1, 2, 3, 3),
                MatRef::new(&a, 0, 3, 2, 2),
                false,
                false,
            );
        });
        assert!(result.is_err());
    }

    #[test]
    fn exp_is_accurate() {
        for i in -8700..=8800 {
            let x = i as f32 / 100.0;
            let (got, want) = (exp(x), (x as f64).exp());
            let rel = ((got as f64 - want) / want).abs();
            assert!(rel < 5e-7, "exp({x}) = {got}, want {want}");
        }
    }

    #[test]
    fn gelu_matches_the_erf_definition() {
        for i in -1000..=1000 {
            let x = i as f32 / 100.0;
            let want = 0.5 * x as f64 * (1.0 + erf_f64(x as f64 / std::f64::consts::SQRT_2));
            assert!((gelu(x) as f64 - want).abs() < 2e-6, "gelu({x})");
        }
    }

    /// erf by its Taylor series in f64 (|x| ≤ 4; beyond, erf is ±1 within 2e-8).
    fn erf_f64(x: f64) -> f64 {
        if x.abs() > 4.0 {
            return x.signum();
        }
        let mut term = x;
        let mut sum = x;
        for n in 1..200 {
            term *= -x * x / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn softmax_rows_sum_to_one() {
        let mut x = vec![1.0, 2.0, 3.0, -1e9, 0.0, 0.0];
        softmax_rows(&mut x, 3);
        assert!((x[..3].iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(x[2] > x[1] && x[1] > x[0]);
        assert!(x[3] == 0.0 && (x[4] - 0.5).abs() < 1e-6);
    }

    #[test]
    fn layer_norm_centres_and_scales_rows() {
        let mut x = vec![1.0, 2.0, 3.0, 4.0, 10.0, 10.0, 10.0, 10.0];
        layer_norm(&mut x, &[1.0; 4], &[0.5; 4], 1e-12);
        assert!((x[..4].iter().sum::<f32>() - 2.0).abs() < 1e-5);
        assert!(x[4..].iter().all(|v| (v - 0.5).abs() < 1e-5));
    }
}
