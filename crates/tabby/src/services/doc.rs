//! [`DocSearch`] over the `structured_doc` corpus of the one index: a BM25 leg on the chunks'
//! lower-cased words, filtered to the sources the caller may read, one hit per document, with
//! the document's kind and fields read from its document row.
//!
//! Structured-doc rows (written by the jobs that index commits, web pages and ingested
//! documents): the document row's `attributes` hold `kind` (`web` | `commit` | `ingested`) and
//! the kind's fields (web `title`, `link`; commit `sha`, `message`, `author_email`,
//! `author_at` (RFC 3339); ingested `title`, `link`, `doc_id`); each chunk row stores its text
//! in `chunk_text`.

use std::collections::HashSet;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value as Json;
use tabby_common::{
    api::doc::{DocSearch, DocSearchDocument, DocSearchHit},
    index::{IndexSchema, code::search_words, corpus, stored_json},
};
use tabby_index::snapshot::IndexLocation;

use super::code::tie::top_by_score;
use tantivy::{
    Index, TantivyDocument,
    collector::TopDocs,
    query::{BooleanQuery, Occur, Query, TermQuery},
    schema::{IndexRecordOption, Value},
};

/// Most chunk rows fetched to settle the order of equally scored ones.
const MAX_FETCH: usize = 2_000;

pub struct DocSearchService {
    index: IndexLocation,
}

impl DocSearchService {
    pub fn new(index: impl Into<IndexLocation>) -> Self {
        Self {
            index: index.into(),
        }
    }

    /// The source ids of the index (code and docs), distinct and sorted; empty before the
    /// first index exists.
    pub fn source_ids(&self) -> anyhow::Result<Vec<String>> {
        let Some(dir) = self.index.dir() else {
            return Ok(Vec::new());
        };
        if !dir.join("meta.json").exists() {
            return Ok(Vec::new());
        }
        let index = Index::open_in_dir(&dir)?;
        let searcher = index.reader()?.searcher();
        let field = IndexSchema::instance().field_source_id;
        let mut ids = std::collections::BTreeSet::new();
        for segment in searcher.segment_readers() {
            let inverted = segment.inverted_index(field)?;
            let mut terms = inverted.terms().stream()?;
            while terms.advance() {
                if let Ok(id) = std::str::from_utf8(terms.key()) {
                    ids.insert(id.to_string());
                }
            }
        }
        Ok(ids.into_iter().collect())
    }
}

fn document(attributes: &Json, chunk_text: &str) -> Option<DocSearchDocument> {
    let text = |key: &str| attributes[key].as_str().map(str::to_string);
    Some(match attributes["kind"].as_str()? {
        "web" => DocSearchDocument::Web {
            title: text("title")?,
            link: text("link")?,
            content: chunk_text.to_string(),
        },
        "commit" => DocSearchDocument::Commit {
            sha: text("sha")?,
            message: text("message")?,
            author_email: text("author_email"),
            author_at: text("author_at")
                .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
                .map(|t| t.with_timezone(&Utc))?,
        },
        "ingested" => DocSearchDocument::Ingested {
            id: text("doc_id")?,
            title: text("title")?,
            body: chunk_text.to_string(),
            link: text("link"),
        },
        "issue" => DocSearchDocument::Issue {
            title: text("title")?,
            link: text("link")?,
            author: text("author"),
            body: text("body").unwrap_or_default(),
            closed: attributes["closed"].as_bool().unwrap_or(false),
        },
        "pull" => DocSearchDocument::Pull {
            title: text("title")?,
            link: text("link")?,
            author: text("author"),
            body: text("body").unwrap_or_default(),
            diff: text("diff").unwrap_or_default(),
            merged: attributes["merged"].as_bool().unwrap_or(false),
        },
        _ => return None,
    })
}

