//! The first stages of indexing a repository, on threads of their own so that both cores stay
//! busy: a reader lists the files, skips those already indexed and reads the rest; one prepare
//! worker per core parses and chunks each file and builds its chunk rows (all but the
//! embedding). The caller's task embeds and writes what comes out. The queues between stages
//! are bounded, so a slow stage holds back the others instead of filling memory.

use std::{
    collections::{HashMap, HashSet},
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
        mpsc,
    },
    thread::JoinHandle,
    time::Instant,
};

use serde_json::json;
use tabby_common::{
    index::{
        IndexSchema,
        chunk_side::ChunkSide,
        code::{CodeOrigin, fields, is_test_path, search_words, tokenize_code},
        corpus,
    },
    languages::LanguageTable,
};
use tantivy::TantivyDocument;

use super::stat_cache::{FileStamp, StatCache, StatCacheUpdate};
use super::{
    chunk_defined_names, chunk_defines, chunk_symbols, clip_front, document_id,
    filter::{self, MAX_FILE_BYTES, SkipReason},
    intelligence::{self, DEFAULT_CHUNK_SIZE},
    relations::FileRecord,
};
use crate::git::{self, RefSnapshot};

/// Stack of each prepare worker.
const PREPARE_STACK_BYTES: usize = 16 * 1024 * 1024;
/// Files waiting between two stages.
const QUEUE_FILES: usize = 32;

/// Where the files of a repository come from.
pub(super) enum FileSource {
    Git {
        dir: PathBuf,
        snapshots: Vec<RefSnapshot>,
    },
    Directory {
        files: Vec<(String, PathBuf)>,
        /// The blob ids of the previous run, by file metadata.
        cache: StatCache,
    },
}

/// What the indexer needs to know about the repository it reads.
pub(super) struct ReadContext {
    pub source_id: String,
    pub git_url: String,
    pub languages: Arc<LanguageTable>,
    /// The source's files in the index when the run started, and whether each is indexed in
    /// full (`CodeIndexer::source_rows`). A file listed twice in one run (in two refs) is a
    /// duplicate the second time, so rows written during the run need no lookup.
    pub indexed: Arc<HashMap<String, bool>>,
    /// Bytes of text embedded per chunk (0: all of it).
    pub max_embedding_bytes: usize,
    /// Busy nanoseconds of the reader and of the prepare workers together.
    pub read_nanos: AtomicU64,
    pub prepare_nanos: AtomicU64,
}

/// One file, read and ready to be prepared.
struct FileToPrepare {
    id: String,
    /// The blob id in `id`.
    hash: String,
    rel: String,
    language: String,
    chunk_size: usize,
    commit: Option<String>,
    text: String,
}

/// A file whose rows are built, but for the embeddings.
pub(super) struct PreparedFile {
    pub id: String,
    pub commit: Option<String>,
    /// The file's relationship record (JSON), for its document row.
    pub relations: String,
    pub bytes: u64,
    pub chunk_docs: Vec<TantivyDocument>,
    pub embedding_inputs: Vec<String>,
}

/// What comes out of the pipeline for each file listed.
pub(super) enum Listed {
    /// Not indexed, for this reason.
    Skipped(SkipReason),
    /// The same file in another ref, already seen in this run.
    Duplicate,
    Prepared(PreparedFile),
}

/// The running stages; `output` yields one item per file listed, then closes.
pub(super) struct Pipeline {
    pub output: tokio::sync::mpsc::Receiver<anyhow::Result<Listed>>,
    reader: JoinHandle<(HashSet<String>, Option<StatCacheUpdate>)>,
    workers: Vec<JoinHandle<()>>,
    context: Arc<ReadContext>,
}

