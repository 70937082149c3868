//! Code intelligence per language: tree-sitter grammars and tags queries, definitions found by
//! tree-sitter-tags, and chunks cut by text-splitter (CodeSplitter where a grammar exists,
//! TextSplitter otherwise) with exact 1-based start lines.

use std::{collections::HashMap, ops::Range, sync::OnceLock};

use text_splitter::{ChunkConfig, CodeSplitter, TextSplitter};
use tree_sitter_tags::{TagsConfiguration, TagsContext};

/// Default chunk size in characters when the languages table gives none.
pub const DEFAULT_CHUNK_SIZE: usize = 512;
/// Bumped when a tags query changes; recorded in the index metadata.
pub const TAGS_QUERY_VERSION: u32 = 1;

/// A grammar and its tags configuration.
pub struct LanguageIntelligence {
    pub grammar: tree_sitter::Language,
    pub tags: TagsConfiguration,
}

fn csharp_tags_query() -> String {
    // tree-sitter-tags rejects the shipped query's `@module` capture: drop that pattern.
    tree_sitter_c_sharp::TAGS_QUERY
        .lines()
        .filter(|l| !l.trim_end().ends_with(") @module"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn build(canonical: &str) -> Option<LanguageIntelligence> {
    let (grammar, query, locals): (tree_sitter::Language, String, &str) = match canonical {
        "python" => (
            tree_sitter_python::LANGUAGE.into(),
            tree_sitter_python::TAGS_QUERY.into(),
            "",
        ),
        "rust" => (
            tree_sitter_rust::LANGUAGE.into(),
            tree_sitter_rust::TAGS_QUERY.into(),
            "",
        ),
        "java" => (
            tree_sitter_java::LANGUAGE.into(),
            tree_sitter_java::TAGS_QUERY.into(),
            "",
        ),
        "kotlin" => (
            tree_sitter_kotlin_ng::LANGUAGE.into(),
            include_str!("../../queries/kotlin.scm").into(),
            "",
        ),
        "javascript-typescript" => (
            tree_sitter_typescript::LANGUAGE_TSX.into(),
            // The TypeScript query covers only TS-specific nodes; the JS one covers the rest.
            format!(
                "{}\n{}",
                tree_sitter_javascript::TAGS_QUERY,
                tree_sitter_typescript::TAGS_QUERY
            ),
            "",
        ),
        "go" => (
            tree_sitter_go::LANGUAGE.into(),
            tree_sitter_go::TAGS_QUERY.into(),
            "",
        ),
        "ruby" => (
            tree_sitter_ruby::LANGUAGE.into(),
            tree_sitter_ruby::TAGS_QUERY.into(),
            "",
        ),
        "c" => (
            tree_sitter_c::LANGUAGE.into(),
            tree_sitter_c::TAGS_QUERY.into(),
            "",
        ),
        "cpp" => (
            tree_sitter_cpp::LANGUAGE.into(),
            tree_sitter_cpp::TAGS_QUERY.into(),
            "",
        ),
        "csharp" => (
            tree_sitter_c_sharp::LANGUAGE.into(),
            csharp_tags_query(),
            "",
        ),
        "php" => (
            tree_sitter_php::LANGUAGE_PHP.into(),
            tree_sitter_php::TAGS_QUERY.into(),
            "",
        ),
        "scala" => (
            tree_sitter_scala::LANGUAGE.into(),
            include_str!("../../queries/scala.scm").into(),
            "",
        ),
        "lua" => (
            tree_sitter_lua::LANGUAGE.into(),
            tree_sitter_lua::TAGS_QUERY.into(),
            "",
        ),
        "shellscript" => (
            tree_sitter_bash::LANGUAGE.into(),
            include_str!("../../queries/bash.scm").into(),
            "",
        ),
        _ => return None,
    };
    match TagsConfiguration::new(grammar.clone(), &query, locals) {
        Ok(tags) => Some(LanguageIntelligence { grammar, tags }),
        Err(e) => {
            tracing::error!("tags query for {canonical} is invalid: {e}");
            None
        }
    }
}

/// Canonical names of the languages with a grammar and tags query.
pub const LANGUAGES_WITH_GRAMMAR: &[&str] = &[
    "python",
    "rust",
    "java",
    "kotlin",
    "javascript-typescript",
    "go",
    "ruby",
    "c",
    "cpp",
    "csharp",
    "php",
    "scala",
    "lua",
    "shellscript",
];

/// The grammar and tags configuration for a canonical language name, built once.
pub fn intelligence(canonical: &str) -> Option<&'static LanguageIntelligence> {
    static CACHE: OnceLock<HashMap<&'static str, LanguageIntelligence>> = OnceLock::new();
    CACHE
        .get_or_init(|| {
            LANGUAGES_WITH_GRAMMAR
                .iter()
                .filter_map(|name| build(name).map(|i| (*name, i)))
                .collect()
        })
        .get(canonical)
}

/// A definition found by tree-sitter-tags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tag {
    pub name: String,
    /// `function`, `class`, `method`, …
    pub kind: String,
    /// 0-based line range of the whole definition.
    pub line_range: Range<usize>,
    /// Byte range of the definition's name.
    pub name_range: Range<usize>,
}

/// Definitions in `text` (empty when the language has no tags query or the text does not parse).
pub fn find_definitions(canonical: &str, text: &str) -> Vec<Tag> {
    let Some(intel) = intelligence(canonical) else {
        return vec![];
    };
    let mut context = TagsContext::new();
    let Ok((tags, _)) = context.generate_tags(&intel.tags, text.as_bytes(), None) else {
        return vec![];
    };
    tags.filter_map(Result::ok)
        .filter(|tag| tag.is_definition)
        .map(|tag| {
            let start_line = text[..tag.range.start.min(text.len())]
                .matches('\n')
                .count();
            let end_line = text[..tag.range.end.min(text.len())].matches('\n').count();
            Tag {
                name: text
                    .get(tag.name_range.clone())
                    .unwrap_or_default()
                    .to_string(),
                kind: intel.tags.syntax_type_name(tag.syntax_type_id).to_string(),
                line_range: start_line..end_line + 1,
                name_range: tag.name_range,
            }
        })
        .collect()
}

/// A piece of a file to index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub body: String,
    /// 1-based line of the chunk's first character.
    pub start_line: usize,
    /// Byte offset of the chunk in the file.
    pub offset: usize,
}

