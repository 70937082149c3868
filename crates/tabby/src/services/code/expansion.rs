//! Expansion of a question's BM25 terms with the code words its words point to ("true" →
//! `bool`, "remove" → `pop`, "length" → `len`): a question is written in English, the code it
//! asks for in identifiers, and BM25 only meets words both share.
//!
//! The table (`assets/nl-expansion.tsv`) is learned from doc sentence ↔ definition pairs of
//! generated training sets by `scripts/eval/train_expansion.py`; both sides are search words
//! (split, lower-cased, stemmed), the same the index holds. Expansion terms join the BM25 query
//! at a fraction of an original term's weight; the ranker's content features still read the
//! question's own words.

use std::{
    collections::{HashMap, HashSet},
    sync::OnceLock,
};

const BUILTIN: &str = include_str!("../../../assets/nl-expansion.tsv");

/// Expansion terms one question gets at most.
pub const MAX_EXPANSIONS: usize = 6;
/// An expansion term's weight, against 1 for each occurrence of a term of the question. Chosen
/// on the dev sets' service Recall@10 among 0.2, 0.33, 0.5, 0.7, 0.85 and 1 (README, "Code words
/// for a question's words").
pub const EXPANSION_WEIGHT: f32 = 1.0;

pub struct NlExpansion {
    /// The first word of the table's first comment line (`nl-expansion-v1`).
    version: String,
    table: HashMap<String, Vec<(String, f32)>>,
}

impl NlExpansion {
    /// The table compiled into the binary.
    pub fn builtin() -> &'static NlExpansion {
        static BUILT: OnceLock<NlExpansion> = OnceLock::new();
        BUILT.get_or_init(|| {
            NlExpansion::parse(BUILTIN).expect("the built-in nl expansion table parses")
        })
    }

    /// Reads the table's format: `#` comment lines, then `word<TAB>code:score,code:score`.
    pub fn parse(text: &str) -> Result<NlExpansion, String> {
        let version = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# "))
            .and_then(|l| l.split(':').next())
            .filter(|v| !v.is_empty() && !v.contains(' '))
            .unwrap_or("unversioned")
            .to_string();
        let mut table = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = || format!("nl expansion table, line {}: {line:?}", i + 1);
            let (word, rest) = line.split_once('\t').ok_or_else(bad)?;
            let mut targets = Vec::new();
            for item in rest.split(',') {
                let (code, score) = item.rsplit_once(':').ok_or_else(bad)?;
                let score: f32 = score.parse().map_err(|_| bad())?;
                if code.is_empty() || !score.is_finite() || score <= 0.0 {
                    return Err(bad());
                }
                targets.push((code.to_string(), score));
            }
            table.insert(word.to_string(), targets);
        }
        Ok(NlExpansion { version, table })
    }

    pub fn version(&self) -> &str {
        &self.version
    }

    /// Up to `max` code words that the question's search words `terms` point to and do not
    /// hold themselves, best first: a word's score is the sum of its scores over the distinct
    /// terms that point to it (ties by the word, so the order is stable).
    pub fn expand(&self, terms: &[String], max: usize) -> Vec<String> {
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
            .take(max)
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
        let table = NlExpansion::builtin();
        // "Return true if the map holds no entries" → `bool` among the expansions.
        let got = table.expand(&terms(&["return", "true", "map", "hold", "no", "entri"]), 6);
        assert!(got.iter().any(|w| w == "bool"), "{got:?}");
        assert!(!got.iter().any(|w| w == "true" || w == "map"), "{got:?}");
        assert!(got.len() <= 6);
        assert!(table.expand(&terms(&["zzzunknown"]), 6).is_empty());
        assert_eq!(table.version(), "nl-expansion-v1");
    }

    #[test]
    fn scores_add_over_terms_and_own_terms_are_left_out() {
        let table =
            NlExpansion::parse("# c\nlength\tlen:0.8,size:0.5\ncount\tlen:0.3,num:0.6\n").unwrap();
        assert_eq!(
            table.expand(&terms(&["length", "count"]), 6),
            vec!["len", "num", "size"]
        );
        assert_eq!(table.expand(&terms(&["length", "len"]), 6), vec!["size"]);
        assert_eq!(table.expand(&terms(&["length", "count"]), 1), vec!["len"]);
    }

    #[test]
    fn malformed_tables_are_refused() {
        for bad in [
            "word",
            "word\tcode",
            "word\tcode:x",
            "word\tcode:-1",
            "word\t:1",
        ] {
            assert!(NlExpansion::parse(bad).is_err(), "{bad}");
        }
    }
}
