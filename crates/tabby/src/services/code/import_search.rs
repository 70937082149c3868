//! Import-aware candidates for completion: the definitions in the files that the file being
//! edited imports (read from its indexed version and from the request's prefix), ranked by the
//! query's BM25 terms plus the imported names, under the same source filter as every search.

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex},
};

use tabby_common::{
    api::code::{
        CodeSearchError, CodeSearchHit, CodeSearchQuery, CodeSearchScores, ImportStatement,
    },
    index::{
        IndexSchema,
        code::{code_search_filter, fields},
    },
};
use tantivy::{
    DocAddress, Searcher,
    query::{BooleanQuery, Occur, Query},
};

use tabby_index::code::imports;

use super::{
    Bm25Query, CodeSearchService, bm25_leg, generation_cache::PerGeneration, query, stitch,
    tie::TieKeys,
};

/// Per searcher generation: every indexed file path (all sources), and the resolved imports of
/// the files completions were asked in.
pub struct PathCache {
    paths: Mutex<Option<(u64, Arc<imports::PathIndex>)>>,
    imports: PerGeneration<FileImports>,
}

impl Default for PathCache {
    fn default() -> Self {
        Self {
            paths: Mutex::default(),
            // An entry is a few paths, names and statements.
            imports: PerGeneration::new(MAX_CACHED_FILES, usize::MAX),
        }
    }
}

/// The file a completion is asked in, as the index and its repository have it.
pub(super) struct EditedFile {
    pub language: String,
    pub filepath: String,
    pub searcher: Searcher,
    pub paths: Arc<imports::PathIndex>,
    pub imports: Arc<FileImports>,
}

/// What the indexed version of a file imports.
#[derive(Debug, Default)]
pub struct FileImports {
    /// Resolved to files of the repository, with the imported names.
    resolved: imports::Imports,
    /// Its top-level import statements as written.
    header: Vec<ImportStatement>,
    /// Its import statements as the import reader reads them (one line each).
    pub statements: Vec<String>,
}

/// How many times a word of the query counts against once for a word of an imported name.
/// On the generated sets, 2 instead of 1 lowered the import candidates' Recall@1 (markdown
/// 0.210 → 0.185, h2 0.037 → 0.025, packaging unchanged); ranking by the query alone and
/// filling with the names lowered it further (click 0.075 → 0.054).
const QUERY_WEIGHT: usize = 1;

/// Files whose imports are kept per generation.
const MAX_CACHED_FILES: usize = 1024;

impl PathCache {
    /// The paths of `searcher`'s index, from the term dictionary of the chunks' filepath
    /// attribute (no stored document is read); computed once per searcher generation.
    pub(super) fn paths(&self, searcher: &Searcher) -> Arc<imports::PathIndex> {
        let generation = searcher.generation().generation_id();
        let mut slot = self.paths.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((g, paths)) = slot.as_ref()
            && *g == generation
        {
            return paths.clone();
        }
        let schema = IndexSchema::instance();
        let probe = schema.chunk_attribute_term(fields::CHUNK_FILEPATH, "");
        let prefix = probe.serialized_value_bytes().to_vec();
        let mut paths = BTreeSet::new();
        for segment in searcher.segment_readers() {
            let Ok(index) = segment.inverted_index(schema.field_chunk_attributes) else {
                continue;
            };
            let Ok(mut stream) = index.terms().range().ge(&prefix).into_stream() else {
                continue;
            };
            while stream.advance() {
                let Some(value) = stream.key().strip_prefix(prefix.as_slice()) else {
                    break;
                };
                if let Ok(path) = std::str::from_utf8(value) {
                    paths.insert(path.to_string());
                }
            }
        }
        let paths = Arc::new(imports::PathIndex::new(paths));
        *slot = Some((generation, paths.clone()));
        paths
    }
}

impl CodeSearchService {
    /// The file `query.filepath` in `query.language`, with its imports as indexed (resolved and
    /// as written; once per index generation: an editor asks again and again in the same
    /// file); none without a filepath or language.
    pub(super) fn edited_file(
        &self,
        query: &CodeSearchQuery,
    ) -> Result<Option<EditedFile>, CodeSearchError> {
        let (Some(filepath), Some(language)) =
            (query.filepath.as_deref(), query.language.as_deref())
        else {
            return Ok(None);
        };
        let language = self.languages.get(language).canonical_name().to_string();
        let searcher = self.loaded()?.reader.searcher();
        let filepath = filepath.replace('\\', "/");
        let paths = self.paths.paths(&searcher);
        let source_id = &query.source_id;
        let imports = self.paths.imports.get_or_make::<CodeSearchError>(
            searcher.generation().generation_id(),
            source_id,
            &filepath,
            || {
                let text = self.source_text(&searcher, source_id, &filepath)?;
                Ok(FileImports {
                    resolved: imports::resolve(&language, &filepath, &text, &paths),
                    header: imports::header_statements(&language, &filepath, &text, &paths),
                    statements: imports::statements(&language, &text),
                })
            },
            |_| 0,
        )?;
        Ok(Some(EditedFile {
            language,
            filepath,
            searcher,
            paths,
            imports,
        }))
    }

    /// The top-level import statements of `query.filepath` as indexed (none without a filepath
    /// or language, or when the file is not indexed).
    pub fn file_imports(
        &self,
        query: &CodeSearchQuery,
    ) -> Result<Vec<ImportStatement>, CodeSearchError> {
        Ok(self
            .edited_file(query)?
            .map(|file| file.imports.header.clone())
            .unwrap_or_default())
    }