fn search_index(
    index_dir: &std::path::Path,
    source_ids: &[String],
    content: &str,
    limit: usize,
) -> anyhow::Result<Vec<DocSearchHit>> {
    let words = search_words(content);
    if source_ids.is_empty()
        || words.is_empty()
        || limit == 0
        || !index_dir.join("meta.json").exists()
    {
        return Ok(Vec::new());
    }
    let index = Index::open_in_dir(index_dir)?;
    let searcher = index.reader()?.searcher();
    let schema = IndexSchema::instance();
    let sources: Vec<(Occur, Box<dyn Query>)> = source_ids
        .iter()
        .map(|s| (Occur::Should, IndexSchema::filter(schema.source_id_term(s))))
        .collect();
    let terms: Vec<(Occur, Box<dyn Query>)> = words
        .iter()
        .map(|w| {
            let term = tantivy::Term::from_field_text(schema.field_chunk_words, w);
            (
                Occur::Should,
                Box::new(TermQuery::new(term, IndexRecordOption::WithFreqs)) as Box<dyn Query>,
            )
        })
        .collect();
    let query = BooleanQuery::new(vec![
        (
            Occur::Must,
            IndexSchema::filter(schema.corpus_term(corpus::STRUCTURED_DOC)),
        ),
        (Occur::Must, Box::new(BooleanQuery::new(sources))),
        (Occur::Must, Box::new(BooleanQuery::new(terms))),
    ]);
    // Equal scores (the same words in several documents) by the chunks' stable keys.
    let top = top_by_score(&searcher, &query, limit * 4, MAX_FETCH)?;
    let mut seen = HashSet::new();
    let mut hits = Vec::new();
    for (score, address) in top {
        let chunk: TantivyDocument = searcher.doc(address)?;
        let Some(id) = chunk.get_first(schema.field_id).and_then(|v| v.as_str()) else {
            continue;
        };
        if !seen.insert(id.to_string()) {
            continue;
        }
        let chunk_text = chunk
            .get_first(schema.field_chunk_text)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string();
        // The document row: same id, no chunk id.
        let rows = searcher.search(
            &BooleanQuery::new(vec![
                (Occur::Must, IndexSchema::filter(schema.id_term(id))),
                (
                    Occur::Must,
                    IndexSchema::filter(schema.corpus_term(corpus::STRUCTURED_DOC)),
                ),
            ]),
            &TopDocs::with_limit(64).order_by_score(),
        )?;
        let attributes = rows.into_iter().find_map(|(_, a)| {
            let row: TantivyDocument = searcher.doc(a).ok()?;
            row.get_first(schema.field_chunk_id)
                .is_none()
                .then(|| stored_json(&row, schema.field_attributes))
        });
        if let Some(doc) = attributes.and_then(|a| document(&a, &chunk_text)) {
            hits.push(DocSearchHit { score, doc });
            if hits.len() == limit {
                break;
            }
        }
    }
    Ok(hits)
}