/// Cuts `text` into chunks of at most `chunk_size` characters: along syntax boundaries where the
/// language has a grammar, along text boundaries otherwise.
pub fn chunks(canonical: &str, text: &str, chunk_size: usize) -> Vec<Chunk> {
    let config = || ChunkConfig::new(chunk_size.max(1));
    let pieces: Vec<(usize, &str)> = match intelligence(canonical) {
        Some(intel) => match CodeSplitter::new(intel.grammar.clone(), config()) {
            Ok(splitter) => splitter.chunk_indices(text).collect(),
            Err(_) => TextSplitter::new(config()).chunk_indices(text).collect(),
        },
        None => TextSplitter::new(config()).chunk_indices(text).collect(),
    };
    let mut chunks = Vec::with_capacity(pieces.len());
    let (mut line, mut counted_to) = (1, 0);
    for (offset, body) in pieces {
        // Offsets only grow, so count newlines incrementally.
        if offset >= counted_to {
            line += text.as_bytes()[counted_to..offset]
                .iter()
                .filter(|b| **b == b'\n')
                .count();
            counted_to = offset;
        } else {
            line = text[..offset].matches('\n').count() + 1;
            counted_to = offset;
        }
        chunks.push(Chunk {
            body: body.to_string(),
            start_line: line,
            offset,
        });
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(language: &str, text: &str) -> Vec<String> {
        find_definitions(language, text)
            .into_iter()
            .map(|t| format!("{}:{}@{}", t.kind, t.name, t.line_range.start + 1))
            .collect()
    }

    #[test]
    fn every_registered_language_builds() {
        for language in LANGUAGES_WITH_GRAMMAR {
            assert!(intelligence(language).is_some(), "{language}");
        }
        assert!(intelligence("markdown").is_none());
    }

    #[test]
    fn definitions_per_language() {
        let cases: &[(&str, &str, &[&str])] = &[
            (
                "python",
                "class A:\n    def m(self):\n        pass\n\ndef f():\n    pass\n",
                &["class:A@1", "function:m@2", "function:f@5"],
            ),
            (
                "rust",
                "fn add() {}\nstruct Point;\nimpl Point {\n    fn norm(&self) {}\n}\n",
                &["function:add@1", "class:Point@2", "method:norm@4"],
            ),
            (
                "javascript-typescript",
                "interface I { x: number }\nclass C {\n  m() {}\n}\nfunction f() {}\n",
                &["interface:I@1", "class:C@2", "method:m@3", "function:f@5"],
            ),
            (
                "go",
                "package p\ntype T struct{}\nfunc (t T) M() {}\nfunc F() {}\n",
                &["type:T@2", "method:M@3", "function:F@4"],
            ),
            (
                "java",
                "class A {\n  void m() {}\n}\n",
                &["class:A@1", "method:m@2"],
            ),
            (
                "c",
                "struct S { int x; };\nint f(void) { return 0; }\n",
                &["class:S@1", "function:f@2"],
            ),
            (
                "cpp",
                "class K {};\nint g() { return 1; }\n",
                &["class:K@1", "function:g@2"],
            ),
            (
                "ruby",
                "class R\n  def m\n  end\nend\n",
                &["class:R@1", "method:m@2"],
            ),
            (
                "php",
                "<?php\nclass P {}\nfunction h() {}\n",
                &["class:P@2", "function:h@3"],
            ),
            (
                "csharp",
                "namespace N {\n  class Q {\n    void M() {}\n  }\n}\n",
                &["module:N@1", "class:Q@2", "method:M@3"],
            ),
            (
                "kotlin",
                "class Kt {\n  fun m(): Int = 1\n}\nobject O\nfun top() {}\n",
                &["class:Kt@1", "function:m@2", "object:O@4", "function:top@5"],
            ),
            (
                "shellscript",
                "greet() {\n  echo hi\n}\nfunction bye {\n  echo bye\n}\n",
                &["function:greet@1", "function:bye@4"],
            ),
            (
                "scala",
                "trait T\nclass C extends T {\n  def m(): Int = 1\n}\nobject O\n",
                &["interface:T@1", "class:C@2", "function:m@3", "object:O@5"],
            ),
            (
                "lua",
                "function f()\nend\nlocal function g()\nend\n",
                &["function:f@1", "function:g@3"],
            ),
        ];
        for (language, text, expected) in cases {
            let mut found = names(language, text);
            found.sort();
            let mut expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
            expected.sort();
            assert_eq!(found, expected, "{language}");
        }
    }

    #[test]
    fn code_chunks_follow_syntax_and_report_start_lines() {
        let text: String = (0..40)
            .map(|i| format!("def function_{i}(a, b):\n    return a + b * {i}\n\n"))
            .collect();
        let chunks = chunks("python", &text, 200);
        assert!(chunks.len() > 5);
        for chunk in &chunks {
            assert!(chunk.body.chars().count() <= 200, "{:?}", chunk.body);
            assert!(chunk.body.starts_with("def "), "{:?}", chunk.body);
            let line = text[..chunk.offset].matches('\n').count() + 1;
            assert_eq!(chunk.start_line, line);
            let expected = text.lines().nth(chunk.start_line - 1).unwrap();
            assert!(chunk.body.starts_with(expected), "{expected:?}");
        }
        assert_eq!(chunks[0].start_line, 1);
    }

    #[test]
    fn text_chunks_for_languages_without_grammar() {
        let text = "# Title\n\n".to_string() + &"Some words here. ".repeat(100);
        let chunks = chunks("markdown", &text, 512);
        assert!(chunks.len() >= 3);
        assert_eq!(chunks[0].start_line, 1);
        assert!(chunks.iter().all(|c| c.body.chars().count() <= 512));
    }
}
