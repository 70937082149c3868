//! Distils a BERT sentence encoder into a static token table (`static_table.rs`), the way
//! Model2Vec does: every token of the WordPiece vocabulary goes through the encoder alone
//! (`[CLS] token [SEP]`), the outputs are centred and reduced with PCA, and each row is scaled
//! by a weight that falls with the token's estimated frequency (SIF: `a / (a + p(token))`, with
//! `p` from Zipf's law over the vocabulary's order, which for BERT's vocabulary is roughly by
//! frequency: single characters first, then words and word pieces). The choices of
//! [`DistillOptions::default`] were made with `tabby eval` on the click set.
//!
//! Runs once, at download time, in well under two minutes on two cores: the ~30k three-token
//! inputs go through the encoder in large packed batches. [`ensure_distilled`] is what
//! `tabby download` calls: it does nothing when the table exists and was made from the same
//! source files with the same options.

use std::{
    io::Read,
    path::{Path, PathBuf},
};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{
    CONFIG_FILE, SentenceEncoder, TOKENIZER_FILE, WEIGHTS_FILE,
    adapter::{self, AppliedAdapter, CodeAdapter},
    dir_id,
    kernels::{MatRef, matmul},
    static_table::{
        FORMAT_VERSION, HEADER_FILE, SourceFiles, TABLE_FILE, TABLE_TENSOR, TableHeader,
    },
};
use crate::registry::{MODEL_INFO_FILE, ModelInfo};

/// How a table is distilled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DistillOptions {
    pub pooling: TokenPooling,
    /// Principal components kept after centring; `None` keeps the encoder's vectors as they
    /// are (not centred).
    pub dimensions: Option<usize>,
    pub weighting: TokenWeighting,
    /// sha256 of the code adapter to fold into the table (`adapter.rs`), `None` for the plain
    /// distilled table. Applied only where the table is the one the adapter was trained on
    /// ([`TableHeader::code_adapter`] says whether it was).
    #[serde(default)]
    pub code_adapter: Option<String>,
}

/// Measured with `tabby eval` (embedding leg, Recall@10 nl / completion; the leg compares sign
/// bits): the weighting matters most (none 0.12 / 0.05, log-rank 0.23 / 0.09, SIF a = 1e-4
/// 0.26 / 0.15, a = 1e-5 0.32 / 0.19, a = 1e-6 0.30 / 0.18); the token's own output beats the
/// mean over `[CLS] token [SEP]` (0.32 / 0.19 against 0.27 / 0.15 with a = 1e-5); 256
/// components are as good as 384 (0.32 / 0.16) and better than 128 (0.26 / 0.15), at two
/// thirds of the size.
impl Default for DistillOptions {
    fn default() -> Self {
        Self {
            pooling: TokenPooling::Token,
            dimensions: Some(256),
            weighting: TokenWeighting::Sif { a: 1e-5 },
            code_adapter: Some(adapter::shipped_sha256().to_string()),
        }
    }
}

/// Which output of `[CLS] token [SEP]` becomes the token's vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenPooling {
    /// The token's own output vector.
    Token,
    /// The sentence embedding: the mean over all three outputs.
    Mean,
}

/// The weight of each token's vector, from its rank `r` (1 = most frequent) among the
/// vocabulary's real tokens in id order.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TokenWeighting {
    None,
    /// `a / (a + p)`, `p = (1/r) / H(n)` (Zipf): frequent tokens count less.
    Sif {
        a: f64,
    },
    /// `ln(1 + r)`.
    LogRank,
}

/// What [`ensure_distilled`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum DistillOutcome {
    /// The table was current: same source files, same options.
    UpToDate,
    Distilled,
}

/// Distils `source_dir` (a BERT model directory) into `out_dir` with the default options,
/// unless `out_dir` already holds a table made from the same source files with them.
/// `progress(done, total)` follows the encoder pass.
pub fn ensure_distilled(
    source_dir: &Path,
    out_dir: &Path,
    progress: &dyn Fn(usize, usize),
) -> anyhow::Result<DistillOutcome> {
    let options = DistillOptions::default();
    let source = source_files(source_dir)?;
    if let Ok(header) = TableHeader::load(out_dir)
        && header.format_version == FORMAT_VERSION
        && header.distillation == options
        && header.source == source
        && out_dir.join(TOKENIZER_FILE).is_file()
        && sha256_file(&out_dir.join(TABLE_FILE)).is_ok_and(|h| h == header.table_sha256)
    {
        return Ok(DistillOutcome::UpToDate);
    }
    distill(source_dir, out_dir, &options, progress)?;
    Ok(DistillOutcome::Distilled)
}

