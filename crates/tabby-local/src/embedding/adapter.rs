//! The code adapter of the static embedding: one weight per token and one `d × d` map,
//! trained on code by `scripts/eval/train_code_adapter.py` (contrastive pairs of doc sentences
//! and the definitions they document, mined from registry packages outside the evaluation
//! sets) and shipped in the repository (`assets/code-adapter.safetensors`, ~390 KB). A text's
//! embedding becomes `normalise((Σ w[t] · row[t]) · M)`, which is the same as a table whose
//! rows are `w[t] · row[t] · M`: the adapter is folded into the table once, at distillation,
//! and search and indexing cost what they cost before.
//!
//! The adapter was trained on one distilled table. A distillation that comes out different
//! (another source model, other options, or rounding that turned the PCA basis) would give the
//! map a basis it was not trained for, so the file carries a probe: a few tokens' rows of the
//! table it was trained on. The adapter is applied only when the distilled rows match them.

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The adapter shipped with this build.
pub const CODE_ADAPTER: &[u8] = include_bytes!("../../assets/code-adapter.safetensors");

/// Cosine a probe row must reach with the distilled row of its token.
const PROBE_MIN_COSINE: f64 = 0.999;
/// Relative difference of norms a probe row may have from the distilled row.
const PROBE_MAX_NORM_RATIO: f64 = 0.01;

/// What the table header records of an applied adapter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AppliedAdapter {
    /// sha256 (hex) of the adapter file.
    pub sha256: String,
}

pub struct CodeAdapter {
    /// One weight per token of the vocabulary.
    pub token_weights: Vec<f32>,
    /// `d × d`, row-major: the adapted row is `row · map`.
    pub map: Vec<f32>,
    pub dimension: usize,
    probe_ids: Vec<usize>,
    /// `probe_ids.len() × d`.
    probe_rows: Vec<f32>,
    pub sha256: String,
}

/// sha256 (hex) of an adapter file's bytes, written like `distill.rs`'s file hashes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// sha256 (hex) of [`CODE_ADAPTER`], hashed once per process.
pub fn shipped_sha256() -> &'static str {
    static SHA: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SHA.get_or_init(|| sha256_hex(CODE_ADAPTER))
}

impl CodeAdapter {
    /// The adapter this build ships.
    pub fn shipped() -> anyhow::Result<Self> {
        Self::parse(CODE_ADAPTER).context("the shipped code adapter")
    }

    pub fn parse(bytes: &[u8]) -> anyhow::Result<Self> {
        let tensors = candle_core::safetensors::load_buffer(bytes, &candle_core::Device::Cpu)
            .context("not a safetensors file")?;
        let get = |name: &str| {
            tensors
                .get(name)
                .with_context(|| format!("no tensor {name}"))
        };
        let token_weights: Vec<f32> = get("token_weights")?
            .to_dtype(candle_core::DType::F32)?
            .to_vec1()?;
        let map = get("map")?.to_dtype(candle_core::DType::F32)?;
        let (rows, cols) = map.dims2()?;
        if rows != cols {
            bail!("the map is {rows} × {cols}, not square");
        }
        let map: Vec<f32> = map.flatten_all()?.to_vec1()?;
        let probe_ids: Vec<i64> = get("probe_ids")?
            .to_dtype(candle_core::DType::I64)?
            .to_vec1()?;
        let probe = get("probe_rows")?.to_dtype(candle_core::DType::F32)?;
        let (n, d) = probe.dims2()?;
        if n != probe_ids.len() || d != rows {
            bail!(
                "the probe is {n} × {d} for {} tokens of dimension {rows}",
                probe_ids.len()
            );
        }
        let probe_ids = probe_ids
            .into_iter()
            .map(|id| {
                usize::try_from(id)
                    .ok()
                    .filter(|&i| i < token_weights.len())
            })
            .collect::<Option<Vec<usize>>>()
            .context("a probe token is outside the vocabulary")?;
        if token_weights.iter().chain(&map).any(|v| !v.is_finite()) {
            bail!("a weight is not a finite number");
        }
        Ok(Self {
            token_weights,
            map,
            dimension: rows,
            probe_ids,
            probe_rows: probe.flatten_all()?.to_vec1()?,
            sha256: sha256_hex(bytes),
        })
    }

