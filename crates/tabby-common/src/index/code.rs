//! The code corpus: chunk attribute keys, code tokens, binarized embedding tokens, and the
//! filter part of a code search query.

use tantivy::query::{BooleanQuery, Occur, Query};

use super::{IndexSchema, corpus, stem::stem};

/// Keys of a code chunk's `chunk_attributes` (its body is in the stored `chunk_text` field).
pub mod fields {
    pub const CHUNK_GIT_URL: &str = "chunk_git_url";
    pub const CHUNK_FILEPATH: &str = "chunk_filepath";
    pub const CHUNK_LANGUAGE: &str = "chunk_language";
    pub const CHUNK_START_LINE: &str = "chunk_start_line";
}

/// Identifier-like tokens of `text` (`\w+`), dropping tokens of 64 bytes or more.
pub fn tokenize_code(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut start = None;
    for (i, ch) in text.char_indices() {
        if ch.is_alphanumeric() || ch == '_' {
            start.get_or_insert(i);
        } else if let Some(s) = start.take() {
            push_token(&mut tokens, &text[s..i]);
        }
    }
    if let Some(s) = start {
        push_token(&mut tokens, &text[s..]);
    }
    tokens
}

fn push_token(tokens: &mut Vec<String>, token: &str) {
    if token.len() < 64 {
        tokens.push(token.to_string());
    }
}

/// Lower-cased search words of `text`: each code token, and when it is a compound
/// (`snake_case`, `camelCase`, `HTTPServer2`), also its parts. `parse_config` → `parse_config`,
/// `parse`, `config`; `readFileSync` → `readfilesync`, `read`, `file`, `sync`.
pub fn tokenize_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    for token in tokenize_code(text) {
        let lower = token.to_lowercase();
        let parts = split_identifier(&token);
        let compound = parts.len() > 1;
        words.push(lower);
        if compound {
            words.extend(parts.into_iter().filter(|p| p.len() > 1));
        }
    }
    words
}

/// `tokenize_words` with every word stemmed (`stem::stem`): what `chunk_words` and
/// `chunk_symbols` hold. Queries on those fields stem their words the same way.
pub fn search_words(text: &str) -> Vec<String> {
    tokenize_words(text).iter().map(|w| stem(w)).collect()
}

/// Splits an identifier at `_`, lower→upper changes, acronym ends and letter/digit changes.
fn split_identifier(token: &str) -> Vec<String> {
    let chars: Vec<char> = token.chars().collect();
    let mut parts = Vec::new();
    let mut current = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c == '_' {
            if !current.is_empty() {
                parts.push(std::mem::take(&mut current));
            }
            continue;
        }
        if !current.is_empty() {
            let prev = chars[i - 1];
            let next = chars.get(i + 1).copied();
            let boundary = (prev.is_lowercase() && c.is_uppercase())
                || (prev.is_uppercase()
                    && c.is_uppercase()
                    && next.is_some_and(|n| n.is_lowercase()))
                || (prev.is_alphabetic() && c.is_ascii_digit())
                || (prev.is_ascii_digit() && c.is_alphabetic());
            if boundary {
                parts.push(std::mem::take(&mut current));
            }
        }
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        parts.push(current);
    }
    parts
}

/// Whether a repository path is test code: under a `test`, `tests`, `__tests__`, `spec` or
/// `testdata` directory, or named like a test in the common conventions (`test_x.py`,
/// `x_test.py`, `x_test.go`, `x.test.ts`, `x.spec.js`, `XTest.java`, `XTests.cs`, `x_spec.rb`,
/// `conftest.py`).
pub fn is_test_path(path: &str) -> bool {
    let path = path.replace('\\', "/");
    let mut parts: Vec<&str> = path.split('/').collect();
    let name = parts.pop().unwrap_or_default();
    if parts.iter().any(|dir| {
        matches!(
            dir.to_ascii_lowercase().as_str(),
            "test" | "tests" | "__tests__" | "spec" | "testdata"
        )
    }) {
        return true;
    }
    let (stem, _) = name.split_once('.').unwrap_or((name, ""));
    let lower = name.to_ascii_lowercase();
    stem.starts_with("test_")
        || stem.ends_with("_test")
        || stem.ends_with("_spec")
        || stem.ends_with("Test")
        || stem.ends_with("Tests")
        || lower.contains(".test.")
        || lower.contains(".spec.")
        || lower == "conftest.py"
}

