//! The languages table: canonical names and aliases, file extensions, line comments, top-level
//! keywords and chunk sizes. Built from the embedded `assets/languages.toml` plus the config's
//! `[[additional_languages]]`.

use std::{collections::HashMap, path::Path};

use serde::Deserialize;

const BUILTIN: &str = include_str!("../assets/languages.toml");

/// One language entry. The first name in `languages` is the canonical one.
#[derive(Clone, Debug, Deserialize, PartialEq, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Language {
    pub languages: Vec<String>,
    pub exts: Vec<String>,
    #[serde(default)]
    pub line_comment: Option<String>,
    #[serde(default)]
    pub top_level_keywords: Vec<String>,
    #[serde(default)]
    pub chunk_size: Option<usize>,
}

impl Language {
    pub fn canonical_name(&self) -> &str {
        self.languages
            .first()
            .map(String::as_str)
            .unwrap_or("unknown")
    }

    /// The comment marker for injected snippets; `None` when the language has none (or it is empty).
    pub fn snippet_comment(&self) -> Option<&str> {
        self.line_comment.as_deref().filter(|c| !c.is_empty())
    }
}

#[derive(Deserialize)]
struct LanguageFile {
    config: Vec<Language>,
}

/// Looks languages up by any alias, by extension or by file name.
#[derive(Clone, Debug)]
pub struct LanguageTable {
    languages: Vec<Language>,
    by_name: HashMap<String, usize>,
    by_ext: HashMap<String, usize>,
    unknown: Language,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LanguageTableError {
    #[error("additional language {name:?} is already defined")]
    DuplicateName { name: String },
    #[error("extension {ext:?} of additional language {name:?} already belongs to {existing:?}")]
    DuplicateExt {
        ext: String,
        name: String,
        existing: String,
    },
    #[error("an additional language has an empty `languages` list")]
    EmptyNames,
}

impl LanguageTable {
    /// The built-in table only.
    pub fn builtin() -> Self {
        Self::with_additional(&[]).expect("the built-in languages table is consistent")
    }

    /// The built-in table extended with `additional` (from `[[additional_languages]]`).
    /// A name or extension that is already taken is an error, not a silent override.
    pub fn with_additional(additional: &[Language]) -> Result<Self, LanguageTableError> {
        let file: LanguageFile =
            toml::from_str(BUILTIN).expect("the built-in languages table parses");
        let mut table = LanguageTable {
            languages: Vec::new(),
            by_name: HashMap::new(),
            by_ext: HashMap::new(),
            unknown: Language {
                languages: vec!["unknown".into()],
                exts: vec![],
                // Upstream's unknown language has an empty line comment, so "\n" is a stop word
                // and completions for unknown files are single-line. We keep that behaviour.
                line_comment: Some(String::new()),
                top_level_keywords: vec![],
                chunk_size: None,
            },
        };
        for language in file.config.into_iter().chain(additional.iter().cloned()) {
            table.insert(language)?;
        }
        Ok(table)
    }

    fn insert(&mut self, language: Language) -> Result<(), LanguageTableError> {
        let name = language
            .languages
            .first()
            .ok_or(LanguageTableError::EmptyNames)?
            .clone();
        for alias in &language.languages {
            if self.by_name.contains_key(alias) {
                return Err(LanguageTableError::DuplicateName {
                    name: alias.clone(),
                });
            }
        }
        for ext in &language.exts {
            if let Some(&i) = self.by_ext.get(ext) {
                return Err(LanguageTableError::DuplicateExt {
                    ext: ext.clone(),
                    name,
                    existing: self.languages[i].canonical_name().to_string(),
                });
            }
        }
        let index = self.languages.len();
        for alias in &language.languages {
            self.by_name.insert(alias.clone(), index);
        }
        for ext in &language.exts {
            self.by_ext.insert(ext.clone(), index);
        }
        self.languages.push(language);
        Ok(())
    }

    /// The language with this name or alias, or the `unknown` language.
    pub fn get(&self, name: &str) -> &Language {
        self.by_name
            .get(name)
            .map(|&i| &self.languages[i])
            .unwrap_or(&self.unknown)
    }

