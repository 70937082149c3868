//! Chunks by symbol name, for the agents' definition and reference tools: chunks that hold or
//! live in a definition of that name (`chunk_symbols`), and chunks whose code tokens contain
//! the identifier. The caller confirms the exact name in the files themselves.

use tabby_common::{
    api::code::{CodeSearchDocument, CodeSearchError},
    index::{
        IndexSchema,
        code::{code_search_filter, search_words, tokenize_code},
    },
};
use tantivy::{
    Searcher, Term,
    collector::Count,
    query::{BooleanQuery, Occur, Query, TermQuery},
    schema::IndexRecordOption,
};

use super::{CodeSearchService, tie::top_by_score};

/// Most rows fetched to settle the order of a name's equally scored chunks.
const MAX_FETCH: usize = 2_000;

/// What to look for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum SymbolUse {
    /// Chunks that hold (or live in) a definition of the name.
    Definition,
    /// Chunks that contain the identifier.
    Occurrence,
}

impl CodeSearchService {
    /// Up to `limit` chunks of `source_id` for `symbol` (an identifier), best matches first.
    pub fn symbol_chunks(
        &self,
        source_id: &str,
        symbol: &str,
        kind: SymbolUse,
        limit: usize,
    ) -> Result<Vec<CodeSearchDocument>, CodeSearchError> {
        let terms = symbol_terms(symbol, kind);
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        let mut clauses = code_search_filter(source_id, None, None);
        for term in terms {
            clauses.push((
                Occur::Must,
                Box::new(TermQuery::new(term, IndexRecordOption::WithFreqs)) as Box<dyn Query>,
            ));
        }
        let searcher = self.loaded()?.reader.searcher();
        // Equal scores (a name defined in several files) by the chunks' stable keys.
        let top = top_by_score(
            &searcher,
            &BooleanQuery::new(clauses),
            limit.max(1),
            MAX_FETCH,
        )
        .map_err(|e| CodeSearchError::Other(e.into()))?;
        Ok(top
            .into_iter()
            .filter_map(|(_, address)| Self::document(&searcher, address))
            .collect())
    }

    /// The files of `source_id` among the best `chunks` chunks for `symbol`, in the order of
    /// their best chunk, at most `max_files`: (path, language). The agents' symbol tools and
    /// the evidence packs read these files and confirm the name in them.
    pub fn symbol_files(
        &self,
        source_id: &str,
        symbol: &str,
        kind: SymbolUse,
        chunks: usize,
        max_files: usize,
    ) -> Result<Vec<(String, String)>, CodeSearchError> {
        let mut files: Vec<(String, String)> = Vec::new();
        for chunk in self.symbol_chunks(source_id, symbol, kind, chunks)? {
            if files.len() == max_files {
                break;
            }
            if !files.iter().any(|(p, _)| p == &chunk.filepath) {
                files.push((chunk.filepath, chunk.language));
            }
        }
        Ok(files)
    }
}

/// The index terms a chunk must hold to match `symbol` as `kind` says: the whole identifier,
/// lower-cased and stemmed as `chunk_symbols` holds it, for a definition; each code token in
/// `chunk_tokens` for an occurrence. None when `symbol` has no word.
fn symbol_terms(symbol: &str, kind: SymbolUse) -> Vec<Term> {
    let schema = IndexSchema::instance();
    match kind {
        SymbolUse::Definition => (search_words(symbol).into_iter().next())
            .map(|word| Term::from_field_text(schema.field_chunk_symbols, &word))
            .into_iter()
            .collect(),
        SymbolUse::Occurrence => tokenize_code(symbol)
            .iter()
            .map(|token| Term::from_field_text(schema.field_chunk_tokens, token))
            .collect(),
    }
}

/// How many chunks of `source_id` use the identifier `name`: hold it as a code token without
/// defining it (a class whose subclasses all override `run` does not make `run` a much-used
/// name). 0 for a name with no code token.
pub fn identifier_uses(searcher: &Searcher, source_id: &str, name: &str) -> usize {
    let used = symbol_terms(name, SymbolUse::Occurrence);
    if used.is_empty() {
        return 0;
    }
    let defined = symbol_terms(name, SymbolUse::Definition);
    let mut clauses = code_search_filter(source_id, None, None);
    for (occur, terms) in [(Occur::Must, used), (Occur::MustNot, defined)] {
        for term in terms {
            clauses.push((
                occur,
                Box::new(TermQuery::new(term, IndexRecordOption::Basic)) as Box<dyn Query>,
            ));
        }
    }
    searcher
        .search(&BooleanQuery::new(clauses), &Count)
        .unwrap_or(0)
}
