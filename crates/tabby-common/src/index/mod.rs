//! The one Tantivy index shared by every corpus: its schema, and the query pieces both the
//! indexer and the searchers build on.
//!
//! Layout (upstream's): each source document is one *document row* (no `chunk_id`) plus N
//! *chunk rows* (`chunk_id = "{id}-{n}"`) that carry the searchable tokens. Deliberate
//! differences: BM25 tokens (`chunk_tokens`) are indexed with term frequencies, a second BM25
//! field (`chunk_words`) holds lower-cased words with compound identifiers split, a third
//! (`chunk_symbols`) the words of the names of the definitions around the chunk, and the
//! binarized embedding is kept as packed sign bits in a fast field (`chunk_embedding_bits`)
//! for a popcount scan, instead of upstream's one indexed token per dimension (which ranks the
//! same, and was most of the postings a cold index wrote: without them the 45 MB bench corpus
//! indexes in 14 s instead of 20, README "Performance"). A chunk's
//! text (code body or document text) is stored in `chunk_text`, outside the indexed
//! `chunk_attributes`: indexed there it became one raw term per chunk, which no query reads
//! and whose term dictionary took a fifth of a cold index's CPU.

pub mod chunk_side;
pub mod code;
pub mod stem;

use std::sync::OnceLock;

use tantivy::{
    Term,
    query::{BooleanQuery, ConstScoreQuery, Occur, Query, TermQuery},
    schema::{
        BytesOptions, DateOptions, FAST, Field, INDEXED, IndexRecordOption, JsonObjectOptions,
        STORED, STRING, Schema, TextFieldIndexing, TextOptions,
    },
};

pub mod corpus {
    pub const CODE: &str = "code";
    pub const STRUCTURED_DOC: &str = "structured_doc";
}

/// Bumped whenever the schema or the meaning of a field changes; a mismatch rebuilds the index.
pub const SCHEMA_VERSION: u32 = 13;

pub struct IndexSchema {
    pub schema: Schema,
    pub field_corpus: Field,
    pub field_source_id: Field,
    pub field_id: Field,
    pub field_updated_at: Field,
    pub field_failed_chunks_count: Field,
    pub field_attributes: Field,
    pub field_chunk_id: Field,
    pub field_chunk_attributes: Field,
    /// The chunk's text: stored only.
    pub field_chunk_text: Field,
    pub field_chunk_tokens: Field,
    /// Lower-cased words and compound parts of the chunk and its path (the tuned BM25 leg).
    pub field_chunk_words: Field,
    /// Words of the names of the definitions a code chunk starts or lies in (tags).
    pub field_chunk_symbols: Field,
    /// The names of the definitions (tags) that start in a code chunk, one value each, stored
    /// only: what the completion's used-names gate reads from a hit instead of parsing it.
    pub field_chunk_names: Field,
    pub field_chunk_embedding_bits: Field,
    /// A code chunk's `chunk_side::ChunkSide` (its definition's name, head, length and path
    /// words), encoded, for the learned ranker.
    pub field_chunk_side: Field,
    /// 1 on the chunks of test files (`code::is_test_path`), for the tuned BM25 leg's penalty.
    pub field_chunk_in_test: Field,
    /// 1 on the code chunks in which a definition (tags) starts, for the tuned BM25 leg.
    pub field_chunk_defines: Field,
    /// A chunk's stable key (`chunk_key`): what search breaks equal scores by, so that
    /// two builds of one corpus answer in the same order whatever order their rows were
    /// written in.
    pub field_chunk_key: Field,
    /// On a code file's document row: its source id (indexed only), so that a repository's
    /// relationship records are found without touching its chunk rows.
    pub field_file_source: Field,
    /// On a code file's document row: its relationship record (`tabby_index::code::relations`,
    /// JSON), stored only.
    pub field_file_relations: Field,
}

