//! `POST /v1beta/ingestion` and `DELETE /v1beta/ingestion/{source}[/{id}]`: the HTTP side of
//! [`IngestionService`], authorized by the registration token (not a user's token).

use std::sync::Arc;

use axum::{
    Json,
    extract::{Path, State, rejection::JsonRejection},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};

use crate::{
    Webserver,
    edge::{WebError, bearer_token},
    service::ingestion::{IngestionError, IngestionRequest, IngestionService},
};

fn failed(e: IngestionError) -> Response {
    let status = match e {
        IngestionError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
        IngestionError::Invalid(_) => StatusCode::BAD_REQUEST,
        IngestionError::NotFound(_) => StatusCode::NOT_FOUND,
        IngestionError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    WebError::new(status, e.to_string()).into_response()
}

fn service(server: &Webserver) -> &IngestionService {
    &server.services.ingestion
}

async fn authorized(server: &Webserver, headers: &HeaderMap) -> Result<(), Response> {
    service(server)
        .authorize(bearer_token(headers))
        .await
        .map_err(failed)
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
        Err(rejection) => {
            return WebError::new(rejection.status(), rejection.body_text()).into_response();
        }
    };
    match service(&server).ingest(request).await {
        Ok(accepted) => (StatusCode::ACCEPTED, Json(accepted)).into_response(),
        Err(e) => failed(e),
    }
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
    match service(server).delete(source, id).await {
        Ok(deleted) => (
            StatusCode::ACCEPTED,
            Json(serde_json::json!({
                "source": source,
                "deleted": deleted,
                "message": "Deletion has been accepted; the index is updated shortly.",
            })),
        )
            .into_response(),
        Err(e) => failed(e),
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
