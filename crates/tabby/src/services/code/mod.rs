//! Hybrid code search over the code corpus: a BM25 leg on code tokens and an embedding leg on
//! binarized embeddings, both under the same zero-scored filters, fused by the learned ranker
//! (`ranker.rs`; Reciprocal Rank Fusion for the upstream strategy), capped per file
//! and thresholded.

pub(crate) mod content;
pub mod expansion;
pub mod file_names;
mod generation_cache;
mod hamming;
mod import_search;
pub mod members;
mod outline;
pub mod query;
pub mod ranker;
pub mod relations;
pub mod symbols;
pub(crate) mod tie;

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use tabby_common::{
    api::code::{
        CodeOutline, CodeSearch, CodeSearchDocument, CodeSearchError, CodeSearchHit,
        CodeSearchQuery, CodeSearchScores, ImportStatement, ReceiverNames,
    },
    config::CodeSearchParams,
    index::{
        IndexSchema,
        code::{CodeOrigin, code_search_filter, exclude_file, fields, filtered},
        stored_json,
    },
    languages::LanguageTable,
};
use tabby_index::{
    meta::{self, CodeCorpusMeta},
    snapshot::IndexLocation,
};
use tabby_inference::Embedding;
use tantivy::{
    DocAddress, Index, IndexReader, ReloadPolicy, Searcher, TantivyDocument,
    collector::TopDocs,
    query::{BooleanQuery, BoostQuery, Occur, Query, TermQuery},
    schema::{IndexRecordOption, Value},
};

use self::hamming::{
    BitsCache, CachedFilterQuery, FilterCache, ScanFilter, hamming_leg, pack_words,
};
pub use self::query::QueryStrategy;
use self::ranker::{QueryKind, Ranker};
use self::tie::{TieKeys, sort_hits, top_by_score};

/// RRF constant: each list contributes 1 / (RRF_K + rank), ranks from 1.
const RRF_K: f32 = 60.0;

#[derive(Clone)]
pub struct CodeSearchEmbedding {
    pub model: Arc<dyn Embedding>,
    pub model_id: String,
}

struct Loaded {
    /// The directory it was opened from (a snapshot's changes when a newer one is published).
    dir: PathBuf,
    reader: IndexReader,
    meta: CodeCorpusMeta,
    /// The metadata file's mtime when `meta` was read; a change means the corpus may differ.
    meta_modified: Option<std::time::SystemTime>,
}

/// One leg's ranked candidates (best first).
pub type LegHits = Vec<(f32, DocAddress)>;

pub struct CodeSearchService {
    index: IndexLocation,
    embedding: Option<CodeSearchEmbedding>,
    languages: Arc<LanguageTable>,
    pub query_strategy: QueryStrategy,
    /// The learned ranker the tuned strategy fuses with (default: the built-in one; None: RRF).
    pub ranker: Option<Arc<Ranker>>,
    /// The code words a question's words point to, added to its BM25 query under the tuned
    /// strategy (default: the built-in table; None: questions search their own words only).
    pub nl_expansion: Option<Arc<expansion::NlExpansion>>,
    loaded: Mutex<Option<Arc<Loaded>>>,
    bits: Arc<BitsCache>,
    filter_docs: Arc<FilterCache>,
    /// What the ranker reads from each chunk's stored document (its name, head and path),
    /// read once per chunk.
    pub(crate) chunk_sides: Arc<content::ChunkSides>,
    /// Where files are read as the repository has them (the import header and outlines); None:
    /// as indexed.
    pub files: Option<Arc<tabby_index::repo_files::RepoFiles>>,
    paths: import_search::PathCache,
    outlines: outline::OutlineCache,
    graphs: relations::GraphCache,
    file_names: file_names::FileNamesCache,
    /// Run the names and members legs of code queries even when the ranker gives them no
    /// weight (`tabby eval --features-out`, which writes their features for training).
    pub always_file_legs: bool,
}

/// The legs of one search, before fusion (for `tabby eval`).
pub struct SearchLegs {
    pub searcher: Searcher,
    pub bm25: LegHits,
    pub embedding: LegHits,
    /// The definitions of the names the edited file uses above the editor's window, nearest
    /// first (`file_names.rs`); empty when the leg did not run.
    pub names: file_names::NameHits,
    /// The definitions of the members of what the chain before the cursor leads to, in the
    /// leg's order (`members.rs`); empty when the leg did not run.
    pub members: members::MemberHits,
    /// Whether the embedding leg ran (an embedding model matching the index exists).
    pub has_embedding: bool,
    pub kind: QueryKind,
    /// The text searched (its last `query::MAX_QUERY_BYTES`), for the ranker's content
    /// features; its words are read only when the ranker uses them (`text`).
    content: String,
    text: std::sync::OnceLock<content::QueryText>,
}

