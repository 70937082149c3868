//! The names leg of a code query: the chunks that define, in other files, the names the
//! edited file uses above the editor's window. The editor sends the lines near the cursor;
//! the names the file imported or called further up are what it is likely to call next, and
//! neither the BM25 nor the embedding leg reads them. Each name's definitions are found by the
//! whole identifier in `chunk_symbols`, under the same filters as the other legs, and the leg
//! ranks them by how near the window the name was last used. The ranker weighs the leg with
//! the others (`ranker::NAME_FEATURES`); a ranker that gives it no weight does not run it.

use std::collections::HashMap;

use tabby_common::index::{IndexSchema, code::search_words};
use tantivy::{
    Searcher, Term,
    query::{BooleanQuery, Occur, Query, TermQuery},
    schema::IndexRecordOption,
};

use super::{generation_cache::PerGeneration, tie::top_by_score};

/// Names looked up per query, nearest the window first, at most.
pub const MAX_LOOKUPS: usize = 96;
/// Names with a definition elsewhere that the leg keeps, at most.
pub const MAX_NAMES: usize = 24;
/// A name in the symbols of more chunks than this says little about which one is meant
/// (`get`, `value`, `new`); the leg skips it. (A class's name is in the symbols of each of
/// its methods' chunks, so the bound is not 1.)
pub const MAX_DEFINING_CHUNKS: u64 = 32;
/// Chunks per name, at most (the definition's first chunks).
pub const CHUNKS_PER_NAME: usize = 2;
/// Lines of the query tried, from its top, to place the window in the file.
const PROBES: usize = 20;
/// Lines of a file that are read, at most.
const MAX_LINES: usize = 50_000;
/// Shortest name the leg looks up (shorter ones are loop variables and keywords).
const MIN_NAME_BYTES: usize = 4;
/// Keywords of the languages we index that are also 4+ bytes long: never a callee, sometimes
/// (stemmed) a method's name somewhere.
const KEYWORDS: &[&str] = &[
    "async",
    "await",
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "crate",
    "declare",
    "default",
    "defer",
    "delete",
    "elif",
    "else",
    "enum",
    "except",
    "export",
    "exports",
    "extends",
    "extern",
    "false",
    "fallthrough",
    "final",
    "finally",
    "from",
    "func",
    "function",
    "global",
    "goto",
    "impl",
    "implements",
    "import",
    "instanceof",
    "interface",
    "keyof",
    "lambda",
    "loop",
    "match",
    "module",
    "move",
    "namespace",
    "never",
    "nonlocal",
    "None",
    "null",
    "package",
    "pass",
    "private",
    "protected",
    "public",
    "raise",
    "readonly",
    "require",
    "return",
    "select",
    "self",
    "Self",
    "static",
    "struct",
    "super",
    "switch",
    "this",
    "throw",
    "throws",
    "trait",
    "true",
    "True",
    "False",
    "type",
    "typeof",
    "undefined",
    "unsafe",
    "unknown",
    "void",
    "where",
    "while",
    "with",
    "yield",
];
/// Files whose names are kept per index generation, and the bytes they may hold.
const MAX_CACHED_FILES: usize = 1024;
const MAX_CACHED_BYTES: usize = 32 << 20;

/// What a file's indexed text says about the names it uses: each line's key (to place the
/// editor's window) and every identifier occurrence, in order.
#[derive(Debug, Default)]
pub struct FileNames {
    line_keys: Vec<u64>,
    names: Vec<Box<str>>,
    /// (line, index into `names`), in text order.
    uses: Vec<(u32, u32)>,
}

/// Per searcher generation, the files code queries were asked in.
pub struct FileNamesCache(PerGeneration<FileNames>);

impl Default for FileNamesCache {
    fn default() -> Self {
        Self(PerGeneration::new(MAX_CACHED_FILES, MAX_CACHED_BYTES))
    }
}

