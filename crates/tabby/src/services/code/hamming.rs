//! The embedding leg as a popcount scan: every chunk's embedding signs are kept packed in the
//! `chunk_embedding_bits` fast field; per segment they are loaded once into a flat `u64` array,
//! and a scan scores each chunk that passes the filters by the fraction of matching bits. The
//! filters' doc ids are cached per segment too, so a query costs one pass over the candidates.
//! This is exactly the score of the token form (a union of `embedding_{one,zero}_i` terms worth
//! 1/D each), without walking D posting lists of N/2 entries.

use std::{
    cmp::Ordering,
    collections::{BinaryHeap, HashMap},
    sync::{Arc, Mutex},
};

use tabby_common::index::{
    IndexSchema,
    code::{code_search_filter, exclude_generated, fields},
};
use tantivy::{
    BitSet, DocAddress, DocId, DocSet, Score, Searcher, SegmentOrdinal, SegmentReader, TERMINATED,
    columnar::Column,
    index::SegmentId,
    query::{
        BitSetDocSet, BooleanQuery, ConstScorer, EnableScoring, Explanation, Query, Scorer, Weight,
    },
    schema::IndexRecordOption,
};

use super::tie;

/// Packed sign bits of every document of one segment (zeros and `present = false` for rows
/// without an embedding, such as document rows).
pub struct SegmentBits {
    data: Vec<u64>,
    present: Vec<bool>,
}

impl SegmentBits {
    fn load(segment: &SegmentReader, words: usize) -> tantivy::Result<SegmentBits> {
        let max_doc = segment.max_doc() as usize;
        let mut data = vec![0u64; max_doc * words];
        let mut present = vec![false; max_doc];
        let name = IndexSchema::instance()
            .schema
            .get_field_name(IndexSchema::instance().field_chunk_embedding_bits);
        if let Some(column) = segment.fast_fields().bytes(name)? {
            let mut buf = Vec::new();
            for doc in 0..max_doc as u32 {
                let Some(ord) = column.term_ords(doc).next() else {
                    continue;
                };
                buf.clear();
                if column.ord_to_bytes(ord, &mut buf)? {
                    let row = &mut data[doc as usize * words..(doc as usize + 1) * words];
                    for (i, byte) in buf.iter().take(words * 8).enumerate() {
                        row[i / 8] |= (*byte as u64) << ((i % 8) * 8);
                    }
                    present[doc as usize] = true;
                }
            }
        }
        Ok(SegmentBits { data, present })
    }
}

/// Values built once per segment (segments are immutable) and a key, kept until the segment
/// is merged away (`retain`), or until `max_entries` are held, when it starts over.
pub struct SegmentCache<K, V> {
    entries: Mutex<HashMap<(SegmentId, K), Arc<V>>>,
    max_entries: usize,
}

impl<K: std::hash::Hash + Eq, V> SegmentCache<K, V> {
    pub(super) fn new(max_entries: usize) -> Self {
        SegmentCache {
            entries: Mutex::default(),
            max_entries,
        }
    }

    pub(super) fn get_or_build(
        &self,
        segment: &SegmentReader,
        key: K,
        build: impl FnOnce() -> tantivy::Result<V>,
    ) -> tantivy::Result<Arc<V>> {
        let key = (segment.segment_id(), key);
        let lock = || self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(value) = lock().get(&key) {
            return Ok(value.clone());
        }
        // Built outside the lock: a concurrent query may build the same value, and one wins.
        let value = Arc::new(build()?);
        let mut entries = lock();
        if entries.len() >= self.max_entries {
            entries.clear();
        }
        entries.insert(key, value.clone());
        Ok(value)
    }

    /// Drops segments that no longer exist (after merges).
    pub fn retain(&self, live: &[SegmentId]) {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(id, _), _| live.contains(id));
    }
}

/// Per-segment bit arrays, keyed by words per row.
pub struct BitsCache(SegmentCache<usize, SegmentBits>);

impl Default for BitsCache {
    fn default() -> Self {
        // One entry per segment and embedding width: only merges remove segments.
        BitsCache(SegmentCache::new(usize::MAX))
    }
}

impl BitsCache {
    fn get(&self, segment: &SegmentReader, words: usize) -> tantivy::Result<Arc<SegmentBits>> {
        self.0
            .get_or_build(segment, words, || SegmentBits::load(segment, words))
    }

    pub fn retain(&self, live: &[SegmentId]) {
        self.0.retain(live)
    }
}

