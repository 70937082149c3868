//! Fake model servers for tests: small axum apps on `127.0.0.1:0` that speak the real wire
//! protocols of OpenAI, llama.cpp's server, Ollama and Mistral's FIM API, answer from a
//! [`Script`], and record every request they receive.
//!
//! This crate is test support only (never shipped): it exists so that the HTTP backends and the
//! end-to-end tests of the server can run against something that behaves like the real thing,
//! without network access or model weights. It is deliberately not a simulator: it streams the
//! scripted text pieces regardless of the prompt.
//!
//! ```no_run
//! # async fn demo() {
//! use fake_model_servers::{FakeServer, Protocol, Script};
//! let server = FakeServer::start(Protocol::LlamaCpp, Script::default().pieces(["a", "b"])).await;
//! // point a backend at server.url(), then:
//! assert_eq!(server.request_count(), 0);
//! # }
//! ```

mod llama_cpp;
mod mistral;
mod ollama;
mod openai;
mod wire;

pub use ollama::MODEL_NAME as OLLAMA_MODEL_NAME;

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    body::Body,
    extract::{Request, State},
    http::StatusCode,
    middleware::{self, Next},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

/// Which protocol a fake server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// `/v1/completions`, `/v1/chat/completions`, `/v1/embeddings` (also without `/v1`).
    OpenAi,
    /// llama.cpp server: `/completion`, `/tokenize`, `/embeddings`, `/health`.
    LlamaCpp,
    /// Ollama: `/api/generate`, `/api/chat`, `/api/embed`, `/api/tags`.
    Ollama,
    /// Mistral: `/v1/fim/completions`, plus the OpenAI-compatible chat route.
    Mistral,
}

/// How a fake server answers. Built with the chained setters, changeable while running through
/// [`FakeServer::update_script`].
#[derive(Clone, Debug, PartialEq)]
pub struct Script {
    /// Text pieces streamed in order (joined for non-streaming answers).
    pub pieces: Vec<String>,
    /// Sleep before answering anything (after the request is recorded).
    pub delay: Option<Duration>,
    /// Answer every request with this HTTP status and an OpenAI-style error body.
    pub error_status: Option<u16>,
    /// Pause between streamed events, so that clients see them in separate reads.
    pub piece_interval: Duration,
    /// Dimension of the deterministic embeddings.
    pub embedding_dim: usize,
    /// List OpenAI embedding results last input first (each keeps its `index`), as servers that
    /// finish a batch out of order do.
    pub reverse_embedding_order: bool,
    /// Chat answers by request: the first rule whose needle occurs in the raw request body
    /// answers with its pieces instead of `pieces`.
    pub rules: Vec<(String, Vec<String>)>,
}

impl Default for Script {
    fn default() -> Self {
        Self {
            pieces: vec!["hello".into(), " world".into()],
            delay: None,
            error_status: None,
            piece_interval: Duration::from_millis(2),
            embedding_dim: 8,
            reverse_embedding_order: false,
            rules: Vec::new(),
        }
    }
}

impl Script {
    pub fn pieces<I, S>(mut self, pieces: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.pieces = pieces.into_iter().map(Into::into).collect();
        self
    }

    /// Chat requests whose body contains `needle` get these pieces.
    pub fn when<I, S>(mut self, needle: &str, pieces: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.rules.push((
            needle.to_string(),
            pieces.into_iter().map(Into::into).collect(),
        ));
        self
    }

    /// The pieces that answer a request with this body.
    pub fn pieces_for(&self, body: &[u8]) -> &[String] {
        let body = String::from_utf8_lossy(body);
        self.rules
            .iter()
            .find(|(needle, _)| body.contains(needle.as_str()))
            .map(|(_, pieces)| pieces.as_slice())
            .unwrap_or(&self.pieces)
    }

    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    pub fn error_status(mut self, status: u16) -> Self {
        self.error_status = Some(status);
        self
    }

    /// No artificial work at all: no delay, no pause between events (the whole stream is written
    /// as one body). For latency benchmarks.
    pub fn instant(mut self) -> Self {
        self.delay = None;
        self.piece_interval = Duration::ZERO;
        self
    }

    pub fn embedding_dim(mut self, dim: usize) -> Self {
        self.embedding_dim = dim;
        self
    }

    pub fn reverse_embedding_order(mut self) -> Self {
        self.reverse_embedding_order = true;
        self
    }
}

/// One request as the fake server received it.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedRequest {
    pub method: String,
    /// Path without the query string.
    pub path: String,
    /// Header names are lower case; repeated headers are joined with `, `.
    pub headers: BTreeMap<String, String>,
    /// The body parsed as JSON; `Null` when empty, a JSON string when it is not JSON.
    pub body: Value,
}

