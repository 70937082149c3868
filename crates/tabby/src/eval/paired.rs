//! Paired comparison of completion-eval variants: each variant against a baseline on the same
//! queries, with how sure the difference is. A set of 40–120 queries moves by one to three
//! points per query, so a ratio alone says little; this adds the queries won and lost, a 95 %
//! bootstrap interval of the ratio (resampling queries, seeded) and an exact two-sided sign
//! test on the queries where the two differ.
//!
//! `tabby eval --mode completion` prints it after its table (every variant against the first);
//! `tabby eval compare FILE…` prints it from the per-query files `--out` wrote, so runs made at
//! different times can be compared without running the model again.

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
};

use anyhow::{Context, bail};
use serde::Deserialize;

use super::Rng;

/// Resamples of the bootstrap, and its seed (the same figures on every run).
const RESAMPLES: usize = 10_000;
const SEED: u64 = 20_240_601;

/// Largest per-query file read (a 1,000-query run with prompts is a few MB).
const MAX_FILE_BYTES: u64 = 256 << 20;

#[derive(clap::Args)]
pub struct CompareOptions {
    /// Per-query files written by `tabby eval --mode completion --out` (rows with `id`,
    /// `variant` and `identifier_match`); a variant may come from any of them.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// The variant the others are compared against.
    #[arg(long, default_value = "off")]
    pub base: String,
}

/// One variant against the baseline, over the queries both answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub n: usize,
    pub hits: usize,
    pub base_hits: usize,
    /// Queries only this variant gets right / only the baseline does.
    pub won: usize,
    pub lost: usize,
    /// hits / base_hits; none when the baseline gets nothing right.
    pub ratio: Option<f64>,
    /// The 2.5th and 97.5th percentiles of the ratio over resampled query sets (infinite where
    /// a resample's baseline gets nothing right); none without queries.
    pub interval: Option<(f64, f64)>,
    /// Exact two-sided sign test over the won and lost queries.
    pub p: f64,
}

/// `variant[i]` and `base[i]` are the same query's outcomes.
pub fn compare(base: &[bool], variant: &[bool]) -> Comparison {
    assert_eq!(base.len(), variant.len(), "paired outcomes");
    let n = base.len();
    let hits = variant.iter().filter(|h| **h).count();
    let base_hits = base.iter().filter(|h| **h).count();
    let won = base
        .iter()
        .zip(variant)
        .filter(|(b, v)| !**b && **v)
        .count();
    let lost = base
        .iter()
        .zip(variant)
        .filter(|(b, v)| **b && !**v)
        .count();
    let ratio = (base_hits > 0).then(|| hits as f64 / base_hits as f64);
    let interval = (n > 0).then(|| {
        let mut rng = Rng(SEED);
        let mut ratios: Vec<f64> = (0..RESAMPLES)
            .map(|_| {
                let (mut h, mut b) = (0usize, 0usize);
                for _ in 0..n {
                    let i = (rng.next() % n as u64) as usize;
                    h += variant[i] as usize;
                    b += base[i] as usize;
                }
                match b {
                    0 if h == 0 => 1.0,
                    0 => f64::INFINITY,
                    b => h as f64 / b as f64,
                }
            })
            .collect();
        ratios.sort_by(f64::total_cmp);
        let at = |q: f64| ratios[((RESAMPLES as f64 * q) as usize).min(RESAMPLES - 1)];
        (at(0.025), at(0.975))
    });
    Comparison {
        n,
        hits,
        base_hits,
        won,
        lost,
        ratio,
        interval,
        p: sign_test(won, lost),
    }
}

/// P(a split at least as uneven as `a` : `b` | each side equally likely), both tails.
fn sign_test(a: usize, b: usize) -> f64 {
    let n = a + b;
    if n == 0 {
        return 1.0;
    }
    let k = a.min(b);
    // ln C(n, i) / 2^n, summed for i ≤ k in log space (n may be thousands).
    let mut ln_pmf = -(n as f64) * std::f64::consts::LN_2;
    let mut tail = 0.0;
    for i in 0..=k {
        tail += ln_pmf.exp();
        ln_pmf += ((n - i) as f64 / (i + 1) as f64).ln();
    }
    (2.0 * tail).min(1.0)
}

