//! Expansion of a question's BM25 terms with the code words its words point to ("true" →
//! `bool`, "remove" → `pop`, "length" → `len`): a question is written in English, the code it
//! asks for in identifiers, and BM25 only meets words both share.
//!
//! The table (`assets/nl-expansion.tsv`) is learned from doc sentence ↔ definition pairs of
//! generated training sets by `scripts/eval/train_expansion.py`; both sides are search words
//! (split, lower-cased, stemmed), the same the index holds. The file also says how many code
//! words a question gets and at what weight they join its BM25 query; the ranker's content
//! features still read the question's own words. `tabby eval --nl-expansion FILE|none`
//! measures another table, or none.

use std::{
    collections::{HashMap, HashSet},
    path::Path,
    sync::{Arc, OnceLock},
};

const BUILTIN: &str = include_str!("../../../assets/nl-expansion.tsv");

/// Bounds on a table's parameters: a question's BM25 query stays within
/// `query::MAX_QUERY_TERMS` distinct terms and a few expansions, and no code word can outweigh
/// the question by orders of magnitude.
const MAX_EXPANSIONS: usize = 16;
const MAX_WEIGHT: f32 = 10.0;

#[derive(Debug)]
pub struct NlExpansion {
    /// The first word of the table's first comment line (`nl-expansion-v1`).
    version: String,
    /// Code words one question gets at most (`@max`).
    max: usize,
    /// Each code word's weight in the BM25 query, against 1 for each occurrence of a word of
    /// the question (`@weight`).
    weight: f32,
    table: HashMap<String, Vec<(String, f32)>>,
}

impl NlExpansion {
    /// The table compiled into this build (None, logged once, if it does not parse: questions
    /// are then searched by their own words; a unit test keeps that from shipping).
    pub fn builtin() -> Option<Arc<NlExpansion>> {
        static BUILT: OnceLock<Option<Arc<NlExpansion>>> = OnceLock::new();
        BUILT
            .get_or_init(|| match NlExpansion::parse(BUILTIN) {
                Ok(x) => Some(Arc::new(x)),
                Err(e) => {
                    tracing::error!("the built-in nl expansion table is unusable ({e})");
                    None
                }
            })
            .clone()
    }