/// Distils `source_dir` into `out_dir` (created if needed): the table, its header, a copy of
/// the tokenizer and, if absent, `tabby.json`. The header is written last, so an interrupted
/// run leaves no header and is redone.
pub fn distill(
    source_dir: &Path,
    out_dir: &Path,
    options: &DistillOptions,
    progress: &dyn Fn(usize, usize),
) -> anyhow::Result<TableHeader> {
    let source = source_files(source_dir)?;
    let encoder = SentenceEncoder::load(source_dir)?;
    let tokenizer = &encoder.tokenizer;
    let vocab_size = tokenizer.get_vocab_size(true);
    let id = |token: &str| {
        tokenizer.token_to_id(token).with_context(|| {
            format!(
                "{}: no {token} token (not a BERT tokenizer)",
                source_dir.join(TOKENIZER_FILE).display()
            )
        })
    };
    let (cls, sep) = (id("[CLS]")?, id("[SEP]")?);
    let kept = real_tokens(tokenizer, vocab_size);

    let h = encoder.dimension;
    let mut raw = vec![0f32; vocab_size * h];
    const BATCH: usize = 1024;
    let ids: Vec<u32> = (0..vocab_size as u32)
        .filter(|&t| kept[t as usize])
        .collect();
    progress(0, ids.len());
    for (done, batch) in ids.chunks(BATCH).enumerate() {
        let inputs: Vec<Vec<u32>> = batch.iter().map(|&t| vec![cls, t, sep]).collect();
        let states = encoder
            .encoder
            .last_hidden_states(&inputs)
            .map_err(anyhow::Error::msg)
            .context("the encoder failed")?;
        for (&t, state) in batch.iter().zip(&states) {
            let row = &mut raw[t as usize * h..][..h];
            match options.pooling {
                TokenPooling::Token => row.copy_from_slice(&state[h..2 * h]),
                TokenPooling::Mean => {
                    for token in state.chunks(h) {
                        row.iter_mut().zip(token).for_each(|(r, v)| *r += v / 3.0);
                    }
                }
            }
        }
        progress((done * BATCH + batch.len()).min(ids.len()), ids.len());
    }
    let (mut table, dimension) = post_process(&raw, h, &kept, options);
    let code_adapter = match &options.code_adapter {
        None => None,
        Some(sha) => {
            let adapter = CodeAdapter::shipped()?;
            if &adapter.sha256 != sha {
                bail!("no code adapter with sha256 {sha} in this build");
            }
            match adapter.fits(&table, dimension) {
                Ok(()) => {
                    adapter.fold_into(&mut table);
                    Some(AppliedAdapter {
                        sha256: adapter.sha256,
                    })
                }
                Err(why) => {
                    tracing::warn!(
                        "the code adapter was not applied to {}: {why}; the plain distilled table is used",
                        out_dir.display()
                    );
                    None
                }
            }
        }
    };

    std::fs::create_dir_all(out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;
    let _ = std::fs::remove_file(out_dir.join(HEADER_FILE));
    let table_path = out_dir.join(TABLE_FILE);
    let partial = partial_path(&table_path);
    let tensor =
        candle_core::Tensor::from_vec(table, (vocab_size, dimension), &candle_core::Device::Cpu)
            .and_then(|t| t.to_dtype(candle_core::DType::F16))?;
    candle_core::safetensors::save(&[(TABLE_TENSOR, tensor)].into_iter().collect(), &partial)
        .with_context(|| format!("cannot write {}", partial.display()))?;
    rename(&partial, &table_path)?;
    let table_sha256 = sha256_file(&table_path)?;

    copy(
        &source_dir.join(TOKENIZER_FILE),
        &out_dir.join(TOKENIZER_FILE),
    )?;
    let info_path = out_dir.join(MODEL_INFO_FILE);
    if !info_path.exists() {
        write(
            &info_path,
            &(serde_json::to_string_pretty(&ModelInfo::default())? + "\n"),
        )?;
    }
    let header = TableHeader {
        format_version: FORMAT_VERSION,
        vocab_size,
        dimension,
        table_sha256,
        source,
        distillation: options.clone(),
        code_adapter,
    };
    write(
        &out_dir.join(HEADER_FILE),
        &(serde_json::to_string_pretty(&header)? + "\n"),
    )?;
    Ok(header)
}

/// Which ids WordPiece can emit for text: not the special tokens, not BERT's `[unusedN]`
/// placeholders. Only these are encoded, fit the PCA and get a row; the rest stay zero.
fn real_tokens(tokenizer: &tokenizers::Tokenizer, vocab_size: usize) -> Vec<bool> {
    let mut kept = vec![false; vocab_size];
    for (token, id) in tokenizer.get_vocab(false) {
        let placeholder = token.starts_with("[unused") && token.ends_with(']');
        if let Some(k) = kept.get_mut(id as usize) {
            *k = !placeholder;
        }
    }
    for (id, added) in tokenizer.get_added_tokens_decoder() {
        if added.special
            && let Some(k) = kept.get_mut(id as usize)
        {
            *k = false;
        }
    }
    kept
}

/// Centring + PCA (when asked) and the frequency weights, over the `kept` rows of `raw`
/// (`kept.len() × h`); other rows come out zero. Returns the table and its width.
fn post_process(
    raw: &[f32],
    h: usize,
    kept: &[bool],
    options: &DistillOptions,
) -> (Vec<f32>, usize) {
    let n = kept.len();
    let (mut table, d) = match options.dimensions {
        None => (raw.to_vec(), h),
        Some(d) => {
            let d = d.clamp(1, h);
            let rows: Vec<usize> = (0..n).filter(|&r| kept[r]).collect();
            let mut mean = vec![0f64; h];
            for &r in &rows {
                for (m, v) in mean.iter_mut().zip(&raw[r * h..][..h]) {
                    *m += f64::from(*v);
                }
            }
            mean.iter_mut().for_each(|m| *m /= rows.len().max(1) as f64);
            let mut centred = vec![0f32; rows.len() * h];
            for (out, &r) in centred.chunks_mut(h).zip(&rows) {
                for ((o, v), m) in out.iter_mut().zip(&raw[r * h..][..h]).zip(&mean) {
                    *o = (f64::from(*v) - m) as f32;
                }
            }
            let x = MatRef::new(&centred, 0, rows.len(), h, h);
            let mut covariance = vec![0f32; h * h];
            matmul(&mut covariance, 0, h, x.t(), x, false, true);
            let (_, vectors) =
                symmetric_eigen(covariance.iter().map(|&c| f64::from(c)).collect(), h);
            // The top `d` eigenvectors as the columns of an `h × d` projection.
            let mut projection = vec![0f32; h * d];
            for i in 0..h {
                for j in 0..d {
                    projection[i * d + j] = vectors[i * h + j] as f32;
                }
            }
            let mut projected = vec![0f32; rows.len() * d];
            matmul(
                &mut projected,
                0,
                d,
                x,
                MatRef::new(&projection, 0, h, d, d),
                false,
                true,
            );
            let mut table = vec![0f32; n * d];
            for (row, &r) in projected.chunks(d).zip(&rows) {
                table[r * d..][..d].copy_from_slice(row);
            }
            (table, d)
        }
    };
    let real = kept.iter().filter(|&&k| k).count().max(1);
    let harmonic: f64 = (1..=real).map(|r| 1.0 / r as f64).sum();
    let mut rank = 0usize;
    for (r, row) in table.chunks_mut(d).enumerate() {
        if !kept[r] {
            row.fill(0.0);
            continue;
        }
        rank += 1;
        let weight = match options.weighting {
            TokenWeighting::None => 1.0,
            TokenWeighting::Sif { a } => {
                let p = 1.0 / rank as f64 / harmonic;
                a / (a + p)
            }
            TokenWeighting::LogRank => (1.0 + rank as f64).ln(),
        } as f32;
        row.iter_mut().for_each(|v| *v *= weight);
    }
    (table, d)
}

/// Eigenvalues (descending) and eigenvectors (column `j` of the row-major `n × n` result goes
/// with eigenvalue `j`) of the symmetric `n × n` matrix `a`, by cyclic Jacobi rotations. Each
/// eigenvector's largest component is positive, so the result does not depend on rounding.
fn symmetric_eigen(mut a: Vec<f64>, n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut v = vec![0f64; n * n];
    for i in 0..n {
        v[i * n + i] = 1.0;
    }
    let scale: f64 = a.iter().map(|x| x * x).sum::<f64>().max(f64::MIN_POSITIVE);
    for _sweep in 0..64 {
        let off: f64 = (0..n)
            .flat_map(|p| (0..n).filter(move |&q| q != p).map(move |q| (p, q)))
            .map(|(p, q)| a[p * n + q] * a[p * n + q])
            .sum();
        if off <= 1e-24 * scale {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                let apq = a[p * n + q];
                if apq.abs() <= 1e-300 {
                    continue;
                }
                let theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..n {
                    let (akp, akq) = (a[k * n + p], a[k * n + q]);
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for k in 0..n {
                    let (apk, aqk) = (a[p * n + k], a[q * n + k]);
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
                for k in 0..n {
                    let (vkp, vkq) = (v[k * n + p], v[k * n + q]);
                    v[k * n + p] = c * vkp - s * vkq;
                    v[k * n + q] = s * vkp + c * vkq;
                }
            }
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| a[j * n + j].total_cmp(&a[i * n + i]).then(i.cmp(&j)));
    let values = order.iter().map(|&i| a[i * n + i]).collect();
    let mut vectors = vec![0f64; n * n];
    for (j, &i) in order.iter().enumerate() {
        let largest = (0..n)
            .map(|k| v[k * n + i])
            .max_by(|x, y| x.abs().total_cmp(&y.abs()))
            .unwrap_or(1.0);
        let sign = if largest < 0.0 { -1.0 } else { 1.0 };
        for k in 0..n {
            vectors[k * n + j] = sign * v[k * n + i];
        }
    }
    (values, vectors)
}

/// The sha256 of each source file a table depends on.
fn source_files(source_dir: &Path) -> anyhow::Result<SourceFiles> {
    let hash = |name: &str| {
        let path = source_dir.join(name);
        if !path.is_file() {
            bail!(
                "{} is missing: the static embedding is distilled from the sentence encoder; \
                 run `tabby download` first",
                path.display()
            );
        }
        sha256_file(&path)
    };
    Ok(SourceFiles {
        model: dir_id(source_dir),
        weights_sha256: hash(WEIGHTS_FILE)?,
        config_sha256: hash(CONFIG_FILE)?,
        tokenizer_sha256: hash(TOKENIZER_FILE)?,
    })
}

fn sha256_file(path: &Path) -> anyhow::Result<String> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(format!("{:x}", hasher.finalize()))
}

fn partial_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.partial"))
}

fn rename(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::rename(from, to)
        .with_context(|| format!("cannot move {} to {}", from.display(), to.display()))
}

/// Writes through a temporary file, so a reader never sees half a file.
fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    let partial = partial_path(path);
    std::fs::write(&partial, text)
        .with_context(|| format!("cannot write {}", partial.display()))?;
    rename(&partial, path)
}