/// Packs an embedding's signs into words (bit i of word i/64 ⇔ dimension i is positive).
pub fn pack_words(embedding: &[f32]) -> Vec<u64> {
    let mut words = vec![0u64; embedding.len().div_ceil(64)];
    for (i, v) in embedding.iter().enumerate() {
        if *v > 0.0 {
            words[i / 64] |= 1 << (i % 64);
        }
    }
    words
}

/// A scored row: its score, stable key (`tie.rs`) and address.
#[derive(PartialEq)]
struct Scored(f32, u64, DocAddress);
impl Eq for Scored {}
impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scored {
    /// "Greater" = worse, so the heap's top is the worst kept hit.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .0
            .total_cmp(&self.0)
            .then_with(|| self.1.cmp(&other.1))
            .then_with(|| self.2.cmp(&other.2))
    }
}

/// What the embedding leg may return: the rows of the code corpus of one source (and language),
/// minus one file. The positive part is the same for every query of a source, so its doc ids are
/// kept per segment; the excluded file is looked up per query (a short posting list).
pub struct ScanFilter<'a> {
    pub source_id: &'a str,
    pub language: Option<&'a str>,
    pub include_generated: bool,
    pub exclude_filepath: Option<&'a str>,
}

/// The doc ids of one segment that pass a filter's positive part, as a sorted list (for the
/// scan) and a bit set (for BM25's intersection). Deleted rows are included: deletes are
/// checked at search time, as a segment's deletes grow under the same id.
pub struct FilterDocs {
    list: Vec<DocId>,
    set: BitSet,
}

/// `FilterDocs` per segment, source and language: the three term filters every code search
/// applies match most of a segment, and intersecting their posting lists on every query cost
/// about a third of the BM25 leg at 100k chunks.
pub struct FilterCache(SegmentCache<FilterKey, FilterDocs>);

/// A filter's positive part: source, language, and whether generated and vendored code passes.
type FilterKey = (String, Option<String>, bool);

/// Entries kept before the filter cache starts over (sources × languages × segments).
const MAX_FILTER_ENTRIES: usize = 256;

impl Default for FilterCache {
    fn default() -> Self {
        FilterCache(SegmentCache::new(MAX_FILTER_ENTRIES))
    }
}

impl FilterCache {
    fn get(
        &self,
        segment: &SegmentReader,
        source_id: &str,
        language: Option<&str>,
        include_generated: bool,
    ) -> tantivy::Result<Arc<FilterDocs>> {
        let key = (
            source_id.to_string(),
            language.map(str::to_string),
            include_generated,
        );
        self.0.get_or_build(segment, key, || {
            let mut clauses = code_search_filter(source_id, language, None);
            if !include_generated {
                clauses.extend(exclude_generated());
            }
            let query = BooleanQuery::new(clauses);
            let schema = &IndexSchema::instance().schema;
            let weight = query.weight(EnableScoring::disabled_from_schema(schema))?;
            let mut scorer = weight.scorer(segment, 1.0)?;
            let mut list = Vec::new();
            let mut set = BitSet::with_max_value(segment.max_doc());
            while scorer.doc() != TERMINATED {
                list.push(scorer.doc());
                set.insert(scorer.doc());
                scorer.advance();
            }
            Ok(FilterDocs { list, set })
        })
    }

    pub fn retain(&self, live: &[SegmentId]) {
        self.0.retain(live)
    }
}

/// The positive part of the code search filters (code corpus, source, language) as one
/// zero-scored clause served from a `FilterCache`; same matches as `code_search_filter`
/// without the exclusion.
#[derive(Clone)]
pub struct CachedFilterQuery {
    pub cache: Arc<FilterCache>,
    pub source_id: String,
    pub language: Option<String>,
    pub include_generated: bool,
}

impl std::fmt::Debug for CachedFilterQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedFilterQuery")
            .field("source_id", &self.source_id)
            .field("language", &self.language)
            .finish()
    }
}

impl CachedFilterQuery {
    fn docs(&self, reader: &SegmentReader) -> tantivy::Result<Arc<FilterDocs>> {
        self.cache.get(
            reader,
            &self.source_id,
            self.language.as_deref(),
            self.include_generated,
        )
    }
}

impl Query for CachedFilterQuery {
    fn weight(&self, _scoring: EnableScoring<'_>) -> tantivy::Result<Box<dyn Weight>> {
        Ok(Box::new(self.clone()))
    }
}

impl Weight for CachedFilterQuery {
    fn scorer(&self, reader: &SegmentReader, _boost: Score) -> tantivy::Result<Box<dyn Scorer>> {
        let docs = self.docs(reader)?;
        Ok(Box::new(ConstScorer::new(
            BitSetDocSet::from(docs.set.clone()),
            0.0,
        )))
    }

