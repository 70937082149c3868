//! The OpenAPI 3 document served at `/api-docs/openapi.json`, generated from the route and type
//! annotations.

use utoipa::{
    Modify, OpenApi,
    openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
};

use crate::services::{completion, health};

#[derive(OpenApi)]
#[openapi(
    info(title = "Tabby Server", description = "Tabby-compatible code completion and chat API."),
    servers((url = "/", description = "This server")),
    paths(
        super::completions::completions,
        super::events::events,
        super::health::health,
        super::chat::chat_completions,
        super::models::models,
        super::models::server_setting,
        super::search::search,
        super::context::context,
    ),
    components(schemas(
        completion::CompletionRequest,
        completion::CompletionResponse,
        completion::Segments,
        completion::Declaration,
        completion::Snippet,
        completion::EditHistory,
        completion::DebugOptions,
        completion::DebugData,
        completion::Choice,
        completion::CompletionMode,
        tabby_common::api::event::LogEventRequest,
        health::HealthState,
        health::ModelsHealth,
        health::ModelHealth,
        health::Version,
        super::search::SearchRequest,
        super::context::ContextRequest,
        super::search::SearchParamsOverride,
        super::search::SearchResponse,
        super::search::SearchHit,
    )),
    modifiers(&SecurityAddon),
)]
pub struct ApiDoc;

struct SecurityAddon;

impl Modify for SecurityAddon {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        if let Some(components) = openapi.components.as_mut() {
            components.add_security_scheme(
                "token",
                SecurityScheme::Http(
                    HttpBuilder::new()
                        .scheme(HttpAuthScheme::Bearer)
                        .bearer_format("token")
                        .build(),
                ),
            );
        }
    }
}