impl SearchLegs {
    /// The query's words and identifiers, as the content features read them (built once).
    pub fn text(&self) -> &content::QueryText {
        self.text
            .get_or_init(|| content::QueryText::new(&self.content))
    }
}

impl CodeSearchService {
    pub fn new(
        index: impl Into<IndexLocation>,
        embedding: Option<CodeSearchEmbedding>,
        languages: Arc<LanguageTable>,
    ) -> Self {
        Self {
            index: index.into(),
            embedding,
            languages,
            query_strategy: QueryStrategy::default(),
            ranker: Ranker::builtin(),
            nl_expansion: expansion::NlExpansion::builtin(),
            loaded: Mutex::new(None),
            bits: Arc::new(BitsCache::default()),
            filter_docs: Arc::default(),
            chunk_sides: Arc::default(),
            files: None,
            paths: Default::default(),
            outlines: Default::default(),
            graphs: Default::default(),
            file_names: Default::default(),
            always_file_legs: false,
        }
    }

    /// Where this service reads the index.
    pub fn index(&self) -> &IndexLocation {
        &self.index
    }

    /// The canonical language of a repository path (empty when none is known).
    pub fn language_of(&self, path: &str) -> String {
        self.languages
            .by_path(std::path::Path::new(path))
            .map(|l| l.canonical_name().to_string())
            .unwrap_or_default()
    }

    /// Opens the index on first use; until it exists (and has a code corpus) search is NotReady.
    /// The versions that shaped the index's code records (schema, chunker, tags queries,
    /// relationship records, embedding model and dimension), for results to cite; `None` before the first index.
    pub fn index_versions(&self) -> Option<serde_json::Value> {
        let loaded = self.loaded().ok()?;
        let meta = &loaded.meta;
        Some(serde_json::json!({
            "schema": tabby_common::index::SCHEMA_VERSION,
            "chunker": meta.chunker,
            "chunk_size": meta.default_chunk_size,
            "tags_queries": meta.tags_query_version,
            "relations": meta.relations_version,
            "embedding_model": meta.embedding_model,
            "embedding_dim": meta.embedding_dim,
        }))
    }

