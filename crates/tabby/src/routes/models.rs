use std::sync::Arc;

use axum::{Json, extract::State};
use serde::Serialize;
use tabby_common::config::{ModelConfig, ModelConfigGroup};
use utoipa::ToSchema;

use super::ApiState;

/// `supported_models` of the remote completion and chat models.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ModelList {
    completion: Option<Vec<String>>,
    chat: Option<Vec<String>>,
}

impl ModelList {
    pub fn from_config(models: &ModelConfigGroup) -> Self {
        let supported = |m: &Option<ModelConfig>| match m {
            Some(ModelConfig::Http(http)) => http.supported_models.clone(),
            _ => None,
        };
        Self {
            completion: supported(&models.completion),
            chat: supported(&models.chat),
        }
    }
}

#[utoipa::path(
    get,
    path = "/v1beta/models",
    operation_id = "models",
    tag = "v1beta",
    responses((status = 200, description = "Success", body = ModelList, content_type = "application/json")),
    security(("token" = []))
)]
pub async fn models(State(state): State<Arc<ApiState>>) -> Json<ModelList> {
    Json(state.models.clone())
}

#[derive(Serialize, ToSchema)]
pub struct ServerSetting {
    disable_client_side_telemetry: bool,
}

#[utoipa::path(
    get,
    path = "/v1beta/server_setting",
    operation_id = "config",
    tag = "v1beta",
    responses((status = 200, description = "Success", body = ServerSetting, content_type = "application/json")),
    security(("token" = []))
)]
pub async fn server_setting() -> Json<ServerSetting> {
    Json(ServerSetting {
        disable_client_side_telemetry: false,
    })
}
