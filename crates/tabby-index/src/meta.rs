//! Opening the index and keeping it consistent with the code that reads it: the index records
//! the versions that shape it (schema, chunker, tags queries, relationship records, embedding model and dimension) in
//! `tabby-index.json`. A schema change rebuilds the whole index; a change in the code corpus'
//! settings deletes that corpus so it is re-indexed instead of mixing incompatible records.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use tabby_common::index::{IndexSchema, SCHEMA_VERSION};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy};

use crate::{
    code::intelligence::{DEFAULT_CHUNK_SIZE, TAGS_QUERY_VERSION},
    read_directory::ReadDirectory,
};

const META_FILE: &str = "tabby-index.json";
/// Identifies the chunking algorithm; bump when chunk boundaries change.
pub const CHUNKER: &str = "syntax-nodes/v3";

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct IndexMeta {
    pub schema_version: u32,
    pub code: Option<CodeCorpusMeta>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct CodeCorpusMeta {
    pub chunker: String,
    pub default_chunk_size: usize,
    pub tags_query_version: u32,
    /// What relationship records hold (`code::relations`); 0 in an index from before them.
    #[serde(default)]
    pub relations_version: u32,
    /// `none` when chunks carry no embedding.
    pub embedding_model: String,
    pub embedding_dim: usize,
}

impl CodeCorpusMeta {
    pub fn current(embedding_model: &str, embedding_dim: usize) -> Self {
        Self {
            chunker: CHUNKER.into(),
            default_chunk_size: DEFAULT_CHUNK_SIZE,
            tags_query_version: TAGS_QUERY_VERSION,
            relations_version: crate::code::relations::RELATIONS_VERSION,
            embedding_model: embedding_model.into(),
            embedding_dim,
        }
    }
}

fn meta_path(dir: &Path) -> PathBuf {
    dir.join(META_FILE)
}

/// When the metadata was last written (cheap: no read or parse).
pub fn meta_modified(dir: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(meta_path(dir))
        .and_then(|m| m.modified())
        .ok()
}

pub fn read_meta(dir: &Path) -> Option<IndexMeta> {
    let text = std::fs::read_to_string(meta_path(dir)).ok()?;
    serde_json::from_str(&text).ok()
}

pub fn write_meta(dir: &Path, meta: &IndexMeta) -> anyhow::Result<()> {
    let tmp = dir.join(format!("{META_FILE}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec_pretty(meta)?)?;
    std::fs::rename(&tmp, meta_path(dir))?;
    Ok(())
}

/// The index's writer (holding Tantivy's lock) and a manually reloaded reader, with a clear
/// error when another process holds the lock.
pub fn open_writer(
    index: &Index,
    dir: &Path,
    heap_bytes: usize,
) -> anyhow::Result<(IndexWriter, IndexReader)> {
    let writer = index.writer(heap_bytes).map_err(|e| match e {
        tantivy::TantivyError::LockFailure(..) => anyhow::anyhow!(
            "the index at {} is locked by another process (is `tabby serve` or another `tabby index` indexing?)",
            dir.display()
        ),
        e => e.into(),
    })?;
    let reader = index
        .reader_builder()
        .reload_policy(ReloadPolicy::Manual)
        .try_into()?;
    Ok((writer, reader))
}

/// Opens (or creates) the index in `dir` for writing (read without memory maps, see
/// `read_directory`), wiping it first when it was written with another
/// schema version or cannot be opened with this schema.
pub fn open_or_create(dir: &Path) -> anyhow::Result<Index> {
    let schema = IndexSchema::instance().schema.clone();
    let stale = match read_meta(dir) {
        Some(meta) => meta.schema_version != SCHEMA_VERSION,
        None => dir.join("meta.json").exists(),
    };
    if stale {
        tracing::warn!(
            "index at {} was built by another version; rebuilding it",
            dir.display()
        );
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot remove {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let directory = ReadDirectory::open(dir)?;
    let index = match Index::open_or_create(directory, schema.clone()) {
        Ok(index) => index,
        Err(e) => {
            tracing::warn!(
                "index at {} cannot be opened ({e}); rebuilding it",
                dir.display()
            );
            std::fs::remove_dir_all(dir)?;
            std::fs::create_dir_all(dir)?;
            Index::open_or_create(ReadDirectory::open(dir)?, schema)?
        }
    };
    if read_meta(dir).is_none() {
        write_meta(
            dir,
            &IndexMeta {
                schema_version: SCHEMA_VERSION,
                code: None,
            },
        )?;
    }
    Ok(index)
}
