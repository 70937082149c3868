//! The snippet candidates of a completion, in priority order: the editor's own (declarations,
//! then changed files, then recently opened files, as tabby-agent sends them), then server-side
//! code search hits in the order search ranks them. The prompt builder takes the ones that fit.

use tabby_common::{
    api::code::{
        AllowedCodeRepository, CodeSearch, CodeSearchError, CodeSearchQuery, ImportStatement,
        ReceiverNames,
    },
    config::CodeSearchParams,
};
use tracing::warn;

use super::types::{Segments, Snippet};

/// Editor snippets kept as candidates; tabby-agent sends a handful, a client could send more.
const MAX_CLIENT_SNIPPETS: usize = 32;

/// Snippets from the request itself, in priority order.
pub fn client_snippets(segments: &Segments) -> Vec<Snippet> {
    let declarations = segments.declarations.iter().flatten().map(|d| Snippet {
        filepath: d.filepath.clone(),
        body: d.body.clone(),
        score: 1.0,
        defines: None,
    });
    let changed = segments
        .relevant_snippets_from_changed_files
        .iter()
        .flatten()
        .cloned();
    let recent = segments
        .relevant_snippets_from_recently_opened_files
        .iter()
        .flatten()
        .cloned();
    declarations
        .chain(changed)
        .chain(recent)
        .take(MAX_CLIENT_SNIPPETS)
        .collect()
}

/// Code search hits for the repository the request names, if the caller may read it: up to
/// `import_snippets` from the files the edited file imports, then the hybrid search's (scored
/// by RRF); none when search is not ready or fails (the completion goes on without them).
pub async fn code_search_snippets(
    code_search: &dyn CodeSearch,
    allowed: &AllowedCodeRepository,
    segments: &Segments,
    language: &str,
    params: &CodeSearchParams,
    import_snippets: usize,
    both_legs: bool,
) -> Vec<Snippet> {
    let Some(query) = repository_query(allowed, segments, language) else {
        return Vec::new();
    };
    let imported = match import_snippets {
        0 => Ok(Vec::new()),
        n => code_search.search_imports(query.clone(), n).await,
    };
    let searched = code_search.search_in_language(query, params.clone()).await;
    let mut snippets: Vec<Snippet> = Vec::new();
    for (hits, score) in [(imported, Score::Bm25), (searched, Score::Rrf)] {
        let hits = match hits {
            Ok(hits) => hits,
            Err(CodeSearchError::NotReady) => continue,
            Err(e) => {
                warn!("code search failed, completing without it: {e}");
                continue;
            }
        };
        for hit in hits {
            let one_leg = hit.scores.bm25 <= 0.0 || hit.scores.embedding == 0.0;
            if both_legs && matches!(score, Score::Rrf) && one_leg {
                continue;
            }
            let duplicate = snippets
                .iter()
                .any(|s| s.filepath == hit.doc.filepath && s.body == hit.doc.body);
            if !duplicate {
                snippets.push(Snippet {
                    filepath: hit.doc.filepath,
                    body: hit.doc.body,
                    score: match score {
                        Score::Bm25 => hit.scores.bm25,
                        Score::Rrf => hit.scores.rrf,
                    },
                    defines: hit.doc.defines.map(Into::into),
                });
            }
        }
    }
    snippets
}

/// The top-level import statements of the edited file as indexed, if the caller may read its
/// repository; none when search is not ready or fails.
pub async fn file_imports(
    code_search: &dyn CodeSearch,
    allowed: &AllowedCodeRepository,
    segments: &Segments,
    language: &str,
) -> Vec<ImportStatement> {
    let Some(query) = repository_query(allowed, segments, language) else {
        return Vec::new();
    };
    match code_search.file_imports(query).await {
        Ok(imports) => imports,
        Err(CodeSearchError::NotReady) => Vec::new(),
        Err(e) => {
            warn!("reading the file's imports failed, completing without them: {e}");
            Vec::new()
        }
    }
}