impl FileNamesCache {
    pub fn get_or_make<E>(
        &self,
        generation: u64,
        source_id: &str,
        path: &str,
        text: impl FnOnce() -> Result<String, E>,
    ) -> Result<std::sync::Arc<FileNames>, E> {
        self.0.get_or_make(
            generation,
            source_id,
            path,
            || text().map(|t| FileNames::read(&t)),
            FileNames::bytes,
        )
    }
}

fn line_key(line: &str) -> Option<u64> {
    let trimmed = line.trim();
    (trimmed.len() >= 8).then(|| {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        trimmed.hash(&mut h);
        h.finish()
    })
}

pub(crate) fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$'
}

/// The identifiers of `text` (runs of letters, digits, `_` and `$` not starting with a digit):
/// how the names leg reads a file, and how completion reads the names a file uses.
pub(crate) fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !is_name_char(c))
        .filter(|w| w.chars().next().is_some_and(|c| !c.is_ascii_digit()))
}

impl FileNames {
    pub fn read(text: &str) -> Self {
        let mut file = FileNames::default();
        let mut index: HashMap<&str, u32> = HashMap::new();
        for (n, line) in text.lines().take(MAX_LINES).enumerate() {
            file.line_keys.push(line_key(line).unwrap_or(0));
            for name in identifiers(line).filter(|n| n.len() >= MIN_NAME_BYTES) {
                let next = index.len() as u32;
                let i = *index.entry(name).or_insert(next);
                if i == next {
                    file.names.push(name.into());
                }
                file.uses.push((n as u32, i));
            }
        }
        file
    }

    fn bytes(&self) -> usize {
        self.line_keys.len() * 8
            + self.uses.len() * 8
            + self.names.iter().map(|n| n.len() + 16).sum::<usize>()
    }

    /// The file's line where the editor's text (`window`, the query) starts: placed by the
    /// first of its top lines that the file holds exactly once. None when no line places it
    /// (a new file, or one that changed too much).
    pub fn window_top(&self, window: &str) -> Option<usize> {
        let probes: Vec<(usize, u64)> = window
            .lines()
            .enumerate()
            // The first line may be cut where the query was bounded.
            .skip(1)
            .take(PROBES)
            .filter_map(|(j, l)| line_key(l).map(|k| (j, k)))
            .collect();
        if probes.is_empty() {
            return None;
        }
        // Each probe's key: how often the file holds it, and its first line there.
        let mut count: HashMap<u64, (usize, usize)> =
            probes.iter().map(|&(_, k)| (k, (0, 0))).collect();
        for (i, k) in self.line_keys.iter().enumerate() {
            if let Some(e) = count.get_mut(k) {
                if e.0 == 0 {
                    e.1 = i;
                }
                e.0 += 1;
            }
        }
        probes.iter().find_map(|(j, key)| match count.get(key) {
            Some(&(1, i)) if i >= *j => Some(i - j),
            _ => None,
        })
    }

    /// The names used above `top`, the last used first, that `window` does not show (the other
    /// legs read those); at most `max`.
    pub fn above(&self, top: usize, window: &str, max: usize) -> Vec<&str> {
        let shown: std::collections::HashSet<&str> = identifiers(window).collect();
        let mut seen = vec![false; self.names.len()];
        let mut out = Vec::new();
        for &(line, i) in self.uses.iter().rev() {
            if line as usize >= top || seen[i as usize] {
                continue;
            }
            seen[i as usize] = true;
            let name = &*self.names[i as usize];
            if shown.contains(name) || KEYWORDS.contains(&name) {
                continue;
            }
            out.push(name);
            if out.len() == max {
                break;
            }
        }
        out
    }
}

/// A names leg's hits: the chunk, the name's rank among the names found (nearest the window
/// first) and how many chunks hold the name in their symbols.
pub type NameHits = Vec<NameHit>;

