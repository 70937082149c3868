//! Indexing repositories into the code corpus: sync, list files per ref, skip what is already
//! indexed (content-addressed ids), chunk, embed in batches, write document and chunk rows,
//! commit in batches, and garbage-collect what changed or vanished.

pub mod exports;
pub mod filter;
pub mod imports;
pub mod intelligence;
mod macro_items;
pub mod outline;
mod pipeline;
pub mod relations;
mod stat_cache;

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    path::{Path, PathBuf},
    sync::Arc,
    time::Instant,
};

use anyhow::Context;
use serde_json::json;
use tabby_common::{
    git_url::{canonicalize_git_url, redact_credentials},
    index::{
        IndexSchema,
        code::{pack_embedding_bits, search_words},
        corpus,
    },
    languages::LanguageTable,
};
use tabby_inference::Embedding;
use tantivy::{
    DocSet, Index, IndexReader, IndexWriter, TantivyDocument,
    collector::Count,
    schema::{IndexRecordOption, OwnedValue},
};
use tracing::{info, warn};

use self::intelligence::Chunk;
use crate::{
    git::{self, RepositorySource},
    meta::{self, CodeCorpusMeta, IndexMeta},
    summary::{IndexProgress, RepositorySummary},
};

/// Chunks embedded per call to the embedding backend.
const EMBED_BATCH: usize = 64;
/// Chunks written between commits, or [`COMMIT_EVERY`] if that comes first: a crash loses at
/// most this much work. Each commit writes segments that merges then rewrite; at 2,000 chunks
/// the commits and merges of the 45 MB bench corpus took 3 s more of its 17 s (README,
/// "Performance").
const COMMIT_EVERY_CHUNKS: usize = 20_000;
const COMMIT_EVERY: std::time::Duration = std::time::Duration::from_secs(5);
/// Heap for Tantivy's writer, split across its threads.
const WRITER_HEAP_BYTES: usize = 64 * 1024 * 1024;
/// More searchable segments than this after a run are merged (into one or two, see
/// `CodeIndexer::compact`): every query pays a
/// term lookup and a scorer per segment and term, which dominates search time at 100k chunks
/// when a run leaves dozens of segments behind (one per commit, minus background merges).
const MAX_SEGMENTS_AFTER_RUN: usize = 4;

/// A repository to index, as configured.
#[derive(Clone, Debug)]
pub struct RepositoryToIndex {
    pub source_id: String,
    /// As configured; may carry credentials, which never reach logs or the index.
    pub git_url: String,
    pub refs: Vec<String>,
}

/// The embedding that goes with every chunk, and how it is identified in the index metadata.
#[derive(Clone)]
pub struct EmbeddingSetup {
    pub model: Arc<dyn Embedding>,
    pub model_id: String,
    /// Bytes of text embedded per chunk.
    pub max_input_bytes: usize,
}

/// Words of the names of the definitions a chunk is part of: those that start in it, and those
/// that enclose its first line (the class around a method, the function around a nested
/// block), so a chunk is found by the names it defines or lives in.
fn chunk_symbols(definitions: &[intelligence::Tag], chunk: &Chunk) -> Vec<String> {
    let (first, last) = chunk_lines(chunk);
    let mut words = Vec::new();
    for tag in definitions {
        let starts_inside = (first..last).contains(&tag.line_range.start);
        let encloses = tag.line_range.start < first && tag.line_range.end > first;
        if starts_inside || encloses {
            words.extend(search_words(&tag.name));
        }
    }
    words
}

/// Splits segments (largest first) into two groups of about equal row counts, to be merged
/// side by side.
fn split_for_merging(metas: Vec<tantivy::SegmentMeta>) -> [Vec<tantivy::index::SegmentId>; 2] {
    let mut groups: [Vec<tantivy::index::SegmentId>; 2] = [Vec::new(), Vec::new()];
    let mut rows = [0u64; 2];
    for meta in metas {
        let smaller = usize::from(rows[1] < rows[0]);
        rows[smaller] += u64::from(meta.num_docs());
        groups[smaller].push(meta.id());
    }
    groups
}

/// A chunk's 0-based line range.
fn chunk_lines(chunk: &Chunk) -> (usize, usize) {
    let first = chunk.start_line.saturating_sub(1);
    (first, first + chunk.body.lines().count().max(1))
}