fn copy(from: &Path, to: &Path) -> anyhow::Result<()> {
    let partial = partial_path(to);
    std::fs::copy(from, &partial)
        .with_context(|| format!("cannot copy {} to {}", from.display(), partial.display()))?;
    rename(&partial, to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eigenvectors_of_a_known_matrix() {
        // Eigenvalues 3 (along (1,1)/√2), 1 (along (1,-1)/√2) and 5 (the third axis).
        let a = vec![2.0, 1.0, 0.0, 1.0, 2.0, 0.0, 0.0, 0.0, 5.0];
        let (values, vectors) = symmetric_eigen(a, 3);
        let close = |x: f64, y: f64| (x - y).abs() < 1e-9;
        assert!(close(values[0], 5.0) && close(values[1], 3.0) && close(values[2], 1.0));
        let column = |j: usize| [vectors[j], vectors[3 + j], vectors[6 + j]];
        let r = std::f64::consts::FRAC_1_SQRT_2;
        assert_eq!(
            column(0).map(|x| x.abs() < 1e-9 || close(x, 1.0)),
            [true; 3]
        );
        assert!(close(column(1)[0], r) && close(column(1)[1], r));
        // Largest component positive: (−1, 1)/√2 and (1, −1)/√2 tie; either has one positive.
        assert!(close(column(2)[0].abs(), r) && close(column(2)[0], -column(2)[1]));
    }

    #[test]
    fn pca_keeps_the_direction_of_largest_variance_and_zeroes_other_rows() {
        // Points along (1, 1, 0) with a little noise on the third axis, plus an excluded row.
        let mut raw = Vec::new();
        for i in 0..20 {
            let t = i as f32 - 9.5;
            raw.extend([10.0 + t, 10.0 + t, 0.1 * ((i % 3) as f32 - 1.0)]);
        }
        raw.extend([100.0, -100.0, 100.0]);
        let mut kept = vec![true; 21];
        kept[20] = false;
        let options = DistillOptions {
            pooling: TokenPooling::Mean,
            dimensions: Some(1),
            weighting: TokenWeighting::None,
            code_adapter: None,
        };
        let (table, d) = post_process(&raw, 3, &kept, &options);
        assert_eq!(d, 1);
        // Centred and projected: t·√2, up to sign.
        for (i, value) in table[..20].iter().enumerate() {
            let expected = (i as f32 - 9.5) * std::f32::consts::SQRT_2;
            assert!((value.abs() - expected.abs()).abs() < 1e-3, "{i}: {value}");
        }
        assert_eq!(table[20], 0.0);
    }

    #[test]
    fn sif_weights_grow_with_rank_and_log_rank_too() {
        let raw = vec![1.0f32; 5 * 2];
        let kept = vec![false, true, true, true, true];
        for weighting in [TokenWeighting::Sif { a: 0.1 }, TokenWeighting::LogRank] {
            let options = DistillOptions {
                pooling: TokenPooling::Mean,
                dimensions: None,
                weighting,
                code_adapter: None,
            };
            let (table, _) = post_process(&raw, 2, &kept, &options);
            assert_eq!(&table[..2], &[0.0, 0.0]);
            let weights: Vec<f32> = table.chunks(2).skip(1).map(|r| r[0]).collect();
            assert!(weights.windows(2).all(|w| w[0] < w[1]), "{weights:?}");
        }
    }
}