impl RecordedRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    pub fn authorization(&self) -> Option<&str> {
        self.header("authorization")
    }
}

/// State shared by the handlers of one server and its [`FakeServer`] handle.
#[derive(Debug)]
struct Shared {
    script: Mutex<Script>,
    requests: Mutex<Vec<RecordedRequest>>,
    count: AtomicUsize,
}

impl Shared {
    fn script(&self) -> Script {
        lock(&self.script).clone()
    }

    /// A per-server sequence number for response ids.
    fn next_id(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }
}

/// A poisoned lock only means another test thread panicked; the data is still usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A running fake server. Dropping it stops the server.
#[derive(Debug)]
pub struct FakeServer {
    addr: SocketAddr,
    protocol: Protocol,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeServer {
    /// Binds `127.0.0.1:0` and serves `protocol` in a tokio task.
    ///
    /// Panics if the loopback port cannot be bound: this is test support, and a test cannot
    /// proceed without its server.
    pub async fn start(protocol: Protocol, script: Script) -> FakeServer {
        let shared = Arc::new(Shared {
            script: Mutex::new(script),
            requests: Mutex::new(Vec::new()),
            count: AtomicUsize::new(0),
        });
        let routes = match protocol {
            Protocol::OpenAi => openai::routes(),
            Protocol::LlamaCpp => llama_cpp::routes(),
            Protocol::Ollama => ollama::routes(),
            Protocol::Mistral => mistral::routes(),
        };
        let app: Router = routes
            .layer(middleware::from_fn_with_state(shared.clone(), record))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("fake model server: cannot bind 127.0.0.1:0");
        let addr = listener
            .local_addr()
            .expect("fake model server: bound listener has no address");
        let task = tokio::spawn(async move {
            // The server runs until the handle aborts it; an I/O error just ends the task.
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                let _ = tcp.set_nodelay(true);
            });
            let _ = axum::serve(listener, app).await;
        });
        FakeServer {
            addr,
            protocol,
            shared,
            task,
        }
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    pub fn last_request(&self) -> Option<RecordedRequest> {
        lock(&self.shared.requests).last().cloned()
    }

    /// Requests received on `path`, oldest first.
    pub fn requests_to(&self, path: &str) -> Vec<RecordedRequest> {
        lock(&self.shared.requests)
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }

    pub fn request_count(&self) -> usize {
        self.shared.count.load(Ordering::SeqCst)
    }

    /// Forgets the recorded requests (the counter keeps counting).
    pub fn clear_requests(&self) {
        lock(&self.shared.requests).clear();
    }

    /// Changes how the server answers from now on.
    pub fn update_script(&self, change: impl FnOnce(&mut Script)) {
        change(&mut lock(&self.shared.script));
    }

    pub fn script(&self) -> Script {
        self.shared.script()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A deterministic unit vector for `text`: the same text always gives the same vector, different
/// texts (almost surely) different ones.
pub fn fake_embedding(text: &str, dim: usize) -> Vec<f32> {
    // FNV-1a seed, then splitmix64 per component.
    let mut seed: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        seed ^= u64::from(byte);
        seed = seed.wrapping_mul(0x0100_0000_01b3);
    }
    let raw: Vec<f32> = (0..dim as u64)
        .map(|i| {
            let mut z = seed.wrapping_add((i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            // Top 24 bits to [-1, 1).
            ((z >> 40) as f32 / (1u64 << 23) as f32) - 1.0
        })
        .collect();
    let norm = raw.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm == 0.0 {
        return raw;
    }
    raw.into_iter().map(|x| x / norm).collect()
}

/// Records the request, then applies the script's delay and error status before the handler runs.
async fn record(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, 64 * 1024 * 1024).await {
        Ok(bytes) => bytes,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let mut headers = BTreeMap::new();
    for (name, value) in &parts.headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        headers
            .entry(name.as_str().to_string())
            .and_modify(|v: &mut String| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert(value);
    }
    let body_value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    lock(&shared.requests).push(RecordedRequest {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        headers,
        body: body_value,
    });
    shared.count.fetch_add(1, Ordering::SeqCst);

    let script = shared.script();
    if let Some(delay) = script.delay {
        tokio::time::sleep(delay).await;
    }
    if let Some(status) = script.error_status {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = json!({
            "error": {
                "message": format!("fake error (status {})", status.as_u16()),
                "type": "fake_error",
                "param": null,
                "code": null,
            }
        });
        return (status, axum::Json(body)).into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