/// Whether a definition starts in the chunk: its header (the `def`, `class`, `fn`, `impl` line)
/// is in it, so it shows what the definition is called and takes.
fn chunk_defines(definitions: &[intelligence::Tag], chunk: &Chunk) -> bool {
    chunk_defined_names(definitions, chunk).next().is_some()
}

/// Names a chunk's row keeps at most (a minified file's chunk can start hundreds).
const MAX_CHUNK_NAMES: usize = 256;

/// The names of the definitions that start in the chunk, in file order, each once (at most
/// `MAX_CHUNK_NAMES`): stored with the chunk, so that a search hit says what it defines.
fn chunk_defined_names<'a>(
    definitions: &'a [intelligence::Tag],
    chunk: &Chunk,
) -> impl Iterator<Item = &'a str> {
    let (first, last) = chunk_lines(chunk);
    let mut seen = HashSet::new();
    definitions
        .iter()
        .filter(move |tag| (first..last).contains(&tag.line_range.start))
        .map(|tag| tag.name.as_str())
        .filter(move |name| seen.insert(*name))
        .take(MAX_CHUNK_NAMES)
}

/// Writes the code corpus. Holds the index writer (and so the index lock) while it lives.
pub struct CodeIndexer {
    dir: PathBuf,
    writer: IndexWriter,
    reader: IndexReader,
    embedding: Option<EmbeddingSetup>,
    embedding_dim: usize,
    languages: Arc<LanguageTable>,
    uncommitted_chunks: usize,
    last_commit: Instant,
    times: WriteTimes,
}

/// Busy seconds of the stages that run on the caller's task.
#[derive(Default)]
struct WriteTimes {
    embed: f64,
    write: f64,
    commit: f64,
}

impl CodeIndexer {
    /// Opens the index for writing. If the code corpus was built with other settings (chunker,
    /// tags queries, embedding model or dimension), it is deleted first so it gets rebuilt.
    pub async fn open(
        dir: &Path,
        embedding: Option<EmbeddingSetup>,
        languages: LanguageTable,
    ) -> anyhow::Result<CodeIndexer> {
        let index = meta::open_or_create(dir)?;
        let embedding_dim = match &embedding {
            Some(setup) => probe_dimension(setup.model.as_ref()).await?,
            None => 0,
        };
        let (writer, reader) = meta::open_writer(&index, dir, WRITER_HEAP_BYTES)?;
        let mut indexer = CodeIndexer {
            dir: dir.to_path_buf(),
            writer,
            reader,
            embedding,
            embedding_dim,
            languages: Arc::new(languages),
            uncommitted_chunks: 0,
            last_commit: Instant::now(),
            times: WriteTimes::default(),
        };
        indexer.check_corpus_settings(&index)?;
        Ok(indexer)
    }

    fn corpus_meta(&self) -> CodeCorpusMeta {
        let model = self
            .embedding
            .as_ref()
            .map(|e| e.model_id.as_str())
            .unwrap_or("none");
        CodeCorpusMeta::current(model, self.embedding_dim)
    }

    fn check_corpus_settings(&mut self, _index: &Index) -> anyhow::Result<()> {
        let mut meta = meta::read_meta(&self.dir).unwrap_or(IndexMeta {
            schema_version: tabby_common::index::SCHEMA_VERSION,
            code: None,
        });
        let current = self.corpus_meta();
        if meta.code.as_ref() == Some(&current) {
            return Ok(());
        }
        if let Some(previous) = &meta.code {
            info!(
                "code index settings changed ({previous:?} → {current:?}): rebuilding the code corpus"
            );
        }
        let schema = IndexSchema::instance();
        self.writer.delete_term(schema.corpus_term(corpus::CODE));
        self.writer.commit()?;
        meta.code = Some(current);
        meta::write_meta(&self.dir, &meta)?;
        self.reader.reload()?;
        Ok(())
    }

    /// Syncs and indexes one repository, then removes its files that changed or vanished.
    pub async fn index_repository(
        &mut self,
        repo: &RepositoryToIndex,
        repositories_dir: &Path,
        progress: &dyn IndexProgress,
    ) -> anyhow::Result<RepositorySummary> {
        self.index_repository_with(repo, repositories_dir, progress, None)
            .await
    }

