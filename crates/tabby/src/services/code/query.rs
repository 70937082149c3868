//! How search text becomes BM25 terms and embedding input.
//!
//! `upstream` is faithful to Tabby: the whole text, raw `\w+` tokens on `chunk_tokens`.
//! `tuned` is what `tabby eval` chose (see README, "Retrieval quality"): lower-cased words with
//! compound identifiers split, matched on `chunk_words`; English stop words dropped; and for
//! code (multi-line text such as an editor prefix) only the lines nearest the cursor.

use serde::{Deserialize, Serialize};
use tabby_common::index::{
    IndexSchema,
    code::{tokenize_code, tokenize_words},
};
use tantivy::schema::Field;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueryStrategy {
    Upstream,
    #[default]
    Tuned,
}

/// Lines of a multi-line query (the text before the cursor) that the tuned strategy keeps.
const TUNED_LAST_LINES: usize = 10;

const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "if", "in", "into", "is", "it",
    "its", "of", "on", "or", "that", "the", "this", "to", "was", "will", "with",
];

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
    /// The field the BM25 leg searches.
    pub fn bm25_field(&self) -> Field {
        let schema = IndexSchema::instance();
        match self {
            QueryStrategy::Upstream => schema.field_chunk_tokens,
            QueryStrategy::Tuned => schema.field_chunk_words,
        }
    }

    pub fn bm25_terms(&self, content: &str) -> Vec<String> {
        match self {
            QueryStrategy::Upstream => tokenize_code(content),
            QueryStrategy::Tuned => tokenize_words(last_lines(content, TUNED_LAST_LINES))
                .into_iter()
                .filter(|w| !STOP_WORDS.contains(&w.as_str()))
                .collect(),
        }
    }

    pub fn embedding_text(&self, content: &str) -> String {
        match self {
            QueryStrategy::Upstream => content.to_string(),
            QueryStrategy::Tuned => last_lines(content, TUNED_LAST_LINES).to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    #[test]
    fn tuned_terms_drop_stop_words_and_split_compounds() {
        assert_eq!(
            QueryStrategy::Tuned.bm25_terms("Return the parsedValue of a file"),
            vec!["return", "parsedvalue", "parsed", "value", "file"]
        );
        assert_eq!(
            QueryStrategy::Upstream.bm25_terms("the parsedValue"),
            vec!["the", "parsedValue"]
        );
    }
}