    fn loaded(&self) -> Result<Arc<Loaded>, CodeSearchError> {
        let dir = self.index.dir().ok_or(CodeSearchError::NotReady)?;
        let mut slot = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        let modified = meta::meta_modified(&dir);
        if let Some(loaded) = slot.as_ref().filter(|l| l.dir == dir) {
            // The indexer may have rebuilt the corpus with other settings since; only re-read
            // the metadata (this is the completion hot path) when its file changed.
            if modified.is_some() && modified == loaded.meta_modified {
                return Ok(loaded.clone());
            }
            match meta::read_meta(&dir).and_then(|m| m.code) {
                Some(meta) if meta == loaded.meta => {
                    let same = Arc::new(Loaded {
                        dir: dir.clone(),
                        reader: loaded.reader.clone(),
                        meta,
                        meta_modified: modified,
                    });
                    *slot = Some(same.clone());
                    return Ok(same);
                }
                _ => *slot = None,
            }
        }
        // Another snapshot (or none loaded yet): searches in flight keep the old reader.
        let meta = meta::read_meta(&dir)
            .and_then(|m| m.code)
            .ok_or(CodeSearchError::NotReady)?;
        let index = Index::open_in_dir(&dir).map_err(|_| CodeSearchError::NotReady)?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::OnCommitWithDelay)
            .try_into()
            .map_err(|e: tantivy::TantivyError| CodeSearchError::Other(e.into()))?;
        let loaded = Arc::new(Loaded {
            dir,
            reader,
            meta,
            meta_modified: modified,
        });
        *slot = Some(loaded.clone());
        Ok(loaded)
    }

    /// Runs both legs (each returns up to `num_to_score` candidates).
    pub async fn search_legs(
        &self,
        query: &CodeSearchQuery,
        num_to_score: usize,
    ) -> Result<SearchLegs, CodeSearchError> {
        self.search_legs_with(query, num_to_score, true, true).await
    }

    /// `search_legs` as `params` asks: their candidates per leg and file legs.
    async fn search_legs_for(
        &self,
        query: &CodeSearchQuery,
        params: &CodeSearchParams,
    ) -> Result<SearchLegs, CodeSearchError> {
        let (n, names, members) = (params.num_to_score, params.names_leg, params.members_leg);
        self.search_legs_with(query, n, names, members).await
    }

    /// `search_legs`, with the names and members legs only where `names_leg` and
    /// `members_leg` allow them.
    async fn search_legs_with(
        &self,
        query: &CodeSearchQuery,
        num_to_score: usize,
        names_leg: bool,
        members_leg: bool,
    ) -> Result<SearchLegs, CodeSearchError> {
        let loaded = self.loaded()?;
        let searcher = loaded.reader.searcher();
        let language = query
            .language
            .as_deref()
            .map(|l| self.languages.get(l).canonical_name().to_string())
            .filter(|l| l != "unknown");
        let live: Vec<_> = searcher
            .segment_readers()
            .iter()
            .map(|s| s.segment_id())
            .collect();
        self.bits.retain(&live);
        self.filter_docs.retain(&live);
        self.chunk_sides.retain(&live);
        // The same matches as `code_search_filter`, with the positive part served from the
        // per-segment filter cache.
        let filters = || {
            let mut clauses: Vec<(Occur, Box<dyn Query>)> = vec![(
                Occur::Must,
                Box::new(CachedFilterQuery {
                    cache: self.filter_docs.clone(),
                    source_id: query.source_id.clone(),
                    language: language.clone(),
                    include_generated: query.include_generated,
                }),
            )];
            clauses.extend(query.filepath.as_deref().map(exclude_file));
            clauses
        };
        let kind = QueryKind::of(&query.content, query.filepath.as_deref());
        let tokens = self
            .query_strategy
            .bm25_terms(query::bounded(&query.content));
        // A question's words also look for the code words they point to (tuned strategy).
        let (expansions, expansion_weight) = match &self.nl_expansion {
            Some(x) if kind == QueryKind::Nl && self.query_strategy.expands_questions() => {
                (x.expand(&tokens), x.weight())
            }
            _ => (vec![], 0.0),
        };
        let bm25_query = Bm25Query {
            fields: self.query_strategy.bm25_fields(),
            tokens,
            expansions,
            expansion_weight,
            prune_common: self.query_strategy.prunes_common_terms(),
            row_factors: self.query_strategy.row_factors(),
        };

        let embedding = self
            .embedding
            .as_ref()
            .filter(|e| e.model_id == loaded.meta.embedding_model && loaded.meta.embedding_dim > 0);
        // With an embedding leg, BM25 runs on a blocking thread meanwhile (the query embedding
        // and the popcount scan take about as long as it does), so a lone query uses both cores.
        let bm25_task = match embedding {
            Some(_) => {
                let searcher = searcher.clone();
                let filters = filters();
                Bm25Task::Spawned(tokio::task::spawn_blocking(move || {
                    bm25_leg(&searcher, &bm25_query, filters, num_to_score)
                }))
            }
            None => Bm25Task::Inline(bm25_query),
        };

        let mut embedding_hits = Vec::new();
        let mut has_embedding = false;
        if let Some(embedding) = embedding {
            let text = self
                .query_strategy
                .embedding_text(query::bounded(&query.content));
            let vector = embedding
                .model
                .embed(&[text])
                .await
                .map_err(|e| CodeSearchError::Other(e.into()))?
                .into_iter()
                .next()
                .filter(|v| v.len() == loaded.meta.embedding_dim)
                .ok_or_else(|| {
                    CodeSearchError::Other(anyhow::anyhow!(
                        "query embedding does not have the index's dimension"
                    ))
                })?;
            has_embedding = true;
            embedding_hits = hamming_leg(
                &searcher,
                &self.bits,
                &self.filter_docs,
                &pack_words(&vector),
                vector.len(),
                num_to_score,
                &ScanFilter {
                    source_id: &query.source_id,
                    language: language.as_deref(),
                    include_generated: query.include_generated,
                    exclude_filepath: query.filepath.as_deref(),
                },
            )
            .map_err(|e| CodeSearchError::Other(e.into()))?;
        }
        let bm25 = match bm25_task {
            Bm25Task::Inline(bm25_query) => {
                bm25_leg(&searcher, &bm25_query, filters(), num_to_score)?
            }
            Bm25Task::Spawned(task) => task.await.map_err(|e| {
                CodeSearchError::Other(anyhow::anyhow!("BM25 search failed: {e}"))
            })??,
        };
        let names = if names_leg {
            self.names_leg(&searcher, query, kind, &filters)?
        } else {
            Vec::new()
        };
        let members = if members_leg {
            self.members_leg(&searcher, query, kind, &filters)?
        } else {
            Vec::new()
        };
        Ok(SearchLegs {
            searcher,
            bm25,
            embedding: embedding_hits,
            names,
            members,
            has_embedding,
            kind,
            content: query::bounded(&query.content).to_string(),
            text: std::sync::OnceLock::new(),
        })
    }

    /// Whether a leg that reads the edited file runs: a code query in a file, the tuned
    /// strategy, and a ranker whose code scorer weighs the leg (`reads`) or
    /// `always_file_legs`.
    fn runs_file_leg(
        &self,
        query: &CodeSearchQuery,
        kind: QueryKind,
        reads: fn(&Ranker, QueryKind) -> bool,
    ) -> bool {
        let weighed = self
            .ranker
            .as_deref()
            .is_some_and(|r| reads(r, QueryKind::Code));
        (self.always_file_legs || weighed)
            && kind == QueryKind::Code
            && query.filepath.is_some()
            && self.query_strategy == QueryStrategy::Tuned
    }

    /// The names leg of a code query in a file (tuned strategy, and a ranker that weighs it or
    /// `always_file_legs`): the definitions of the names the file, as indexed, uses above the
    /// query's lines. Empty when the file is not indexed or the query's lines are not found in it.
    fn names_leg(
        &self,
        searcher: &Searcher,
        query: &CodeSearchQuery,
        kind: QueryKind,
        filters: &dyn Fn() -> Vec<(Occur, Box<dyn Query>)>,
    ) -> Result<file_names::NameHits, CodeSearchError> {
        let Some(filepath) = query.filepath.as_deref() else {
            return Ok(Vec::new());
        };
        if !self.runs_file_leg(query, kind, Ranker::reads_names) {
            return Ok(Vec::new());
        }
        let filepath = filepath.replace('\\', "/");
        let file = self.file_names.get_or_make(
            searcher.generation().generation_id(),
            &query.source_id,
            &filepath,
            || self.source_text(searcher, &query.source_id, &filepath),
        )?;
        let window = query::bounded(&query.content);
        let Some(top) = file.window_top(window) else {
            return Ok(Vec::new());
        };
        let names = file.above(top, window, file_names::MAX_LOOKUPS);
        file_names::names_leg(searcher, &names, filters)
            .map_err(|e| CodeSearchError::Other(e.into()))
    }

    /// The members leg of a code query in a file whose lines end with a chain of names (tuned
    /// strategy, and a ranker that weighs it or `always_file_legs`): the definitions of the
    /// members of what the chain leads to. Empty when it leads nowhere in the repository.
    fn members_leg(
        &self,
        searcher: &Searcher,
        query: &CodeSearchQuery,
        kind: QueryKind,
        filters: &dyn Fn() -> Vec<(Occur, Box<dyn Query>)>,
    ) -> Result<members::MemberHits, CodeSearchError> {
        if !self.runs_file_leg(query, kind, Ranker::reads_members) {
            return Ok(Vec::new());
        }
        let found = self.receiver_members(query)?;
        members::members_leg(searcher, &found, filters)
            .map_err(|e| CodeSearchError::Other(e.into()))
    }

    /// Reads a hit's stored chunk.
    pub fn document(searcher: &Searcher, address: DocAddress) -> Option<CodeSearchDocument> {
        let schema = IndexSchema::instance();
        let doc: TantivyDocument = searcher.doc(address).ok()?;
        let attributes = stored_json(&doc, schema.field_chunk_attributes);
        let text = |key: &str| attributes[key].as_str().map(str::to_string);
        Some(CodeSearchDocument {
            file_id: doc.get_first(schema.field_id)?.as_str()?.to_string(),
            chunk_id: doc.get_first(schema.field_chunk_id)?.as_str()?.to_string(),
            body: doc
                .get_first(schema.field_chunk_text)?
                .as_str()?
                .to_string(),
            filepath: text(fields::CHUNK_FILEPATH)?,
            git_url: text(fields::CHUNK_GIT_URL).unwrap_or_default(),
            commit: None,
            language: text(fields::CHUNK_LANGUAGE).unwrap_or_default(),
            start_line: attributes[fields::CHUNK_START_LINE]
                .as_u64()
                .map(|l| l as usize),
            origin: CodeOrigin::from_attribute(attributes[fields::CHUNK_ORIGIN].as_str()),
            defines: Some(
                doc.get_all(schema.field_chunk_names)
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect(),
            ),
        })
    }
}