    /// [`Self::index_repository`], fetching with `auth` (an integration's token for its
    /// host).
    pub async fn index_repository_with(
        &mut self,
        repo: &RepositoryToIndex,
        repositories_dir: &Path,
        progress: &dyn IndexProgress,
        auth: Option<&git::GitHttpAuth>,
    ) -> anyhow::Result<RepositorySummary> {
        let started = Instant::now();
        let redacted = redact_credentials(&repo.git_url);
        let mut summary = RepositorySummary::new(&redacted);
        let git_url = canonicalize_git_url(&repo.git_url);
        let source = {
            let url = repo.git_url.clone();
            let dir = repositories_dir.to_path_buf();
            let auth = auth.cloned();
            tokio::task::spawn_blocking(move || git::sync_with(&url, &dir, auth.as_ref()))
                .await
                .context("sync task failed")??
        };
        let files = match source {
            RepositorySource::Git(dir) => {
                let snapshots = git::snapshots(&dir, &repo.refs)?;
                progress.start(&redacted, snapshots.iter().map(|s| s.files.len()).sum());
                pipeline::FileSource::Git { dir, snapshots }
            }
            RepositorySource::Directory(dir) => {
                let files = git::walk_directory(&dir);
                progress.start(&redacted, files.len());
                let cache = stat_cache::StatCache::load(&stat_cache::StatCache::path(
                    &self.dir,
                    &repo.source_id,
                ));
                pipeline::FileSource::Directory { files, cache }
            }
        };
        let rows = Arc::new(self.source_rows(&repo.source_id)?);
        let mut stages = pipeline::Pipeline::start(
            files,
            pipeline::ReadContext {
                source_id: repo.source_id.clone(),
                git_url: git_url.clone(),
                languages: self.languages.clone(),
                indexed: rows.clone(),
                max_embedding_bytes: self.embedding.as_ref().map_or(0, |e| e.max_input_bytes),
                read_nanos: Default::default(),
                prepare_nanos: Default::default(),
            },
        );
        let written = self
            .write_files(&mut stages, repo, &mut summary, progress)
            .await;
        let pipeline::Finished {
            expected,
            stat_cache,
            read_secs: read,
            prepare_secs: prepare,
        } = tokio::task::spawn_blocking(move || stages.finish()).await??;
        written?;
        if let Some(update) = stat_cache {
            let path = stat_cache::StatCache::path(&self.dir, &repo.source_id);
            if let Err(e) = update.save(&path) {
                warn!("cannot write {}: {e}", path.display());
            }
        }
        summary.removed = self.remove_stale(&rows, &expected);
        let commit_started = Instant::now();
        self.commit()?;
        self.times.commit += commit_started.elapsed().as_secs_f64();
        let merge_started = Instant::now();
        self.compact()?;
        let merge = merge_started.elapsed().as_secs_f64();
        summary.seconds = started.elapsed().as_secs_f64();
        let times = std::mem::take(&mut self.times);
        summary.stages = vec![
            ("read", read),
            ("prepare", prepare),
            ("embed", times.embed),
            ("write", times.write),
            ("commit", times.commit),
            ("merge", merge),
        ];
        progress.finish(&summary);
        Ok(summary)
    }

    /// The last stages: takes the prepared files as they come, embeds their chunks in
    /// batches and writes the rows.
    async fn write_files(
        &mut self,
        stages: &mut pipeline::Pipeline,
        repo: &RepositoryToIndex,
        summary: &mut RepositorySummary,
        progress: &dyn IndexProgress,
    ) -> anyhow::Result<()> {
        let mut batch = Vec::new();
        let mut batch_chunks = 0;
        while let Some(listed) = stages.output.recv().await {
            summary.files_seen += 1;
            match listed? {
                pipeline::Listed::Skipped(reason) => {
                    summary.skip(reason);
                    progress.file(0, 0);
                }
                pipeline::Listed::Duplicate => progress.file(0, 0),
                pipeline::Listed::Prepared(file) => {
                    // A stale record of this file (failed chunks) is replaced.
                    self.writer
                        .delete_term(IndexSchema::instance().id_term(&file.id));
                    summary.files_indexed += 1;
                    summary.bytes += file.bytes;
                    summary.chunks += file.chunk_docs.len();
                    progress.file(file.bytes, file.chunk_docs.len());
                    batch_chunks += file.chunk_docs.len();
                    batch.push(file);
                    if batch_chunks >= EMBED_BATCH {
                        self.write_batch(std::mem::take(&mut batch), repo, summary)
                            .await?;
                        batch_chunks = 0;
                    }
                }
            }
        }
        self.write_batch(batch, repo, summary).await
    }