    /// Whether `table` (`vocab × dimension`, row-major) is the table this adapter was trained
    /// on: same shape, and each probe token's row points the same way at the same length.
    /// `Err` says why not.
    pub fn fits(&self, table: &[f32], dimension: usize) -> Result<(), String> {
        let d = self.dimension;
        if dimension != d || table.len() != self.token_weights.len() * d {
            return Err(format!(
                "the table is {} × {dimension}, the adapter {} × {d}",
                table.len() / dimension.max(1),
                self.token_weights.len()
            ));
        }
        for (k, &id) in self.probe_ids.iter().enumerate() {
            let got = &table[id * d..][..d];
            let want = &self.probe_rows[k * d..][..d];
            let dot: f64 = got
                .iter()
                .zip(want)
                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                .sum();
            let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
            let (ng, nw) = (norm(got), norm(want));
            let cosine = dot / (ng * nw).max(1e-30);
            if cosine < PROBE_MIN_COSINE || (ng - nw).abs() > PROBE_MAX_NORM_RATIO * nw {
                return Err(format!(
                    "token {id}'s row differs from the one the adapter was trained on (cosine {cosine:.4})"
                ));
            }
        }
        Ok(())
    }

    /// Folds the adapter into `table`: row `t` becomes `w[t] · row[t] · M`. Call [`Self::fits`]
    /// first.
    pub fn fold_into(&self, table: &mut [f32]) {
        let d = self.dimension;
        let mut out = vec![0f32; d];
        for (row, &w) in table.chunks_mut(d).zip(&self.token_weights) {
            out.fill(0.0);
            for (i, &x) in row.iter().enumerate() {
                if x == 0.0 {
                    continue;
                }
                let m = &self.map[i * d..][..d];
                out.iter_mut().zip(m).for_each(|(o, &m)| *o += x * m);
            }
            row.iter_mut().zip(&out).for_each(|(r, &o)| *r = w * o);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_adapter_parses_and_is_finite() {
        let adapter = CodeAdapter::shipped().unwrap();
        assert_eq!(adapter.map.len(), adapter.dimension * adapter.dimension);
        assert!(!adapter.probe_ids.is_empty());
        assert_eq!(adapter.sha256, sha256_hex(CODE_ADAPTER));
    }

    #[test]
    fn folding_is_the_adapter_applied_to_each_row() {
        // Two tokens, dimension 2: w = (2, 0.5), M swaps the axes and doubles the second.
        let adapter = CodeAdapter {
            token_weights: vec![2.0, 0.5],
            map: vec![0.0, 2.0, 1.0, 0.0],
            dimension: 2,
            probe_ids: vec![0],
            probe_rows: vec![1.0, 3.0],
            sha256: String::new(),
        };
        let mut table = vec![1.0, 3.0, -4.0, 2.0];
        assert_eq!(adapter.fits(&table, 2), Ok(()));
        adapter.fold_into(&mut table);
        // Row 0: (1, 3)·M = (3, 2), × 2. Row 1: (−4, 2)·M = (2, −8), × 0.5.
        assert_eq!(table, vec![6.0, 4.0, 1.0, -4.0]);
    }

    #[test]
    fn a_table_it_was_not_trained_on_is_refused() {
        let adapter = CodeAdapter {
            token_weights: vec![1.0, 1.0],
            map: vec![1.0, 0.0, 0.0, 1.0],
            dimension: 2,
            probe_ids: vec![1],
            probe_rows: vec![1.0, 0.0],
            sha256: String::new(),
        };
        // Another shape.
        assert!(adapter.fits(&[1.0; 6], 3).is_err());
        assert!(adapter.fits(&[1.0; 6], 2).is_err());
        // The probe row turned (another PCA basis) or scaled.
        assert!(adapter.fits(&[0.0, 0.0, 0.0, 1.0], 2).is_err());
        assert!(adapter.fits(&[0.0, 0.0, 1.5, 0.0], 2).is_err());
        assert!(adapter.fits(&[5.0, 5.0, 1.0, 0.0001], 2).is_ok());
    }

    #[test]
    fn a_damaged_file_is_an_error() {
        assert!(CodeAdapter::parse(b"garbage").is_err());
        assert!(CodeAdapter::parse(&CODE_ADAPTER[..CODE_ADAPTER.len() / 2]).is_err());
    }
}
