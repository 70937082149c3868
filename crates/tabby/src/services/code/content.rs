//! What the learned ranker reads about a candidate beyond the legs' ranks: how much of the
//! query its words and the names of its definitions cover (read from the index's postings and
//! field norms, as BM25 does), and how its file path meets the query (is the file's module
//! named in an editor's prefix, do the question's words name the file).
//!
//! Chosen offline on the generated training sets (README, "Learned ranking"): on the dev sets
//! these lifted the learned order's Recall@10 more than any rank or score feature had, most of
//! all the path features on completion queries (a prefix that says `items.` or imports
//! `..parser` points at a file).
//!
//! Deliberately absent: whether the prefix already names the candidate's definition. The
//! generated sets drop every completion whose prefix holds the callee's name (shared/eval's
//! exclusion rule), so a ranker trained on them learns to push such chunks down (-4.4 when it
//! was tried), which would score well on those sets and badly in an editor.
//!
//! Cost per search: one postings lookup per query term, field and segment, and a seek per
//! candidate; the chunk's own side (its definition's name, head, length and path words,
//! `tabby_common::index::chunk_side`) was computed at indexing and is read from a column.

use std::{collections::HashMap, sync::Arc};

use tabby_common::index::{
    IndexSchema,
    chunk_side::{ChunkSide, has, key, keys},
    code::{search_words, tokenize_code},
};
use tantivy::{
    DocId, DocSet, SegmentReader, TERMINATED, Term, index::SegmentId, schema::IndexRecordOption,
};

use super::{
    hamming::SegmentCache,
    query::{MAX_QUERY_TERMS, QueryStrategy, distinct_last},
};

/// Names of the content features, in the order `features` returns them.
pub const NAMES: [&str; 13] = [
    "q_cov",
    "q_in_symbols",
    "symbols_cov",
    "log_words",
    "name_cov",
    "q_in_name",
    "head_cov",
    "log_lines",
    "has_name",
    "q_in_path",
    "path_in_q",
    "module_named",
    "path_cov_prefix",
];

/// The query's side, computed once per search.
#[derive(Debug, Default)]
pub struct QueryText {
    /// The BM25 leg's terms (stemmed words near the cursor, or of the question), distinct,
    /// with their keys.
    terms: Vec<(String, u64)>,
    /// Identifiers as written anywhere in the (bounded) query text (keys).
    identifiers: Box<[u64]>,
    /// Every search word of the (bounded) query text.
    words: Box<[u64]>,
}

impl QueryText {
    /// The tuned strategy's terms, whichever strategy searches: the features were trained on
    /// them.
    pub fn new(content: &str) -> Self {
        let content = super::query::bounded(content);
        // The same distinct terms the BM25 leg queries, at most `MAX_QUERY_TERMS` of them: a
        // postings lookup each per field and segment.
        let all = QueryStrategy::Tuned.bm25_terms(content);
        let terms = distinct_last(&all, MAX_QUERY_TERMS)
            .into_iter()
            .map(|(t, _)| (t.to_string(), key(t)))
            .collect();
        Self {
            terms,
            identifiers: keys(tokenize_code(content)),
            words: keys(search_words(content)),
        }
    }
}

/// Each segment's chunk sides (the `chunk_side` column), loaded on first use: every chunk's
/// once, shared by chunks whose sides are equal. Merged segments are dropped with `retain`.
#[derive(Default)]
pub struct SegmentSides {
    /// Per row: 1 + the index of its side in `sides`, or 0 for rows without one (documents).
    by_row: Vec<u32>,
    sides: Vec<ChunkSide>,
}

static NO_SIDE: std::sync::LazyLock<ChunkSide> = std::sync::LazyLock::new(ChunkSide::default);

impl SegmentSides {
    fn load(segment: &SegmentReader) -> tantivy::Result<SegmentSides> {
        let schema = IndexSchema::instance();
        let name = schema.schema.get_field_name(schema.field_chunk_side);
        let mut out = SegmentSides {
            by_row: vec![0; segment.max_doc() as usize],
            sides: Vec::new(),
        };
        let Some(column) = segment.fast_fields().bytes(name)? else {
            return Ok(out);
        };
        // The dictionary in order once (ordinals are its positions), then each row's ordinal.
        let mut by_ord: Vec<u32> = vec![0; column.num_terms()];
        let mut terms = column.dictionary().stream()?;
        while terms.advance() {
            if let (Some(side), Some(slot)) = (
                ChunkSide::decode(terms.key()),
                by_ord.get_mut(terms.term_ord() as usize),
            ) {
                out.sides.push(side);
                *slot = out.sides.len() as u32;
            }
        }
        for (row, slot) in out.by_row.iter_mut().enumerate() {
            if let Some(ord) = column.term_ords(row as u32).next() {
                *slot = by_ord.get(ord as usize).copied().unwrap_or(0);
            }
        }
        Ok(out)
    }

