//! What the learned ranker reads from a code chunk itself, beyond its words: the name of the
//! definition it holds, its head (the first lines: a signature), its length, and what its file
//! path says (the path's words, the module a prefix would name, the file's stem). Computed once
//! when the chunk is indexed and kept in the `chunk_side` fast field, so search reads it with
//! the chunk's other columns instead of decompressing stored documents.
//!
//! Words are kept as `key`s: 64-bit FNV-1a hashes of the stemmed search words, stable across
//! builds and platforms because they are stored in the index.

use std::collections::HashSet;

use super::{code::search_words, stem::stem};

/// Keywords after which a definition's name follows, in the languages we chunk.
const DEFINING: &[&str] = &[
    "def",
    "class",
    "fn",
    "func",
    "function",
    "struct",
    "enum",
    "trait",
    "interface",
    "type",
    "impl",
    "const",
    "let",
    "var",
    "mod",
];

/// Lines of a chunk that count as its head (a definition's signature).
const HEAD_LINES: usize = 2;

/// File stems that stand for their directory (a package's facade).
const FACADES: &[&str] = &["__init__", "index", "mod", "lib"];

/// Bytes a module name or a file stem keeps (longer ones are cut; they still compare).
const MAX_NAME_BYTES: usize = 64;

/// Keys a side holds at most per list: a name or a path has a few words and a head (two
/// lines) a few dozen, so this only bounds a minified line's cost (memory per cached chunk).
const MAX_KEYS: usize = 64;

/// Format of `encode`; `decode` refuses any other.
const FORMAT: u8 = 1;

/// A word's key: FNV-1a, 64 bits.
pub fn key(word: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in word.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The distinct keys of `words`, sorted (at most `MAX_KEYS`).
pub fn keys(words: impl IntoIterator<Item = String>) -> Box<[u64]> {
    let mut v: Vec<u64> = words.into_iter().map(|w| key(&w)).collect();
    v.sort_unstable();
    v.dedup();
    v.truncate(MAX_KEYS);
    v.into()
}

/// Whether sorted `keys` hold `k`.
pub fn has(keys: &[u64], k: u64) -> bool {
    keys.binary_search(&k).is_ok()
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChunkSide {
    /// The words of the chunk's first definition's name (its parts, for a compound).
    pub name: Box<[u64]>,
    pub has_name: bool,
    /// The words of its first `HEAD_LINES` lines.
    pub head: Box<[u64]>,
    pub lines: u32,
    /// The words of its file's path (without the extension).
    pub path: Box<[u64]>,
    /// The key of the module a prefix would name to reach the file (a facade's directory).
    pub module: u64,
    /// The file's stem, lower-cased without `_`, stemmed.
    pub compact_stem: Box<str>,
}

fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl ChunkSide {
    /// From a chunk's text and its repository-relative path.
    pub fn new(body: &str, filepath: &str) -> Self {
        let head: String = body.lines().take(HEAD_LINES).collect::<Vec<_>>().join("\n");
        let name = definition_name(body);
        let stem_path = filepath
            .rsplit_once('.')
            .filter(|(_, ext)| !ext.contains('/'))
            .map_or(filepath, |(p, _)| p);
        let file_stem = stem_path.rsplit('/').next().unwrap_or(stem_path);
        let module = if FACADES.contains(&file_stem) {
            stem_path.rsplit('/').nth(1).unwrap_or(file_stem)
        } else {
            file_stem
        };
        let compact_stem = stem(&file_stem.to_lowercase().replace('_', ""));
        ChunkSide {
            name: keys(name.map(name_parts).unwrap_or_default()),
            has_name: name.is_some(),
            head: keys(search_words(&head)),
            lines: body.lines().count().max(1).min(u32::MAX as usize) as u32,
            path: keys(search_words(stem_path)),
            module: if module.is_empty() { 0 } else { key(module) },
            compact_stem: cut(&compact_stem, MAX_NAME_BYTES).into(),
        }
    }

    /// The bytes the `chunk_side` field holds.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            16 + 8 * (self.name.len() + self.head.len() + self.path.len())
                + self.compact_stem.len(),
        );
        out.push(FORMAT);
        out.push(self.has_name as u8);
        out.extend_from_slice(&self.lines.to_le_bytes());
        out.extend_from_slice(&self.module.to_le_bytes());
        for list in [&self.name, &self.head, &self.path] {
            out.push(list.len() as u8);
            for k in list.iter() {
                out.extend_from_slice(&k.to_le_bytes());
            }
        }
        out.push(self.compact_stem.len() as u8);
        out.extend_from_slice(self.compact_stem.as_bytes());
        out
    }

    /// The side `encode` wrote; None for anything else (another format, cut bytes).
    pub fn decode(bytes: &[u8]) -> Option<ChunkSide> {
        let mut at = 0usize;
        let mut take = |n: usize| -> Option<&[u8]> {
            let s = bytes.get(at..at.checked_add(n)?)?;
            at += n;
            Some(s)
        };
        if take(1)?[0] != FORMAT {
            return None;
        }
        let has_name = take(1)?[0] != 0;
        let lines = u32::from_le_bytes(take(4)?.try_into().ok()?);
        let module = u64::from_le_bytes(take(8)?.try_into().ok()?);
        let mut lists: [Box<[u64]>; 3] = Default::default();
        for list in &mut lists {
            let n = take(1)?[0] as usize;
            let raw = take(n * 8)?;
            *list = raw
                .chunks_exact(8)
                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
                .collect();
        }
        let n = take(1)?[0] as usize;
        let compact_stem = std::str::from_utf8(take(n)?).ok()?.into();
        let [name, head, path] = lists;
        Some(ChunkSide {
            name,
            has_name,
            head,
            lines,
            path,
            module,
            compact_stem,
        })
    }
}

