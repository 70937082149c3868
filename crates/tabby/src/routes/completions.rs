use std::sync::Arc;

use axum::{
    Extension, Json,
    extract::State,
    http::{HeaderMap, StatusCode, header::USER_AGENT},
};
use tabby_common::api::code::AllowedCodeRepository;

use super::{ApiError, ApiState, JsonBody, user_from_headers};
use crate::services::completion::{
    CompletionError, CompletionRequest, CompletionResponse, RequestContext,
};

#[utoipa::path(
    post,
    path = "/v1/completions",
    request_body = CompletionRequest,
    operation_id = "completion",
    tag = "v1",
    responses(
        (status = 200, description = "Success", body = CompletionResponse, content_type = "application/json"),
        (status = 400, description = "Bad request: invalid JSON, or neither segments nor raw_prompt"),
        (status = 408, description = "The model did not answer within [server] completion_timeout"),
        (status = 413, description = "Request body larger than 1 MiB"),
        (status = 415, description = "Content-Type is not application/json"),
        (status = 422, description = "JSON does not match the schema (e.g. missing segments.prefix)"),
        (status = 501, description = "No completion model is configured"),
        (status = 502, description = "The model server answered with an error"),
        (status = 503, description = "The model server cannot be reached"),
    ),
    security(("token" = []))
)]
pub async fn completions(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    allowed: Option<Extension<AllowedCodeRepository>>,
    JsonBody(request): JsonBody<CompletionRequest>,
) -> Result<Json<CompletionResponse>, ApiError> {
    let Some(service) = &state.completion else {
        return Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "no completion model is configured: add [model.completion.http] to config.toml",
        ));
    };
    let allowed = allowed
        .as_ref()
        .map(|Extension(a)| a)
        .unwrap_or(&state.repositories);
    let ctx = RequestContext {
        user: user_from_headers(&headers),
        user_agent: headers.get(USER_AGENT).and_then(|v| v.to_str().ok()),
        allowed_repositories: Some(allowed),
    };
    let generation = service.generate(request, ctx);
    match tokio::time::timeout(state.completion_timeout, generation).await {
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the completion did not finish within {} s ([server] completion_timeout)",
                state.completion_timeout.as_secs()
            ),
        )),
        Ok(Ok(response)) => Ok(Json(response)),
        Ok(Err(CompletionError::Model(e))) => Err(e.into()),
        Ok(Err(e)) => Err(ApiError::new(StatusCode::BAD_REQUEST, e.to_string())),
    }
}
