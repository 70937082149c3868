//! Helpers shared by the protocol modules: reading the JSON body, writing a stream of framed
//! events (SSE or newline-delimited JSON) at the script's pace, and small field accessors.

use std::{
    convert::Infallible,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use axum::{
    body::{Body, Bytes},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::Value;

/// Parses a JSON request body, or answers 400 like a real server would.
#[allow(clippy::result_large_err)] // the error is the response itself, returned at once
pub(crate) fn json_body(bytes: &Bytes) -> Result<Value, Response> {
    serde_json::from_slice(bytes).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            axum::Json(
                serde_json::json!({ "error": { "message": format!("invalid JSON body: {e}") } }),
            ),
        )
            .into_response()
    })
}

/// Frames as SSE `data:` events.
pub(crate) fn sse_frames<'a>(events: impl IntoIterator<Item = &'a Value>) -> Vec<String> {
    events
        .into_iter()
        .map(|event| format!("data: {event}\n\n"))
        .collect()
}

/// Frames as newline-delimited JSON.
pub(crate) fn ndjson_frames<'a>(events: impl IntoIterator<Item = &'a Value>) -> Vec<String> {
    events
        .into_iter()
        .map(|event| format!("{event}\n"))
        .collect()
}

/// Streams `frames` with `interval` between them; with a zero interval the whole stream is
/// written as one body.
pub(crate) fn streamed(
    frames: Vec<String>,
    interval: Duration,
    content_type: &'static str,
) -> Response {
    let body = if interval.is_zero() {
        Body::from(frames.concat())
    } else {
        Body::from_stream(async_stream::stream! {
            for (i, frame) in frames.into_iter().enumerate() {
                if i > 0 {
                    tokio::time::sleep(interval).await;
                }
                yield Ok::<Bytes, Infallible>(Bytes::from(frame));
            }
        })
    };
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

pub(crate) const SSE: &str = "text/event-stream";
pub(crate) const NDJSON: &str = "application/x-ndjson";

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The request's `model`, or `fallback` when absent or not a string.
pub(crate) fn model_of(body: &Value, fallback: &str) -> String {
    body.get("model")
        .and_then(Value::as_str)
        .unwrap_or(fallback)
        .to_string()
}

/// `input` as a list of texts: a string is one text, an array is many (non-strings become "").
pub(crate) fn texts_of(input: Option<&Value>) -> Vec<String> {
    match input {
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().unwrap_or_default().to_string())
            .collect(),
        _ => Vec::new(),
    }
}

pub(crate) fn stream_requested(body: &Value, default: bool) -> bool {
    body.get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(default)
}
