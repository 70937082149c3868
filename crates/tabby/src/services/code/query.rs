//! How search text becomes BM25 terms and embedding input.
//!
//! `upstream` is faithful to Tabby: the whole text, raw `\w+` tokens on `chunk_tokens`.
//! `tuned` is what `tabby eval` chose (see README, "Retrieval quality"): lower-cased words with
//! compound identifiers split, matched on `chunk_words` and, at half weight, on
//! `chunk_symbols` (the names of the definitions around the chunk); English stop words dropped; and for
//! code (multi-line text such as an editor prefix) only the lines nearest the cursor; and terms
//! in more than a third of the code rows dropped from the BM25 query in large indexes.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use tabby_common::index::{
    IndexSchema,
    code::{tokenize_code, tokenize_words},
    stem::stem,
};
use tantivy::schema::Field;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueryStrategy {
    Upstream,
    #[default]
    Tuned,
}

/// Weight of a match on the names of the definitions a chunk starts or lies in, next to 1.0
/// for a match anywhere in its text. Chosen with `tabby eval` on click among 0.3, 0.5, 1 and 2
/// (README, "Retrieval quality"): 0.5 was the only one that helped every kind on every leg.
const SYMBOL_WEIGHT: f32 = 0.5;

/// One field of the BM25 leg.
#[derive(Clone, Debug)]
pub struct Bm25Field {
    pub field: Field,
    /// Weight of a match in this field.
    pub weight: f32,
    /// In large indexes, query terms found in more than this share of the code rows are
    /// dropped (when the strategy prunes; at least a few of the rarest terms stay).
    pub max_share: f64,
}

/// A word in more than a third of the code rows has an IDF under 1.1 and mostly adds postings
/// to walk (`self`, `def`, `return`, `if`…). Measured on click, recall is unchanged (README,
/// "Retrieval quality"); at 100k chunks the BM25 leg gets several times faster.
const WORDS_MAX_SHARE: f64 = 1.0 / 3.0;
/// A name shared by the definitions around more than one chunk in twenty does not single out
/// a definition.
const SYMBOLS_MAX_SHARE: f64 = 1.0 / 20.0;

/// See `QueryStrategy::row_factors`; chosen with `tabby eval` on click (README).
const TEST_PENALTY: f32 = 0.5;
const NO_DEFINITION_PENALTY: f32 = 0.5;

/// Factors (each at most 1) on the BM25 scores of kinds of chunks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowFactors {
    /// Chunks of test files (`chunk_in_test`).
    pub test: f32,
    /// Chunks in which no definition starts (`chunk_defines` = 0): the middle or end of a
    /// body, imports, module code.
    pub no_definition: f32,
}

/// Lines of a multi-line query (the text before the cursor) that the tuned strategy keeps: the
/// BM25 leg matches words, and the nearest lines hold the words of what is being written (on
/// click, 4–6 lines ranked the callee's definition best: MRR@10 0.15–0.18 against 0.12 for 10
/// and 0.10 for 20; README, "Retrieval quality"); the embedding leg did best with 10.
const TUNED_BM25_LINES: usize = 5;
const TUNED_EMBEDDING_LINES: usize = 10;

const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "if", "in", "into", "is", "it",
    "its", "of", "on", "or", "that", "the", "this", "to", "was", "will", "with",
];

/// Bytes of a query's text that search reads: its end (the lines nearest the cursor). A long
/// minified line or a pasted file must not make a search's cost grow with the request.
pub const MAX_QUERY_BYTES: usize = 4096;
/// Distinct terms one BM25 query has at most.
pub const MAX_QUERY_TERMS: usize = 64;

/// The part of `content` that search reads (see [`MAX_QUERY_BYTES`]).
pub fn bounded(content: &str) -> &str {
    tabby_inference::clip_to_last_bytes(content, MAX_QUERY_BYTES)
}

/// The distinct tokens of `tokens` with their counts, at most `max` of them: those whose last
/// occurrence comes latest, in order of first occurrence among them. Linear in `tokens`.
pub fn distinct_last(tokens: &[String], max: usize) -> Vec<(&str, usize)> {
    let mut counts: HashMap<&str, (usize, usize, usize)> = HashMap::new();
    for (i, token) in tokens.iter().enumerate() {
        let entry = counts.entry(token.as_str()).or_insert((0, i, i));
        entry.0 += 1;
        entry.2 = i;
    }
    let mut kept: Vec<(&str, (usize, usize, usize))> = counts.into_iter().collect();
    if kept.len() > max {
        kept.sort_unstable_by_key(|(_, (_, _, last))| std::cmp::Reverse(*last));
        kept.truncate(max);
    }
    kept.sort_unstable_by_key(|(_, (_, first, _))| *first);
    kept.into_iter().map(|(t, (n, _, _))| (t, n)).collect()
}

fn last_lines(text: &str, n: usize) -> &str {
    let mut start = text.len();
    for _ in 0..n {
        match text[..start].rfind('\n') {
            Some(i) => start = i,
            None => return text,
        }
    }
    &text[start + 1..]
}