    /// Embeds the chunks of `files` and writes their chunk rows and document rows.
    async fn write_batch(
        &mut self,
        files: Vec<pipeline::PreparedFile>,
        repo: &RepositoryToIndex,
        summary: &mut RepositorySummary,
    ) -> anyhow::Result<()> {
        if files.is_empty() {
            return Ok(());
        }
        let embed_started = Instant::now();
        let inputs: Vec<&String> = files.iter().flat_map(|f| &f.embedding_inputs).collect();
        let embeddings: Vec<Option<Vec<f32>>> = match &self.embedding {
            None => vec![None; inputs.len()],
            Some(setup) => {
                let mut out = Vec::with_capacity(inputs.len());
                for batch in inputs.chunks(EMBED_BATCH) {
                    let batch: Vec<String> = batch.iter().map(|s| s.to_string()).collect();
                    match setup.model.embed(&batch).await {
                        Ok(vectors) if vectors.len() == batch.len() => out.extend(
                            vectors
                                .into_iter()
                                .map(|v| (v.len() == self.embedding_dim).then_some(v)),
                        ),
                        Ok(_) => {
                            warn!("embedding backend returned the wrong number of vectors");
                            out.extend(std::iter::repeat_n(None, batch.len()));
                        }
                        Err(e) => {
                            warn!("embedding failed for {} chunks: {e}", batch.len());
                            out.extend(std::iter::repeat_n(None, batch.len()));
                        }
                    }
                }
                out
            }
        };
        self.times.embed += embed_started.elapsed().as_secs_f64();
        let write_started = Instant::now();
        let schema = IndexSchema::instance();
        let now = tantivy::DateTime::from_timestamp_secs(chrono::Utc::now().timestamp());
        let mut embeddings = embeddings.into_iter();
        let mut written = 0;
        for file in files {
            let mut failed = 0u64;
            for mut doc in file.chunk_docs {
                match embeddings.next().flatten() {
                    Some(vector) => {
                        doc.add_bytes(
                            schema.field_chunk_embedding_bits,
                            &pack_embedding_bits(&vector),
                        );
                        summary.chunks_embedded += 1;
                    }
                    None if self.embedding.is_some() => failed += 1,
                    None => {}
                }
                self.writer.add_document(doc)?;
                written += 1;
            }
            let mut doc = TantivyDocument::new();
            doc.add_text(schema.field_corpus, corpus::CODE);
            doc.add_text(schema.field_source_id, &repo.source_id);
            doc.add_text(schema.field_id, &file.id);
            doc.add_date(schema.field_updated_at, now);
            let attributes = match &file.commit {
                Some(commit) => json!({"commit": commit}),
                None => json!({}),
            };
            doc.add_field_value(schema.field_attributes, &OwnedValue::from(attributes));
            doc.add_text(schema.field_file_source, &repo.source_id);
            doc.add_text(schema.field_file_relations, &file.relations);
            if failed > 0 {
                doc.add_u64(schema.field_failed_chunks_count, failed);
                summary.chunks_failed += failed as usize;
            }
            self.writer.add_document(doc)?;
        }
        self.uncommitted_chunks += written;
        self.times.write += write_started.elapsed().as_secs_f64();
        if self.uncommitted_chunks >= COMMIT_EVERY_CHUNKS
            || self.last_commit.elapsed() >= COMMIT_EVERY
        {
            let commit_started = Instant::now();
            self.commit()?;
            self.times.commit += commit_started.elapsed().as_secs_f64();
        }
        Ok(())
    }

    /// The files of `source_id` in the index, by document id, and whether each is indexed in
    /// full (no failed chunks). Walks the id terms under the source's prefix (document ids
    /// start with `{source_id}:::`) once, before a run: the run's check of each file it lists is
    /// then a lookup instead of two queries over every segment, and the files it did not list
    /// are the ones left here.
    fn source_rows(&mut self, source_id: &str) -> anyhow::Result<HashMap<String, bool>> {
        let schema = IndexSchema::instance();
        self.reader.reload()?;
        let searcher = self.reader.searcher();
        let prefix = document_id_prefix(source_id);
        let mut upper = prefix.clone().into_bytes();
        // `{source_id}:::{` → `{source_id}:::|`, the first key after every id of the source.
        *upper.last_mut().expect("the prefix is not empty") += 1;
        let failed_field = schema
            .schema
            .get_field_name(schema.field_failed_chunks_count);
        let mut rows: HashMap<String, bool> = HashMap::new();
        for segment in searcher.segment_readers() {
            let inverted = segment.inverted_index(schema.field_id)?;
            // A segment without any document row has no such column.
            let failed = segment.fast_fields().column_opt::<u64>(failed_field)?;
            let alive = segment.alive_bitset();
            let mut terms = inverted
                .terms()
                .range()
                .ge(prefix.as_bytes())
                .lt(&upper)
                .into_stream()?;
            while terms.advance() {
                let Ok(id) = std::str::from_utf8(terms.key()) else {
                    continue;
                };
                // Terms outlive their deleted rows until a merge: only live rows count.
                let mut postings = inverted
                    .read_postings_from_terminfo(terms.value(), IndexRecordOption::Basic)?;
                let (mut live, mut complete) = (false, true);
                while postings.doc() != tantivy::TERMINATED {
                    let doc = postings.doc();
                    if alive.is_none_or(|a| a.is_alive(doc)) {
                        live = true;
                        complete &= failed.as_ref().and_then(|f| f.first(doc)).unwrap_or(0) == 0;
                    }
                    postings.advance();
                }
                if live {
                    let entry = rows.entry(id.to_string()).or_insert(true);
                    *entry &= complete;
                }
            }
        }
        Ok(rows)
    }

