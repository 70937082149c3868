use std::sync::Arc;

use axum::{Extension, Json, extract::State, http::StatusCode};
use serde::Deserialize;
use tabby_common::api::code::{AllowedCodeRepository, CodeSearchError};
use tabby_index::repo_files::clean_path;
use utoipa::ToSchema;

use super::{ApiError, ApiState, JsonBody};
use crate::services::context::{
    ContextRequest as PackRequest, DEFAULT_BUDGET_CHARS, DEFAULT_DEPTH, DEFAULT_MAX_ITEMS,
    MAX_BUDGET_CHARS, MAX_DEPTH, MAX_ITEMS, symbol_name,
};

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextRequest {
    /// The task or question; code names in it are looked up as symbols.
    #[serde(default)]
    pub task: String,
    /// Only this source (e.g. `config:…`).
    pub source_id: Option<String>,
    /// Only the configured repository whose name matches this remote URL.
    pub git_url: Option<String>,
    /// Symbols whose definitions to include (at most 20).
    #[serde(default)]
    pub symbols: Vec<String>,
    /// Repository-relative files to include (at most 20; needs `source_id` or `git_url`).
    #[serde(default)]
    pub paths: Vec<String>,
    /// Repository-relative files being changed (at most 20; needs `source_id` or `git_url`):
    /// included with the files that import them, their tests and their build files.
    #[serde(default)]
    pub changed_files: Vec<String>,
    /// Characters of excerpt the pack may hold (500 to 100,000; default 12,000).
    pub budget_chars: Option<usize>,
    /// Items at most (1 to 100; default 20).
    pub max_items: Option<usize>,
    /// Expansion steps from the entry points (0 to 2; default 1).
    pub depth: Option<u8>,
    /// Also generated and vendored code (left out by default).
    #[serde(default)]
    pub include_generated: bool,
}

fn unprocessable(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, message)
}

#[utoipa::path(
    post,
    path = "/v1beta/context",
    request_body = ContextRequest,
    operation_id = "context",
    tag = "v1beta",
    responses(
        (status = 200, description = "An evidence pack: items with provenance and reasons, and gaps", content_type = "application/json"),
        (status = 404, description = "Unknown or inaccessible source_id / git_url"),
        (status = 422, description = "Invalid request"),
        (status = 501, description = "Code search is not available (no repositories configured)"),
        (status = 503, description = "The index is not ready yet"),
    ),
    security(("token" = []))
)]
pub async fn context(
    State(state): State<Arc<ApiState>>,
    allowed: Option<Extension<AllowedCodeRepository>>,
    JsonBody(request): JsonBody<ContextRequest>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Some(service) = &state.context else {
        return Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "code search is not available: configure [[repositories]] in config.toml",
        ));
    };
    let budget_chars = request.budget_chars.unwrap_or(DEFAULT_BUDGET_CHARS);
    if !(500..=MAX_BUDGET_CHARS).contains(&budget_chars) {
        return Err(unprocessable(format!(
            "budget_chars must be 500 to {MAX_BUDGET_CHARS}"
        )));
    }
    let max_items = request.max_items.unwrap_or(DEFAULT_MAX_ITEMS);
    if !(1..=MAX_ITEMS).contains(&max_items) {
        return Err(unprocessable(format!("max_items must be 1 to {MAX_ITEMS}")));
    }
    let max_depth = request.depth.unwrap_or(DEFAULT_DEPTH);
    if max_depth > MAX_DEPTH {
        return Err(unprocessable(format!("depth must be 0 to {MAX_DEPTH}")));
    }
    if request.symbols.len() > 20 || request.paths.len() > 20 || request.changed_files.len() > 20 {
        return Err(unprocessable(
            "at most 20 symbols, 20 paths and 20 changed_files",
        ));
    }
    if request.task.trim().is_empty()
        && request.symbols.is_empty()
        && request.paths.is_empty()
        && request.changed_files.is_empty()
    {
        return Err(unprocessable(
            "give a task, symbols, paths or changed_files",
        ));
    }
    let symbols = request
        .symbols
        .iter()
        .map(|symbol| {
            symbol_name(symbol)
                .map(str::to_string)
                .ok_or_else(|| unprocessable(format!("{symbol:?} is not an identifier")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let clean = |list: &[String]| {
        list.iter()
            .map(|p| clean_path(p).map_err(|e| unprocessable(e.to_string())))
            .collect::<Result<Vec<_>, _>>()
    };
    let paths = clean(&request.paths)?;
    let changed_files = clean(&request.changed_files)?;
    let allowed = allowed
        .as_ref()
        .map(|Extension(a)| a)
        .unwrap_or(&state.repositories);
    if request.source_id.is_none()
        && request.git_url.is_none()
        && !(paths.is_empty() && changed_files.is_empty())
    {
        return Err(unprocessable(
            "paths and changed_files need source_id or git_url",
        ));
    }
    let repos = super::search::selected_repositories(
        allowed,
        request.source_id.as_deref(),
        request.git_url.as_deref(),
    )?;
    let pack = service
        .build(
            repos,
            PackRequest {
                task: request.task.chars().take(8192).collect(),
                symbols,
                paths,
                changed_files,
                budget_chars,
                max_items,
                max_depth,
                exclude_path: None,
                include_generated: request.include_generated,
            },
        )
        .await
        .map_err(|e| match e {
            CodeSearchError::NotReady => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the code index is not ready yet: indexing has not finished its first run",
            ),
            CodeSearchError::Other(e) => {
                tracing::warn!("context pack failed: {e:#}");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "building the context failed",
                )
            }
        })?;
    Ok(Json(serde_json::to_value(pack).unwrap_or_default()))
}