enum Bm25Task {
    Inline(Bm25Query),
    Spawned(tokio::task::JoinHandle<Result<LegHits, CodeSearchError>>),
}

/// The BM25 leg's query: its terms (each once, with its count in the query) and how to treat
/// terms most chunks contain.
struct Bm25Query {
    fields: Vec<Bm25Field>,
    tokens: Vec<String>,
    /// Terms the query's own terms point to (`expansion`), each at `expansion_weight`.
    expansions: Vec<String>,
    expansion_weight: f32,
    /// Drop terms that too many code rows contain (see `Bm25Field::max_share`).
    prune_common: bool,
    /// Factors on the scores of kinds of chunks (see `QueryStrategy::row_factors`).
    row_factors: Option<RowFactors>,
}

pub use self::query::{Bm25Field, RowFactors};

/// Indexes smaller than this keep every query term: there a word in half the chunks can still
/// be what tells them apart.
const MIN_ROWS_TO_PRUNE: u64 = 1000;
/// Query terms kept even when all of them are common (the rarest first).
const MIN_TERMS_KEPT: usize = 4;

/// The number of code rows, when the index is large enough to prune common terms.
fn rows_to_prune(searcher: &Searcher) -> Option<u64> {
    let schema = IndexSchema::instance();
    let rows = searcher
        .doc_freq(&schema.corpus_term(tabby_common::index::corpus::CODE))
        .ok()?;
    (rows >= MIN_ROWS_TO_PRUNE).then_some(rows)
}

