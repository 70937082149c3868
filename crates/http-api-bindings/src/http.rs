//! What every remote backend shares: reading the endpoint and keys out of the config, building the
//! reqwest client (connect timeout, proxy bypass for loopback), and turning transport failures and
//! upstream error statuses into [`ModelError`]s a person can act on.

use std::time::Duration;

use reqwest::{RequestBuilder, Response};
use tabby_common::config::HttpModelConfig;
use tabby_inference::ModelError;

use crate::BindingError;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How much of an upstream error body is quoted in the error message.
const BODY_EXCERPT_CHARS: usize = 200;

/// The config's `api_endpoint` without trailing `/`, or `default` when absent.
pub(crate) fn endpoint_or(config: &HttpModelConfig, default: &str) -> String {
    config
        .api_endpoint
        .as_deref()
        .filter(|ep| !ep.trim().is_empty())
        .unwrap_or(default)
        .trim_end_matches('/')
        .to_string()
}

/// The config's `api_endpoint` without trailing `/`; an error when absent.
pub(crate) fn required_endpoint(config: &HttpModelConfig) -> Result<String, BindingError> {
    let endpoint = endpoint_or(config, "");
    if endpoint.is_empty() {
        return Err(missing("api_endpoint", config));
    }
    Ok(endpoint)
}

pub(crate) fn required_model_name(config: &HttpModelConfig) -> Result<String, BindingError> {
    config
        .model_name
        .clone()
        .filter(|name| !name.is_empty())
        .ok_or_else(|| missing("model_name", config))
}

pub(crate) fn required_api_key(config: &HttpModelConfig) -> Result<String, BindingError> {
    api_key(config).ok_or_else(|| missing("api_key", config))
}

/// The api key, if set and not empty.
pub(crate) fn api_key(config: &HttpModelConfig) -> Option<String> {
    config.api_key.clone().filter(|key| !key.is_empty())
}

fn missing(key: &'static str, config: &HttpModelConfig) -> BindingError {
    BindingError::MissingKey {
        key,
        kind: config.kind.clone(),
    }
}

/// A client for `endpoint`. Loopback endpoints bypass any configured proxy.
pub(crate) fn client_for(endpoint: &str) -> Result<reqwest::Client, BindingError> {
    let mut builder = reqwest::Client::builder().connect_timeout(CONNECT_TIMEOUT);
    if endpoint.starts_with("http://localhost") || endpoint.starts_with("http://127.0.0.1") {
        builder = builder.no_proxy();
    }
    builder
        .build()
        .map_err(|e| BindingError::HttpClient(e.to_string()))
}

/// Adds `Authorization: Bearer` when a key is set.
pub(crate) fn with_auth(request: RequestBuilder, api_key: Option<&str>) -> RequestBuilder {
    match api_key {
        Some(key) => request.bearer_auth(key),
        None => request,
    }
}

/// Sends `request`; a transport failure or a non-2xx answer becomes a [`ModelError`].
pub(crate) async fn send(request: RequestBuilder, url: &str) -> Result<Response, ModelError> {
    let response = request.send().await.map_err(|e| transport_error(&e, url))?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let body = response.text().await.unwrap_or_default();
    Err(ModelError::Backend(format!(
        "{url} answered {status}: {}",
        excerpt(&body)
    )))
}

/// Connection problems mean the upstream is unavailable; anything else is a backend error.
pub(crate) fn transport_error(error: &reqwest::Error, url: &str) -> ModelError {
    if error.is_connect() || error.is_timeout() {
        ModelError::Unavailable(format!("cannot reach {url}: {}", error_chain(error)))
    } else {
        ModelError::Backend(format!("request to {url} failed: {}", error_chain(error)))
    }
}

/// reqwest's top-level message is terse ("error sending request"); the causes say why.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

pub(crate) fn excerpt(body: &str) -> String {
    let trimmed = body.trim();
    match trimmed.char_indices().nth(BODY_EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &trimmed[..cut]),
        None => trimmed.to_string(),
    }
}

/// A JSON error payload some servers put inside an otherwise successful stream.
pub(crate) fn stream_error(value: &serde_json::Value) -> Option<ModelError> {
    let error = value.get("error")?;
    if error.is_null() {
        return None;
    }
    let message = error
        .get("message")
        .and_then(|m| m.as_str())
        .map(str::to_string)
        .unwrap_or_else(|| error.to_string());
    Some(ModelError::Backend(format!(
        "upstream reported an error mid-stream: {}",
        excerpt(&message)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpt_cuts_long_bodies_on_char_boundaries() {
        let long = "é".repeat(300);
        let cut = excerpt(&long);
        assert_eq!(cut.chars().count(), BODY_EXCERPT_CHARS + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(excerpt("  short \n"), "short");
    }

    #[test]
    fn stream_error_reads_openai_and_ollama_shapes() {
        let openai = serde_json::json!({"error": {"message": "boom"}});
        let ollama = serde_json::json!({"error": "model not found"});
        assert!(
            matches!(stream_error(&openai), Some(ModelError::Backend(m)) if m.ends_with("boom"))
        );
        assert!(
            matches!(stream_error(&ollama), Some(ModelError::Backend(m)) if m.contains("model not found"))
        );
        assert!(stream_error(&serde_json::json!({"content": "x"})).is_none());
    }
}
