//! Mistral: `/v1/fim/completions` streams chat-chunk-shaped events (`choices[0].delta.content`)
//! ending with `[DONE]`; chat goes through the OpenAI-compatible routes.

use std::sync::Arc;

use axum::{
    Json, Router,
    body::Bytes,
    extract::State,
    response::{IntoResponse, Response},
    routing::post,
};
use serde_json::json;

use crate::{
    Shared, openai,
    wire::{SSE, json_body, model_of, sse_frames, stream_requested, streamed, unix_now},
};

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/v1/fim/completions", post(fim_completions))
        .merge(openai::chat_routes())
}

async fn fim_completions(State(shared): State<Arc<Shared>>, bytes: Bytes) -> Response {
    let body = match json_body(&bytes) {
        Ok(body) => body,
        Err(response) => return response,
    };
    let script = shared.script();
    let id = format!("fim-fake-{}", shared.next_id());
    let model = model_of(&body, "codestral-latest");
    let created = unix_now();
    if !stream_requested(&body, false) {
        return Json(json!({
            "id": id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [{
                "index": 0,
                "message": { "role": "assistant", "content": script.pieces.concat() },
                "finish_reason": "stop",
            }],
            "usage": { "prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0 },
        }))
        .into_response();
    }
    let mut frames = sse_frames(&openai::chat_chunks(&id, &model, created, &script.pieces));
    frames.push("data: [DONE]\n\n".into());
    streamed(frames, script.piece_interval, SSE)
}