fn bm25_leg(
    searcher: &Searcher,
    query: &Bm25Query,
    filters: Vec<(Occur, Box<dyn Query>)>,
    limit: usize,
) -> Result<LegHits, CodeSearchError> {
    let row_factors = query.row_factors;
    if query.tokens.is_empty() || limit == 0 {
        return Ok(vec![]);
    }
    // A token the query repeats is one clause boosted by its count: the same score as one
    // clause per occurrence, but its postings are walked once. At most MAX_QUERY_TERMS distinct
    // tokens count, the last ones (nearest the cursor), so a query's cost is bounded.
    let distinct = query::distinct_last(&query.tokens, query::MAX_QUERY_TERMS);
    let mut counts: Vec<(tantivy::Term, f32, &Bm25Field)> = Vec::new();
    for field in &query.fields {
        for (token, n) in &distinct {
            let term = tantivy::Term::from_field_text(field.field, token);
            counts.push((term, field.weight * *n as f32, field));
        }
        for token in &query.expansions {
            let term = tantivy::Term::from_field_text(field.field, token);
            counts.push((term, field.weight * query.expansion_weight, field));
        }
    }
    if let Some(rows) = query
        .prune_common
        .then(|| rows_to_prune(searcher))
        .flatten()
    {
        let mut with_df: Vec<(tantivy::Term, f32, &Bm25Field, u64)> = counts
            .into_iter()
            .map(|(term, n, field)| {
                let df = searcher.doc_freq(&term).unwrap_or(0);
                (term, n, field, df)
            })
            .filter(|(.., df)| *df > 0)
            .collect();
        with_df.sort_by_key(|(.., df)| *df);
        let common = |(_, _, field, df): &(tantivy::Term, f32, &Bm25Field, u64)| {
            *df as f64 > rows as f64 * field.max_share
        };
        let kept: Vec<_> = with_df.iter().filter(|t| !common(t)).cloned().collect();
        let with_df = if kept.len() >= MIN_TERMS_KEPT.min(with_df.len()) {
            kept
        } else {
            with_df.truncate(MIN_TERMS_KEPT);
            with_df
        };
        counts = with_df
            .into_iter()
            .map(|(term, n, field, _)| (term, n, field))
            .collect();
    }
    let terms: Vec<(Occur, Box<dyn Query>)> = counts
        .into_iter()
        .map(|(term, n, _)| {
            let query: Box<dyn Query> =
                Box::new(TermQuery::new(term, IndexRecordOption::WithFreqs));
            let query = if n != 1.0 {
                Box::new(BoostQuery::new(query, n))
            } else {
                query
            };
            (Occur::Should, query)
        })
        .collect();
    if terms.is_empty() {
        return Ok(vec![]);
    }
    let query = filtered(Box::new(BooleanQuery::new(terms)), filters);
    // No factor to apply when no segment holds a row it applies to.
    let Some(factors) = row_factors.filter(|f| RowColumns::apply_to_any(searcher, f)) else {
        return top_by_score(searcher, &query, limit, MAX_PENALTY_FETCH)
            .map_err(|e| CodeSearchError::Other(e.into()));
    };
    let search = |n: usize| {
        searcher
            .search(&query, &TopDocs::with_limit(n).order_by_score())
            .map_err(|e| CodeSearchError::Other(e.into()))
    };
    // Chunks of test files and chunks where no definition starts score a fraction of their
    // BM25 score. Over-fetch, re-score and re-sort; fetch more while a row beyond the fetched
    // ones could still make the top `limit` (every factor is at most 1, so its raw score, at
    // most the lowest fetched one, bounds it).
    let mut fetch = limit * 3;
    loop {
        let mut hits = search(fetch)?;
        let complete = hits.len() < fetch;
        let lowest_raw = hits.last().map_or(0.0, |(s, _)| *s);
        RowColumns::scale(
            searcher,
            &factors,
            hits.iter_mut().map(|(score, address)| (score, *address)),
        );
        sort_hits(searcher, &mut hits);
        hits.truncate(limit);
        let kth = hits.last().map_or(0.0, |(s, _)| *s);
        // Strictly above: a row not fetched that ties the last kept one would be ordered by
        // its key, so it must be fetched too.
        if complete || hits.len() < limit || kth > lowest_raw || fetch >= MAX_PENALTY_FETCH {
            return Ok(hits);
        }
        fetch *= 4;
    }
}

/// A segment's columns that the row factors read.
struct RowColumns {
    in_test: Option<tantivy::columnar::Column<u64>>,
    defines: Option<tantivy::columnar::Column<u64>>,
}

