//! Which code-search hits may become snippets of a completion prompt when
//! `[completion] snippets_of_used_names` is set (the default): those from a file the edited
//! file imports (as indexed; in Go, also a file of its own package, which needs no import), and
//! those that define a name that the editor's text uses — the prefix, the suffix or the file's
//! import statements. What a hit defines is what the indexer stored with its chunk
//! (`chunk_names`: the tags of the whole file that start in the chunk), so a request parses
//! nothing. A hit from elsewhere that defines nothing the file touches (a chunk from the middle
//! of a body, a definition that only shares words with the lines before the cursor) stays out.
//! A file the index does not hold keeps every hit, and the name being typed counts as a use of
//! the names it starts (README, "What context does to completions", sessions 29 to 31).

use std::{
    collections::{HashMap, HashSet, VecDeque},
    hash::{DefaultHasher, Hash, Hasher},
    sync::{Arc, Mutex},
};

use tabby_index::code::intelligence::{find_definitions, intelligence};

use super::types::Snippet;
use crate::services::code::file_names::{identifiers, is_name_char};

/// Bytes of the prefix (its end) and of the suffix (its start) whose names count: the editor
/// sends a window, but a client could send a whole file.
const WINDOW_BYTES: usize = 16 * 1024;

/// Snippet bodies whose definitions are kept; a line's keystrokes ask for the same few.
const CAPACITY: usize = 4096;

/// Most bytes of a snippet body parsed; a longer body (a client's, or a huge chunk) is judged
/// by its start.
const MAX_PARSED_BYTES: usize = 16 * 1024;

/// Names by the hash of (language, body), and the hashes in the order they came.
type Entries = (HashMap<u64, Arc<Vec<String>>>, VecDeque<u64>);

/// The names each snippet body defines, per language, kept for the bodies seen last.
#[derive(Default)]
pub struct DefinedNames {
    inner: Mutex<Entries>,
}

impl DefinedNames {
    /// The names `body` (in the language named `canonical`) defines.
    fn of(&self, canonical: &str, body: &str) -> Arc<Vec<String>> {
        let mut hasher = DefaultHasher::new();
        (canonical, body).hash(&mut hasher);
        let key = hasher.finish();
        {
            let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(names) = inner.0.get(&key) {
                return names.clone();
            }
        }
        let parsed = tabby_inference::clip_to_first_bytes(body, MAX_PARSED_BYTES);
        let names: Arc<Vec<String>> = Arc::new(
            find_definitions(canonical, parsed)
                .into_iter()
                .map(|tag| tag.name)
                .collect(),
        );
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (map, order) = &mut *inner;
        if map.insert(key, names.clone()).is_none() {
            order.push_back(key);
        }
        while order.len() > CAPACITY {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
        names
    }

    /// The snippets of `hits` that come from a file in `near` or define a name `used` holds,
    /// in their order; all of them when the language has no definitions to read (no tags
    /// query). What a hit defines is what the indexer stored with it (the tags of its whole
    /// file, so a method's chunk names its method however it is indented); a snippet without
    /// that record is parsed on its own, once per body.
    pub fn keep_used(
        &self,
        canonical: &str,
        hits: &[Snippet],
        used: &UsedNames<'_>,
        near: &NearFiles,
    ) -> Vec<Snippet> {
        if intelligence(canonical).is_none() {
            return hits.to_vec();
        }
        hits.iter()
            .filter(|hit| {
                near.holds(&hit.filepath)
                    || match &hit.defines {
                        Some(names) => names.iter().any(|name| used.uses(name)),
                        None => self
                            .of(canonical, &hit.body)
                            .iter()
                            .any(|name| used.uses(name)),
                    }
            })
            .cloned()
            .collect()
    }
}

/// The files whose hits pass whatever they define: those the edited file imports, and in Go
/// the files of its own package (its directory), which it uses without an import.
pub struct NearFiles {
    imported: HashSet<String>,
    package_dir: Option<String>,
}

impl NearFiles {
    /// `editor` is the edited file's path in its repository, `imported` the files it imports.
    pub fn new(canonical: &str, editor: Option<&str>, imported: Vec<String>) -> Self {
        let package_dir = match (canonical, editor) {
            ("go", Some(path)) => Some(parent(&path.replace('\\', "/")).to_string()),
            _ => None,
        };
        Self {
            imported: imported.into_iter().collect(),
            package_dir,
        }
    }

