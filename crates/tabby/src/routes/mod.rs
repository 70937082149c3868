//! The REST API for editors: thin handlers that extract, call a service and map the result.
//! Every failure is a JSON body `{"error": "..."}` with the status upstream uses.

mod chat;
mod completions;
mod context;
mod events;
pub mod health;
pub mod metrics;
mod models;
pub mod openapi;
mod search;

use std::{sync::Arc, time::Duration};

use axum::{
    Json, Router,
    extract::{DefaultBodyLimit, FromRequest, Request, rejection::JsonRejection},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::Serialize;
use tabby_common::{
    USER_HEADER_FIELD_NAME,
    api::{code::AllowedCodeRepository, event::EventLogger},
};
use tower_http::cors::CorsLayer;

use crate::services::{
    chat::ChatService, code::CodeSearchService, completion::CompletionService, health::HealthState,
};

/// Request bodies above this are refused with 413 (completions and events are small).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Chat requests may carry whole files as context.
pub const MAX_CHAT_BODY_BYTES: usize = 8 * 1024 * 1024;

pub struct ApiState {
    pub completion: Option<Arc<CompletionService>>,
    pub chat: Option<Arc<ChatService>>,
    pub logger: Arc<dyn EventLogger>,
    pub health: HealthState,
    pub models: models::ModelList,
    /// Repositories every request may search (community mode: all configured ones).
    pub repositories: AllowedCodeRepository,
    pub completion_timeout: Duration,
    pub code_search: Option<Arc<CodeSearchService>>,
    /// Defaults of `/v1beta/search` (the `[answer]` code search parameters).
    pub search_params: tabby_common::config::CodeSearchParams,
    /// Evidence packs for `/v1beta/context`, when code search exists.
    pub context: Option<Arc<crate::services::context::ContextService>>,
}

impl ApiState {
    pub fn model_list(models: &tabby_common::config::ModelConfigGroup) -> models::ModelList {
        models::ModelList::from_config(models)
    }
}

/// The `/v1` and `/v1beta` routes.
pub fn api_router(state: Arc<ApiState>) -> Router {
    let small = Router::new()
        .route("/v1/completions", post(completions::completions))
        .route("/v1/events", post(events::events))
        .route("/v1beta/search", post(search::search))
        .route("/v1beta/context", post(context::context))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES));
    let chat = Router::new()
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/v1beta/chat/completions", post(chat::chat_completions))
        .layer(DefaultBodyLimit::max(MAX_CHAT_BODY_BYTES));
    Router::new()
        .merge(small)
        .merge(chat)
        .route("/v1/health", get(health::health).post(health::health))
        .route("/v1beta/models", get(models::models))
        .route("/v1beta/server_setting", get(models::server_setting))
        .with_state(state)
        .layer(CorsLayer::permissive())
}

/// An API failure: a status and a message for the JSON body.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(ErrorBody {
                error: &self.message,
            }),
        )
            .into_response()
    }
}

impl From<tabby_inference::ModelError> for ApiError {
    fn from(e: tabby_inference::ModelError) -> Self {
        use tabby_inference::ModelError::*;
        let status = match &e {
            Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Backend(_) => StatusCode::BAD_GATEWAY,
            InvalidRequest(_) => StatusCode::BAD_REQUEST,
        };
        ApiError::new(status, e.client_message())
    }
}

/// `Json<T>` whose rejections keep axum's statuses (415 wrong content type, 400 syntax,
/// 422 schema, 413 too large) but answer with a JSON error body naming the problem.
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(value)) => Ok(JsonBody(value)),
            Err(rejection) => Err(ApiError::new(rejection.status(), rejection.body_text())),
        }
    }
}

/// The user id the server vouches for (`x-tabby-user`). In community mode there is no auth, so
/// the header is trusted as upstream does.
pub fn user_from_headers(headers: &HeaderMap) -> Option<String> {
    headers
        .get(USER_HEADER_FIELD_NAME)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

/// JSON 404 for any path no route serves.
pub async fn not_found(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no route for {} {}", req.method(), req.uri().path()),
    )
}
