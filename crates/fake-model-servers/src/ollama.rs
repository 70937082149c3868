//! Ollama: `/api/generate` and `/api/chat` (newline-delimited JSON, streaming by default),
//! `/api/embed` and `/api/tags` (which lists one model, [`MODEL_NAME`]).

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
    wire::{NDJSON, json_body, model_of, ndjson_frames, stream_requested, streamed, texts_of},
};

/// The only model `/api/tags` lists.
pub const MODEL_NAME: &str = "fake-model:latest";

const CREATED_AT: &str = "2024-01-01T00:00:00Z";

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/api/generate", post(generate))
        .route("/api/chat", post(chat))
        .route("/api/embed", post(embed))
        .route("/api/tags", get(tags))
}

async fn generate(State(shared): State<Arc<Shared>>, bytes: Bytes) -> Response {
    let body = match json_body(&bytes) {
        Ok(body) => body,
        Err(response) => return response,
    };
    let script = shared.script();
    let model = model_of(&body, MODEL_NAME);
    let piece = |response: &str, done: bool| {
        let mut event = json!({
            "model": model,
            "created_at": CREATED_AT,
            "response": response,
            "done": done,
        });
        if done {
            event["done_reason"] = json!("stop");
        }
        event
    };
    if !stream_requested(&body, true) {
        return Json(piece(&script.pieces.concat(), true)).into_response();
    }
    let mut events: Vec<Value> = script.pieces.iter().map(|p| piece(p, false)).collect();
    events.push(piece("", true));
    streamed(ndjson_frames(&events), script.piece_interval, NDJSON)
}

async fn chat(State(shared): State<Arc<Shared>>, bytes: Bytes) -> Response {
    let body = match json_body(&bytes) {
        Ok(body) => body,
        Err(response) => return response,
    };
    let script = shared.script();
    let model = model_of(&body, MODEL_NAME);
    let message = |content: &str, done: bool| {
        json!({
            "model": model,
            "created_at": CREATED_AT,
            "message": { "role": "assistant", "content": content },
            "done": done,
        })
    };
    if !stream_requested(&body, true) {
        return Json(message(&script.pieces.concat(), true)).into_response();
    }
    let mut events: Vec<Value> = script.pieces.iter().map(|p| message(p, false)).collect();
    events.push(message("", true));
    streamed(ndjson_frames(&events), script.piece_interval, NDJSON)
}

async fn embed(State(shared): State<Arc<Shared>>, bytes: Bytes) -> Response {
    let body = match json_body(&bytes) {
        Ok(body) => body,
        Err(response) => return response,
    };
    let dim = shared.script().embedding_dim;
    let embeddings: Vec<Vec<f32>> = texts_of(body.get("input"))
        .iter()
        .map(|text| fake_embedding(text, dim))
        .collect();
    Json(json!({ "model": model_of(&body, MODEL_NAME), "embeddings": embeddings })).into_response()
}

async fn tags() -> Json<Value> {
    Json(json!({
        "models": [{
            "name": MODEL_NAME,
            "model": MODEL_NAME,
            "modified_at": CREATED_AT,
            "size": 1,
            "digest": "0000000000000000000000000000000000000000000000000000000000000000",
            "details": {
                "format": "gguf",
                "family": "fake",
                "families": ["fake"],
                "parameter_size": "1B",
                "quantization_level": "Q8_0",
            },
        }]
    }))
}