/// The embedding's signs (positive = 1) packed little-endian into bytes (bit i of the vector =
/// bit i%8 of byte i/8).
pub fn pack_embedding_bits(embedding: &[f32]) -> Vec<u8> {
    let mut bytes = vec![0u8; embedding.len().div_ceil(8)];
    for (i, v) in embedding.iter().enumerate() {
        if *v > 0.0 {
            bytes[i / 8] |= 1 << (i % 8);
        }
    }
    bytes
}

/// Filters shared by both legs of code search, all zero-scored: the code corpus, the source,
/// the language (canonical name, so the JavaScript/TypeScript family is one group), and the
/// query's own file excluded.
pub fn code_search_filter(
    source_id: &str,
    canonical_language: Option<&str>,
    exclude_filepath: Option<&str>,
) -> Vec<(Occur, Box<dyn Query>)> {
    let schema = IndexSchema::instance();
    let mut clauses = vec![
        (
            Occur::Must,
            IndexSchema::filter(schema.corpus_term(corpus::CODE)),
        ),
        (
            Occur::Must,
            IndexSchema::filter(schema.source_id_term(source_id)),
        ),
    ];
    if let Some(language) = canonical_language {
        clauses.push((
            Occur::Must,
            IndexSchema::filter(schema.chunk_attribute_term(fields::CHUNK_LANGUAGE, language)),
        ));
    }
    clauses.extend(exclude_filepath.map(exclude_file));
    clauses
}

/// The clause that leaves out the rows of one file (the query's own).
pub fn exclude_file(path: &str) -> (Occur, Box<dyn Query>) {
    let normalized = path.replace('\\', "/");
    let schema = IndexSchema::instance();
    (
        Occur::MustNot,
        IndexSchema::filter(schema.chunk_attribute_term(fields::CHUNK_FILEPATH, &normalized)),
    )
}

/// A boolean query of `filters` plus one scoring clause.
pub fn filtered(scoring: Box<dyn Query>, filters: Vec<(Occur, Box<dyn Query>)>) -> BooleanQuery {
    let mut clauses = filters;
    clauses.push((Occur::Must, scoring));
    BooleanQuery::new(clauses)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_tokens() {
        assert_eq!(
            tokenize_code("fn add(a: i32) -> i32 { a+b_c }"),
            vec!["fn", "add", "a", "i32", "i32", "a", "b_c"]
        );
        let long = "x".repeat(64);
        assert_eq!(tokenize_code(&format!("ok {long} é")), vec!["ok", "é"]);
    }

    #[test]
    fn words_split_compounds() {
        assert_eq!(
            tokenize_words("parse_config"),
            vec!["parse_config", "parse", "config"]
        );
        assert_eq!(
            tokenize_words("readFileSync(HTTPServer2)"),
            vec![
                "readfilesync",
                "read",
                "file",
                "sync",
                "httpserver2",
                "http",
                "server"
            ]
        );
        assert_eq!(tokenize_words("plain x"), vec!["plain", "x"]);
    }

    #[test]
    fn test_paths() {
        for path in [
            "tests/test_basic.py",
            "src/pkg/tests/helpers.py",
            "test_cli.py",
            "pkg/io_test.py",
            "server/handler_test.go",
            "web/app.test.tsx",
            "web/app.spec.js",
            "web/__tests__/app.js",
            "src/test/java/com/x/ParserTest.java",
            "Lib/ParserTests.cs",
            "spec/models/user_spec.rb",
            "conftest.py",
            "pkg\\tests\\x.py",
        ] {
            assert!(is_test_path(path), "{path}");
        }
        for path in [
            "src/click/testing.py",
            "src/contest.py",
            "src/latest.py",
            "src/attestation/verify.rs",
            "web/spectrum.ts",
            "README.md",
        ] {
            assert!(!is_test_path(path), "{path}");
        }
    }

    #[test]
    fn embedding_signs_pack_little_endian() {
        let e = [0.5, -0.1, 0.0, 2.0, 1.0, -3.0, 0.1, 0.1, 0.7];
        assert_eq!(pack_embedding_bits(&e), vec![0b1101_1001, 0b1]);
    }
}