impl RowColumns {
    fn open(segment: &tantivy::SegmentReader) -> Self {
        let schema = IndexSchema::instance();
        let column = |field| {
            segment
                .fast_fields()
                .u64(schema.schema.get_field_name(field))
                .ok()
        };
        RowColumns {
            in_test: column(schema.field_chunk_in_test),
            defines: column(schema.field_chunk_defines),
        }
    }

    /// Whether some segment holds a chunk that a factor below 1 applies to.
    fn apply_to_any(searcher: &Searcher, factors: &RowFactors) -> bool {
        searcher.segment_readers().iter().any(|segment| {
            let columns = RowColumns::open(segment);
            (factors.test < 1.0 && columns.in_test.is_some_and(|c| c.max_value() > 0))
                || (factors.no_definition < 1.0
                    && columns.defines.is_some_and(|c| c.min_value() == 0))
        })
    }

    /// (in a test file, a definition starts in it) for one row.
    fn flags(&self, doc: tantivy::DocId) -> (bool, bool) {
        let value = |column: &Option<tantivy::columnar::Column<u64>>| {
            column.as_ref().and_then(|c| c.first(doc))
        };
        (
            value(&self.in_test) == Some(1),
            value(&self.defines) != Some(0),
        )
    }

    fn factor(&self, factors: &RowFactors, doc: tantivy::DocId) -> f32 {
        let value = |column: &Option<tantivy::columnar::Column<u64>>| {
            column.as_ref().and_then(|c| c.first(doc))
        };
        let mut factor = 1.0;
        if value(&self.in_test) == Some(1) {
            factor *= factors.test;
        }
        if value(&self.defines) == Some(0) {
            factor *= factors.no_definition;
        }
        factor
    }

    /// Multiplies each score by its row's factor (columns opened once per segment).
    fn scale<'a>(
        searcher: &Searcher,
        factors: &RowFactors,
        scores: impl Iterator<Item = (&'a mut f32, DocAddress)>,
    ) {
        let mut columns: HashMap<u32, RowColumns> = HashMap::new();
        for (score, address) in scores {
            let columns = columns
                .entry(address.segment_ord)
                .or_insert_with(|| RowColumns::open(searcher.segment_reader(address.segment_ord)));
            *score *= columns.factor(factors, address.doc_id);
        }
    }
}

/// The most candidates the row factors re-score for one query.
const MAX_PENALTY_FETCH: usize = 10_000;

/// One fused candidate.
#[derive(Clone, Debug)]
pub struct Fused {
    pub address: DocAddress,
    pub scores: CodeSearchScores,
    /// What the candidates are ordered by: the learned score, or the RRF score (with the row
    /// factors) for plain fusion.
    pub order: f32,
    /// The chunk's stable key (`tie.rs`), which orders equal `order`s.
    pub key: u64,
}

/// Reciprocal Rank Fusion of the two legs, best first (ties by the chunks' stable keys).
pub fn rrf_merge(searcher: &Searcher, bm25: &LegHits, embedding: &LegHits) -> Vec<Fused> {
    let mut keys = TieKeys::new(searcher);
    let mut merged: HashMap<DocAddress, CodeSearchScores> = HashMap::new();
    type SetScore = fn(&mut CodeSearchScores, f32);
    let legs: [(&LegHits, SetScore); 2] = [
        (bm25, |s, v| s.bm25 = v),
        (embedding, |s, v| s.embedding = v),
    ];
    for (hits, set_raw_score) in legs {
        for (rank, (score, address)) in hits.iter().enumerate() {
            let entry = merged.entry(*address).or_insert(CodeSearchScores {
                rrf: 0.0,
                bm25: 0.0,
                embedding: 0.0,
            });
            entry.rrf += 1.0 / (RRF_K + rank as f32 + 1.0);
            set_raw_score(entry, *score);
        }
    }
    let mut fused: Vec<Fused> = merged
        .into_iter()
        .map(|(address, scores)| Fused {
            address,
            order: scores.rrf,
            scores,
            key: keys.key(address),
        })
        .collect();
    sort_fused(&mut fused);
    fused
}

impl CodeSearchService {
    /// Fuses the legs the way the service answers: the learned ranker for the tuned strategy,
    /// plain RRF for upstream's (or when no ranker is set).
    pub fn fuse(&self, legs: &SearchLegs) -> Vec<Fused> {
        self.fuse_with(legs, true, true)
    }

    /// `fuse`, leaving out the names leg's hits unless `names` and the members leg's unless
    /// `members` (what a search with those legs off returns: completion's, by default).
    pub fn fuse_with(&self, legs: &SearchLegs, names: bool, members: bool) -> Vec<Fused> {
        let (none, no_members) = (Vec::new(), Vec::new());
        match (&self.ranker, self.query_strategy) {
            (Some(ranker), QueryStrategy::Tuned) => ranker.rank(
                legs.kind,
                &legs.searcher,
                [&legs.bm25, &legs.embedding],
                (
                    if names { &legs.names } else { &none },
                    if members { &legs.members } else { &no_members },
                ),
                ranker
                    .reads_content(legs.kind)
                    .then(|| self.content_of(legs)),
            ),
            _ => self.fuse_rrf(legs),
        }
    }

