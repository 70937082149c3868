use std::{convert::Infallible, sync::Arc};

use async_openai::types::chat::CreateChatCompletionRequest;
use axum::{
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
};
use futures::StreamExt;
use serde::Serialize;
use utoipa::ToSchema;

use super::{ApiError, ApiState, JsonBody, user_from_headers};

/// The OpenAI chat request (documented subset; every OpenAI field is accepted).
#[derive(Serialize, ToSchema)]
pub struct ChatCompletionRequestDoc {
    /// May be empty: the configured model is used.
    model: String,
    messages: Vec<ChatMessageDoc>,
    stream: Option<bool>,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
}

#[derive(Serialize, ToSchema)]
pub struct ChatMessageDoc {
    /// `system`, `user` or `assistant`.
    role: String,
    content: String,
}

#[utoipa::path(
    post,
    path = "/v1/chat/completions",
    request_body = ChatCompletionRequestDoc,
    operation_id = "chat_completions",
    tag = "v1",
    responses(
        (status = 200, description = "A text/event-stream of OpenAI `chat.completion.chunk` objects, then `data: [DONE]`", content_type = "text/event-stream"),
        (status = 400, description = "Invalid JSON"),
        (status = 422, description = "JSON is not an OpenAI chat request"),
        (status = 501, description = "No chat model is configured"),
        (status = 502, description = "The chat model answered with an error"),
        (status = 503, description = "The chat model cannot be reached"),
    ),
    security(("token" = []))
)]
pub async fn chat_completions(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    JsonBody(request): JsonBody<CreateChatCompletionRequest>,
) -> Result<Response, ApiError> {
    let Some(service) = &state.chat else {
        return Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "no chat model is configured: add [model.chat.http] to config.toml",
        ));
    };
    let mut chunks = service.stream(request, user_from_headers(&headers)).await?;
    let events = async_stream::stream! {
        while let Some(chunk) = chunks.next().await {
            match chunk {
                Ok(chunk) => match Event::default().json_data(&chunk) {
                    Ok(event) => yield Ok::<_, Infallible>(event),
                    Err(e) => tracing::warn!("cannot serialize chat chunk: {e}"),
                },
                Err(e) => {
                    tracing::warn!("chat stream failed: {e}");
                    let body = serde_json::json!({"error": {"message": e.client_message()}});
                    yield Ok(Event::default().data(body.to_string()));
                    return;
                }
            }
        }
        // Upstream ends without a sentinel; OpenAI clients expect one and tabby-agent ignores it.
        yield Ok(Event::default().data("[DONE]"));
    };
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}
