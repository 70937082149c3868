//! The OpenAI protocol: legacy text completions, chat completions and embeddings, each mounted
//! both under `/v1` and at the root (clients differ in whether `/v1` is part of the endpoint).

use std::sync::Arc;

use axum::{
    Json, Router,
    body::Bytes,
    extract::State,
    response::{IntoResponse, Response},
    routing::post,
};
use serde_json::{Value, json};

use crate::{
    Shared, fake_embedding,
    wire::{SSE, json_body, model_of, sse_frames, stream_requested, streamed, texts_of, unix_now},
};

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/completions", post(completions))
        .merge(chat_routes())
        .route("/v1/embeddings", post(embeddings))
        .route("/embeddings", post(embeddings))
}

/// Chat routes alone; the Mistral fake mounts them too.
pub(crate) fn chat_routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/chat/completions", post(chat_completions))
}

async fn completions(State(shared): State<Arc<Shared>>, bytes: Bytes) -> Response {
    let body = match json_body(&bytes) {
        Ok(body) => body,
        Err(response) => return response,
    };
    let script = shared.script();
    let id = format!("cmpl-fake-{}", shared.next_id());
    let model = model_of(&body, "fake-model");
    let created = unix_now();
    let chunk = |text: &str, finish_reason: Value| {
        json!({
            "id": id,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [{ "text": text, "index": 0, "logprobs": null, "finish_reason": finish_reason }],
        })
    };
    if !stream_requested(&body, false) {
        let mut response = chunk(&script.pieces.concat(), json!("stop"));
        response["usage"] =
            json!({ "prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0 });
        return Json(response).into_response();
    }
    let mut events: Vec<Value> = script
        .pieces
        .iter()
        .map(|p| chunk(p, Value::Null))
        .collect();
    events.push(chunk("", json!("stop")));
    let mut frames = sse_frames(&events);
    frames.push("data: [DONE]\n\n".into());
    streamed(frames, script.piece_interval, SSE)
}

async fn chat_completions(State(shared): State<Arc<Shared>>, bytes: Bytes) -> Response {
    let body = match json_body(&bytes) {
        Ok(body) => body,
        Err(response) => return response,
    };
    let script = shared.script();
    let id = format!("chatcmpl-fake-{}", shared.next_id());
    let model = model_of(&body, "fake-model");
    let created = unix_now();
    let pieces = script.pieces_for(&bytes).to_vec();
    if !stream_requested(&body, false) {
        return Json(json!({
            "id": id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [{
                "index": 0,
                "message": { "role": "assistant", "content": pieces.concat() },
                "logprobs": null,
                "finish_reason": "stop",
            }],
            "usage": { "prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0 },
        }))
        .into_response();
    }
    let mut frames = sse_frames(&chat_chunks(&id, &model, created, &pieces));
    frames.push("data: [DONE]\n\n".into());
    streamed(frames, script.piece_interval, SSE)
}

/// `chat.completion.chunk` events: the role, one per piece, then the finish reason.
pub(crate) fn chat_chunks(id: &str, model: &str, created: u64, pieces: &[String]) -> Vec<Value> {
    let chunk = |delta: Value, finish_reason: Value| {
        json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": null,
            "choices": [{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason }],
        })
    };
    let mut events = vec![chunk(
        json!({ "role": "assistant", "content": "" }),
        Value::Null,
    )];
    events.extend(
        pieces
            .iter()
            .map(|piece| chunk(json!({ "content": piece }), Value::Null)),
    );
    events.push(chunk(json!({}), json!("stop")));
    events
}

async fn embeddings(State(shared): State<Arc<Shared>>, bytes: Bytes) -> Response {
    let body = match json_body(&bytes) {
        Ok(body) => body,
        Err(response) => return response,
    };
    let script = shared.script();
    let dim = script.embedding_dim;
    let mut data: Vec<Value> = texts_of(body.get("input"))
        .iter()
        .enumerate()
        .map(|(index, text)| {
            json!({ "object": "embedding", "index": index, "embedding": fake_embedding(text, dim) })
        })
        .collect();
    if script.reverse_embedding_order {
        data.reverse();
    }
    Json(json!({
        "object": "list",
        "data": data,
        "model": model_of(&body, "fake-embedding"),
        "usage": { "prompt_tokens": 0, "total_tokens": 0 },
    }))
    .into_response()
}