    /// The files the indexed version of `query.filepath` imports; `None` without a filepath
    /// or language, or when the file is not indexed.
    pub fn imported_files(
        &self,
        query: &CodeSearchQuery,
    ) -> Result<Option<Vec<String>>, CodeSearchError> {
        Ok(self
            .edited_file(query)?
            .filter(|file| file.paths.contains(&file.filepath))
            .map(|file| file.imports.resolved.files.clone()))
    }

    /// Up to `limit` chunks of the files `query.filepath` imports; none without a filepath or
    /// language, or when nothing it imports is in the index.
    pub async fn search_imports(
        &self,
        query: &CodeSearchQuery,
        limit: usize,
    ) -> Result<Vec<CodeSearchHit>, CodeSearchError> {
        let Some(EditedFile {
            language,
            filepath,
            searcher,
            paths,
            imports: file,
        }) = self.edited_file(query)?
        else {
            return Ok(vec![]);
        };
        let indexed = &file.resolved;
        let typed = imports::resolve(&language, &filepath, query::bounded(&query.content), &paths);
        let mut files = indexed.files.clone();
        files.extend(
            typed
                .files
                .into_iter()
                .filter(|f| !indexed.files.contains(f)),
        );
        let mut names = indexed.names.clone();
        names.extend(typed.names);
        names.sort();
        names.dedup();
        if files.is_empty() || limit == 0 {
            return Ok(vec![]);
        }
        let schema = IndexSchema::instance();
        let filters = || {
            let in_files: Vec<(Occur, Box<dyn Query>)> = files
                .iter()
                .map(|f| {
                    (
                        Occur::Should,
                        IndexSchema::filter(schema.chunk_attribute_term(fields::CHUNK_FILEPATH, f)),
                    )
                })
                .collect();
            let mut filters = code_search_filter(&query.source_id, None, Some(&filepath));
            filters.push((
                Occur::Must,
                Box::new(BooleanQuery::new(in_files)) as Box<dyn Query>,
            ));
            filters
        };
        let leg = |tokens: Vec<String>| {
            let bm25 = Bm25Query {
                fields: self.query_strategy.bm25_fields(),
                tokens,
                expansions: vec![],
                expansion_weight: 0.0,
                prune_common: false,
                row_factors: self.query_strategy.row_factors(),
            };
            bm25_leg(&searcher, &bm25, filters(), limit)
        };
        // Ranked by the query's words (counted QUERY_WEIGHT times) and the imported names.
        let mut tokens = Vec::new();
        for _ in 0..QUERY_WEIGHT {
            tokens.extend(
                self.query_strategy
                    .bm25_terms(query::bounded(&query.content)),
            );
        }
        for name in &names {
            tokens.extend(self.query_strategy.bm25_terms(name));
        }
        let hits = leg(tokens)?;
        Ok(hits
            .into_iter()
            .filter_map(|(score, address)| {
                Some(CodeSearchHit {
                    scores: CodeSearchScores {
                        rrf: 0.0,
                        bm25: score,
                        embedding: 0.0,
                    },
                    doc: Self::document(&searcher, address)?,
                })
            })
            .collect())
    }
}

impl CodeSearchService {
    /// The text of `filepath`, a file indexed in `source_id`: as the repository's local copy
    /// has it (where the service reads repositories, [`CodeSearchService::files`]), else as
    /// indexed (its chunks put back at their lines, where a one-line chunk has lost its
    /// indentation); empty when the file is not indexed. The repository is the one the index
    /// recorded for the source, and the path one it indexed: nothing else is read.
    pub(super) fn source_text(
        &self,
        searcher: &Searcher,
        source_id: &str,
        filepath: &str,
    ) -> Result<String, CodeSearchError> {
        let (text, git_url) = indexed_text(searcher, source_id, filepath)?;
        let (Some(files), Some(git_url)) = (&self.files, git_url) else {
            return Ok(text);
        };
        let read = files
            .snapshot(&git_url, None)
            .and_then(|snapshot| snapshot.read(filepath));
        Ok(match read.map(String::from_utf8) {
            Ok(Ok(whole)) => whole,
            _ => text,
        })
    }
}

/// The indexed text of `filepath` in `source_id` (its chunks put back at their lines) and the
/// repository URL its chunks record; empty when it is not indexed (a new file).
fn indexed_text(
    searcher: &Searcher,
    source_id: &str,
    filepath: &str,
) -> Result<(String, Option<String>), CodeSearchError> {
    let schema = IndexSchema::instance();
    let mut clauses = code_search_filter(source_id, None, None);
    clauses.push((
        Occur::Must,
        IndexSchema::filter(schema.chunk_attribute_term(fields::CHUNK_FILEPATH, filepath)),
    ));
    let addresses = searcher
        .search(
            &BooleanQuery::new(clauses),
            &tantivy::collector::DocSetCollector,
        )
        .map_err(|e| CodeSearchError::Other(e.into()))?;
    // The collector's set has no order: read a file with more chunks than the bound in the
    // order of the chunks' stable keys, so that every build of the index reads the same ones.
    let mut keys = TieKeys::new(searcher);
    let mut addresses: Vec<(u64, DocAddress)> =
        addresses.into_iter().map(|a| (keys.key(a), a)).collect();
    addresses.sort_unstable();
    let mut git_url = None;
    let chunks: Vec<(Option<usize>, String)> = addresses
        .into_iter()
        .take(MAX_CHUNKS_READ)
        .filter_map(|(_, a)| {
            let doc = CodeSearchService::document(searcher, a)?;
            git_url.get_or_insert(doc.git_url);
            Some((doc.start_line, doc.body))
        })
        .collect();
    Ok((stitch(chunks), git_url))
}

/// Chunks of the current file read for its imports (imports sit at the top, but the order of
/// the set is not the file's, so a generous bound).
const MAX_CHUNKS_READ: usize = 400;