    fn explain(&self, reader: &SegmentReader, doc: DocId) -> tantivy::Result<Explanation> {
        let docs = self.docs(reader)?;
        if !docs.set.contains(doc) {
            return Err(tantivy::TantivyError::InvalidArgument(format!(
                "document {doc} does not match the filter"
            )));
        }
        Ok(Explanation::new("code search filter", 0.0))
    }
}

/// The rows of `filepath` in one segment (sorted).
fn file_docs(segment: &SegmentReader, filepath: &str) -> tantivy::Result<Vec<DocId>> {
    let schema = IndexSchema::instance();
    let term = schema.chunk_attribute_term(fields::CHUNK_FILEPATH, filepath);
    let mut docs = Vec::new();
    if let Some(mut postings) = segment
        .inverted_index(schema.field_chunk_attributes)?
        .read_postings(&term, IndexRecordOption::Basic)?
    {
        while postings.doc() != TERMINATED {
            docs.push(postings.doc());
            postings.advance();
        }
    }
    Ok(docs)
}

/// Top `limit` chunks by Hamming similarity to `query` (packed signs of a `dim`-dimensional
/// embedding) among the live rows that pass `filter`: a popcount over each candidate's packed
/// bits. Same scores and order as the token form.
pub fn hamming_leg(
    searcher: &Searcher,
    bits: &BitsCache,
    filters: &FilterCache,
    query: &[u64],
    dim: usize,
    limit: usize,
    filter: &ScanFilter,
) -> tantivy::Result<Vec<(f32, DocAddress)>> {
    let mut heap: BinaryHeap<Scored> = BinaryHeap::with_capacity(limit + 1);
    if limit == 0 {
        return Ok(vec![]);
    }
    let words = query.len();
    for (ordinal, segment) in searcher.segment_readers().iter().enumerate() {
        let rows = bits.get(segment, words)?;
        let docs = filters.get(
            segment,
            filter.source_id,
            filter.language,
            filter.include_generated,
        )?;
        let excluded = match filter.exclude_filepath {
            Some(path) => file_docs(segment, &path.replace('\\', "/"))?,
            None => Vec::new(),
        };
        let keys = tie::key_column(segment);
        let candidates = Candidates {
            docs: &docs.list,
            rows: &rows,
            alive: segment.alive_bitset(),
            excluded: &excluded,
            ordinal: ordinal as SegmentOrdinal,
            keys: keys.as_ref(),
        };
        scan(&candidates, query, dim, limit, &mut heap);
    }
    let mut hits: Vec<Scored> = heap.into_vec();
    hits.sort();
    Ok(hits.into_iter().map(|Scored(s, _, a)| (s, a)).collect())
}

/// One segment's rows to score.
struct Candidates<'a> {
    docs: &'a [DocId],
    rows: &'a SegmentBits,
    alive: Option<&'a tantivy::fastfield::AliveBitSet>,
    excluded: &'a [DocId],
    ordinal: SegmentOrdinal,
    keys: Option<&'a Column<u64>>,
}

/// Scores `c`'s rows into `heap`, kept at the best `limit`. (A `popcnt` build of this loop
/// measured no faster: at 100k chunks the scan reads 4.8 MB of bits and is memory-bound.)
fn scan(c: &Candidates, query: &[u64], dim: usize, limit: usize, heap: &mut BinaryHeap<Scored>) {
    let words = query.len();
    for &doc in c.docs {
        let d = doc as usize;
        if !c.rows.present.get(d).copied().unwrap_or(false)
            || c.alive.is_some_and(|a| a.is_deleted(doc))
            || (!c.excluded.is_empty() && c.excluded.binary_search(&doc).is_ok())
        {
            continue;
        }
        let row = &c.rows.data[d * words..(d + 1) * words];
        let differing: u32 = row
            .iter()
            .zip(query)
            .map(|(a, b)| (a ^ b).count_ones())
            .sum();
        let score = 1.0 - differing as f32 / dim as f32;
        // The key is read only for a row that could enter: not below the worst kept score.
        let full = heap.len() >= limit;
        if full && heap.peek().is_some_and(|worst| score < worst.0) {
            continue;
        }
        let hit = Scored(
            score,
            tie::key_in(c.keys, doc),
            DocAddress::new(c.ordinal, doc),
        );
        if !full {
            heap.push(hit);
        } else if heap.peek().is_some_and(|worst| hit < *worst) {
            heap.pop();
            heap.push(hit);
        }
    }
}