/// The files the edited file imports as indexed, if the caller may read its repository;
/// `None` when the file is not indexed, or search is not ready or fails.
pub async fn imported_files(
    code_search: &dyn CodeSearch,
    allowed: &AllowedCodeRepository,
    segments: &Segments,
    language: &str,
) -> Option<Vec<String>> {
    let query = repository_query(allowed, segments, language)?;
    match code_search.imported_files(query).await {
        Ok(files) => files,
        Err(CodeSearchError::NotReady) => None,
        Err(e) => {
            warn!("reading the file's imports failed, completing without them: {e}");
            None
        }
    }
}

/// The outline of what the chain of names before the cursor leads to in the request's
/// repository (if the caller may read it), as snippets; none when search is not ready or fails.
pub async fn receiver_outline(
    code_search: &dyn CodeSearch,
    allowed: &AllowedCodeRepository,
    segments: &Segments,
    language: &str,
    max_bytes: usize,
) -> Vec<Snippet> {
    let Some(query) = repository_query(allowed, segments, language) else {
        return Vec::new();
    };
    match code_search.receiver_outline(query, max_bytes).await {
        Ok(outlines) => outlines
            .into_iter()
            .map(|o| Snippet {
                filepath: o.filepath,
                body: o.body,
                score: 0.0,
                defines: None,
            })
            .collect(),
        Err(CodeSearchError::NotReady) => Vec::new(),
        Err(e) => {
            warn!("outlining the name before the cursor failed, completing without it: {e}");
            Vec::new()
        }
    }
}

/// Every name that may follow the chain of names before the cursor, when the request's
/// repository (if the caller may read it) says them all; none when search is not ready or
/// fails.
pub async fn receiver_names(
    code_search: &dyn CodeSearch,
    allowed: &AllowedCodeRepository,
    segments: &Segments,
    language: &str,
) -> Option<ReceiverNames> {
    let query = repository_query(allowed, segments, language)?;
    match code_search.receiver_names(query).await {
        Ok(names) => names,
        Err(CodeSearchError::NotReady) => None,
        Err(e) => {
            warn!(
                "reading the names after the cursor's module failed, completing without them: {e}"
            );
            None
        }
    }
}

/// The query of a request on the repository it names, if the caller may read it.
fn repository_query(
    allowed: &AllowedCodeRepository,
    segments: &Segments,
    language: &str,
) -> Option<CodeSearchQuery> {
    let repo = allowed.closest_match(segments.git_url.as_deref()?)?;
    Some(CodeSearchQuery {
        include_generated: false,
        filepath: segments.filepath.clone(),
        language: Some(language.to_string()),
        content: segments.prefix.clone(),
        source_id: repo.source_id.clone(),
    })
}

/// Which score a snippet carries: import candidates have only BM25.
enum Score {
    Bm25,
    Rrf,
}

#[cfg(test)]
mod tests {
    use super::*;
    use tabby_common::api::code::CodeSearchHit;

    use crate::services::completion::types::Declaration;

    fn snippet(path: &str, body: &str) -> Snippet {
        Snippet {
            filepath: path.into(),
            body: body.into(),
            score: 0.5,
            defines: None,
        }
    }

    /// Search hits and import candidates with the scores a search gives them.
    struct FakeSearch;

    fn hit(path: &str, bm25: f32, embedding: f32) -> CodeSearchHit {
        CodeSearchHit {
            scores: tabby_common::api::code::CodeSearchScores {
                rrf: 0.01,
                bm25,
                embedding,
            },
            doc: tabby_common::api::code::CodeSearchDocument {
                file_id: path.into(),
                chunk_id: path.into(),
                body: format!("def {}(): pass", path.replace('.', "_")),
                filepath: path.into(),
                git_url: "https://github.com/acme/app.git".into(),
                commit: None,
                language: "python".into(),
                start_line: Some(1),
                origin: Default::default(),
                defines: Some(vec![path.replace('.', "_")]),
            },
        }
    }