impl Pipeline {
    pub fn start(source: FileSource, context: ReadContext) -> Pipeline {
        let context = Arc::new(context);
        let (read_tx, read_rx) = mpsc::sync_channel::<ReadItem>(QUEUE_FILES);
        let (out_tx, output) = tokio::sync::mpsc::channel(QUEUE_FILES);
        let reader = {
            let context = context.clone();
            std::thread::spawn(move || read_files(source, &context, &read_tx))
        };
        let read_rx = Arc::new(Mutex::new(read_rx));
        let workers = (0..worker_count())
            .map(|_| {
                let (read_rx, out_tx, context) = (read_rx.clone(), out_tx.clone(), context.clone());
                // Packing chunks keeps its own stack, but parsers and queries of foreign code
                // get room to spare: a stack overflow aborts the whole process.
                std::thread::Builder::new()
                    .name("index-prepare".into())
                    .stack_size(PREPARE_STACK_BYTES)
                    .spawn(move || {
                        loop {
                            let item =
                                match read_rx.lock().unwrap_or_else(|e| e.into_inner()).recv() {
                                    Ok(item) => item,
                                    Err(_) => return,
                                };
                            let listed = item.map(|file| match file {
                                Read::Skipped(reason) => Listed::Skipped(reason),
                                Read::Duplicate => Listed::Duplicate,
                                Read::File(file) => {
                                    let started = Instant::now();
                                    let prepared = prepare(&context, file);
                                    add_nanos(&context.prepare_nanos, started);
                                    Listed::Prepared(prepared)
                                }
                            });
                            if out_tx.blocking_send(listed).is_err() {
                                return;
                            }
                        }
                    })
                    .expect("cannot start an indexing thread")
            })
            .collect();
        Pipeline {
            output,
            reader,
            workers,
            context,
        }
    }

    /// Waits for the stages to end (the output must have been drained or dropped) and returns
    /// what the run saw.
    pub fn finish(self) -> anyhow::Result<Finished> {
        drop(self.output);
        for worker in self.workers {
            let _ = worker.join();
        }
        let (expected, stat_cache) = self
            .reader
            .join()
            .map_err(|_| anyhow::anyhow!("the file reader panicked"))?;
        let secs = |n: &AtomicU64| n.load(Ordering::Relaxed) as f64 / 1e9;
        Ok(Finished {
            expected,
            stat_cache,
            read_secs: secs(&self.context.read_nanos),
            prepare_secs: secs(&self.context.prepare_nanos),
        })
    }
}

/// What a finished pipeline saw.
pub(super) struct Finished {
    /// The ids of every file listed (the ones the index must keep).
    pub expected: HashSet<String>,
    /// For a plain directory, the blob ids to remember for the next run.
    pub stat_cache: Option<StatCacheUpdate>,
    /// Busy seconds of reading and of preparing.
    pub read_secs: f64,
    pub prepare_secs: f64,
}

fn add_nanos(total: &AtomicU64, since: Instant) {
    total.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

fn worker_count() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().clamp(1, 8))
}

enum Read {
    Skipped(SkipReason),
    Duplicate,
    File(FileToPrepare),
}

type ReadItem = anyhow::Result<Read>;