    fn holds(&self, path: &str) -> bool {
        self.imported.contains(path)
            || self
                .package_dir
                .as_deref()
                .is_some_and(|dir| parent(path) == dir)
    }
}

fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// The identifiers of the editor's text, and the name being typed at the cursor.
pub struct UsedNames<'a> {
    names: HashSet<&'a str>,
    typing: Option<&'a str>,
}

impl<'a> UsedNames<'a> {
    /// The identifiers of the prefix's end, the suffix's start and the import statements; the
    /// identifier the prefix ends in (a name being typed) counts as a use of every name it
    /// starts, so the definition of a function the file has not imported yet comes back as
    /// soon as its first letters are typed.
    pub fn new(
        prefix: &'a str,
        suffix: &'a str,
        imports: impl IntoIterator<Item = &'a str>,
    ) -> Self {
        let mut names = HashSet::new();
        let prefix = tabby_inference::clip_to_last_bytes(prefix, WINDOW_BYTES);
        let suffix = tabby_inference::clip_to_first_bytes(suffix, WINDOW_BYTES);
        for text in [prefix, suffix].into_iter().chain(imports) {
            names.extend(identifiers(text));
        }
        let start = prefix
            .char_indices()
            .rev()
            .take_while(|(_, c)| is_name_char(*c))
            .last()
            .map_or(prefix.len(), |(i, _)| i);
        let typing = Some(&prefix[start..])
            .filter(|w| w.chars().next().is_some_and(|c| !c.is_ascii_digit()));
        Self { names, typing }
    }

