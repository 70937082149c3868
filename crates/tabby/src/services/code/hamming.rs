//! The embedding leg as a popcount scan: every chunk's embedding signs are kept packed in the
//! `chunk_embedding_bits` fast field; per segment they are loaded once into a flat `u64` array,
//! and a collector scores each chunk that passes the filters by the fraction of matching bits.
//! This is exactly the score of the token form (a union of `embedding_{one,zero}_i` terms worth
//! 1/D each), without walking D posting lists of N/2 entries.

use std::{
    cmp::Ordering,
    collections::{BinaryHeap, HashMap},
    sync::{Arc, Mutex},
};

use tabby_common::index::IndexSchema;
use tantivy::index::SegmentId;
use tantivy::{
    DocAddress, DocId, Score, SegmentOrdinal, SegmentReader,
    collector::{Collector, SegmentCollector},
};

/// Packed sign bits of every document of one segment (zeros and `present = false` for rows
/// without an embedding, such as document rows).
pub struct SegmentBits {
    words: usize,
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
        Ok(SegmentBits {
            words,
            data,
            present,
        })
    }
}

/// Per-segment bit arrays, built once per segment (segments are immutable).
#[derive(Default)]
pub struct BitsCache {
    segments: Mutex<HashMap<(SegmentId, usize), Arc<SegmentBits>>>,
}

impl BitsCache {
    fn get(&self, segment: &SegmentReader, words: usize) -> tantivy::Result<Arc<SegmentBits>> {
        let key = (segment.segment_id(), words);
        if let Some(bits) = self
            .segments
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(bits.clone());
        }
        let bits = Arc::new(SegmentBits::load(segment, words)?);
        self.segments
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, bits.clone());
        Ok(bits)
    }

    /// Drops segments that no longer exist (after merges).
    pub fn retain(&self, live: &[SegmentId]) {
        self.segments
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(id, _), _| live.contains(id));
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

#[derive(PartialEq)]
struct Scored(f32, DocAddress);
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
    }
}

/// Top `limit` chunks by Hamming similarity to `query` among the documents the query matched.
pub struct HammingCollector {
    pub query: Arc<Vec<u64>>,
    pub dim: usize,
    pub limit: usize,
    pub cache: Arc<BitsCache>,
}

pub struct HammingSegmentCollector {
    query: Arc<Vec<u64>>,
    dim: usize,
    limit: usize,
    segment: SegmentOrdinal,
    bits: Arc<SegmentBits>,
    heap: BinaryHeap<Scored>,
}

impl Collector for HammingCollector {
    type Fruit = Vec<(f32, DocAddress)>;
    type Child = HammingSegmentCollector;

    fn for_segment(
        &self,
        segment: SegmentOrdinal,
        reader: &SegmentReader,
    ) -> tantivy::Result<Self::Child> {
        Ok(HammingSegmentCollector {
            query: self.query.clone(),
            dim: self.dim,
            limit: self.limit,
            segment,
            bits: self.cache.get(reader, self.query.len())?,
            heap: BinaryHeap::with_capacity(self.limit + 1),
        })
    }

    fn requires_scoring(&self) -> bool {
        false
    }

    fn merge_fruits(&self, fruits: Vec<Self::Fruit>) -> tantivy::Result<Self::Fruit> {
        let mut all: Vec<(f32, DocAddress)> = fruits.into_iter().flatten().collect();
        sort_hits(&mut all);
        all.truncate(self.limit);
        Ok(all)
    }
}

impl SegmentCollector for HammingSegmentCollector {
    type Fruit = Vec<(f32, DocAddress)>;

    fn collect(&mut self, doc: DocId, _score: Score) {
        let d = doc as usize;
        if !self.bits.present.get(d).copied().unwrap_or(false) {
            return;
        }
        let row = &self.bits.data[d * self.bits.words..(d + 1) * self.bits.words];
        let differing: u32 = row
            .iter()
            .zip(self.query.iter())
            .map(|(a, b)| (a ^ b).count_ones())
            .sum();
        let score = 1.0 - differing as f32 / self.dim as f32;
        let hit = Scored(score, DocAddress::new(self.segment, doc));
        if self.heap.len() < self.limit {
            self.heap.push(hit);
        } else if let Some(worst) = self.heap.peek() {
            if hit < *worst {
                self.heap.pop();
                self.heap.push(hit);
            }
        }
    }

    fn harvest(self) -> Self::Fruit {
        self.heap.into_iter().map(|Scored(s, a)| (s, a)).collect()
    }
}

/// Best first; ties by document address, so both legs and both embedding forms agree.
pub fn sort_hits(hits: &mut [(f32, DocAddress)]) {
    hits.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
}