/// The reader stage: returns the ids of every file listed (the ones the index must keep) and,
/// for a plain directory, the blob ids learnt.
fn read_files(
    source: FileSource,
    context: &ReadContext,
    tx: &mpsc::SyncSender<ReadItem>,
) -> (HashSet<String>, Option<StatCacheUpdate>) {
    let mut expected = HashSet::new();
    let mut visit = |rel: &str,
                     abs: &Path,
                     hash: &str,
                     commit: Option<&str>,
                     read: &mut dyn FnMut() -> anyhow::Result<Option<Vec<u8>>>|
     -> bool {
        let started = Instant::now();
        let item = decide(context, &mut expected, rel, abs, hash, commit, read);
        add_nanos(&context.read_nanos, started);
        tx.send(item).is_ok()
    };
    match source {
        FileSource::Git { dir, snapshots } => {
            let repo = match git2::Repository::open(&dir) {
                Ok(repo) => repo,
                Err(e) => {
                    let _ = tx.send(Err(e.into()));
                    return (expected, None);
                }
            };
            for snapshot in &snapshots {
                for file in &snapshot.files {
                    let abs = dir.join(&file.path);
                    let blob = file.blob;
                    let mut read = || git::read_blob(&repo, blob, MAX_FILE_BYTES);
                    let hash = blob.to_string();
                    if !visit(&file.path, &abs, &hash, Some(&snapshot.commit), &mut read) {
                        return (expected, None);
                    }
                }
            }
            (expected, None)
        }
        FileSource::Directory { files, cache } => {
            let mut update = StatCacheUpdate::default();
            for (rel, abs) in files {
                if context.languages.by_path(Path::new(&rel)).is_none() {
                    // Not read at all: `decide` skips it by its name.
                    if tx
                        .send(Ok(Read::Skipped(SkipReason::UnknownLanguage)))
                        .is_err()
                    {
                        return (expected, None);
                    }
                    continue;
                }
                let started = Instant::now();
                let stamp = std::fs::metadata(&abs).ok().map(|m| FileStamp::of(&m));
                let size = stamp.map_or(0, |s| s.size());
                let cached = stamp.and_then(|s| cache.lookup(&rel, &s).map(str::to_string));
                let (hash, mut bytes) = match cached {
                    // Read only if the index lacks it (it may have been rebuilt since).
                    Some(hash) => (hash, None),
                    None if size > MAX_FILE_BYTES => (format!("size-{size}"), Some(None)),
                    None => {
                        let bytes = std::fs::read(&abs).ok();
                        let hash = match &bytes {
                            Some(b) => match git::blob_hash(b) {
                                Ok(oid) => oid.to_string(),
                                Err(e) => {
                                    let _ = tx.send(Err(e));
                                    return (expected, None);
                                }
                            },
                            None => format!("size-{size}"),
                        };
                        (hash, Some(bytes))
                    }
                };
                if let Some(stamp) = stamp
                    && !hash.starts_with("size-")
                {
                    update.record(&rel, stamp, &hash);
                }
                add_nanos(&context.read_nanos, started);
                let mut read = || match bytes.take() {
                    Some(bytes) => Ok(bytes),
                    None if size > MAX_FILE_BYTES => Ok(None),
                    None => Ok(std::fs::read(&abs).ok()),
                };
                if !visit(&rel, &abs, &hash, None, &mut read) {
                    return (expected, None);
                }
            }
            (expected, Some(update))
        }
    }
}

/// Whether a file needs indexing, and its text when it does.
fn decide(
    context: &ReadContext,
    expected: &mut HashSet<String>,
    rel: &str,
    abs: &Path,
    hash: &str,
    commit: Option<&str>,
    read: &mut dyn FnMut() -> anyhow::Result<Option<Vec<u8>>>,
) -> ReadItem {
    let Some(language) = context.languages.by_path(Path::new(rel)) else {
        return Ok(Read::Skipped(SkipReason::UnknownLanguage));
    };
    let id = document_id(&context.source_id, abs, language.canonical_name(), hash);
    if !expected.insert(id.clone()) {
        return Ok(Read::Duplicate);
    }
    if context.indexed.get(&id) == Some(&true) {
        return Ok(Read::Skipped(SkipReason::Unchanged));
    }
    let text = match read()? {
        None => Err(SkipReason::TooLarge),
        Some(bytes) => {
            filter::as_text(&bytes).and_then(|t| filter::quality_check(t).map(|_| t.to_string()))
        }
    };
    Ok(match text {
        Ok(text) => Read::File(FileToPrepare {
            id,
            hash: hash.to_string(),
            rel: rel.to_string(),
            language: language.canonical_name().to_string(),
            chunk_size: language.chunk_size.unwrap_or(DEFAULT_CHUNK_SIZE),
            commit: commit.map(str::to_string),
            text,
        }),
        Err(reason) => Read::Skipped(reason),
    })
}