impl IndexSchema {
    pub fn instance() -> &'static IndexSchema {
        static SCHEMA: OnceLock<IndexSchema> = OnceLock::new();
        SCHEMA.get_or_init(IndexSchema::build)
    }

    fn build() -> IndexSchema {
        let mut builder = Schema::builder();
        let field_corpus = builder.add_text_field("corpus", STRING | FAST | STORED);
        let field_source_id = builder.add_text_field("source_id", STRING | FAST | STORED);
        let field_id = builder.add_text_field("id", STRING | STORED);
        let field_updated_at = builder.add_date_field(
            "updated_at",
            DateOptions::default().set_indexed().set_stored(),
        );
        let field_failed_chunks_count =
            builder.add_u64_field("failed_chunks_count", INDEXED | FAST | STORED);
        let raw_json = JsonObjectOptions::default()
            .set_stored()
            .set_indexing_options(
                TextFieldIndexing::default()
                    .set_tokenizer("raw")
                    .set_fieldnorms(true)
                    .set_index_option(IndexRecordOption::Basic),
            );
        let field_attributes =
            builder.add_json_field("attributes", raw_json.clone().set_fast("raw"));
        let field_chunk_id = builder.add_text_field("chunk_id", STRING | FAST | STORED);
        let field_chunk_attributes = builder.add_json_field("chunk_attributes", raw_json);
        let field_chunk_text = builder.add_text_field("chunk_text", STORED);
        let field_chunk_tokens = builder.add_text_field(
            "chunk_tokens",
            TextOptions::default().set_indexing_options(
                TextFieldIndexing::default()
                    .set_tokenizer("raw")
                    .set_fieldnorms(true)
                    .set_index_option(IndexRecordOption::WithFreqs),
            ),
        );
        let words = TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer("raw")
                .set_fieldnorms(true)
                .set_index_option(IndexRecordOption::WithFreqs),
        );
        let field_chunk_words = builder.add_text_field("chunk_words", words.clone());
        let field_chunk_symbols = builder.add_text_field("chunk_symbols", words);
        let field_chunk_names = builder.add_text_field("chunk_names", STORED);
        let field_chunk_embedding_bits =
            builder.add_bytes_field("chunk_embedding_bits", BytesOptions::default().set_fast());
        let field_chunk_side =
            builder.add_bytes_field("chunk_side", BytesOptions::default().set_fast());
        let field_chunk_in_test = builder.add_u64_field("chunk_in_test", FAST);
        let field_chunk_defines = builder.add_u64_field("chunk_defines", FAST);
        let field_chunk_key = builder.add_u64_field("chunk_key", FAST);
        let field_file_source = builder.add_text_field("file_source", STRING);
        let field_file_relations = builder.add_text_field("file_relations", STORED);
        IndexSchema {
            schema: builder.build(),
            field_corpus,
            field_source_id,
            field_id,
            field_updated_at,
            field_failed_chunks_count,
            field_attributes,
            field_chunk_id,
            field_chunk_attributes,
            field_chunk_text,
            field_chunk_tokens,
            field_chunk_words,
            field_chunk_symbols,
            field_chunk_names,
            field_chunk_embedding_bits,
            field_chunk_side,
            field_chunk_in_test,
            field_chunk_defines,
            field_chunk_key,
            field_file_source,
            field_file_relations,
        }
    }

    /// A term on a key of the `chunk_attributes` JSON field.
    pub fn chunk_attribute_term(&self, key: &str, value: &str) -> Term {
        let mut term = Term::from_field_json_path(self.field_chunk_attributes, key, false);
        term.append_type_and_str(value);
        term
    }

    /// A term on a key of the (document row) `attributes` JSON field.
    pub fn attribute_term(&self, key: &str, value: &str) -> Term {
        let mut term = Term::from_field_json_path(self.field_attributes, key, false);
        term.append_type_and_str(value);
        term
    }

    pub fn corpus_term(&self, corpus: &str) -> Term {
        Term::from_field_text(self.field_corpus, corpus)
    }

    pub fn source_id_term(&self, source_id: &str) -> Term {
        Term::from_field_text(self.field_source_id, source_id)
    }

    pub fn id_term(&self, id: &str) -> Term {
        Term::from_field_text(self.field_id, id)
    }

    /// A term query that contributes nothing to the score (a filter).
    pub fn filter(term: Term) -> Box<dyn Query> {
        Box::new(ConstScoreQuery::new(
            Box::new(TermQuery::new(term, IndexRecordOption::Basic)),
            0.0,
        ))
    }

    /// Matches every row (document and chunks) of `corpus` in `source_id`.
    pub fn source_query(&self, corpus: &str, source_id: &str) -> BooleanQuery {
        BooleanQuery::new(vec![
            (Occur::Must, Self::filter(self.corpus_term(corpus))),
            (Occur::Must, Self::filter(self.source_id_term(source_id))),
        ])
    }
}

/// A chunk's stable key: FNV-1a of its source, file path and first line (a structured
/// document's chunk: its document id and number). It depends only on what the chunk is, not on
/// when or by which thread it was indexed (unlike its document address), so search orders
/// equal scores by it.
pub fn chunk_key(source_id: &str, path: &str, line: usize) -> u64 {
    chunk_side::key(&format!("{source_id}\0{path}\0{line}"))
}

/// The stable key of the `ordinal`-th code chunk that starts on `line` of a file (counting
/// from 0): the first one's is [`chunk_key`]; the pieces a very long line is cut into each get
/// their own, so that equal scores between them do not fall back to the document address.
pub fn code_chunk_key(source_id: &str, path: &str, line: usize, ordinal: usize) -> u64 {
    match ordinal {
        0 => chunk_key(source_id, path, line),
        n => chunk_side::key(&format!("{source_id}\0{path}\0{line}\0{n}")),
    }
}

/// A stored JSON field of `doc` as `serde_json::Value` (`Null` when absent).
pub fn stored_json(doc: &tantivy::TantivyDocument, field: Field) -> serde_json::Value {
    use tantivy::schema::OwnedValue;
    doc.get_first(field)
        .map(OwnedValue::from)
        .and_then(|v| serde_json::to_value(&v).ok())
        .unwrap_or(serde_json::Value::Null)
}

#[cfg(test)]
mod key_tests {
    use super::*;

    #[test]
    fn pieces_of_one_line_get_their_own_keys_and_the_first_keeps_the_line_key() {
        let line = chunk_key("src", "flag.go", 690);
        assert_eq!(code_chunk_key("src", "flag.go", 690, 0), line);
        let keys: Vec<u64> = (0..4)
            .map(|n| code_chunk_key("src", "flag.go", 690, n))
            .collect();
        let mut distinct = keys.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 4, "{keys:?}");
        assert_ne!(code_chunk_key("src", "flag.go", 691, 1), keys[1]);
    }
}
