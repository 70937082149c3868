//! The `SyncIngestionIndex` job: documents clients posted to `/v1beta/ingestion` into the doc
//! corpus, expired ones out of it.

use chrono::Utc;
use tabby_index::doc::{DocFields, DocIndexer, StructuredDoc};

use super::{JobLog, JobService};

/// Ingested documents indexed per ingestion run.
const INGESTION_BATCH: usize = 500;

impl JobService {
    pub(super) async fn sync_ingestion(&self, log: &JobLog) -> anyhow::Result<()> {
        let deps = self.deps()?;
        let mut docs = DocIndexer::open(&deps.index_dir, deps.embedding.clone())?;
        let expired = self
            .db
            .delete_expired_ingested_documents(Utc::now().timestamp())
            .await?;
        for (source, doc_id) in &expired {
            docs.delete(&ingested_doc_id(source, doc_id));
        }
        if !expired.is_empty() {
            log.info(format!("removed {} expired documents", expired.len()));
        }
        let pending = self
            .db
            .list_pending_ingested_documents(INGESTION_BATCH)
            .await?;
        let mut indexed = 0;
        for doc in &pending {
            let result = docs
                .add(&StructuredDoc {
                    source_id: ingested_source_id(&doc.source),
                    id: ingested_doc_id(&doc.source, &doc.doc_id),
                    fields: DocFields::Ingested {
                        doc_id: doc.doc_id.clone(),
                        title: doc.title.clone(),
                        link: doc.link.clone(),
                        body: doc.body.clone(),
                    },
                })
                .await;
            let status = match result {
                Ok(_) => {
                    indexed += 1;
                    "indexed"
                }
                Err(e) => {
                    log.warn(format!("{}/{}: {e:#}", doc.source, doc.doc_id));
                    "failed"
                }
            };
            // Commit before marking, so "indexed" is never ahead of the index.
            docs.commit()?;
            self.db.set_ingested_document_status(doc, status).await?;
        }
        docs.commit()?;
        log.info(format!(
            "indexed {indexed} of {} pending documents",
            pending.len()
        ));
        Ok(())
    }
}

/// Index source id of a client's ingestion source.
pub fn ingested_source_id(source: &str) -> String {
    format!("ingested:{source}")
}

/// Index document id of an ingested document (the client's id, URL-encoded).
pub fn ingested_doc_id(source: &str, doc_id: &str) -> String {
    let encoded: String = doc_id
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect();
    format!("ingested:{source}:{encoded}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn ingested_doc_ids_are_url_encoded() {
        assert_eq!(
            super::ingested_doc_id("wiki", "a b/c"),
            "ingested:wiki:a%20b%2Fc"
        );
    }
}