    /// Deletes the files of `rows` (a source's files before the run) that the run did not
    /// list.
    fn remove_stale(&mut self, rows: &HashMap<String, bool>, expected: &HashSet<String>) -> usize {
        let schema = IndexSchema::instance();
        let mut removed = 0;
        for id in rows.keys().filter(|id| !expected.contains(*id)) {
            self.writer.delete_term(schema.id_term(id));
            removed += 1;
        }
        removed
    }

    /// Removes every code row whose source is not in `keep` (repositories dropped from the config).
    pub fn remove_other_sources(&mut self, keep: &[String]) -> anyhow::Result<Vec<String>> {
        let schema = IndexSchema::instance();
        self.reader.reload()?;
        let searcher = self.reader.searcher();
        let mut present = BTreeMap::new();
        for segment in searcher.segment_readers() {
            let inverted = segment.inverted_index(schema.field_source_id)?;
            let mut terms = inverted.terms().stream()?;
            while terms.advance() {
                if let Ok(source) = std::str::from_utf8(terms.key()) {
                    present.insert(source.to_string(), ());
                }
            }
        }
        let mut removed = Vec::new();
        for source in present.into_keys() {
            if keep.contains(&source) {
                continue;
            }
            let query = schema.source_query(corpus::CODE, &source);
            if searcher.search(&query, &Count)? > 0 {
                self.writer.delete_query(Box::new(query))?;
                let _ = std::fs::remove_file(stat_cache::StatCache::path(&self.dir, &source));
                removed.push(source);
            }
        }
        if !removed.is_empty() {
            self.commit()?;
        }
        Ok(removed)
    }

