//! The snippet candidates of a completion, in priority order: the editor's own (declarations,
//! then changed files, then recently opened files, as tabby-agent sends them), then server-side
//! code search hits in the order search ranks them. The prompt builder takes the ones that fit.

use tabby_common::{
    api::code::{AllowedCodeRepository, CodeSearch, CodeSearchError, CodeSearchQuery},
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
) -> Vec<Snippet> {
    let Some(git_url) = segments.git_url.as_deref() else {
        return Vec::new();
    };
    let Some(repo) = allowed.closest_match(git_url) else {
        return Vec::new();
    };
    let query = CodeSearchQuery {
        include_generated: false,
        filepath: segments.filepath.clone(),
        language: Some(language.to_string()),
        content: segments.prefix.clone(),
        source_id: repo.source_id.clone(),
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
                });
            }
        }
    }
    snippets
}

/// Which score a snippet carries: import candidates have only BM25.
enum Score {
    Bm25,
    Rrf,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::completion::types::Declaration;

    fn snippet(path: &str, body: &str) -> Snippet {
        Snippet {
            filepath: path.into(),
            body: body.into(),
            score: 0.5,
        }
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