    pub fn get(&self, row: DocId) -> &ChunkSide {
        match self.by_row.get(row as usize) {
            Some(&i) if i > 0 => &self.sides[i as usize - 1],
            _ => &NO_SIDE,
        }
    }
}

/// The segments' sides, kept until a segment is merged away.
pub struct ChunkSides(SegmentCache<(), SegmentSides>);

impl Default for ChunkSides {
    fn default() -> Self {
        ChunkSides(SegmentCache::new(usize::MAX))
    }
}

impl ChunkSides {
    /// The sides of a segment's chunks (none when the column cannot be read: the features
    /// that read them are then 0).
    pub fn segment(&self, segment: &SegmentReader) -> Arc<SegmentSides> {
        self.0
            .get_or_build(segment, (), || SegmentSides::load(segment))
            .unwrap_or_else(|e| {
                tracing::warn!("cannot read the chunk sides of a segment: {e}");
                Arc::default()
            })
    }

    pub fn retain(&self, live: &[SegmentId]) {
        self.0.retain(live)
    }
}

/// What the index says of one candidate against the query's terms.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct IndexSide {
    /// Query terms among the chunk's words (`chunk_words`, which holds its path's words too).
    pub in_words: usize,
    /// Query terms among the names of the definitions it starts or lies in (`chunk_symbols`).
    pub in_symbols: usize,
    /// Words in those names, and in the chunk (field norms: exact up to 40, then about 10 %).
    pub symbol_words: u32,
    pub words: u32,
}

/// The index side of each of `docs` (one segment's candidates, in any order).
pub fn index_sides(
    segment: &SegmentReader,
    query: &QueryText,
    docs: &[DocId],
) -> tantivy::Result<HashMap<DocId, IndexSide>> {
    let schema = IndexSchema::instance();
    let mut sorted = docs.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut sides: HashMap<DocId, IndexSide> =
        sorted.iter().map(|d| (*d, IndexSide::default())).collect();
    let fields = [schema.field_chunk_words, schema.field_chunk_symbols];
    for (i, field) in fields.into_iter().enumerate() {
        let inverted = segment.inverted_index(field)?;
        for (term, _) in &query.terms {
            let term = Term::from_field_text(field, term);
            let Some(mut postings) = inverted.read_postings(&term, IndexRecordOption::Basic)?
            else {
                continue;
            };
            for doc in &sorted {
                // `seek` only moves forward: a posting past this candidate may be the next one's.
                let mut at = postings.doc();
                if at < *doc {
                    at = postings.seek(*doc);
                }
                if at == TERMINATED {
                    break;
                }
                if at == *doc {
                    let side = sides.get_mut(doc).expect("every candidate has a side");
                    match i {
                        0 => side.in_words += 1,
                        _ => side.in_symbols += 1,
                    }
                }
            }
        }
        let norms = segment.get_fieldnorms_reader(field)?;
        for (doc, side) in sides.iter_mut() {
            match i {
                0 => side.words = norms.fieldnorm(*doc),
                _ => side.symbol_words = norms.fieldnorm(*doc),
            }
        }
    }
    Ok(sides)
}

fn share(hits: usize, of: usize) -> f32 {
    if of == 0 {
        0.0
    } else {
        (hits as f32 / of as f32).min(1.0)
    }
}

