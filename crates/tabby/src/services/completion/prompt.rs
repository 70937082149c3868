//! Building the FIM prompt for a standard completion: pick snippets under a character budget
//! (declarations, then changed files, then recent files, then server-side code search), inject
//! them as line comments above the prefix, fill the template and fit the result into
//! `max_input_length` bytes without ever cutting the template's own tokens.

use std::collections::HashMap;

use tabby_common::{
    api::code::{AllowedCodeRepository, CodeSearch, CodeSearchError, CodeSearchQuery},
    config::CodeSearchParams,
    languages::Language,
};
use tabby_inference::clip_prefix_for_budget;
use tracing::warn;

use super::types::{Segments, Snippet};

/// Characters of snippet text a prompt may carry.
pub const SNIPPET_BUDGET_CHARS: usize = 768;
/// Server-side code search runs only while more than this much budget is left.
const MIN_BUDGET_FOR_CODE_SEARCH: usize = 256;

/// A FIM template with `{prefix}` and `{suffix}` placeholders, checked once at start-up.
#[derive(Clone, Debug)]
pub struct PromptTemplate {
    template: String,
    /// Bytes the template adds around prefix and suffix.
    overhead: usize,
}

impl PromptTemplate {
    pub fn new(template: &str) -> Result<Self, String> {
        let filled = fill(template, "", "")?;
        Ok(Self {
            template: template.to_string(),
            overhead: filled.len(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.template
    }
}

fn fill(template: &str, prefix: &str, suffix: &str) -> Result<String, String> {
    let vars = HashMap::from([
        ("prefix".to_string(), prefix.to_string()),
        ("suffix".to_string(), suffix.to_string()),
    ]);
    strfmt::strfmt(template, &vars)
        .map_err(|e| format!("prompt template {template:?} cannot be filled: {e}"))
}

/// Snippets from the request itself, in priority order, while they fit the budget.
/// Returns the chosen snippets and the budget left.
pub fn client_snippets(segments: &Segments) -> (Vec<Snippet>, usize) {
    let mut budget = SNIPPET_BUDGET_CHARS;
    let mut chosen = Vec::new();
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
    // Each list stops at its first item that does not fit, as upstream does.
    for list in [
        declarations.collect::<Vec<_>>(),
        changed.collect(),
        recent.collect(),
    ] {
        for snippet in list {
            let size = snippet.body.chars().count();
            if size > budget {
                break;
            }
            budget -= size;
            chosen.push(snippet);
        }
    }
    (chosen, budget)
}

/// Adds server-side code search hits (scored by RRF) while they fit the remaining budget.
pub async fn add_code_search_snippets(
    code_search: &dyn CodeSearch,
    allowed: &AllowedCodeRepository,
    segments: &Segments,
    language: &str,
    params: &CodeSearchParams,
    snippets: &mut Vec<Snippet>,
    mut budget: usize,
) {
    if budget <= MIN_BUDGET_FOR_CODE_SEARCH {
        return;
    }
    let Some(git_url) = segments.git_url.as_deref() else {
        return;
    };
    let Some(repo) = allowed.closest_match(git_url) else {
        return;
    };
    let query = CodeSearchQuery {
        filepath: segments.filepath.clone(),
        language: Some(language.to_string()),
        content: segments.prefix.clone(),
        source_id: repo.source_id.clone(),
    };
    let hits = match code_search.search_in_language(query, params.clone()).await {
        Ok(hits) => hits,
        Err(CodeSearchError::NotReady) => return,
        Err(e) => {
            warn!("code search failed, completing without it: {e}");
            return;
        }
    };
    for hit in hits {
        let size = hit.doc.body.chars().count();
        if size > budget {
            break;
        }
        budget -= size;
        snippets.push(Snippet {
            filepath: hit.doc.filepath,
            body: hit.doc.body,
            score: hit.scores.rrf,
        });
    }
}

/// Puts the snippets above the prefix as line comments:
/// `<cc> Path: <file>`, `<cc> <line>` per body line, a bare `<cc>` between snippets.
pub fn prefix_with_snippets(language: &Language, prefix: &str, snippets: &[Snippet]) -> String {
    let Some(cc) = language.snippet_comment() else {
        return prefix.to_string();
    };
    if snippets.is_empty() {
        return prefix.to_string();
    }
    let mut out = String::new();
    for (i, snippet) in snippets.iter().enumerate() {
        if i > 0 {
            out.push_str(cc);
            out.push('\n');
        }
        out.push_str(&format!("{cc} Path: {}\n", snippet.filepath));
        for line in snippet.body.lines() {
            if line.is_empty() {
                out.push_str(cc);
            } else {
                out.push_str(cc);
                out.push(' ');
                out.push_str(line);
            }
            out.push('\n');
        }
    }
    out.push_str(prefix);
    out
}

/// Fills the template (or uses the prefix alone when there is none) within `max_input_length`.
pub fn build_prompt(
    template: Option<&PromptTemplate>,
    prefix: &str,
    suffix: &str,
    max_input_length: usize,
) -> String {
    let suffix = if suffix.is_empty() { "\n" } else { suffix };
    match template {
        Some(t) => {
            let clipped = clip_prefix_for_budget(prefix, suffix, t.overhead, max_input_length);
            fill(&t.template, clipped.prefix, clipped.suffix)
                .expect("template was validated at start-up")
        }
        None => tabby_inference::clip_to_last_bytes(prefix, max_input_length).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use tabby_common::languages::LanguageTable;

    use super::*;
    use crate::services::completion::types::Declaration;

    fn snippet(path: &str, body: &str) -> Snippet {
        Snippet {
            filepath: path.into(),
            body: body.into(),
            score: 1.0,
        }
    }

    #[test]
    fn template_filled_and_empty_suffix_is_newline() {
        let t = PromptTemplate::new("<PRE> {prefix} <SUF>{suffix} <MID>").unwrap();
        assert_eq!(
            build_prompt(Some(&t), "a", "", 100),
            "<PRE> a <SUF>\n <MID>"
        );
        assert_eq!(
            build_prompt(Some(&t), "a", "b", 100),
            "<PRE> a <SUF>b <MID>"
        );
    }

    #[test]
    fn no_template_means_prefix_only() {
        assert_eq!(build_prompt(None, "abcdef", "zzz", 4), "cdef");
    }

    #[test]
    fn clipping_never_cuts_the_leading_fim_token() {
        let t = PromptTemplate::new("<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>")
            .unwrap();
        let prefix = "x".repeat(5000) + "CURSOR";
        let prompt = build_prompt(Some(&t), &prefix, "tail", 1536);
        assert!(prompt.starts_with("<|fim_prefix|>"), "{prompt}");
        assert!(prompt.ends_with("<|fim_suffix|>tail<|fim_middle|>"));
        assert!(prompt.contains("CURSOR<|fim_suffix|>"));
        assert!(prompt.len() <= 1536);
    }

    #[test]
    fn bad_template_is_rejected() {
        assert!(PromptTemplate::new("{prefix} {nope}").is_err());
    }

    #[test]
    fn snippets_become_comments() {
        let table = LanguageTable::builtin();
        let out = prefix_with_snippets(
            table.get("python"),
            "def f():",
            &[snippet("a.py", "x = 1\n\ny = 2"), snippet("b.py", "z")],
        );
        assert_eq!(
            out,
            "# Path: a.py\n# x = 1\n#\n# y = 2\n#\n# Path: b.py\n# z\ndef f():"
        );
    }

    #[test]
    fn no_comment_syntax_means_no_snippets() {
        let table = LanguageTable::builtin();
        let out = prefix_with_snippets(table.get("unknown"), "p", &[snippet("a", "b")]);
        assert_eq!(out, "p");
        let out = prefix_with_snippets(table.get("css"), "p", &[snippet("a", "b")]);
        assert_eq!(out, "p");
    }

    #[test]
    fn budget_order_and_stop_at_first_misfit() {
        let segments = Segments {
            prefix: String::new(),
            declarations: Some(vec![Declaration {
                filepath: "d".into(),
                body: "d".repeat(500),
            }]),
            relevant_snippets_from_changed_files: Some(vec![
                snippet("c1", &"c".repeat(300)), // does not fit (268 left): list stops
                snippet("c2", "small"),
            ]),
            relevant_snippets_from_recently_opened_files: Some(vec![snippet(
                "r1",
                &"r".repeat(200),
            )]),
            ..Default::default()
        };
        let (chosen, left) = client_snippets(&segments);
        let paths: Vec<_> = chosen.iter().map(|s| s.filepath.as_str()).collect();
        assert_eq!(paths, vec!["d", "r1"]);
        assert_eq!(left, 768 - 500 - 200);
        assert_eq!(chosen[0].score, 1.0);
    }
}