    /// When there are more than `MAX_SEGMENTS_AFTER_RUN` searchable segments (see there),
    /// merges them: a segment holding most of the live rows is left as it is (a small re-index
    /// then merges what it added, not the whole corpus again) and the others are merged into
    /// two of about equal size, side by side. Background merges the writer started may hold some
    /// of them; the merge is retried until those finish. Returns the segment count afterwards.
    pub fn compact(&mut self) -> anyhow::Result<usize> {
        let index = self.writer.index().clone();
        for attempt in 0.. {
            let mut metas = index.searchable_segment_metas()?;
            if metas.len() <= MAX_SEGMENTS_AFTER_RUN {
                return Ok(metas.len());
            }
            metas.sort_by_key(|m| std::cmp::Reverse(m.num_docs()));
            let total: u64 = metas.iter().map(|m| u64::from(m.num_docs())).sum();
            if u64::from(metas[0].num_docs()) * 2 > total {
                metas.remove(0);
            }
            // Two merges of about equal size at once: both cores work, and the run ends
            // with at most three segments.
            let groups = split_for_merging(metas);
            let pending: Vec<_> = groups
                .iter()
                .filter(|ids| ids.len() > 1)
                .map(|ids| self.writer.merge(ids))
                .collect();
            let results: Vec<_> = pending.into_iter().map(|p| p.wait()).collect();
            match results.into_iter().collect::<Result<Vec<_>, _>>() {
                Ok(_) => {
                    self.reader.reload()?;
                    let left = index.searchable_segment_ids()?.len();
                    if left <= MAX_SEGMENTS_AFTER_RUN {
                        return Ok(left);
                    }
                }
                // A segment is still in a background merge: wait for it and try again.
                Err(e) if attempt < 100 => {
                    tracing::debug!("segment merge deferred: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Err(e) => return Err(e).context("merging index segments"),
            }
        }
        unreachable!("the loop returns")
    }

    /// Deletes the files of merged-away segments, which the reader held until now, and
    /// releases the index: a process that exits right after indexing leaves no stale segment
    /// files behind. (A background merge still running is abandoned; the next writer removes
    /// what it wrote.)
    pub fn finish(self) -> anyhow::Result<()> {
        let CodeIndexer { writer, reader, .. } = self;
        drop(reader);
        if let Err(e) = writer.garbage_collect_files().wait() {
            warn!("cannot remove stale index files: {e}");
        }
        Ok(())
    }

    pub fn commit(&mut self) -> anyhow::Result<()> {
        self.writer.commit()?;
        self.reader.reload()?;
        self.uncommitted_chunks = 0;
        self.last_commit = Instant::now();
        Ok(())
    }
}

/// `{source_id}:::{"path":…,"language":…,"git_hash":…}` — content-addressed.
pub fn document_id(source_id: &str, abs_path: &Path, language: &str, git_hash: &str) -> String {
    let file = json!({
        "path": abs_path.to_string_lossy(),
        "language": language,
        "git_hash": git_hash,
    });
    format!(
        "{}{}",
        document_id_prefix(source_id),
        &file.to_string()[1..]
    )
}

/// What every document id of `source_id` starts with: the source, `:::` and the JSON object's
/// opening brace.
fn document_id_prefix(source_id: &str) -> String {
    format!("{source_id}:::{{")
}

/// The first `max_bytes` bytes of `text` (all of it for 0), cut at a character boundary.
pub(crate) fn clip_front(text: &str, max_bytes: usize) -> String {
    if max_bytes == 0 || text.len() <= max_bytes {
        return text.to_string();
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

async fn probe_dimension(model: &dyn Embedding) -> anyhow::Result<usize> {
    let vectors = model
        .embed(&["tabby embedding dimension probe".to_string()])
        .await
        .context("the embedding model is not reachable")?;
    match vectors.first() {
        Some(v) if !v.is_empty() => Ok(v.len()),
        _ => anyhow::bail!("the embedding model returned no vector"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_carry_the_names_they_define_and_live_in() {
        let text = "import os\n\n\nclass HelpFormatter:\n    def __init__(self):\n        self.width = 80\n\n    def write_dl(self, rows):\n        for row in rows:\n            self.write(row)\n\n\ndef main():\n    pass\n";
        let definitions = intelligence::find_definitions("python", text);
        let chunk = |start_line: usize, body: &str| Chunk {
            body: body.to_string(),
            start_line,
            offset: 0,
        };
        // A chunk inside the class that starts `write_dl`: its own name and the class's.
        let method = chunk(
            8,
            "    def write_dl(self, rows):\n        for row in rows:\n            self.write(row)\n",
        );
        assert_eq!(
            chunk_symbols(&definitions, &method),
            vec![
                "helpformatter",
                "help",
                "formatter",
                "write_dl",
                "write",
                "dl"
            ]
        );
        // The imports define nothing and lie in nothing.
        assert!(chunk_symbols(&definitions, &chunk(1, "import os\n")).is_empty());
        // The last function, on its own.
        assert_eq!(
            chunk_symbols(&definitions, &chunk(13, "def main():\n    pass\n")),
            vec!["main"]
        );

        // Only chunks where a definition starts carry the flag.
        assert!(chunk_defines(&definitions, &method));
        assert!(chunk_defines(
            &definitions,
            &chunk(4, "class HelpFormatter:\n")
        ));
        assert!(!chunk_defines(&definitions, &chunk(1, "import os\n")));
        let body = chunk(9, "        for row in rows:\n            self.write(row)\n");
        assert!(!chunk_defines(&definitions, &body));
        assert!(
            !chunk_symbols(&definitions, &body).is_empty(),
            "it still lies in both"
        );

        // The names stored with a chunk are those that start in it, as written.
        let names = |c: &Chunk| chunk_defined_names(&definitions, c).collect::<Vec<_>>();
        assert_eq!(names(&method), vec!["write_dl"]);
        assert_eq!(
            names(&chunk(4, "class HelpFormatter:\n    def __init__(self):\n")),
            vec!["HelpFormatter", "__init__"]
        );
        assert!(names(&body).is_empty());
        assert!(names(&chunk(1, "import os\n")).is_empty());
    }
}