    /// The canonical language for a file extension (case-sensitive, no dot).
    pub fn by_ext(&self, ext: &str) -> Option<&Language> {
        self.by_ext.get(ext).map(|&i| &self.languages[i])
    }

    /// The canonical language for a path: by extension, else by whole file name (`Makefile`).
    pub fn by_path(&self, path: &Path) -> Option<&Language> {
        if let Some(language) = path
            .extension()
            .and_then(|e| e.to_str())
            .and_then(|e| self.by_ext(e))
        {
            return Some(language);
        }
        path.file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| self.by_ext(n))
    }

    pub fn iter(&self) -> impl Iterator<Item = &Language> {
        self.languages.iter()
    }

    /// The table with `size` as the chunk size of every language that sets none of its own
    /// (code and the unknown language; markdown and plain text keep theirs): what
    /// `tabby eval --chunk-size` indexes with.
    pub fn with_default_chunk_size(mut self, size: usize) -> Self {
        for language in self
            .languages
            .iter_mut()
            .chain(std::iter::once(&mut self.unknown))
        {
            language.chunk_size.get_or_insert(size);
        }
        self
    }
}

impl Default for LanguageTable {
    fn default() -> Self {
        Self::builtin()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_by_alias_ext_and_name() {
        let t = LanguageTable::builtin();
        assert_eq!(
            t.get("typescriptreact").canonical_name(),
            "javascript-typescript"
        );
        assert_eq!(t.get("python").line_comment.as_deref(), Some("#"));
        assert_eq!(t.by_ext("C").unwrap().canonical_name(), "cpp");
        assert_eq!(t.by_ext("c").unwrap().canonical_name(), "c");
        assert_eq!(
            t.by_path(Path::new("a/b/Makefile"))
                .unwrap()
                .canonical_name(),
            "makefile"
        );
        assert_eq!(
            t.by_path(Path::new("x.rs")).unwrap().canonical_name(),
            "rust"
        );
        assert!(t.by_path(Path::new("x.unknownext")).is_none());
        assert_eq!(t.get("markdown").chunk_size, Some(1536));
    }

    #[test]
    fn a_default_chunk_size_leaves_the_languages_that_set_their_own() {
        let t = LanguageTable::builtin().with_default_chunk_size(1024);
        assert_eq!(t.get("python").chunk_size, Some(1024));
        assert_eq!(t.by_ext("ts").unwrap().chunk_size, Some(1024));
        assert_eq!(t.get("brainfuck").chunk_size, Some(1024));
        assert_eq!(t.get("markdown").chunk_size, Some(1536));
        assert_eq!(LanguageTable::builtin().get("python").chunk_size, None);
    }

    #[test]
    fn unknown_language_has_empty_comment() {
        let t = LanguageTable::builtin();
        let u = t.get("brainfuck");
        assert_eq!(u.canonical_name(), "unknown");
        assert_eq!(u.line_comment.as_deref(), Some(""));
        assert_eq!(u.snippet_comment(), None);
    }

    #[test]
    fn additional_language_extends_and_duplicates_are_errors() {
        let zig = Language {
            languages: vec!["zig".into()],
            exts: vec!["zig".into()],
            line_comment: Some("//".into()),
            top_level_keywords: vec!["fn".into()],
            chunk_size: None,
        };
        let t = LanguageTable::with_additional(std::slice::from_ref(&zig)).unwrap();
        assert_eq!(t.by_ext("zig").unwrap().canonical_name(), "zig");

        let mut dup = zig.clone();
        dup.languages = vec!["python".into()];
        assert_eq!(
            LanguageTable::with_additional(&[dup]).unwrap_err(),
            LanguageTableError::DuplicateName {
                name: "python".into()
            }
        );
        let mut dup_ext = zig;
        dup_ext.exts = vec!["rs".into()];
        assert!(matches!(
            LanguageTable::with_additional(&[dup_ext]),
            Err(LanguageTableError::DuplicateExt { .. })
        ));
    }
}
