//! Search over the `structured_doc` corpus (web pages, commits, issues, pull requests,
//! ingested documents) as the
//! Answer Engine sees it: a trait and its hit types. The implementation lives in the server.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

/// A document of the structured-doc corpus, by kind.
#[derive(Clone, Debug, PartialEq)]
pub enum DocSearchDocument {
    Web {
        title: String,
        link: String,
        /// The matching chunk of the page.
        content: String,
    },
    Commit {
        sha: String,
        message: String,
        author_email: Option<String>,
        author_at: DateTime<Utc>,
    },
    Ingested {
        id: String,
        title: String,
        body: String,
        link: Option<String>,
    },
    Issue {
        title: String,
        link: String,
        author: Option<String>,
        body: String,
        closed: bool,
    },
    Pull {
        title: String,
        link: String,
        author: Option<String>,
        body: String,
        /// The patch summary.
        diff: String,
        merged: bool,
    },
}

/// Which documentation sources a caller may read: the enterprise layer's policy for the
/// request's user, carried as a request extension next to `AllowedCodeRepository`.
#[derive(Clone)]
pub struct AllowedDocSources(std::sync::Arc<dyn Fn(&str) -> bool + Send + Sync>);

impl AllowedDocSources {
    pub fn new(can_read: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(can_read))
    }

    /// Every source (the open single-user mode).
    pub fn all() -> Self {
        Self::new(|_| true)
    }

    pub fn can_read(&self, source_id: &str) -> bool {
        (self.0)(source_id)
    }
}

impl std::fmt::Debug for AllowedDocSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AllowedDocSources")
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct DocSearchHit {
    pub score: f32,
    pub doc: DocSearchDocument,
}

#[async_trait]
pub trait DocSearch: Send + Sync {
    /// The best `limit` documents of the given sources for `content` (one hit per document).
    async fn search(
        &self,
        source_ids: &[String],
        content: &str,
        limit: usize,
    ) -> anyhow::Result<Vec<DocSearchHit>>;
}
