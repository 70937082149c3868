use std::sync::Arc;

use axum::{Json, extract::State};

use super::ApiState;
use crate::services::health::HealthState;

#[utoipa::path(
    get,
    path = "/v1/health",
    operation_id = "health",
    tag = "v1",
    responses((status = 200, description = "Success", body = HealthState, content_type = "application/json")),
    security(("token" = []))
)]
pub async fn health(State(state): State<Arc<ApiState>>) -> Json<HealthState> {
    Json(state.health.clone())
}