#[async_trait]
impl DocSearch for DocSearchService {
    async fn search(
        &self,
        source_ids: &[String],
        content: &str,
        limit: usize,
    ) -> anyhow::Result<Vec<DocSearchHit>> {
        let Some(dir) = self.index.dir() else {
            return Ok(Vec::new());
        };
        let source_ids = source_ids.to_vec();
        let content = content.to_string();
        tokio::task::spawn_blocking(move || search_index(&dir, &source_ids, &content, limit))
            .await?
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tantivy::schema::OwnedValue;

    use super::*;

    fn add(
        writer: &mut tantivy::IndexWriter,
        source: &str,
        id: &str,
        attributes: Json,
        chunks: &[&str],
    ) {
        let schema = IndexSchema::instance();
        let mut row = TantivyDocument::new();
        row.add_text(schema.field_corpus, corpus::STRUCTURED_DOC);
        row.add_text(schema.field_source_id, source);
        row.add_text(schema.field_id, id);
        row.add_field_value(schema.field_attributes, &OwnedValue::from(attributes));
        writer.add_document(row).unwrap();
        for (n, text) in chunks.iter().enumerate() {
            let mut chunk = TantivyDocument::new();
            chunk.add_text(schema.field_corpus, corpus::STRUCTURED_DOC);
            chunk.add_text(schema.field_source_id, source);
            chunk.add_text(schema.field_id, id);
            chunk.add_text(schema.field_chunk_id, format!("{id}-{n}"));
            chunk.add_u64(
                schema.field_chunk_key,
                tabby_common::index::chunk_key(source, id, n),
            );
            chunk.add_text(schema.field_chunk_text, text);
            for word in search_words(text) {
                chunk.add_text(schema.field_chunk_words, word);
            }
            writer.add_document(chunk).unwrap();
        }
    }

    #[tokio::test]
    async fn finds_documents_of_allowed_sources_only_one_hit_each() {
        let dir = tempfile::tempdir().unwrap();
        let index =
            Index::create_in_dir(dir.path(), IndexSchema::instance().schema.clone()).unwrap();
        let mut writer = index.writer(15_000_000).unwrap();
        add(
            &mut writer,
            "web:docs",
            "web:docs:1",
            json!({"kind": "web", "title": "Deploying", "link": "https://example.com/deploy"}),
            &[
                "Deploy the server with docker compose",
                "Upgrade the server docker image",
            ],
        );
        add(
            &mut writer,
            "web:private",
            "web:private:1",
            json!({"kind": "web", "title": "Secret", "link": "https://example.com/secret"}),
            &["Docker compose secrets for the server"],
        );
        add(
            &mut writer,
            "git:repo",
            "git:repo:abc",
            json!({"kind": "commit", "sha": "abc", "message": "Fix docker build", "author_email": "a@example.com", "author_at": "2026-01-02T03:04:05Z"}),
            &["Fix docker build"],
        );
        writer.commit().unwrap();
        let service = DocSearchService::new(dir.path().to_path_buf());

        let hits = service
            .search(&["web:docs".into(), "git:repo".into()], "docker server", 5)
            .await
            .unwrap();
        assert_eq!(hits.len(), 2, "{hits:?}");
        assert!(
            matches!(&hits[0].doc, DocSearchDocument::Web { title, .. } if title == "Deploying")
        );
        assert!(
            hits.iter().all(
                |h| !matches!(&h.doc, DocSearchDocument::Web { title, .. } if title == "Secret")
            )
        );
        assert!(
            hits.iter()
                .any(|h| matches!(&h.doc, DocSearchDocument::Commit { sha, .. } if sha == "abc"))
        );

        assert!(service.search(&[], "docker", 5).await.unwrap().is_empty());
        let empty = DocSearchService::new(dir.path().join("missing"));
        assert!(
            empty
                .search(&["web:docs".into()], "docker", 5)
                .await
                .unwrap()
                .is_empty()
        );
    }

    /// Documents whose chunks score the same come in one order whatever order they were
    /// written in (the chunks' stable keys, not their addresses, break the tie).
    #[tokio::test]
    async fn equal_scores_give_one_document_whatever_order_it_was_written_in() {
        let docs = ["web:docs:a", "web:docs:b", "web:docs:c", "web:docs:d"];
        let mut answers = Vec::new();
        for order in [docs.to_vec(), docs.iter().rev().copied().collect()] {
            let dir = tempfile::tempdir().unwrap();
            let index =
                Index::create_in_dir(dir.path(), IndexSchema::instance().schema.clone()).unwrap();
            // One thread: rows get addresses in the order they are added.
            let mut writer = index.writer_with_num_threads(1, 15_000_000).unwrap();
            for id in order {
                add(
                    &mut writer,
                    "web:docs",
                    id,
                    json!({"kind": "web", "title": id, "link": format!("https://example.com/{id}")}),
                    &["Rotate the signing keys every quarter"],
                );
            }
            writer.commit().unwrap();
            let hits = DocSearchService::new(dir.path().to_path_buf())
                .search(&["web:docs".into()], "rotate signing keys", 2)
                .await
                .unwrap();
            let titles: Vec<String> = hits
                .into_iter()
                .map(|h| match h.doc {
                    DocSearchDocument::Web { title, .. } => title,
                    other => panic!("{other:?}"),
                })
                .collect();
            assert_eq!(titles.len(), 2);
            answers.push(titles);
        }
        assert_eq!(answers[0], answers[1]);
    }
}