    /// What the ranker's content features read for these legs.
    pub fn content_of<'a>(&'a self, legs: &'a SearchLegs) -> ranker::Content<'a> {
        ranker::Content {
            query: legs.text(),
            chunks: &self.chunk_sides,
        }
    }

    /// RRF, then (tuned strategy) the row factors on the fused scores.
    pub fn fuse_rrf(&self, legs: &SearchLegs) -> Vec<Fused> {
        let mut fused = rrf_merge(&legs.searcher, &legs.bm25, &legs.embedding);
        if let Some(factors) = self.query_strategy.row_factors() {
            RowColumns::scale(
                &legs.searcher,
                &factors,
                fused.iter_mut().map(|f| (&mut f.scores.rrf, f.address)),
            );
            for f in &mut fused {
                f.order = f.scores.rrf;
            }
            sort_fused(&mut fused);
        }
        fused
    }
}

/// Best first, ties by stable key, then document address.
fn sort_fused(fused: &mut [Fused]) {
    fused.sort_by(fused_order);
}

fn fused_order(a: &Fused, b: &Fused) -> std::cmp::Ordering {
    b.order
        .total_cmp(&a.order)
        .then_with(|| a.key.cmp(&b.key))
        .then_with(|| a.address.cmp(&b.address))
}

/// Strict thresholds (a negative threshold lets everything through). Without an embedding leg
/// (no embedding model) the embedding threshold cannot apply and is skipped.
pub fn passes(scores: &CodeSearchScores, params: &CodeSearchParams, has_embedding: bool) -> bool {
    scores.bm25 > params.min_bm25_score
        && (!has_embedding || scores.embedding > params.min_embedding_score)
        && scores.rrf > params.min_rrf_score
}

/// Applies thresholds, reads the chunks, keeps at most `max_hits_per_file` per file (0: any
/// number) and `num_to_return`.
pub fn finish(
    searcher: &Searcher,
    fused: Vec<Fused>,
    params: &CodeSearchParams,
    has_embedding: bool,
) -> Vec<CodeSearchHit> {
    finish_with_cap(searcher, fused, params, has_embedding, per_file_cap(params))
}

/// `finish` with another per-file cap (`tabby eval` measures what the cap costs).
pub fn finish_with_cap(
    searcher: &Searcher,
    fused: Vec<Fused>,
    params: &CodeSearchParams,
    has_embedding: bool,
    max_hits_per_file: usize,
) -> Vec<CodeSearchHit> {
    finish_ranked(searcher, fused, params, has_embedding, max_hits_per_file)
        .into_iter()
        .map(|(_, hit)| hit)
        .collect()
}

fn per_file_cap(params: &CodeSearchParams) -> usize {
    match params.max_hits_per_file {
        0 => usize::MAX,
        n => n,
    }
}

/// `finish_with_cap`, each hit with the score it was ordered by.
fn finish_ranked(
    searcher: &Searcher,
    fused: Vec<Fused>,
    params: &CodeSearchParams,
    has_embedding: bool,
    max_hits_per_file: usize,
) -> Vec<(f32, CodeSearchHit)> {
    let mut per_file: HashMap<String, usize> = HashMap::new();
    let mut hits = Vec::new();
    for candidate in fused
        .into_iter()
        .filter(|c| passes(&c.scores, params, has_embedding))
    {
        if hits.len() >= params.num_to_return {
            break;
        }
        let Some(doc) = CodeSearchService::document(searcher, candidate.address) else {
            continue;
        };
        let count = per_file.entry(doc.file_id.clone()).or_default();
        if *count >= max_hits_per_file {
            continue;
        }
        *count += 1;
        hits.push((
            candidate.order,
            CodeSearchHit {
                scores: candidate.scores,
                doc,
            },
        ));
    }
    hits
}

impl CodeSearchService {
    /// Searches several repositories and merges their hits by the score each was ranked by.
    pub async fn search_repositories(
        &self,
        content: &str,
        source_ids: &[String],
        language: Option<&str>,
        filepath: Option<&str>,
        params: &CodeSearchParams,
        include_generated: bool,
    ) -> Result<Vec<CodeSearchHit>, CodeSearchError> {
        let mut all = Vec::new();
        for source_id in source_ids {
            let query = CodeSearchQuery {
                include_generated,
                filepath: filepath.map(str::to_string),
                language: language.map(str::to_string),
                content: content.to_string(),
                source_id: source_id.clone(),
            };
            let legs = self.search_legs_for(&query, params).await?;
            let fused = self.fuse(&legs);
            all.extend(finish_ranked(
                &legs.searcher,
                fused,
                params,
                legs.has_embedding,
                per_file_cap(params),
            ));
        }
        all.sort_by(|a, b| b.0.total_cmp(&a.0));
        all.truncate(params.num_to_return);
        Ok(all.into_iter().map(|(_, hit)| hit).collect())
    }
}