/// The prepare stage: one parse, the chunks and their rows without the embedding fields.
fn prepare(context: &ReadContext, file: FileToPrepare) -> PreparedFile {
    let intelligence::FileAnalysis {
        chunks,
        definitions,
        relations,
    } = intelligence::analyze(&file.language, &file.text, file.chunk_size);
    let relations = FileRecord {
        path: file.rel.clone(),
        language: file.language.clone(),
        blob: file.hash.clone(),
        relations,
    }
    .to_json();
    let schema = IndexSchema::instance();
    let now = tantivy::DateTime::from_timestamp_secs(chrono::Utc::now().timestamp());
    let whole_file = chunks.len() == 1 && chunks[0].body == file.text.trim();
    let in_test = u64::from(is_test_path(&file.rel));
    let origin = CodeOrigin::of(&file.rel, &file.text).attribute();
    let path_words = search_words(&file.rel);
    let mut chunk_docs = Vec::with_capacity(chunks.len());
    let mut embedding_inputs = Vec::with_capacity(chunks.len());
    // How many chunks before this one start on its line (the pieces of a very long line).
    let mut same_line = 0;
    for (n, chunk) in chunks.iter().enumerate() {
        same_line = match n.checked_sub(1).map(|p| chunks[p].start_line) {
            Some(previous) if previous == chunk.start_line => same_line + 1,
            _ => 0,
        };
        embedding_inputs.push(clip_front(
            &format!("```{}\n{}\n```", file.rel, chunk.body),
            context.max_embedding_bytes,
        ));
        let mut doc = TantivyDocument::new();
        doc.add_text(schema.field_corpus, corpus::CODE);
        doc.add_text(schema.field_source_id, &context.source_id);
        doc.add_text(schema.field_id, &file.id);
        doc.add_text(schema.field_chunk_id, format!("{}-{n}", file.id));
        doc.add_date(schema.field_updated_at, now);
        let mut attributes = json!({
            fields::CHUNK_GIT_URL: context.git_url,
            fields::CHUNK_FILEPATH: file.rel,
            fields::CHUNK_LANGUAGE: file.language,
        });
        if !whole_file {
            attributes[fields::CHUNK_START_LINE] = json!(chunk.start_line);
        }
        if let Some(origin) = origin {
            attributes[fields::CHUNK_ORIGIN] = json!(origin);
        }
        doc.add_field_value(
            schema.field_chunk_attributes,
            &tantivy::schema::OwnedValue::from(attributes),
        );
        doc.add_text(schema.field_chunk_text, &chunk.body);
        for token in tokenize_code(&chunk.body) {
            doc.add_text(schema.field_chunk_tokens, token);
        }
        for word in path_words.iter().cloned().chain(search_words(&chunk.body)) {
            doc.add_text(schema.field_chunk_words, word);
        }
        for word in chunk_symbols(&definitions, chunk) {
            doc.add_text(schema.field_chunk_symbols, word);
        }
        for name in chunk_defined_names(&definitions, chunk) {
            doc.add_text(schema.field_chunk_names, name);
        }
        doc.add_u64(schema.field_chunk_in_test, in_test);
        doc.add_bytes(
            schema.field_chunk_side,
            &ChunkSide::new(&chunk.body, &file.rel).encode(),
        );
        doc.add_u64(
            schema.field_chunk_defines,
            u64::from(chunk_defines(&definitions, chunk)),
        );
        doc.add_u64(
            schema.field_chunk_key,
            tabby_common::index::code_chunk_key(
                &context.source_id,
                &file.rel,
                chunk.start_line,
                same_line,
            ),
        );
        chunk_docs.push(doc);
    }
    PreparedFile {
        id: file.id,
        commit: file.commit,
        relations,
        bytes: file.text.len() as u64,
        chunk_docs,
        embedding_inputs,
    }
}