/// A definition's name in the chunk: the first identifier after a defining keyword (a Go
/// receiver `(r *T)` skipped), else the first `name(…) {` / `name(…):` method head.
pub fn definition_name(body: &str) -> Option<&str> {
    for line in body.lines() {
        if let Some(name) = after_keyword(line) {
            return Some(name);
        }
    }
    body.lines().find_map(method_head)
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn identifier_at(s: &str) -> Option<&str> {
    let s = s.trim_start();
    let end = s.find(|c: char| !is_ident(c)).unwrap_or(s.len());
    let ident = &s[..end];
    (!ident.is_empty() && !ident.starts_with(|c: char| c.is_ascii_digit())).then_some(ident)
}

fn after_keyword(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    // Up to six leading words (`export default async function`, `pub(crate) const fn`).
    for _ in 0..6 {
        let word = identifier_at(rest)?;
        let after = rest[rest.find(word)? + word.len()..].trim_start();
        if DEFINING.contains(&word) {
            let after = match after.strip_prefix('(') {
                // A Go receiver: `func (r *Reader) Read(`.
                Some(inner) if word == "func" => inner.split_once(')')?.1,
                _ => after,
            };
            return identifier_at(after).filter(|n| !DEFINING.contains(n));
        }
        // `pub(crate)`
        rest = match after.strip_prefix('(') {
            Some(inner) => inner.split_once(')')?.1.trim_start(),
            None => after,
        };
    }
    None
}

fn method_head(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let open = t.find('(')?;
    let close = t.rfind(')')?;
    if close < open || !t[close + 1..].trim_start().starts_with([':', '{']) {
        return None;
    }
    let head = t[..open].trim_end();
    let name_start = head.rfind(|c: char| !is_ident(c)).map_or(0, |i| i + 1);
    let name = &head[name_start..];
    let before = head[..name_start].trim();
    let modifiers_only = before.split_whitespace().all(|w| {
        matches!(
            w,
            "public" | "private" | "protected" | "static" | "async" | "get" | "set" | "override"
        )
    });
    (modifiers_only && identifier_at(name) == Some(name) && !is_keyword(name)).then_some(name)
}

fn is_keyword(name: &str) -> bool {
    matches!(
        name,
        "if" | "for" | "while" | "switch" | "catch" | "match" | "return" | "function"
    )
}

/// The words of a definition's name: its parts when it is a compound (`code_escape` → code,
/// escap), else the name itself.
fn name_parts(name: &str) -> HashSet<String> {
    let mut words: HashSet<String> = search_words(name).into_iter().collect();
    if words.len() > 1 {
        words.remove(&stem(&name.to_lowercase()));
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definition_names_in_each_language() {
        let cases = [
            (
                "@decorator\ndef parse_hl_lines(expr):\n    pass",
                "parse_hl_lines",
            ),
            ("class BlockParser:\n    x = 1", "BlockParser"),
            ("pub(crate) async fn read_frame(&mut self) {", "read_frame"),
            ("func (r *Reader) ReadRune() (rune, error) {", "ReadRune"),
            ("func Decode(data string) error {", "Decode"),
            ("export default function createAtom(name) {", "createAtom"),
            ("export const isFunction = (x) => typeof x", "isFunction"),
            (
                "  public static parseValue(a: string): number {",
                "parseValue",
            ),
            ("impl Display for Kind {", "Display"),
        ];
        for (body, name) in cases {
            assert_eq!(definition_name(body), Some(name), "{body}");
        }
        assert_eq!(definition_name("    if (x) {\n      y()\n    }"), None);
        assert_eq!(definition_name("import os\nx = 1"), None);
        let _ = definition_name("pub(");
        let _ = definition_name("x)(:");
    }

    #[test]
    fn sides_round_trip_and_bad_bytes_are_refused() {
        let side = ChunkSide::new(
            "def code_escape(text):\n    return text.replace('&', '&amp;')",
            "markdown/extensions/__init__.py",
        );
        assert!(side.has_name);
        assert_eq!(side.name.len(), 2, "code, escap");
        assert_eq!(side.module, key("extensions"));
        assert_eq!(&*side.compact_stem, "init");
        let bytes = side.encode();
        assert_eq!(ChunkSide::decode(&bytes), Some(side.clone()));
        for n in 0..bytes.len() {
            assert_eq!(ChunkSide::decode(&bytes[..n]), None, "cut at {n}");
        }
        let mut other = bytes.clone();
        other[0] = FORMAT + 1;
        assert_eq!(ChunkSide::decode(&other), None);
        assert_eq!(ChunkSide::decode(&[]), None);
    }

    #[test]
    fn keys_are_stable_across_builds() {
        // Stored in indexes: a change here needs a SCHEMA_VERSION bump.
        assert_eq!(key(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(key("a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn hostile_chunks_are_bounded() {
        let long = "x".repeat(100_000);
        let body = format!("def {long}(a):\n{}", "w ".repeat(100_000));
        let side = ChunkSide::new(&body, &format!("{long}/{long}.py"));
        assert!(side.compact_stem.len() <= MAX_NAME_BYTES);
        assert!(side.head.len() <= MAX_KEYS);
        assert_eq!(ChunkSide::decode(&side.encode()), Some(side));
        let many: String = (0..1000).map(|i| format!("w{i} ")).collect();
        let side = ChunkSide::new(&many, "a.py");
        assert_eq!(side.head.len(), MAX_KEYS);
        assert_eq!(ChunkSide::decode(&side.encode()), Some(side));
        for path in ["", ".", "/", "x.", "a/.b", "a/b/c.d/e"] {
            let _ = ChunkSide::new("", path);
        }
    }
}
