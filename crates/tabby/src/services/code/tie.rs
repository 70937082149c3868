//! How search orders equal scores: by the chunk's stable key (`chunk_key`, a hash of its
//! source, path and first line), then by document address. A document address depends on the
//! order the parallel indexer wrote rows in and on segment ids, so two builds of one corpus
//! ordered ties differently and `tabby eval` moved by a query or two from run to run. The key
//! depends only on the chunk. Rows without a key (document rows, which are never searched,
//! or a segment without the column) read 0 and fall back to the address.

use std::collections::HashMap;

use tabby_common::index::IndexSchema;
use tantivy::{
    DocAddress, DocId, Searcher, SegmentOrdinal, SegmentReader, collector::TopDocs,
    columnar::Column, query::Query,
};

/// One segment's `chunk_key` column, if it has one.
pub fn key_column(segment: &SegmentReader) -> Option<Column<u64>> {
    let schema = IndexSchema::instance();
    segment
        .fast_fields()
        .u64(schema.schema.get_field_name(schema.field_chunk_key))
        .ok()
}

/// A row's key in one segment's column (0 when absent).
pub fn key_in(column: Option<&Column<u64>>, doc: DocId) -> u64 {
    column.and_then(|c| c.first(doc)).unwrap_or(0)
}

/// Reads rows' keys, opening each segment's column once.
pub struct TieKeys<'a> {
    searcher: &'a Searcher,
    columns: HashMap<SegmentOrdinal, Option<Column<u64>>>,
}

impl<'a> TieKeys<'a> {
    pub fn new(searcher: &'a Searcher) -> Self {
        TieKeys {
            searcher,
            columns: HashMap::new(),
        }
    }

    pub fn key(&mut self, address: DocAddress) -> u64 {
        let searcher = self.searcher;
        let column = self.columns.entry(address.segment_ord).or_insert_with(|| {
            searcher
                .segment_readers()
                .get(address.segment_ord as usize)
                .and_then(key_column)
        });
        key_in(column.as_ref(), address.doc_id)
    }
}

/// Best score first; equal scores by key, then address.
pub fn sort_hits(searcher: &Searcher, hits: &mut [(f32, DocAddress)]) {
    let mut keys = TieKeys::new(searcher);
    let mut keyed: Vec<(f32, u64, DocAddress)> = hits
        .iter()
        .map(|&(score, address)| (score, keys.key(address), address))
        .collect();
    keyed.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then_with(|| a.1.cmp(&b.1))
            .then_with(|| a.2.cmp(&b.2))
    });
    for (hit, (score, _, address)) in hits.iter_mut().zip(keyed) {
        *hit = (score, address);
    }
}

/// The best `limit` rows for `query` by score, equal scores ordered by key. Tantivy's collector
/// breaks ties at its limit by address, so this fetches past the limit until every row tied
/// with the last one kept is in (at most `max_fetch` rows; beyond that the address decides).
pub fn top_by_score(
    searcher: &Searcher,
    query: &dyn Query,
    limit: usize,
    max_fetch: usize,
) -> tantivy::Result<Vec<(f32, DocAddress)>> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let mut fetch = limit + limit / 2 + 8;
    loop {
        let mut hits = searcher.search(query, &TopDocs::with_limit(fetch).order_by_score())?;
        let closed =
            hits.len() < fetch || hits.get(limit - 1).map(|h| h.0) > hits.last().map(|h| h.0);
        if closed || fetch >= max_fetch {
            sort_hits(searcher, &mut hits);
            hits.truncate(limit);
            return Ok(hits);
        }
        fetch *= 4;
    }
}