    pub fn load(path: &Path) -> anyhow::Result<NlExpansion> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    /// Reads the table's format: `#` comment lines, the parameters `@max<TAB>N` and
    /// `@weight<TAB>W`, then `word<TAB>code:score,code:score` lines.
    pub fn parse(text: &str) -> Result<NlExpansion, String> {
        let version = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# "))
            .and_then(|l| l.split(':').next())
            .filter(|v| !v.is_empty() && !v.contains(' '))
            .unwrap_or("unversioned")
            .to_string();
        let (mut max, mut weight) = (None, None);
        let mut table = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: &str| format!("line {}: {why}: {line:?}", i + 1);
            let (word, rest) = line
                .split_once('\t')
                .ok_or_else(|| bad("expected a word, a tab and its code words"))?;
            match word {
                "@max" => {
                    let n: usize = rest.parse().map_err(|_| bad("@max needs a number"))?;
                    if n == 0 || n > MAX_EXPANSIONS {
                        return Err(bad(&format!("@max must be 1 to {MAX_EXPANSIONS}")));
                    }
                    max = Some(n);
                    continue;
                }
                "@weight" => {
                    let w: f32 = rest.parse().map_err(|_| bad("@weight needs a number"))?;
                    if !(w > 0.0 && w <= MAX_WEIGHT) {
                        return Err(bad(&format!(
                            "@weight must be above 0, at most {MAX_WEIGHT}"
                        )));
                    }
                    weight = Some(w);
                    continue;
                }
                w if w.starts_with('@') => return Err(bad("unknown parameter")),
                _ => {}
            }
            let mut targets = Vec::new();
            for item in rest.split(',') {
                let (code, score) = item
                    .rsplit_once(':')
                    .ok_or_else(|| bad("expected code:score"))?;
                let score: f32 = score.parse().map_err(|_| bad("a score is not a number"))?;
                if code.is_empty() || !score.is_finite() || score <= 0.0 {
                    return Err(bad("expected a code word and a positive score"));
                }
                targets.push((code.to_string(), score));
            }
            table.insert(word.to_string(), targets);
        }
        Ok(NlExpansion {
            version,
            max: max.ok_or("the table does not give @max")?,
            weight: weight.ok_or("the table does not give @weight")?,
            table,
        })
    }

    pub fn version(&self) -> &str {
        &self.version
    }

    pub fn weight(&self) -> f32 {
        self.weight
    }

    /// Up to the table's `@max` code words that the question's search words `terms` point to
    /// and do not hold themselves, best first: a word's score is the sum of its scores over
    /// the distinct terms that point to it (ties by the word, so the order is stable).
    pub fn expand(&self, terms: &[String]) -> Vec<String> {
        let own: HashSet<&str> = terms.iter().map(String::as_str).collect();
        let mut scores: HashMap<&str, f32> = HashMap::new();
        for term in &own {
            for (code, score) in self.table.get(*term).into_iter().flatten() {
                if !own.contains(code.as_str()) {
                    *scores.entry(code.as_str()).or_default() += score;
                }
            }
        }
        let mut ranked: Vec<(&str, f32)> = scores.into_iter().collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
        ranked
            .into_iter()
            .take(self.max)
            .map(|(w, _)| w.to_string())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn builtin_table_maps_question_words_to_code_words() {
        let table = NlExpansion::builtin().expect("the built-in table parses");
        assert_eq!(table.version(), "nl-expansion-v1");
        assert_eq!((table.max, table.weight()), (6, 1.0));
        // "Return true if the map holds no entries" → `bool` among the expansions.
        let got = table.expand(&terms(&["return", "true", "map", "hold", "no", "entri"]));
        assert!(got.iter().any(|w| w == "bool"), "{got:?}");
        assert!(!got.iter().any(|w| w == "true" || w == "map"), "{got:?}");
        assert!(got.len() <= 6);
        assert!(table.expand(&terms(&["zzzunknown"])).is_empty());
    }

    #[test]
    fn scores_add_over_terms_and_own_terms_are_left_out() {
        let text = "# t\n@max\t3\n@weight\t0.5\nlength\tlen:0.8,size:0.5\ncount\tlen:0.3,num:0.6\n";
        let table = NlExpansion::parse(text).unwrap();
        assert_eq!(table.version(), "t");
        assert_eq!(table.weight(), 0.5);
        assert_eq!(
            table.expand(&terms(&["length", "count"])),
            vec!["len", "num", "size"]
        );
        assert_eq!(table.expand(&terms(&["length", "len"])), vec!["size"]);
        let one = NlExpansion::parse(&text.replace("@max\t3", "@max\t1")).unwrap();
        assert_eq!(one.expand(&terms(&["length", "count"])), vec!["len"]);
    }

    #[test]
    fn malformed_tables_are_refused_with_the_line() {
        let head = "# t\n@max\t6\n@weight\t1\n";
        for (bad, says) in [
            ("word\n", "line 4"),
            ("word\tcode\n", "code:score"),
            ("word\tcode:x\n", "not a number"),
            ("word\tcode:-1\n", "positive"),
            ("word\t:1\n", "positive"),
            ("@color\tred\n", "unknown parameter"),
        ] {
            let err = NlExpansion::parse(&format!("{head}{bad}")).unwrap_err();
            assert!(err.contains(says), "{bad:?}: {err}");
        }
        for (params, says) in [
            ("@weight\t1\n", "@max"),
            ("@max\t6\n", "@weight"),
            ("@max\t0\n@weight\t1\n", "1 to 16"),
            ("@max\t100000\n@weight\t1\n", "1 to 16"),
            ("@max\t6\n@weight\tNaN\n", "at most 10"),
            ("@max\t6\n@weight\t1e9\n", "at most 10"),
            ("@max\t6\n@weight\t0\n", "above 0"),
        ] {
            let err = NlExpansion::parse(&format!("# t\n{params}a\tb:1\n")).unwrap_err();
            assert!(err.contains(says), "{params:?}: {err}");
        }
    }
}