#[async_trait]
impl CodeSearch for CodeSearchService {
    async fn search_in_language(
        &self,
        query: CodeSearchQuery,
        params: CodeSearchParams,
    ) -> Result<Vec<CodeSearchHit>, CodeSearchError> {
        let legs = self.search_legs_for(&query, &params).await?;
        let fused = self.fuse(&legs);
        Ok(finish(&legs.searcher, fused, &params, legs.has_embedding))
    }

    async fn list_files(
        &self,
        source_id: &str,
        limit: usize,
    ) -> Result<(Vec<String>, bool), CodeSearchError> {
        let searcher = self.loaded()?.reader.searcher();
        let query = BooleanQuery::new(code_search_filter(source_id, None, None));
        let addresses = searcher
            .search(&query, &tantivy::collector::DocSetCollector)
            .map_err(|e| CodeSearchError::Other(e.into()))?;
        let schema = IndexSchema::instance();
        let mut files = std::collections::BTreeSet::new();
        for address in addresses {
            let Ok(doc) = searcher.doc::<TantivyDocument>(address) else {
                continue;
            };
            if let Some(path) =
                stored_json(&doc, schema.field_chunk_attributes)[fields::CHUNK_FILEPATH].as_str()
            {
                files.insert(path.to_string());
            }
        }
        let truncated = files.len() > limit;
        Ok((files.into_iter().take(limit).collect(), truncated))
    }

    async fn search_imports(
        &self,
        query: CodeSearchQuery,
        limit: usize,
    ) -> Result<Vec<CodeSearchHit>, CodeSearchError> {
        CodeSearchService::search_imports(self, &query, limit).await
    }

    async fn file_imports(
        &self,
        query: CodeSearchQuery,
    ) -> Result<Vec<ImportStatement>, CodeSearchError> {
        CodeSearchService::file_imports(self, &query)
    }

    async fn imported_files(
        &self,
        query: CodeSearchQuery,
    ) -> Result<Option<Vec<String>>, CodeSearchError> {
        CodeSearchService::imported_files(self, &query)
    }

    async fn receiver_outline(
        &self,
        query: CodeSearchQuery,
        max_bytes: usize,
    ) -> Result<Vec<CodeOutline>, CodeSearchError> {
        CodeSearchService::receiver_outline(self, &query, max_bytes)
    }

    async fn receiver_names(
        &self,
        query: CodeSearchQuery,
    ) -> Result<Option<ReceiverNames>, CodeSearchError> {
        CodeSearchService::receiver_names(self, &query)
    }

    async fn file_content(&self, file_id: &str) -> Result<Option<String>, CodeSearchError> {
        let searcher = self.loaded()?.reader.searcher();
        let schema = IndexSchema::instance();
        let query = BooleanQuery::new(vec![
            (
                Occur::Must,
                IndexSchema::filter(schema.corpus_term(tabby_common::index::corpus::CODE)),
            ),
            (Occur::Must, IndexSchema::filter(schema.id_term(file_id))),
        ]);
        let addresses = searcher
            .search(&query, &tantivy::collector::DocSetCollector)
            .map_err(|e| CodeSearchError::Other(e.into()))?;
        let chunks: Vec<(Option<usize>, String)> = addresses
            .into_iter()
            .filter_map(|address| {
                let doc = Self::document(&searcher, address)?;
                Some((doc.start_line, doc.body))
            })
            .collect();
        if chunks.is_empty() {
            return Ok(None);
        }
        if let Some((_, whole)) = chunks.iter().find(|(start, _)| start.is_none()) {
            return Ok(Some(whole.clone()));
        }
        Ok(Some(stitch(chunks)))
    }
}

/// Puts chunks back at their 1-based start lines; lines no chunk covers stay empty.
pub fn stitch(mut chunks: Vec<(Option<usize>, String)>) -> String {
    // By line; chunks may start on the same line (a one-line piece, which lost its
    // indentation, and the chunk it opens): the longer one is written last, so its lines are
    // the ones kept, whatever order the chunks were read in.
    chunks.sort_by(|(a, x), (b, y)| {
        a.cmp(b)
            .then_with(|| x.lines().count().cmp(&y.lines().count()))
            .then_with(|| x.cmp(y))
    });
    let mut lines: Vec<&str> = Vec::new();
    for (start, body) in &chunks {
        let start = start.unwrap_or(1).max(1) - 1;
        for (k, line) in body.lines().enumerate() {
            let at = start + k;
            if lines.len() <= at {
                lines.resize(at + 1, "");
            }
            lines[at] = line;
        }
    }
    lines.join("\n")
}

#[cfg(test)]
pub(crate) mod tests;
