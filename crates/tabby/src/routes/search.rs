use std::sync::Arc;

use axum::{Extension, Json, extract::State, http::StatusCode};
use serde::{Deserialize, Serialize};
use tabby_common::{
    api::code::{AllowedCodeRepository, CodeRepository, CodeSearchError, CodeSearchScores},
    config::CodeSearchParams,
    index::code::CodeOrigin,
};
use utoipa::ToSchema;

use super::{ApiError, ApiState, JsonBody};

#[derive(Deserialize, ToSchema)]
pub struct SearchRequest {
    /// Text to search with: a question, or code (e.g. the text before the cursor).
    pub query: String,
    /// Search the configured repository whose name matches this remote URL.
    pub git_url: Option<String>,
    /// Search this source (e.g. `config:…`). Without `git_url` and `source_id`, every
    /// repository the caller may read is searched.
    pub source_id: Option<String>,
    /// Only chunks of this language (the JavaScript/TypeScript family is one group).
    pub language: Option<String>,
    /// Excluded from the results (the file being edited), relative to the repository root.
    pub filepath: Option<String>,
    /// Overrides of the search parameters (defaults: the `[answer]` code search parameters).
    #[serde(default)]
    pub params: SearchParamsOverride,
    /// Also generated code (`@generated`, `Code generated … DO NOT EDIT`, `*_pb2.py`,
    /// `*.min.js` …) and vendored code (`vendor/`, `third_party/`, `node_modules/`); left out
    /// by default. Each hit's `origin` says which it is.
    #[serde(default)]
    pub include_generated: bool,
}

#[derive(Default, Deserialize, ToSchema)]
pub struct SearchParamsOverride {
    pub min_embedding_score: Option<f32>,
    pub min_bm25_score: Option<f32>,
    pub min_rrf_score: Option<f32>,
    pub num_to_return: Option<usize>,
    pub num_to_score: Option<usize>,
    pub max_hits_per_file: Option<usize>,
}

impl SearchParamsOverride {
    fn apply(&self, mut base: CodeSearchParams) -> CodeSearchParams {
        if let Some(v) = self.min_embedding_score {
            base.min_embedding_score = v;
        }
        if let Some(v) = self.min_bm25_score {
            base.min_bm25_score = v;
        }
        if let Some(v) = self.min_rrf_score {
            base.min_rrf_score = v;
        }
        if let Some(v) = self.num_to_return {
            base.num_to_return = v.min(1000);
        }
        if let Some(v) = self.num_to_score {
            base.num_to_score = v.min(10_000);
        }
        if let Some(v) = self.max_hits_per_file {
            base.max_hits_per_file = v;
        }
        base
    }
}

#[derive(Serialize, ToSchema)]
pub struct SearchHit {
    pub filepath: String,
    pub git_url: String,
    pub language: String,
    /// 1-based first line of the chunk.
    pub start_line: usize,
    /// 1-based last line of the chunk.
    pub end_line: usize,
    pub body: String,
    /// `source` (the team's own code), `generated` or `vendored`.
    pub origin: CodeOrigin,
    #[schema(value_type = Object)]
    pub scores: CodeSearchScores,
}

#[derive(Serialize, ToSchema)]
pub struct SearchResponse {
    pub hits: Vec<SearchHit>,
}

/// The repositories a request names by `source_id` (exactly) or `git_url` (the closest
/// configured match), or all the caller may read when it names none; 404 when the one named is
/// not among them (it may not exist, or the caller may not read it).
pub(super) fn selected_repositories(
    allowed: &AllowedCodeRepository,
    source_id: Option<&str>,
    git_url: Option<&str>,
) -> Result<Vec<CodeRepository>, ApiError> {
    match (source_id, git_url) {
        (Some(id), _) => allowed
            .list
            .iter()
            .find(|r| r.source_id == id)
            .map(|r| vec![r.clone()])
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::NOT_FOUND,
                    format!("no repository with source_id {id:?}"),
                )
            }),
        (None, Some(url)) => allowed
            .closest_match(url)
            .map(|r| vec![r.clone()])
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::NOT_FOUND,
                    format!("no repository matches git_url {url:?}"),
                )
            }),
        (None, None) => Ok(allowed.list.clone()),
    }
}

#[utoipa::path(
    post,
    path = "/v1beta/search",
    request_body = SearchRequest,
    operation_id = "search",
    tag = "v1beta",
    responses(
        (status = 200, description = "Hits, best first", body = SearchResponse, content_type = "application/json"),
        (status = 404, description = "Unknown or inaccessible source_id / git_url"),
        (status = 422, description = "Invalid request body"),
        (status = 501, description = "Code search is not available (no repositories configured)"),
        (status = 503, description = "The index is not ready yet"),
    ),
    security(("token" = []))
)]
pub async fn search(
    State(state): State<Arc<ApiState>>,
    allowed: Option<Extension<AllowedCodeRepository>>,
    JsonBody(request): JsonBody<SearchRequest>,
) -> Result<Json<SearchResponse>, ApiError> {
    let Some(service) = &state.code_search else {
        return Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "code search is not available: configure [[repositories]] in config.toml",
        ));
    };
    let allowed = allowed
        .as_ref()
        .map(|Extension(a)| a)
        .unwrap_or(&state.repositories);
    let sources: Vec<String> = selected_repositories(
        allowed,
        request.source_id.as_deref(),
        request.git_url.as_deref(),
    )?
    .into_iter()
    .map(|r| r.source_id)
    .collect();
    let params = request.params.apply(state.search_params.clone());
    let hits = service
        .search_repositories(
            &request.query,
            &sources,
            request.language.as_deref(),
            request.filepath.as_deref(),
            &params,
            request.include_generated,
        )
        .await
        .map_err(|e| match e {
            CodeSearchError::NotReady => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the code index is not ready yet: indexing has not finished its first run",
            ),
            CodeSearchError::Other(e) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("code search failed: {e:#}"),
            ),
        })?;
    Ok(Json(SearchResponse {
        hits: hits
            .into_iter()
            .map(|hit| {
                let start_line = hit.doc.start_line.unwrap_or(1);
                let lines = hit.doc.body.lines().count().max(1);
                SearchHit {
                    filepath: hit.doc.filepath,
                    git_url: hit.doc.git_url,
                    language: hit.doc.language,
                    start_line,
                    end_line: start_line + lines - 1,
                    body: hit.doc.body,
                    origin: hit.doc.origin,
                    scores: hit.scores,
                }
            })
            .collect(),
    }))
}