impl QueryStrategy {
    /// The fields the BM25 leg searches.
    pub fn bm25_fields(&self) -> Vec<Bm25Field> {
        let schema = IndexSchema::instance();
        match self {
            QueryStrategy::Upstream => vec![Bm25Field {
                field: schema.field_chunk_tokens,
                weight: 1.0,
                max_share: 1.0,
            }],
            QueryStrategy::Tuned => vec![
                Bm25Field {
                    field: schema.field_chunk_words,
                    weight: 1.0,
                    max_share: WORDS_MAX_SHARE,
                },
                Bm25Field {
                    field: schema.field_chunk_symbols,
                    weight: SYMBOL_WEIGHT,
                    max_share: SYMBOLS_MAX_SHARE,
                },
            ],
        }
    }

    /// Factors on the BM25 scores of chunks, and then on their fused (RRF) scores whichever leg
    /// found them (upstream: none). Searches look for definitions:
    /// the function an nl question describes, the callee whose signature a completion needs.
    /// Those live in source files, while tests repeat their names in every call; and a
    /// definition's header (its name and parameters) is in the chunk where it starts, while the
    /// chunks further down its body match the same words without showing what is defined.
    pub fn row_factors(&self) -> Option<RowFactors> {
        match self {
            QueryStrategy::Upstream => None,
            QueryStrategy::Tuned => Some(RowFactors {
                test: TEST_PENALTY,
                no_definition: NO_DEFINITION_PENALTY,
            }),
        }
    }

    /// Whether the BM25 leg adds to a question's terms the code words they point to
    /// (`expansion`; upstream: no).
    pub fn expands_questions(&self) -> bool {
        matches!(self, QueryStrategy::Tuned)
    }

    /// Whether the BM25 leg drops terms most chunks contain (upstream keeps every term).
    pub fn prunes_common_terms(&self) -> bool {
        matches!(self, QueryStrategy::Tuned)
    }

    pub fn bm25_terms(&self, content: &str) -> Vec<String> {
        match self {
            QueryStrategy::Upstream => tokenize_code(content),
            QueryStrategy::Tuned => tokenize_words(last_lines(content, TUNED_BM25_LINES))
                .into_iter()
                .filter(|w| !STOP_WORDS.contains(&w.as_str()))
                .map(|w| stem(&w))
                .collect(),
        }
    }

    pub fn embedding_text(&self, content: &str) -> String {
        match self {
            QueryStrategy::Upstream => content.to_string(),
            QueryStrategy::Tuned => last_lines(content, TUNED_EMBEDDING_LINES).to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_terms_are_counted_and_capped_at_the_latest() {
        let tokens: Vec<String> = ["a", "b", "a", "c", "d", "b"].map(String::from).to_vec();
        assert_eq!(
            distinct_last(&tokens, 10),
            vec![("a", 2), ("b", 2), ("c", 1), ("d", 1)]
        );
        // Last occurrences: a 2, c 3, d 4, b 5 → the three latest are c, d, b.
        assert_eq!(
            distinct_last(&tokens, 3),
            vec![("b", 2), ("c", 1), ("d", 1)]
        );
        let many: Vec<String> = (0..100_000).map(|i| format!("w{i}")).collect();
        let kept = distinct_last(&many, MAX_QUERY_TERMS);
        assert_eq!(kept.len(), MAX_QUERY_TERMS);
        assert_eq!(kept.last().unwrap().0, "w99999");
    }

    #[test]
    fn bounded_keeps_the_end_of_a_long_line() {
        let line = "x".repeat(300_000) + "CURSOR";
        let b = bounded(&line);
        assert_eq!(b.len(), MAX_QUERY_BYTES);
        assert!(b.ends_with("CURSOR"));
    }

    #[test]
    fn tuned_keeps_the_lines_nearest_the_cursor() {
        let text: String = (0..30).map(|i| format!("line{i}\n")).collect::<String>() + "call(";
        let kept = QueryStrategy::Tuned.embedding_text(&text);
        assert!(
            kept.starts_with("line21\n") && kept.ends_with("call("),
            "{kept:?}"
        );
        assert_eq!(QueryStrategy::Upstream.embedding_text(&text), text);
        assert_eq!(last_lines("one line", 12), "one line");
        let terms = QueryStrategy::Tuned.bm25_terms(&text);
        assert_eq!(terms.first().map(String::as_str), Some("line26"));
        assert_eq!(terms.last().map(String::as_str), Some("call"));
    }

    #[test]
    fn tuned_terms_drop_stop_words_split_compounds_and_stem() {
        assert_eq!(
            QueryStrategy::Tuned.bm25_terms("Return the parsedValue of a file"),
            vec!["return", "parsedvalu", "pars", "valu", "file"]
        );
        assert_eq!(
            QueryStrategy::Upstream.bm25_terms("the parsedValue"),
            vec!["the", "parsedValue"]
        );
    }
}