/// The content features of one candidate.
pub fn features(query: &QueryText, index: &IndexSide, chunk: &ChunkSide) -> [f32; NAMES.len()] {
    let q = &query.terms;
    let count = |set: &[u64]| q.iter().filter(|(_, k)| has(set, *k)).count();
    let stem = &*chunk.compact_stem;
    let path_in_q = stem.len() >= 4
        && q.iter()
            .any(|(t, _)| t.contains(stem) || (t.len() >= 4 && stem.contains(t.as_str())));
    [
        share(index.in_words, q.len()),
        share(index.in_symbols, q.len()),
        share(index.in_symbols, index.symbol_words as usize),
        ((1 + index.words) as f32).ln() / 8.0,
        share(
            chunk
                .name
                .iter()
                .filter(|k| q.iter().any(|(_, t)| t == *k))
                .count(),
            chunk.name.len(),
        ),
        share(count(&chunk.name), q.len()),
        share(count(&chunk.head), q.len()),
        ((1 + chunk.lines) as f32).ln() / 5.0,
        chunk.has_name as u8 as f32,
        share(count(&chunk.path), q.len()),
        path_in_q as u8 as f32,
        (chunk.module != 0 && has(&query.identifiers, chunk.module)) as u8 as f32,
        share(
            chunk.path.iter().filter(|k| has(&query.words, **k)).count(),
            chunk.path.len(),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(f: &[f32; NAMES.len()], name: &str) -> f32 {
        f[NAMES.iter().position(|n| *n == name).unwrap()]
    }

    #[test]
    fn path_features_name_the_module_and_the_file() {
        let prefix = "from . import items\n\ndef f(x):\n    return items.";
        let q = QueryText::new(prefix);
        let none = IndexSide::default();
        let f = features(&q, &none, &ChunkSide::new("", "tomlkit/items.py"));
        assert_eq!(get(&f, "module_named"), 1.0);
        assert_eq!(get(&f, "path_in_q"), 1.0);
        assert_eq!(get(&f, "path_cov_prefix"), 0.5, "items of tomlkit/items");
        let f = features(&q, &none, &ChunkSide::new("", "tomlkit/container.py"));
        assert_eq!(get(&f, "module_named"), 0.0);
        assert_eq!(get(&f, "path_in_q"), 0.0);

        let q = QueryText::new("Run Markdown from the codehilite extension.");
        let f = features(
            &q,
            &none,
            &ChunkSide::new("", "markdown/extensions/codehilite.py"),
        );
        assert_eq!(get(&f, "path_in_q"), 1.0);
        assert!(get(&f, "q_in_path") > 0.0, "{f:?}");
    }

    #[test]
    fn name_and_head_features_read_the_definition() {
        let q = QueryText::new("HTML escape a string of code.");
        let chunk = ChunkSide::new(
            "def code_escape(text):\n    return text.replace('&', '&amp;')",
            "markdown/util.py",
        );
        let f = features(&q, &IndexSide::default(), &chunk);
        assert_eq!(get(&f, "has_name"), 1.0);
        assert_eq!(get(&f, "name_cov"), 1.0, "code and escap: {f:?}");
        assert!(
            get(&f, "q_in_name") > 0.3 && get(&f, "q_in_name") < 1.0,
            "{f:?}"
        );
        assert!(get(&f, "head_cov") > 0.0, "{f:?}");
    }

    #[test]
    fn facades_stand_for_their_directory() {
        let q = QueryText::new("import parser\nparser.");
        let f = features(
            &q,
            &IndexSide::default(),
            &ChunkSide::new("", "src/parser/__init__.py"),
        );
        assert_eq!(get(&f, "module_named"), 1.0);
    }

    #[test]
    fn index_shares_are_bounded() {
        let q = QueryText::new("escape html code");
        let side = IndexSide {
            in_words: 3,
            in_symbols: 2,
            symbol_words: 1,
            words: 40,
        };
        let f = features(&q, &side, &ChunkSide::default());
        assert_eq!(get(&f, "q_cov"), 1.0);
        assert!((get(&f, "q_in_symbols") - 2.0 / 3.0).abs() < 1e-6);
        assert_eq!(get(&f, "symbols_cov"), 1.0, "capped at 1");
        assert!(get(&f, "log_words") > 0.0);
    }

    #[test]
    fn hostile_text_is_bounded_and_never_panics() {
        let q = QueryText::new(&"é(".repeat(100_000));
        assert!(q.identifiers.len() <= 1);
        let many: String = (0..10_000).map(|i| format!("word{i} ")).collect();
        let q = QueryText::new(&many);
        assert_eq!(
            q.terms.len(),
            MAX_QUERY_TERMS,
            "as many lookups as the BM25 leg makes"
        );
        assert!(
            q.terms.iter().any(|(t, _)| t == "word9999"),
            "the words nearest the end"
        );
        for path in ["a/.b", "", ".", "/", "x.", "__init__.py", "a/b/c.d/e"] {
            let _ = features(
                &q,
                &IndexSide::default(),
                &ChunkSide::new(&"func (".repeat(1000), path),
            );
        }
    }
}
