use std::sync::Arc;

use axum::{
    extract::{Query, State},
    http::{HeaderMap, StatusCode},
};
use serde::Deserialize;
use tabby_common::api::event::{Event, LogEventRequest, SelectKind};

use super::{ApiError, ApiState, JsonBody, user_from_headers};

#[derive(Deserialize, utoipa::IntoParams)]
pub struct EventParams {
    /// `line` when a single line of a suggestion was accepted.
    #[param(value_type = Option<String>)]
    select_kind: Option<SelectKind>,
}

#[utoipa::path(
    post,
    path = "/v1/events",
    request_body = LogEventRequest,
    params(EventParams),
    operation_id = "event",
    tag = "v1",
    responses(
        (status = 200, description = "Logged; empty body"),
        (status = 400, description = "Unknown event type or invalid JSON"),
        (status = 415, description = "Content-Type is not application/json"),
        (status = 422, description = "JSON does not match the schema"),
    ),
    security(("token" = []))
)]
pub async fn events(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    Query(params): Query<EventParams>,
    JsonBody(request): JsonBody<LogEventRequest>,
) -> Result<StatusCode, ApiError> {
    let event = match request.event_type.as_str() {
        "view" => Event::View {
            completion_id: request.completion_id,
            choice_index: request.choice_index,
            view_id: request.view_id,
        },
        "select" => Event::Select {
            completion_id: request.completion_id,
            choice_index: request.choice_index,
            kind: params.select_kind,
            view_id: request.view_id,
            elapsed: request.elapsed,
        },
        "dismiss" => Event::Dismiss {
            completion_id: request.completion_id,
            choice_index: request.choice_index,
            view_id: request.view_id,
            elapsed: request.elapsed,
        },
        other => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("unknown event type {other:?}: expected view, select or dismiss"),
            ));
        }
    };
    state.logger.log(user_from_headers(&headers), event);
    Ok(StatusCode::OK)
}
