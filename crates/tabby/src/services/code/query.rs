//! How search text becomes BM25 tokens and embedding input.

use serde::{Deserialize, Serialize};
use tabby_common::index::code::tokenize_code;

/// `upstream` uses the whole query text as upstream Tabby does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueryStrategy {
    #[default]
    Upstream,
}

impl QueryStrategy {
    pub fn bm25_tokens(&self, content: &str) -> Vec<String> {
        match self {
            QueryStrategy::Upstream => tokenize_code(content),
        }
    }

    pub fn embedding_text(&self, content: &str) -> String {
        match self {
            QueryStrategy::Upstream => content.to_string(),
        }
    }
}