fn ratio_text(r: f64) -> String {
    if r.is_finite() {
        format!("{r:.2}×")
    } else {
        "∞".into()
    }
}

fn p_text(p: f64) -> String {
    if p < 0.001 {
        "< 0.001".into()
    } else {
        format!("{p:.3}")
    }
}

/// The comparison table, each row one variant against `base`.
pub fn print_table(base: &str, rows: &[(String, Comparison)]) {
    println!(
        "identifier match against `{base}` on the same queries: ratio, its 95 % bootstrap \
         interval ({RESAMPLES} resamples of the queries, seeded), queries won / lost (right \
         only with the variant / only with `{base}`), exact two-sided sign test p"
    );
    println!(
        "| variant | n | identifier match | `{base}` | ratio | 95 % interval | won / lost | sign test p |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (name, c) in rows {
        let share = |h: usize| h as f64 / c.n.max(1) as f64;
        println!(
            "| {name} | {} | {:.3} | {:.3} | {} | {} | {} / {} | {} |",
            c.n,
            share(c.hits),
            share(c.base_hits),
            c.ratio.map_or("—".into(), ratio_text),
            c.interval.map_or("—".into(), |(lo, hi)| format!(
                "{} – {}",
                ratio_text(lo),
                ratio_text(hi)
            )),
            c.won,
            c.lost,
            p_text(c.p),
        );
    }
}

#[derive(Deserialize)]
struct Row {
    id: String,
    variant: String,
    identifier_match: bool,
}