    #[async_trait::async_trait]
    impl CodeSearch for FakeSearch {
        async fn search_in_language(
            &self,
            _query: CodeSearchQuery,
            _params: CodeSearchParams,
        ) -> Result<Vec<CodeSearchHit>, CodeSearchError> {
            Ok(vec![
                hit("both.py", 3.0, 0.4),
                hit("bm25_only.py", 5.0, 0.0),
                hit("embedding_only.py", 0.0, 0.6),
            ])
        }

        async fn search_imports(
            &self,
            _query: CodeSearchQuery,
            _limit: usize,
        ) -> Result<Vec<CodeSearchHit>, CodeSearchError> {
            Ok(vec![hit("imported.py", 2.0, 0.0)])
        }

        async fn list_files(
            &self,
            _source_id: &str,
            _limit: usize,
        ) -> Result<(Vec<String>, bool), CodeSearchError> {
            Ok((vec![], false))
        }

        async fn file_content(&self, _file_id: &str) -> Result<Option<String>, CodeSearchError> {
            Ok(None)
        }
    }

    /// With `search_hits_from_both_legs`, a search hit that one leg alone found is no snippet;
    /// import candidates (BM25 only) still are.
    #[tokio::test]
    async fn search_hits_from_both_legs_only_when_asked() {
        let allowed = AllowedCodeRepository {
            list: vec![tabby_common::api::code::CodeRepository {
                git_url: "https://github.com/acme/app.git".into(),
                source_id: "config:app".into(),
            }],
        };
        let segments = Segments {
            prefix: "x = helper(".into(),
            git_url: Some("git@github.com:acme/app.git".into()),
            ..Default::default()
        };
        let params = CodeSearchParams::completion_default();
        for (both_legs, expected) in [
            (
                false,
                vec![
                    "imported.py",
                    "both.py",
                    "bm25_only.py",
                    "embedding_only.py",
                ],
            ),
            (true, vec!["imported.py", "both.py"]),
        ] {
            let snippets = code_search_snippets(
                &FakeSearch,
                &allowed,
                &segments,
                "python",
                &params,
                4,
                both_legs,
            )
            .await;
            let paths: Vec<&str> = snippets.iter().map(|s| s.filepath.as_str()).collect();
            assert_eq!(paths, expected, "both_legs {both_legs}");
            // Each snippet keeps what its hit defines, for the used-names gate.
            for s in &snippets {
                assert_eq!(
                    s.defines.as_deref(),
                    Some(&[s.filepath.replace('.', "_")][..])
                );
            }
        }
    }

    /// What a snippet defines comes from the index only: a request cannot claim it.
    #[test]
    fn a_request_cannot_say_what_its_snippets_define() {
        let sent: Snippet = serde_json::from_str(
            r#"{"filepath": "a.py", "body": "x = 1", "score": 1.0, "defines": ["anything"]}"#,
        )
        .unwrap();
        assert_eq!(sent.defines, None);
        assert!(!serde_json::to_string(&sent).unwrap().contains("defines"));
    }

    #[test]
    fn declarations_then_changed_then_recent() {
        let segments = Segments {
            declarations: Some(vec![Declaration {
                filepath: "d".into(),
                body: "d".repeat(500),
            }]),
            relevant_snippets_from_changed_files: Some(vec![snippet("c1", "c")]),
            relevant_snippets_from_recently_opened_files: Some(vec![snippet("r1", "r")]),
            ..Default::default()
        };
        let chosen = client_snippets(&segments);
        let paths: Vec<_> = chosen.iter().map(|s| s.filepath.as_str()).collect();
        assert_eq!(paths, vec!["d", "c1", "r1"]);
        assert_eq!(chosen[0].score, 1.0);
    }

    #[test]
    fn client_snippets_are_bounded() {
        let segments = Segments {
            relevant_snippets_from_changed_files: Some(vec![snippet("c", "c"); 1000]),
            ..Default::default()
        };
        assert_eq!(client_snippets(&segments).len(), MAX_CLIENT_SNIPPETS);
    }
}
