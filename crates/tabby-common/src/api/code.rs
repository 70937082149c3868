//! Server-side code search as seen by the completion service: a trait, its query and hit types,
//! and the set of repositories a request may search. The implementation lives elsewhere.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{config::CodeSearchParams, git_url::GitUrl};

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub struct CodeSearchQuery {
    /// The file being edited (excluded from results), relative to the repository root.
    pub filepath: Option<String>,
    pub language: Option<String>,
    /// The text to search with (the prefix, or a question).
    pub content: String,
    pub source_id: String,
    /// Also generated and vendored code (`CodeOrigin`); left out by default.
    #[serde(default)]
    pub include_generated: bool,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub struct CodeSearchScores {
    pub rrf: f32,
    pub bm25: f32,
    pub embedding: f32,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub struct CodeSearchDocument {
    pub file_id: String,
    pub chunk_id: String,
    pub body: String,
    pub filepath: String,
    pub git_url: String,
    pub commit: Option<String>,
    pub language: String,
    pub start_line: Option<usize>,
    /// Whether the chunk's file is the team's own code, generated or vendored.
    #[serde(default)]
    pub origin: crate::index::code::CodeOrigin,
    /// The names of the definitions that start in the chunk, as the indexer found them (tags
    /// of the whole file); `None` where unknown. Not part of any response.
    #[serde(skip)]
    pub defines: Option<Vec<String>>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub struct CodeSearchHit {
    pub scores: CodeSearchScores,
    pub doc: CodeSearchDocument,
}

/// The signature lines of what a name before the cursor leads to (a module's top-level
/// definitions, a type's members), from one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeOutline {
    pub filepath: String,
    pub body: String,
}

/// One import statement of a file as written (its lines kept), and whether it resolves to a
/// file of the same repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportStatement {
    pub text: String,
    pub internal: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum CodeSearchError {
    /// No index exists yet (nothing indexed, or indexing has not finished its first commit).
    #[error("the code index is not ready")]
    NotReady,
    #[error("code search failed: {0}")]
    Other(#[from] anyhow::Error),
}

#[async_trait]
pub trait CodeSearch: Send + Sync {
    async fn search_in_language(
        &self,
        query: CodeSearchQuery,
        params: CodeSearchParams,
    ) -> Result<Vec<CodeSearchHit>, CodeSearchError>;

    /// Up to `limit` chunks of the files that `query.filepath` imports (its indexed version and
    /// `query.content` are read for imports), ranked by the query: where a completion's callee
    /// is most likely defined. Default: none.
    async fn search_imports(
        &self,
        _query: CodeSearchQuery,
        _limit: usize,
    ) -> Result<Vec<CodeSearchHit>, CodeSearchError> {
        Ok(vec![])
    }

    /// The top-level import statements of `query.filepath` as indexed, as written and in file
    /// order: what a completion prompt shows of the imports above the editor's window.
    /// Default: none.
    async fn file_imports(
        &self,
        _query: CodeSearchQuery,
    ) -> Result<Vec<ImportStatement>, CodeSearchError> {
        Ok(vec![])
    }

    /// The repository files that the indexed version of `query.filepath` imports, resolved as
    /// for [`CodeSearch::search_imports`] (at most 16), in the order its imports name them;
    /// `None` when the file is not in the index (a new file). Default: `None`.
    async fn imported_files(
        &self,
        _query: CodeSearchQuery,
    ) -> Result<Option<Vec<String>>, CodeSearchError> {
        Ok(None)
    }

    /// When `query.content` ends with a chain of names (`util.`, `crate::error::`, `self.md.`),
    /// the outline of what it leads to in the repository, within `max_bytes`. Default: none.
    async fn receiver_outline(
        &self,
        _query: CodeSearchQuery,
        _max_bytes: usize,
    ) -> Result<Vec<CodeOutline>, CodeSearchError> {
        Ok(vec![])
    }

    /// When `query.content` ends with a chain of names and `query.filepath` is indexed: the
    /// names that may follow the access, when it leads to a module of the repository whose
    /// files name everything it offers, and the file's indexed text; `None` otherwise.
    /// Default: `None`.
    async fn receiver_names(
        &self,
        _query: CodeSearchQuery,
    ) -> Result<Option<ReceiverNames>, CodeSearchError> {
        Ok(None)
    }

    /// The indexed files of a source, sorted, at most `limit`, and whether there are more.
    async fn list_files(
        &self,
        source_id: &str,
        limit: usize,
    ) -> Result<(Vec<String>, bool), CodeSearchError>;

    /// A file's text as indexed (its chunks put back at their lines), by the `file_id` of a
    /// hit; `None` when the file is no longer indexed.
    async fn file_content(&self, file_id: &str) -> Result<Option<String>, CodeSearchError>;
}

/// What may follow the access before the cursor ([`CodeSearch::receiver_names`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ReceiverNames {
    /// Every name the module offers, sorted; none when the access does not lead to a module
    /// that says them all (a value, a type, `self.`).
    pub names: Option<Vec<String>>,
    /// The edited file as indexed (what the editor shows may be newer), when the index holds
    /// it: the rest of the file's own uses of the module.
    pub indexed_text: Option<String>,
}

/// One piece of the evidence for a question (the evidence pack's item as a hit), and why it
/// was retrieved, in words.
#[derive(Clone, Debug)]
pub struct ContextHit {
    pub hit: CodeSearchHit,
    pub reason: String,
}

/// The evidence pack of a task over one repository, as the Answer Engine uses it.
#[async_trait]
pub trait CodeContext: Send + Sync {
    async fn context(
        &self,
        repository: &CodeRepository,
        task: &str,
    ) -> Result<Vec<ContextHit>, CodeSearchError>;
}

/// A repository a request is allowed to search.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeRepository {
    pub git_url: String,
    pub source_id: String,
}

/// The repositories one request may use for retrieval (all config repositories in community mode;
/// filtered by access policy in the enterprise layer).
#[derive(Clone, Debug, Default)]
pub struct AllowedCodeRepository {
    pub list: Vec<CodeRepository>,
}

impl AllowedCodeRepository {
    /// The repository whose name equals the name of `git_url` (host, owner, protocol and
    /// credentials ignored). On ties, the one whose canonical URL sorts first.
    pub fn closest_match(&self, git_url: &str) -> Option<&CodeRepository> {
        let wanted = GitUrl::parse(git_url)?;
        let wanted_name = wanted.name();
        if wanted_name.is_empty() {
            return None;
        }
        self.list
            .iter()
            .filter_map(|repo| {
                let url = GitUrl::parse(&repo.git_url)?;
                (url.name() == wanted_name).then(|| (url.canonical(), repo))
            })
            .min_by(|a, b| a.0.cmp(&b.0))
            .map(|(_, repo)| repo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(url: &str, id: &str) -> CodeRepository {
        CodeRepository {
            git_url: url.into(),
            source_id: id.into(),
        }
    }

    #[test]
    fn matches_by_name_ignoring_host_protocol_and_credentials() {
        let allowed = AllowedCodeRepository {
            list: vec![
                repo("https://github.com/TabbyML/tabby", "a"),
                repo("https://gitlab.com/other/thing.git", "b"),
            ],
        };
        for q in [
            "git@github.com:TabbyML/tabby.git",
            "https://user:pw@example.com/fork/tabby",
            "ssh://git@host/x/tabby.git",
        ] {
            assert_eq!(
                allowed.closest_match(q).map(|r| r.source_id.as_str()),
                Some("a"),
                "{q}"
            );
        }
        assert_eq!(
            allowed.closest_match("https://github.com/TabbyML/other"),
            None
        );
        assert_eq!(allowed.closest_match(""), None);
    }

    #[test]
    fn ties_go_to_smallest_canonical_url() {
        let allowed = AllowedCodeRepository {
            list: vec![
                repo("https://z.example/x/tabby", "z"),
                repo("https://a.example/x/tabby", "a"),
            ],
        };
        assert_eq!(
            allowed.closest_match("https://q/tabby").unwrap().source_id,
            "a"
        );
    }
}
