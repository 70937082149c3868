//! The structured-doc corpus: web pages, commits, issues, pull/merge requests and ingested
//! documents, written to the same
//! index as code. Each document is one document row (`attributes`: `kind` plus the kind's
//! fields) and N chunk rows (the stored `chunk_text`, BM25 tokens and words, and the
//! embedding's tokens and bits when a model is set). Re-adding a document replaces it.

use std::collections::HashSet;
use std::path::Path;

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde_json::json;
use tabby_common::index::{
    IndexSchema,
    code::{pack_embedding_bits, search_words, tokenize_code},
    corpus,
};
use tantivy::{
    IndexReader, IndexWriter, TantivyDocument,
    collector::DocSetCollector,
    query::{BooleanQuery, Occur},
    schema::{OwnedValue, Value},
};
use text_splitter::{ChunkConfig, TextSplitter};

use crate::{EmbeddingSetup, meta};

/// Characters per chunk of a document's text.
pub const DOC_CHUNK_SIZE: usize = 1024;
const WRITER_HEAP_BYTES: usize = 32 * 1024 * 1024;

#[derive(Clone, Debug, PartialEq)]
pub enum DocFields {
    Web {
        title: String,
        link: String,
        body: String,
    },
    Commit {
        sha: String,
        message: String,
        author_email: Option<String>,
        author_at: DateTime<Utc>,
    },
    Ingested {
        doc_id: String,
        title: String,
        link: Option<String>,
        body: String,
    },
    /// A GitHub issue or GitLab issue of a provided repository.
    Issue {
        title: String,
        link: String,
        /// The vendor's login of the author.
        author: Option<String>,
        body: String,
        closed: bool,
    },
    /// A GitHub pull request or GitLab merge request; `diff` is its patch summary (the
    /// changed files, then the start of the patch).
    Pull {
        title: String,
        link: String,
        author: Option<String>,
        body: String,
        diff: String,
        merged: bool,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct StructuredDoc {
    pub source_id: String,
    /// Unique in the index, e.g. `git:abc:commit:<sha>`.
    pub id: String,
    pub fields: DocFields,
}

impl StructuredDoc {
    fn attributes(&self) -> serde_json::Value {
        match &self.fields {
            DocFields::Web { title, link, .. } => {
                json!({"kind": "web", "title": title, "link": link})
            }
            DocFields::Commit {
                sha,
                message,
                author_email,
                author_at,
            } => json!({
                "kind": "commit",
                "sha": sha,
                "message": message,
                "author_email": author_email,
                "author_at": author_at.to_rfc3339(),
            }),
            DocFields::Ingested {
                doc_id,
                title,
                link,
                ..
            } => json!({"kind": "ingested", "doc_id": doc_id, "title": title, "link": link}),
            DocFields::Issue {
                title,
                link,
                author,
                body,
                closed,
            } => json!({"kind": "issue", "title": title, "link": link, "author": author,
                        "body": body, "closed": closed}),
            DocFields::Pull {
                title,
                link,
                author,
                body,
                diff,
                merged,
            } => json!({"kind": "pull", "title": title, "link": link, "author": author,
                        "body": body, "diff": diff, "merged": merged}),
        }
    }

    /// The title (part of every chunk's words) and the text to chunk: a pull request's
    /// patch summary follows its description.
    fn title_and_text(&self) -> (&str, std::borrow::Cow<'_, str>) {
        match &self.fields {
            DocFields::Web { title, body, .. } => (title, body.into()),
            DocFields::Commit { message, .. } => ("", message.into()),
            DocFields::Ingested { title, body, .. } | DocFields::Issue { title, body, .. } => {
                (title, body.into())
            }
            DocFields::Pull {
                title, body, diff, ..
            } if !diff.is_empty() => (title, format!("{body}\n\n{diff}").into()),
            DocFields::Pull { title, body, .. } => (title, body.into()),
        }
    }
}

pub struct DocIndexer {
    writer: IndexWriter,
    reader: IndexReader,
    embedding: Option<EmbeddingSetup>,
}

impl DocIndexer {
    pub fn open(dir: &Path, embedding: Option<EmbeddingSetup>) -> anyhow::Result<Self> {
        let index = meta::open_or_create(dir)?;
        let (writer, reader) = meta::open_writer(&index, dir, WRITER_HEAP_BYTES)?;
        Ok(Self {
            writer,
            reader,
            embedding,
        })
    }

    fn source_query(source_id: &str) -> BooleanQuery {
        let schema = IndexSchema::instance();
        BooleanQuery::new(vec![
            (
                Occur::Must,
                IndexSchema::filter(schema.corpus_term(corpus::STRUCTURED_DOC)),
            ),
            (
                Occur::Must,
                IndexSchema::filter(schema.source_id_term(source_id)),
            ),
        ])
    }

    /// The sources that have documents in the structured-doc corpus.
    pub fn sources(&self) -> anyhow::Result<HashSet<String>> {
        self.reader.reload()?;
        let searcher = self.reader.searcher();
        let schema = IndexSchema::instance();
        let query = IndexSchema::filter(schema.corpus_term(corpus::STRUCTURED_DOC));
        let mut sources = HashSet::new();
        for address in searcher.search(&*query, &DocSetCollector)? {
            let doc: TantivyDocument = searcher.doc(address)?;
            if doc.get_first(schema.field_chunk_id).is_none()
                && let Some(source) = doc
                    .get_first(schema.field_source_id)
                    .and_then(|v| v.as_str())
            {
                sources.insert(source.to_string());
            }
        }
        Ok(sources)
    }

    /// Ids of the documents of a source (as of the last commit).
    pub fn doc_ids(&self, source_id: &str) -> anyhow::Result<HashSet<String>> {
        self.reader.reload()?;
        let searcher = self.reader.searcher();
        let schema = IndexSchema::instance();
        let mut ids = HashSet::new();
        for address in searcher.search(&Self::source_query(source_id), &DocSetCollector)? {
            let doc: TantivyDocument = searcher.doc(address)?;
            if doc.get_first(schema.field_chunk_id).is_none()
                && let Some(id) = doc.get_first(schema.field_id).and_then(|v| v.as_str())
            {
                ids.insert(id.to_string());
            }
        }
        Ok(ids)
    }

    /// Writes `doc` (replacing an earlier version); returns its number of chunks.
    pub async fn add(&mut self, doc: &StructuredDoc) -> anyhow::Result<usize> {
        let schema = IndexSchema::instance();
        self.delete(&doc.id);
        let (title, text) = doc.title_and_text();
        let chunks: Vec<&str> = TextSplitter::new(ChunkConfig::new(DOC_CHUNK_SIZE))
            .chunks(&text)
            .collect();
        let chunks = if chunks.is_empty() {
            vec![title]
        } else {
            chunks
        };
        let embeddings: Vec<Option<Vec<f32>>> = match &self.embedding {
            Some(setup) => {
                let inputs: Vec<String> = chunks
                    .iter()
                    .map(|c| {
                        crate::code::clip_front(&format!("{title}\n{c}"), setup.max_input_bytes)
                    })
                    .collect();
                match setup.model.embed(&inputs).await {
                    Ok(vectors) if vectors.len() == inputs.len() => {
                        vectors.into_iter().map(Some).collect()
                    }
                    Ok(_) | Err(_) => vec![None; chunks.len()],
                }
            }
            None => vec![None; chunks.len()],
        };
        for (n, (chunk, embedding)) in chunks.iter().zip(embeddings).enumerate() {
            let mut row = TantivyDocument::new();
            row.add_text(schema.field_corpus, corpus::STRUCTURED_DOC);
            row.add_text(schema.field_source_id, &doc.source_id);
            row.add_text(schema.field_id, &doc.id);
            row.add_text(schema.field_chunk_id, format!("{}-{n}", doc.id));
            row.add_u64(
                schema.field_chunk_key,
                tabby_common::index::chunk_key(&doc.source_id, &doc.id, n),
            );
            row.add_text(schema.field_chunk_text, chunk);
            for token in tokenize_code(chunk) {
                row.add_text(schema.field_chunk_tokens, token);
            }
            for word in search_words(title).into_iter().chain(search_words(chunk)) {
                row.add_text(schema.field_chunk_words, word);
            }
            if let Some(vector) = embedding {
                row.add_bytes(
                    schema.field_chunk_embedding_bits,
                    &pack_embedding_bits(&vector),
                );
            }
            self.writer.add_document(row)?;
        }
        let mut row = TantivyDocument::new();
        row.add_text(schema.field_corpus, corpus::STRUCTURED_DOC);
        row.add_text(schema.field_source_id, &doc.source_id);
        row.add_text(schema.field_id, &doc.id);
        row.add_date(
            schema.field_updated_at,
            tantivy::DateTime::from_timestamp_secs(Utc::now().timestamp()),
        );
        row.add_field_value(schema.field_attributes, &OwnedValue::from(doc.attributes()));
        self.writer.add_document(row)?;
        Ok(chunks.len())
    }

    /// Removes a document (takes effect at the next commit).
    pub fn delete(&mut self, id: &str) {
        self.writer.delete_term(IndexSchema::instance().id_term(id));
    }

    /// Removes every document of a source from the structured-doc corpus (code stays).
    pub fn delete_source(&mut self, source_id: &str) -> anyhow::Result<()> {
        self.writer
            .delete_query(Box::new(Self::source_query(source_id)))?;
        Ok(())
    }

    pub fn commit(&mut self) -> anyhow::Result<()> {
        self.writer.commit().context("cannot commit the index")?;
        self.reader.reload()?;
        Ok(())
    }
}

/// A commit of a repository, for the structured-doc corpus.
pub struct CommitInfo {
    pub sha: String,
    pub message: String,
    pub author_email: Option<String>,
    pub author_at: DateTime<Utc>,
}

/// The newest `limit` commits reachable from the repository's refs (`HEAD` when `refs` is
/// empty), newest first, from the local copy (local path or our mirror).
pub fn recent_commits(
    git_url: &str,
    repositories_dir: &Path,
    refs: &[String],
    limit: usize,
) -> anyhow::Result<Vec<CommitInfo>> {
    let dir = crate::git::local_copy(repositories_dir, git_url);
    let repo = git2::Repository::open(&dir)
        .with_context(|| format!("cannot open git repository {}", dir.display()))?;
    let mut walk = repo.revwalk()?;
    walk.set_sorting(git2::Sort::TIME)?;
    if refs.is_empty() {
        walk.push_head()?;
    } else {
        for name in refs {
            let commit = crate::git::resolve_commit(&repo, name)?;
            walk.push(commit)?;
        }
    }
    let mut out = Vec::new();
    for oid in walk.take(limit) {
        let commit = repo.find_commit(oid?)?;
        let author = commit.author();
        out.push(CommitInfo {
            sha: commit.id().to_string(),
            message: commit.message().unwrap_or_default().trim().to_string(),
            author_email: author.email().ok().map(str::to_string),
            author_at: DateTime::from_timestamp(author.when().seconds(), 0).unwrap_or_default(),
        });
    }
    Ok(out)
}
