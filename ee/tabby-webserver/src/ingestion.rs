//! `POST /v1beta/ingestion` and `DELETE /v1beta/ingestion/{source}[/{id}]`: documents pushed
//! by other systems into the doc corpus, authorized by the registration token (not a user's
//! token). Accepted documents are stored as pending and indexed by the 10-second job; a TTL
//! (default 90 days) removes them later.

use std::{sync::Arc, time::Duration};

use axum::{
    Json,
    extract::{Path, State, rejection::JsonRejection},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::{Deserialize, Serialize};

use crate::{Webserver, job::BackgroundJobEvent, password::constant_time_eq};

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

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(serde_json::json!({ "error": message.into() }))).into_response()
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

/// Whether the request carries the registration token as `Authorization: Bearer <token>`.
async fn authorized(server: &Webserver, headers: &HeaderMap) -> Result<(), Response> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(token) = token else {
        return Err(error(
            StatusCode::UNAUTHORIZED,
            "missing token: send `Authorization: Bearer <registration token>`",
        ));
    };
    let expected = server.db.read_registration_token().await.map_err(|e| {
        tracing::error!("cannot read the registration token: {e}");
        error(
            StatusCode::SERVICE_UNAVAILABLE,
            "cannot check the token now",
        )
    })?;
    if constant_time_eq(token.as_bytes(), expected.as_bytes()) {
        Ok(())
    } else {
        Err(error(
            StatusCode::UNAUTHORIZED,
            "invalid token: ingestion needs the server's registration token",
        ))
    }
}

pub async fn ingest(
    State(server): State<Arc<Webserver>>,
    headers: HeaderMap,
    body: Result<Json<IngestionRequest>, JsonRejection>,
) -> Response {
    if let Err(response) = authorized(&server, &headers).await {
        return response;
    }
    let request = match body {
        Ok(Json(request)) => request,
        Err(rejection) => return error(rejection.status(), rejection.body_text()),
    };
    let ttl = match request.validate() {
        Ok(ttl) => ttl,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let expired_at = chrono::Utc::now().timestamp() + ttl.as_secs() as i64;
    if let Err(e) = server
        .db
        .upsert_ingested_document(
            &request.source,
            &request.id,
            request.link.as_deref(),
            &request.title,
            &request.body,
            expired_at,
        )
        .await
    {
        tracing::error!("cannot store an ingested document: {e}");
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "cannot store the document",
        );
    }
    (
        StatusCode::ACCEPTED,
        Json(IngestionResponse {
            id: request.id,
            source: request.source,
            message: "Ingestion has been accepted and will be processed later.".into(),
        }),
    )
        .into_response()
}

async fn delete(
    server: &Webserver,
    headers: &HeaderMap,
    source: &str,
    id: Option<&str>,
) -> Response {
    if let Err(response) = authorized(server, headers).await {
        return response;
    }
    match server.db.delete_ingested_documents(source, id).await {
        Ok(deleted) if deleted.is_empty() => error(
            StatusCode::NOT_FOUND,
            match id {
                Some(id) => format!("no document {id:?} in source {source:?}"),
                None => format!("no documents in source {source:?}"),
            },
        ),
        Ok(deleted) => {
            // The index entries go with the next garbage collection, queued now.
            if let Err(e) = server
                .jobs
                .trigger(&BackgroundJobEvent::IndexGarbageCollection)
                .await
            {
                tracing::warn!("cannot enqueue index garbage collection: {e:#}");
            }
            (
                StatusCode::ACCEPTED,
                Json(serde_json::json!({
                    "source": source,
                    "deleted": deleted.len(),
                    "message": "Deletion has been accepted; the index is updated shortly.",
                })),
            )
                .into_response()
        }
        Err(e) => {
            tracing::error!("cannot delete ingested documents: {e}");
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot delete the documents",
            )
        }
    }
}

pub async fn delete_source(
    State(server): State<Arc<Webserver>>,
    Path(source): Path<String>,
    headers: HeaderMap,
) -> Response {
    delete(&server, &headers, &source, None).await
}

pub async fn delete_document(
    State(server): State<Arc<Webserver>>,
    Path((source, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    delete(&server, &headers, &source, Some(&id)).await
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
