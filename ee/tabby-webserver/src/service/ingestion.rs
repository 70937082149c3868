//! [`IngestionService`]: documents pushed by other systems into the doc corpus. It checks the
//! registration token, validates and stores documents as pending (the 10-second job indexes
//! them, a TTL, 90 days by default, removes them), and deletes them. The HTTP handlers in
//! `crate::ingestion` only parse requests and turn its answers into responses.

use std::{sync::Arc, time::Duration};

use serde::{Deserialize, Serialize};
use tabby_db::DbConn;

use crate::{
    job::{BackgroundJobEvent, JobService},
    password::constant_time_eq,
};

const DEFAULT_TTL: Duration = Duration::from_secs(90 * 24 * 3600);
const MAX_ID: usize = 256;
const MAX_TITLE: usize = 65_535;
/// Bodies are limited by the route's body limit (see `Webserver::routes`).
pub const MAX_INGESTION_BODY_BYTES: usize = 8 * 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestionRequest {
    pub source: String,
    pub id: String,
    pub title: String,
    pub body: String,
    pub link: Option<String>,
    /// A duration such as `90d`, `12h`, `30m`, `45s` or `1w`.
    pub ttl: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct IngestionResponse {
    pub id: String,
    pub source: String,
    pub message: String,
}

/// Why an ingestion request was not done; each kind is one HTTP status at the edge.
#[derive(Debug, thiserror::Error)]
pub enum IngestionError {
    #[error("{0}")]
    Unauthorized(&'static str),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    /// Storage failed; the detail goes to the log, not to the client.
    #[error("{0}")]
    Unavailable(&'static str),
}

/// `90d`, `12h`, `30m`, `45s`, `2w`, or several (`1d12h`).
pub fn parse_ttl(text: &str) -> Option<Duration> {
    let mut total = 0u64;
    let mut number = String::new();
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    for c in text.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let n: u64 = number.parse().ok()?;
        number.clear();
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            'w' => 7 * 86_400,
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(unit)?)?;
    }
    if !number.is_empty() || total == 0 {
        return None;
    }
    Some(Duration::from_secs(total))
}

impl IngestionRequest {
    fn validate(&self) -> Result<Duration, String> {
        let sized = |name: &str, value: &str, max: usize| {
            if value.is_empty() || value.chars().count() > max {
                Err(format!("`{name}` must be 1 to {max} characters"))
            } else {
                Ok(())
            }
        };
        sized("source", &self.source, MAX_ID)?;
        sized("id", &self.id, MAX_ID)?;
        sized("title", &self.title, MAX_TITLE)?;
        if self.source.contains(['/', ':']) || self.source.chars().any(char::is_control) {
            return Err("`source` must not contain '/', ':' or control characters".into());
        }
        match &self.ttl {
            None => Ok(DEFAULT_TTL),
            Some(ttl) => parse_ttl(ttl).ok_or_else(|| {
                format!("`ttl` {ttl:?} is not a duration such as \"90d\", \"12h\" or \"30m\"")
            }),
        }
    }
}

pub struct IngestionService {
    db: DbConn,
    jobs: Arc<JobService>,
}

impl IngestionService {
    pub fn new(db: DbConn, jobs: Arc<JobService>) -> Self {
        Self { db, jobs }
    }

    /// Whether `token` (from `Authorization: Bearer`) is the server's registration token.
    pub async fn authorize(&self, token: Option<&str>) -> Result<(), IngestionError> {
        let Some(token) = token else {
            return Err(IngestionError::Unauthorized(
                "missing token: send `Authorization: Bearer <registration token>`",
            ));
        };
        let expected = self.db.read_registration_token().await.map_err(|e| {
            tracing::error!("cannot read the registration token: {e}");
            IngestionError::Unavailable("cannot check the token now")
        })?;
        if constant_time_eq(token.as_bytes(), expected.as_bytes()) {
            Ok(())
        } else {
            Err(IngestionError::Unauthorized(
                "invalid token: ingestion needs the server's registration token",
            ))
        }
    }

    /// Stores the document as pending for the indexing job.
    pub async fn ingest(
        &self,
        request: IngestionRequest,
    ) -> Result<IngestionResponse, IngestionError> {
        let ttl = request.validate().map_err(IngestionError::Invalid)?;
        let expired_at = chrono::Utc::now().timestamp() + ttl.as_secs() as i64;
        self.db
            .upsert_ingested_document(
                &request.source,
                &request.id,
                request.link.as_deref(),
                &request.title,
                &request.body,
                expired_at,
            )
            .await
            .map_err(|e| {
                tracing::error!("cannot store an ingested document: {e}");
                IngestionError::Unavailable("cannot store the document")
            })?;
        Ok(IngestionResponse {
            id: request.id,
            source: request.source,
            message: "Ingestion has been accepted and will be processed later.".into(),
        })
    }

    /// Deletes the source's documents (or one of them); returns how many went. Their index
    /// entries go with the next garbage collection, queued here.
    pub async fn delete(&self, source: &str, id: Option<&str>) -> Result<usize, IngestionError> {
        let deleted = self
            .db
            .delete_ingested_documents(source, id)
            .await
            .map_err(|e| {
                tracing::error!("cannot delete ingested documents: {e}");
                IngestionError::Unavailable("cannot delete the documents")
            })?;
        if deleted.is_empty() {
            return Err(IngestionError::NotFound(match id {
                Some(id) => format!("no document {id:?} in source {source:?}"),
                None => format!("no documents in source {source:?}"),
            }));
        }
        if let Err(e) = self
            .jobs
            .trigger(&BackgroundJobEvent::IndexGarbageCollection)
            .await
        {
            tracing::warn!("cannot enqueue index garbage collection: {e:#}");
        }
        Ok(deleted.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls() {
        assert_eq!(parse_ttl("90d"), Some(Duration::from_secs(90 * 86_400)));
        assert_eq!(
            parse_ttl("1d12h"),
            Some(Duration::from_secs(86_400 + 12 * 3600))
        );
        assert_eq!(parse_ttl("45s"), Some(Duration::from_secs(45)));
        for bad in ["", "d", "10", "0s", "5x", "-1d", "99999999999999999999w"] {
            assert_eq!(parse_ttl(bad), None, "{bad}");
        }
    }
}