/// `tabby eval compare`: the paired comparison from stored per-query files.
pub fn run(options: CompareOptions) -> anyhow::Result<()> {
    // Variant → query id → outcome, variants in the order they first appear.
    let mut order: Vec<String> = Vec::new();
    let mut outcomes: HashMap<String, BTreeMap<String, bool>> = HashMap::new();
    for path in &options.files {
        let size = std::fs::metadata(path)
            .with_context(|| format!("cannot read {}", path.display()))?
            .len();
        if size > MAX_FILE_BYTES {
            bail!(
                "{} is {size} bytes, over the {MAX_FILE_BYTES} this reads",
                path.display()
            );
        }
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let row: Row = serde_json::from_str(line).with_context(|| {
                format!(
                    "{}:{}: not a row of `tabby eval --mode completion --out` (id, variant, \
                     identifier_match)",
                    path.display(),
                    i + 1
                )
            })?;
            if !outcomes.contains_key(&row.variant) {
                order.push(row.variant.clone());
            }
            let slot = outcomes.entry(row.variant.clone()).or_default();
            if slot.insert(row.id.clone(), row.identifier_match).is_some() {
                bail!(
                    "{}:{}: query {} of variant `{}` appears twice; compare one run of each \
                     variant",
                    path.display(),
                    i + 1,
                    row.id,
                    row.variant
                );
            }
        }
    }
    let Some(base) = outcomes.get(&options.base) else {
        bail!(
            "no rows of the baseline variant `{}` (the files hold: {})",
            options.base,
            order.join(", ")
        );
    };
    let mut rows = Vec::new();
    for name in order.iter().filter(|v| **v != options.base) {
        let (b, v): (Vec<bool>, Vec<bool>) = outcomes[name]
            .iter()
            .filter_map(|(id, hit)| base.get(id).map(|b| (*b, *hit)))
            .unzip();
        if b.is_empty() {
            bail!(
                "variant `{name}` shares no query id with `{}`",
                options.base
            );
        }
        rows.push((name.clone(), compare(&b, &v)));
    }
    if rows.is_empty() {
        bail!("the files hold only the baseline `{}`", options.base);
    }
    print_table(&options.base, &rows);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcomes(hits: usize, n: usize) -> Vec<bool> {
        (0..n).map(|i| i < hits).collect()
    }

    #[test]
    fn the_same_outcomes_are_a_ratio_of_one_and_no_evidence() {
        let a = outcomes(15, 100);
        let c = compare(&a, &a);
        assert_eq!(c.ratio, Some(1.0));
        assert_eq!(c.interval, Some((1.0, 1.0)));
        assert_eq!((c.won, c.lost), (0, 0));
        assert_eq!(c.p, 1.0);
    }

    #[test]
    fn wins_and_losses_are_counted_per_query_and_the_interval_holds_the_ratio() {
        // Baseline right on queries 0..11; the variant on 4..19: 4 lost, 8 won.
        let base = outcomes(11, 100);
        let variant: Vec<bool> = (0..100).map(|i| (4..19).contains(&i)).collect();
        let c = compare(&base, &variant);
        assert_eq!((c.hits, c.base_hits, c.won, c.lost), (15, 11, 8, 4));
        let ratio = c.ratio.unwrap();
        assert!((ratio - 15.0 / 11.0).abs() < 1e-12);
        let (lo, hi) = c.interval.unwrap();
        assert!(lo < ratio && ratio < hi, "{lo} < {ratio} < {hi}");
        // 8 : 4 is weak evidence: P = 2 · P(X ≤ 4 | n = 12) = 794 / 2048.
        assert!((c.p - 794.0 / 2048.0).abs() < 1e-12, "{}", c.p);
        // Seeded: the same inputs give the same interval.
        assert_eq!(compare(&base, &variant), c);
    }

    #[test]
    fn a_clear_difference_has_a_small_p_and_an_interval_above_one() {
        let base = outcomes(10, 100);
        let variant = outcomes(40, 100);
        let c = compare(&base, &variant);
        assert_eq!((c.won, c.lost), (30, 0));
        assert!(c.p < 1e-8, "{}", c.p);
        let (lo, _) = c.interval.unwrap();
        assert!(lo > 2.0, "{lo}");
    }

    #[test]
    fn a_baseline_with_no_hit_has_no_ratio() {
        let c = compare(&outcomes(0, 20), &outcomes(3, 20));
        assert_eq!(c.ratio, None);
        assert_eq!(c.interval.map(|(_, hi)| hi.is_infinite()), Some(true));
        assert!(compare(&[], &[]).interval.is_none());
    }

    #[test]
    fn the_sign_test_is_exact_and_symmetric() {
        assert_eq!(sign_test(0, 0), 1.0);
        assert_eq!(p_text(sign_test(30, 0)), "< 0.001");
        assert_eq!(p_text(sign_test(8, 4)), "0.388");
        assert!((sign_test(5, 0) - 2.0 / 32.0).abs() < 1e-12);
        assert_eq!(sign_test(3, 9), sign_test(9, 3));
        // Large counts stay finite (log space).
        let p = sign_test(2_000, 2_400);
        assert!(p > 0.0 && p < 1e-6, "{p}");
    }

    fn write(dir: &std::path::Path, name: &str, rows: &[(&str, &str, bool)]) -> PathBuf {
        let path = dir.join(name);
        let text: String = rows
            .iter()
            .map(|(id, v, hit)| {
                format!(
                    "{}\n",
                    serde_json::json!({"id": id, "variant": v, "identifier_match": hit, "prompt": "x"})
                )
            })
            .collect();
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn stored_runs_compare_by_query_id_and_bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let off = write(
            dir.path(),
            "off.jsonl",
            &[("q1", "off", true), ("q2", "off", false)],
        );
        let on = write(
            dir.path(),
            "on.jsonl",
            &[("q2", "on", true), ("q1", "on", true), ("q3", "on", true)],
        );
        let run_with = |files: Vec<PathBuf>, base: &str| {
            run(CompareOptions {
                files,
                base: base.into(),
            })
        };
        run_with(vec![off.clone(), on.clone()], "off").unwrap();

        let err = run_with(vec![on.clone()], "off").unwrap_err().to_string();
        assert!(
            err.contains("no rows of the baseline variant `off`"),
            "{err}"
        );
        let err = run_with(vec![off.clone(), off.clone()], "off")
            .unwrap_err()
            .to_string();
        assert!(err.contains("appears twice"), "{err}");
        let bad = dir.path().join("bad.jsonl");
        std::fs::write(&bad, "{\"id\": 1}\n").unwrap();
        let err = format!("{:#}", run_with(vec![off, bad], "off").unwrap_err());
        assert!(err.contains("bad.jsonl:1"), "{err}");
    }
}
