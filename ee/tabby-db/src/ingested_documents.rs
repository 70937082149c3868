//! Documents pushed through `POST /v1beta/ingestion`: stored here as `pending`, indexed into
//! the structured-doc corpus by the ingestion job (source id `ingested:<source>`), removed when
//! their TTL passes or the client deletes them.

use chrono::{DateTime, Utc};
use sqlx::QueryBuilder;

use crate::{DbConn, DbResult, pagination::push_in_filter};

#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct IngestedDocumentDAO {
    pub id: i64,
    pub source: String,
    pub doc_id: String,
    pub link: Option<String>,
    pub title: String,
    pub body: String,
    /// `pending`, `indexed` or `failed`.
    pub status: String,
    /// Unix seconds.
    pub expired_at: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Documents of one source by status.
#[derive(Clone, Debug, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct IngestionStatsDAO {
    pub source: String,
    pub pending: i64,
    pub indexed: i64,
    pub failed: i64,
    pub total: i64,
}

const COLUMNS: &str =
    "id, source, doc_id, link, title, body, status, expired_at, created_at, updated_at";

impl DbConn {
    /// Stores a document as pending (replacing an earlier version of the same source and id).
    #[allow(clippy::too_many_arguments)]
    pub async fn upsert_ingested_document(
        &self,
        source: &str,
        doc_id: &str,
        link: Option<&str>,
        title: &str,
        body: &str,
        expired_at: i64,
    ) -> DbResult<i64> {
        on_pool!(self, pool => {
            let (id,): (i64,) = sqlx::query_as(
                "INSERT INTO ingested_documents (source, doc_id, link, title, body, expired_at)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (source, doc_id) DO UPDATE SET
                    link = excluded.link, title = excluded.title, body = excluded.body,
                    expired_at = excluded.expired_at, status = 'pending',
                    updated_at = DATETIME('now')
                 RETURNING id",
            )
            .bind(source)
            .bind(doc_id)
            .bind(link)
            .bind(title)
            .bind(body)
            .bind(expired_at)
            .fetch_one(pool)
            .await?;
            Ok(id)
        })
    }

    pub async fn list_pending_ingested_documents(
        &self,
        limit: usize,
    ) -> DbResult<Vec<IngestedDocumentDAO>> {
        on_pool!(self, pool => {
            Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {COLUMNS} FROM ingested_documents WHERE status = 'pending'
                 ORDER BY updated_at, id LIMIT $1"
            )))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(pool)
            .await?)
        })
    }

    /// Whether the ingestion job has work: pending documents, or documents past their TTL.
    pub async fn ingestion_has_work(&self, now_unix: i64) -> DbResult<bool> {
        on_pool!(self, pool => {
            let (found,): (bool,) = sqlx::query_as(
                "SELECT EXISTS (SELECT 1 FROM ingested_documents
                                WHERE status = 'pending' OR expired_at <= $1)",
            )
            .bind(now_unix)
            .fetch_one(pool)
            .await?;
            Ok(found)
        })
    }

    /// Sets the status of `doc`, unless the row was replaced by a different version since it
    /// was read (that version is still pending and will be indexed next time).
    pub async fn set_ingested_document_status(
        &self,
        doc: &IngestedDocumentDAO,
        status: &str,
    ) -> DbResult<bool> {
        on_pool!(self, pool => {
            let result = sqlx::query(
                "UPDATE ingested_documents SET status = $1
                 WHERE id = $2 AND title = $3 AND body = $4 AND link IS NOT DISTINCT FROM $5 AND expired_at = $6",
            )
            .bind(status)
            .bind(doc.id)
            .bind(&doc.title)
            .bind(&doc.body)
            .bind(&doc.link)
            .bind(doc.expired_at)
            .execute(pool)
            .await?;
            Ok(result.rows_affected() > 0)
        })
    }

    /// Deletes one document of a source, or all of them; returns the deleted (source, doc_id).
    pub async fn delete_ingested_documents(
        &self,
        source: &str,
        doc_id: Option<&str>,
    ) -> DbResult<Vec<(String, String)>> {
        on_pool!(self, pool => {
            let mut query =
                QueryBuilder::new("DELETE FROM ingested_documents WHERE source = ");
            query.push_bind(source);
            if let Some(doc_id) = doc_id {
                query.push(" AND doc_id = ").push_bind(doc_id);
            }
            query.push(" RETURNING source, doc_id");
            Ok(query.build_query_as().fetch_all(pool).await?)
        })
    }

    /// Deletes documents whose TTL has passed; returns the deleted (source, doc_id).
    pub async fn delete_expired_ingested_documents(
        &self,
        now_unix: i64,
    ) -> DbResult<Vec<(String, String)>> {
        on_pool!(self, pool => {
            Ok(sqlx::query_as(
                "DELETE FROM ingested_documents WHERE expired_at <= $1 RETURNING source, doc_id",
            )
            .bind(now_unix)
            .fetch_all(pool)
            .await?)
        })
    }

    /// The document ids of a source.
    pub async fn list_ingested_doc_ids(&self, source: &str) -> DbResult<Vec<String>> {
        on_pool!(self, pool => {
            Ok(
                sqlx::query_scalar("SELECT doc_id FROM ingested_documents WHERE source = $1")
                    .bind(source)
                    .fetch_all(pool)
                    .await?,
            )
        })
    }

    /// Per source (all sources when `sources` is empty).
    pub async fn ingestion_stats(&self, sources: &[String]) -> DbResult<Vec<IngestionStatsDAO>> {
        on_pool!(self, pool => {
            let mut query = QueryBuilder::new(
                "SELECT source,
                        COUNT(CASE WHEN status = 'pending' THEN 1 END) AS pending,
                        COUNT(CASE WHEN status = 'indexed' THEN 1 END) AS indexed,
                        COUNT(CASE WHEN status = 'failed' THEN 1 END) AS failed,
                        COUNT(*) AS total
                 FROM ingested_documents WHERE TRUE",
            );
            push_in_filter(&mut query, "source", sources);
            query.push(" GROUP BY source ORDER BY source");
            Ok(query
                .build_query_as::<IngestionStatsDAO>()
                .fetch_all(pool)
                .await?)
        })
    }
}
