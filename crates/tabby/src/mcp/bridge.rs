//! `tabby mcp`: a stdio MCP server that forwards every message to a tabby server's `/mcp`, for
//! clients that can only start a command. Newline-delimited JSON-RPC on stdin and stdout (the
//! MCP stdio transport); each message is POSTed with the token, and what comes back (a JSON
//! body or the events of an SSE stream) is written out a line each. Messages are forwarded
//! concurrently (agents call tools in parallel), except `initialize`, whose answer sets the
//! protocol version sent with the rest. An HTTP failure becomes a JSON-RPC error for the
//! request it answered; nothing else reaches stdout, diagnostics go to stderr.

use std::sync::Arc;

use anyhow::Context;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    sync::Mutex,
};

/// Longest message read from stdin.
const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

struct Bridge {
    client: reqwest::Client,
    endpoint: String,
    token: Option<String>,
    /// `Mcp-Session-Id` and `MCP-Protocol-Version` once the server gave them.
    session: std::sync::Mutex<(Option<String>, Option<String>)>,
    out: Mutex<tokio::io::Stdout>,
}

pub async fn run(endpoint: String, token: Option<String>) -> anyhow::Result<()> {
    let url = reqwest::Url::parse(&endpoint).context("--endpoint is not a URL")?;
    if !matches!(url.scheme(), "http" | "https") {
        anyhow::bail!("--endpoint must be an http:// or https:// URL");
    }
    let bridge = Arc::new(Bridge {
        client: reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .build()?,
        endpoint,
        token: token.filter(|t| !t.trim().is_empty()),
        session: std::sync::Mutex::new((None, None)),
        out: Mutex::new(tokio::io::stdout()),
    });
    let mut input = BufReader::new(tokio::io::stdin());
    let mut line = Vec::new();
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        line.clear();
        let read = (&mut input)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .await?;
        if read == 0 {
            break;
        }
        if line.len() > MAX_LINE_BYTES && !line.ends_with(b"\n") {
            // Skip the rest of the oversized line.
            let mut rest = Vec::new();
            input.read_until(b'\n', &mut rest).await?;
            bridge
                .write(&error(Value::Null, -32700, "message larger than 8 MiB"))
                .await;
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        if text.trim().is_empty() {
            continue;
        }
        let message: Value = match serde_json::from_str(text.trim()) {
            Ok(v) => v,
            Err(e) => {
                bridge
                    .write(&error(Value::Null, -32700, &format!("parse error: {e}")))
                    .await;
                continue;
            }
        };
        let is_initialize = message.get("method").and_then(Value::as_str) == Some("initialize");
        if is_initialize {
            bridge.forward(message).await;
        } else {
            let bridge = bridge.clone();
            tasks.spawn(async move { bridge.forward(message).await });
        }
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    Ok(())
}

fn error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

impl Bridge {
    async fn write(&self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        let mut out = self.out.lock().await;
        let _ = out.write_all(line.as_bytes()).await;
        let _ = out.flush().await;
    }

    async fn forward(&self, message: Value) {
        let id = message.get("id").cloned();
        let is_initialize = message.get("method").and_then(Value::as_str) == Some("initialize");
        let fail_id = id.clone();
        let fail = |text: String| async move {
            match fail_id {
                Some(id) => self.write(&error(id, -32000, &text)).await,
                None => eprintln!("tabby mcp: {text}"),
            }
        };
        let mut request = self
            .client
            .post(&self.endpoint)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(message.to_string());
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        {
            let session = self.session.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(id) = &session.0 {
                request = request.header("mcp-session-id", id);
            }
            if let Some(version) = &session.1 {
                request = request.header("mcp-protocol-version", version);
            }
        }
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => return fail(format!("cannot reach {}: {e}", self.endpoint)).await,
        };
        let status = response.status();
        if let Some(session) = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            self.session.lock().unwrap_or_else(|e| e.into_inner()).0 = Some(session.to_string());
        }
        let is_sse = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
        if status.is_success() && is_sse {
            let mut stream = response.bytes_stream();
            let mut buffer = String::new();
            while let Some(chunk) = stream.next().await {
                let Ok(chunk) = chunk else {
                    return fail("the event stream broke off".into()).await;
                };
                buffer.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = buffer.find("\n\n") {
                    let event: String = buffer.drain(..end + 2).collect();
                    let data: Vec<&str> = event
                        .lines()
                        .filter_map(|l| l.strip_prefix("data:"))
                        .map(|d| d.strip_prefix(' ').unwrap_or(d))
                        .collect();
                    if data.is_empty() {
                        continue;
                    }
                    if let Ok(value) = serde_json::from_str::<Value>(&data.join("\n")) {
                        self.remember_version(is_initialize, &value);
                        self.write(&value).await;
                    }
                }
            }
            return;
        }
        let body = response.text().await.unwrap_or_default();
        if status.as_u16() == 202 || (status.is_success() && body.trim().is_empty()) {
            return;
        }
        match serde_json::from_str::<Value>(&body) {
            Ok(value) if value.get("jsonrpc").is_some() || value.is_array() => {
                self.remember_version(is_initialize, &value);
                // An error the server could not tie to the request carries no id.
                if value.get("id").is_some_and(Value::is_null)
                    && let (Some(id), Some(err)) = (id.clone(), value.get("error"))
                {
                    return self
                        .write(&json!({"jsonrpc": "2.0", "id": id, "error": err}))
                        .await;
                }
                self.write(&value).await
            }
            _ => {
                let detail: String = body.chars().take(300).collect();
                fail(format!("HTTP {status} from {}: {detail}", self.endpoint)).await
            }
        }
    }

    fn remember_version(&self, is_initialize: bool, response: &Value) {
        if !is_initialize {
            return;
        }
        if let Some(version) = response
            .pointer("/result/protocolVersion")
            .and_then(Value::as_str)
        {
            self.session.lock().unwrap_or_else(|e| e.into_inner()).1 = Some(version.to_string());
        }
    }
}