    fn uses(&self, name: &str) -> bool {
        self.names.contains(name) || self.typing.is_some_and(|t| name.starts_with(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snippet(body: &str) -> Snippet {
        Snippet {
            filepath: "lib.py".into(),
            body: body.into(),
            score: 1.0,
            defines: None,
        }
    }

    fn nowhere() -> NearFiles {
        NearFiles::new("python", None, vec![])
    }

    fn at(filepath: &str, body: &str) -> Snippet {
        Snippet {
            filepath: filepath.into(),
            ..snippet(body)
        }
    }

    #[test]
    fn hits_from_imported_files_and_in_go_from_the_same_package_are_kept() {
        let used = UsedNames::new("x = 1\n", "", []);
        // A method reached through a module or a receiver: its name is not in the editor's
        // text yet, but its file is imported.
        let hits = [
            at(
                "pkg/types.py",
                "    def convert(self, value):\n        return value\n",
            ),
            at("pkg/other.py", "def convert(value):\n    return value\n"),
        ];
        let near = NearFiles::new("python", Some("pkg/core.py"), vec!["pkg/types.py".into()]);
        let kept = DefinedNames::default().keep_used("python", &hits, &used, &near);
        let paths: Vec<&str> = kept.iter().map(|s| s.filepath.as_str()).collect();
        assert_eq!(paths, vec!["pkg/types.py"]);

        let hits = [
            at(
                "decode/meta.go",
                "func (md *MetaData) Keys() []Key {\n\treturn nil\n}\n",
            ),
            at(
                "encode/meta.go",
                "func (md *MetaData) Keys() []Key {\n\treturn nil\n}\n",
            ),
        ];
        let near = NearFiles::new("go", Some("decode\\decode.go"), vec![]);
        let kept = DefinedNames::default().keep_used("go", &hits, &used, &near);
        let paths: Vec<&str> = kept.iter().map(|s| s.filepath.as_str()).collect();
        assert_eq!(paths, vec!["decode/meta.go"]);
        // Elsewhere the directory is no package.
        let near = NearFiles::new("python", Some("decode/decode.py"), vec![]);
        assert!(near.package_dir.is_none());
    }

    #[test]
    fn hits_that_define_a_used_name_are_kept_in_order() {
        let hits = [
            snippet("def parse_header(line):\n    return line.split(':')\n"),
            snippet("def unrelated(x):\n    return x\n"),
            // A chunk from the middle of a body defines nothing.
            snippet("    total += parse_header(line)\n    return total\n"),
            snippet("class Reader:\n    def read_all(self):\n        pass\n"),
        ];
        let used = UsedNames::new(
            "from lib import parse_header\n\ndef main(r):\n    r.",
            "\n    return read_all\n",
            [],
        );
        let kept = DefinedNames::default().keep_used("python", &hits, &used, &nowhere());
        let bodies: Vec<&str> = kept.iter().map(|s| s.body.as_str()).collect();
        assert_eq!(bodies, vec![hits[0].body.as_str(), hits[3].body.as_str()]);
    }

    #[test]
    fn the_import_statements_count_as_used() {
        let hits = [snippet(
            "export function startBatch() {\n    globalState.inBatch++\n}\n",
        )];
        let none = UsedNames::new("function set(obj) {\n    ", "}\n", []);
        let defined = DefinedNames::default();
        assert!(
            defined
                .keep_used("javascript-typescript", &hits, &none, &nowhere())
                .is_empty()
        );
        let imported = UsedNames::new(
            "function set(obj) {\n    ",
            "}\n",
            ["import { startBatch, endBatch } from \"../internal\""],
        );
        assert_eq!(
            defined
                .keep_used("javascript-typescript", &hits, &imported, &nowhere())
                .len(),
            1
        );
    }

    #[test]
    fn the_name_being_typed_counts_as_a_use_of_the_names_it_starts() {
        let hits = [
            snippet("def compute_discounted_price(price, rate):\n    return price\n"),
            snippet("def checkout(items):\n    return items\n"),
        ];
        let defined = DefinedNames::default();
        let kept = |prefix: &str| -> Vec<String> {
            let used = UsedNames::new(prefix, "\n", []);
            defined
                .keep_used("python", &hits, &used, &nowhere())
                .into_iter()
                .map(|s| s.body)
                .collect()
        };
        // Nothing typed yet: the file does not use the name.
        assert!(kept("    total += ").is_empty());
        assert_eq!(kept("    total += comp"), vec![hits[0].body.clone()]);
        assert_eq!(kept("    total += c").len(), 2);
        // A number is no name.
        assert!(kept("    total += 12").is_empty());
    }

    #[test]
    fn what_the_index_stored_decides_over_the_body() {
        // An indented method's chunk parsed on its own; the index knew it from the whole file.
        let stored = |body: &str, names: &[&str]| Snippet {
            defines: Some(names.iter().map(|n| n.to_string()).collect()),
            ..snippet(body)
        };
        let hits = [
            stored("    def keys(self):\n        return []\n", &["keys"]),
            // The body looks like a definition of `keys`; the index says it defines nothing.
            stored("def keys():\n    pass\n", &[]),
        ];
        let used = UsedNames::new("md.keys", "", []);
        let defined = DefinedNames::default();
        let kept = defined.keep_used("python", &hits, &used, &nowhere());
        assert_eq!(kept, vec![hits[0].clone()]);
        // Nothing was parsed.
        assert!(defined.inner.lock().unwrap().0.is_empty());
    }

    #[test]
    fn a_language_without_tags_keeps_every_hit() {
        let hits = [snippet("anything at all")];
        let used = UsedNames::new("", "", []);
        assert_eq!(
            DefinedNames::default()
                .keep_used("unknown", &hits, &used, &nowhere())
                .len(),
            1
        );
    }

    #[test]
    fn names_are_whole_identifiers() {
        let used = UsedNames::new("x = parse_headers(1)\n$el = 2 + 3abc", "", []);
        assert!(used.names.contains("parse_headers"));
        assert!(used.names.contains("$el"));
        assert!(!used.names.contains("parse_header"));
        assert!(!used.names.contains("3abc"));
    }

    #[test]
    fn the_cache_is_bounded() {
        let defined = DefinedNames::default();
        for i in 0..(CAPACITY + 10) {
            defined.of("python", &format!("def f{i}(): pass\n"));
        }
        let inner = defined.inner.lock().unwrap();
        assert_eq!(inner.0.len(), CAPACITY);
        assert_eq!(inner.1.len(), CAPACITY);
    }
}