#[derive(Clone, Copy, Debug)]
pub struct NameHit {
    pub address: tantivy::DocAddress,
    pub rank: usize,
    pub defining_chunks: u64,
}

/// The leg: for each name nearest the window first that at most `MAX_DEFINING_CHUNKS` chunks
/// hold in their symbols, its best `CHUNKS_PER_NAME` chunks under `filters`; a chunk found
/// by two names keeps the nearer one.
pub fn names_leg(
    searcher: &Searcher,
    names: &[&str],
    filters: impl Fn() -> Vec<(Occur, Box<dyn Query>)>,
) -> tantivy::Result<NameHits> {
    let schema = IndexSchema::instance();
    let mut hits: NameHits = Vec::new();
    let mut found = 0usize;
    for name in names {
        if found == MAX_NAMES {
            break;
        }
        let Some(word) = search_words(name).into_iter().next() else {
            continue;
        };
        let term = Term::from_field_text(schema.field_chunk_symbols, &word);
        let defining_chunks = searcher.doc_freq(&term)?;
        if defining_chunks == 0 || defining_chunks > MAX_DEFINING_CHUNKS {
            continue;
        }
        let mut clauses = filters();
        clauses.push((
            Occur::Must,
            Box::new(TermQuery::new(term, IndexRecordOption::WithFreqs)),
        ));
        let top = top_by_score(
            searcher,
            &BooleanQuery::new(clauses),
            CHUNKS_PER_NAME,
            CHUNKS_PER_NAME * 16,
        )?;
        if top.is_empty() {
            continue;
        }
        for (_, address) in top {
            if !hits.iter().any(|h| h.address == address) {
                hits.push(NameHit {
                    address,
                    rank: found,
                    defining_chunks,
                });
            }
        }
        found += 1;
    }
    Ok(hits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_s_names_are_its_identifiers_not_numbers() {
        let file = FileNames::read("let x1 = foo.bar_baz($el_1, 42, 3abc);\nnaïve_name(4711)\n");
        let names: Vec<&str> = file.names.iter().map(|n| &**n).collect();
        assert_eq!(names, ["bar_baz", "$el_1", "naïve_name"]);
        assert_eq!(file.uses, [(0, 0), (0, 1), (1, 2)]);
    }

    const FILE: &str = "\
from .core import Markdown, convert_text
import helpers

def first_function(a):
    return helpers.shape(a)

def second_function(b):
    value = Markdown(b)
    return value.render()

class Window:
    def method_in_view(self):
        return second_function(self)
";

    #[test]
    fn the_window_is_placed_by_a_line_the_file_holds_once() {
        let file = FileNames::read(FILE);
        // The editor shows from `class Window:` on (its first line may be cut).
        let window = "ss Window:\n    def method_in_view(self):\n        return ";
        assert_eq!(file.window_top(window), Some(10));
        // A line the file does not hold places nothing.
        assert_eq!(file.window_top("x\n    something_else_entirely()\n"), None);
        // Nor does a line it holds twice.
        let twice = FileNames::read("    return value_one\n    return value_one\n");
        assert_eq!(twice.window_top("x\n    return value_one\n"), None);
    }

    #[test]
    fn names_above_the_window_come_last_used_first_without_those_it_shows() {
        let file = FileNames::read(FILE);
        let window = "ss Window:\n    def method_in_view(self):\n        return ";
        let names = file.above(10, window, 100);
        assert_eq!(
            names,
            [
                "render",
                "value",
                "Markdown",
                "second_function",
                "shape",
                "helpers",
                "first_function",
                "convert_text",
                "core"
            ]
        );
        // `self`, `def` and `return` are in the window in the second case.
        let window = "x\nclass Window:\n    def first_function(self):\n        return ";
        let names = file.above(10, window, 3);
        assert_eq!(names, ["render", "value", "Markdown"]);
        // Nothing above the file's top.
        assert!(file.above(0, window, 10).is_empty());
    }
}
