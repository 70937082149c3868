//! Which Ollama model to use: `model_name` when configured, otherwise the first model the server
//! lists in `/api/tags`, looked up on first use (so the server starts while Ollama is down) and
//! then cached.

use serde_json::Value;
use tabby_inference::ModelError;
use tokio::sync::OnceCell;

use crate::http::{send, with_auth};

pub(crate) struct OllamaModel {
    tags_url: String,
    resolved: OnceCell<String>,
}

impl OllamaModel {
    pub(crate) fn new(endpoint: &str, configured: Option<String>) -> Self {
        let resolved = match configured.filter(|name| !name.is_empty()) {
            Some(name) => OnceCell::new_with(Some(name)),
            None => OnceCell::new(),
        };
        Self {
            tags_url: format!("{endpoint}/api/tags"),
            resolved,
        }
    }

    /// The model name; a failed lookup is not cached, so the next request retries.
    pub(crate) async fn name(
        &self,
        client: &reqwest::Client,
        api_key: Option<&str>,
    ) -> Result<String, ModelError> {
        self.resolved
            .get_or_try_init(|| async {
                let request = with_auth(client.get(&self.tags_url), api_key);
                let response = send(request, &self.tags_url).await?;
                let tags: Value = response.json().await.map_err(|e| {
                    ModelError::Backend(format!("{} sent invalid JSON: {e}", self.tags_url))
                })?;
                let first = tags
                    .pointer("/models/0/name")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                let name = first.ok_or_else(|| {
                    ModelError::Unavailable(format!(
                        "{} lists no models; pull one or set model_name",
                        self.tags_url
                    ))
                })?;
                tracing::info!("using Ollama model {name:?} (model_name is not set)");
                Ok(name)
            })
            .await
            .cloned()
    }
}
