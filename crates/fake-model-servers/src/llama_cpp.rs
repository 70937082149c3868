//! llama.cpp's `llama-server`: `/completion` (SSE of `{content, stop}`), `/tokenize`,
//! `/embeddings` (the post-b4356 array shape) and `/health`.

use std::sync::Arc;

use axum::{
    Json, Router,
    body::Bytes,
    extract::State,
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde_json::{Value, json};

use crate::{
    Shared, fake_embedding,
    wire::{SSE, json_body, sse_frames, stream_requested, streamed},
};

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/completion", post(completion))
        .route("/tokenize", post(tokenize))
        .route("/embeddings", post(embeddings))
        .route("/health", get(|| async { Json(json!({ "status": "ok" })) }))
}

fn content_of(body: &Value) -> &str {
    body.get("content")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

async fn completion(State(shared): State<Arc<Shared>>, bytes: Bytes) -> Response {
    let body = match json_body(&bytes) {
        Ok(body) => body,
        Err(response) => return response,
    };
    let script = shared.script();
    if !stream_requested(&body, false) {
        return Json(json!({ "content": script.pieces.concat(), "stop": true })).into_response();
    }
    let mut events: Vec<Value> = script
        .pieces
        .iter()
        .map(|piece| json!({ "content": piece, "stop": false }))
        .collect();
    events.push(json!({ "content": "", "stop": true }));
    streamed(sse_frames(&events), script.piece_interval, SSE)
}

/// One token per whitespace-separated word; ids are a stable hash of the word.
async fn tokenize(bytes: Bytes) -> Response {
    let body = match json_body(&bytes) {
        Ok(body) => body,
        Err(response) => return response,
    };
    let tokens: Vec<u64> = content_of(&body)
        .split_whitespace()
        .map(|word| {
            word.bytes()
                .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
                % 32_000
        })
        .collect();
    Json(json!({ "tokens": tokens })).into_response()
}

async fn embeddings(State(shared): State<Arc<Shared>>, bytes: Bytes) -> Response {
    let body = match json_body(&bytes) {
        Ok(body) => body,
        Err(response) => return response,
    };
    let vector = fake_embedding(content_of(&body), shared.script().embedding_dim);
    Json(json!([{ "index": 0, "embedding": [vector] }])).into_response()
}
