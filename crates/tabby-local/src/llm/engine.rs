//! Generation off the async runtime, on the crate's [`InferencePool`]: a request runs as a
//! chain of short jobs (tokenize, one prompt chunk, one decoding step), each queued when the
//! previous one is done, so concurrent requests take turns token by token in arrival order and
//! `parallelism` of them make progress at once. Each request has its own KV cache
//! ([`Session`]) over the shared weights.
//!
//! A request ends when its stream is dropped (the client went away): every job first checks
//! that its receiver is still there.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use candle_core::{DType, Tensor};
use futures::stream::BoxStream;
use tabby_inference::ModelError;
use tokio::sync::mpsc;

use super::model::{Session, Weights};
use super::sampler::{Sampler, SamplingParams};
use super::tokenizer::{GgufTokenizer, StreamDecoder};
use crate::pool::InferencePool;

/// Prompt tokens per forward pass (and per job) while reading the prompt; bounds the attention
/// scratch and how long other requests wait for a turn.
const PREFILL_CHUNK: usize = 256;

/// One generation request, prompt still as text (tokenizing is CPU work too).
pub struct Generation {
    pub prompt: String,
    /// `None`: until a stop token or the end of the context.
    pub max_tokens: Option<usize>,
    pub sampling: SamplingParams,
    pub stop_tokens: Arc<[u32]>,
}

/// What a generation streams back.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Text(String),
    /// The last item of a successful generation.
    End(Finish),
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// A stop token was sampled.
    Stop,
    /// `max_tokens` (or the context size) was reached.
    Length,
}

type Sender = mpsc::UnboundedSender<Result<Piece, ModelError>>;

/// The loaded model and the pool its requests run on.
pub struct Engine {
    pool: Arc<InferencePool>,
    model: Arc<Model>,
}

/// What every job of every request reads.
struct Model {
    weights: Weights,
    tokenizer: GgufTokenizer,
    /// Weak: a request left in flight must not keep the pool alive after the engine is gone.
    pool: Weak<InferencePool>,
    in_flight: Arc<AtomicUsize>,
}

/// The channel of one request, and its place in the in-flight count until its chain of jobs
/// ends, however it ends (finished, failed, cancelled, pool gone).
struct Request {
    tx: Sender,
    _in_flight: InFlight,
}

struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Engine {
    pub fn start(
        weights: Weights,
        tokenizer: GgufTokenizer,
        parallelism: usize,
    ) -> std::io::Result<Self> {
        let pool = Arc::new(InferencePool::new("llm", parallelism)?);
        let model = Arc::new(Model {
            weights,
            tokenizer,
            pool: Arc::downgrade(&pool),
            in_flight: Arc::new(AtomicUsize::new(0)),
        });
        Ok(Self { pool, model })
    }

    pub fn tokenizer(&self) -> &GgufTokenizer {
        &self.model.tokenizer
    }

    /// Requests that make progress at once.
    pub fn parallelism(&self) -> usize {
        self.pool.parallelism()
    }

    pub fn weights(&self) -> &Weights {
        &self.model.weights
    }

    /// Requests queued or generating.
    pub fn in_flight(&self) -> usize {
        self.model.in_flight.load(Ordering::SeqCst)
    }

    /// Queues `generation`; the stream yields text pieces and ends with [`Piece::End`], or
    /// with one `Err`.
    pub fn submit(&self, generation: Generation) -> BoxStream<'static, Result<Piece, ModelError>> {
        // Unbounded: a client that stops reading must never block a pool thread; what it can
        // pile up is bounded by max_tokens.
        let (tx, rx) = mpsc::unbounded_channel();
        let request = Request {
            tx,
            _in_flight: InFlight::new(&self.model.in_flight),
        };
        schedule(self.model.clone(), Task::Start(generation), request);
        Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        }))
    }
}

/// A candle failure as the client sees it: its first line only (candle appends a backtrace, and
/// the rest is for the server log).
fn backend(e: candle_core::Error) -> ModelError {
    tracing::warn!("local model step failed: {e:?}");
    let text = e.to_string();
    let first = text.lines().next().unwrap_or("").trim();
    ModelError::Backend(format!("the local model failed: {first}"))
}

/// Queues the next job of a request.
fn schedule(model: Arc<Model>, task: Task, request: Request) {
    let Some(pool) = model.pool.upgrade() else {
        let _ = request.tx.send(Err(stopped()));
        return;
    };
    let failed = request.tx.clone();
    if pool.spawn(move || run(model, task, request)).is_err() {
        let _ = failed.send(Err(stopped()));
    }
}

fn stopped() -> ModelError {
    ModelError::Unavailable("the local model has been shut down".into())
}

/// One job: advances `task` by one step and queues the next.
fn run(model: Arc<Model>, task: Task, request: Request) {
    if request.tx.is_closed() {
        return;
    }
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| task.step(&model, &request.tx)));
    let error = match outcome {
        Ok(Ok(Some(next))) => return schedule(model, next, request),
        Ok(Ok(None)) => return,
        Ok(Err(e)) => e,
        Err(_) => ModelError::Backend("the local model crashed on this request".into()),
    };
    tracing::warn!("local generation failed: {error}");
    let _ = request.tx.send(Err(error));
}

enum Task {
    Start(Generation),
    Active(Box<Active>),
}

/// A request past tokenization.
struct Active {
    session: Session,
    prompt: Vec<u32>,
    /// Prompt tokens already in the KV cache.
    read: usize,
    logits: Option<Tensor>,
    max_tokens: usize,
    generated: usize,
    sampler: Sampler,
    decoder: StreamDecoder,
    stop_tokens: Arc<[u32]>,
}

impl Task {
    /// One unit of work; `None` when the request is finished (its end already sent).
    fn step(self, model: &Model, tx: &Sender) -> Result<Option<Task>, ModelError> {
        match self {
            Task::Start(g) => Ok(start(model, g, tx)?.map(|a| Task::Active(Box::new(a)))),
            Task::Active(mut a) => Ok(a.step(model, tx)?.then_some(Task::Active(a))),
        }
    }
}

fn start(model: &Model, g: Generation, tx: &Sender) -> Result<Option<Active>, ModelError> {
    let sampler = Sampler::new(g.sampling).map_err(ModelError::InvalidRequest)?;
    let mut prompt = model
        .tokenizer
        .encode(&g.prompt)
        .map_err(ModelError::InvalidRequest)?;
    if prompt.is_empty() {
        return Err(ModelError::InvalidRequest("the prompt is empty".into()));
    }
    let max_positions = model.weights.max_positions;
    let max_tokens = match g.max_tokens {
        Some(n) => n.min(max_positions - 1),
        // Room for a reply of at least a quarter of the context.
        None => max_positions - prompt.len().min(max_positions - max_positions / 4),
    };
    if max_tokens == 0 {
        let _ = tx.send(Ok(Piece::End(Finish::Length)));
        return Ok(None);
    }
    let budget = max_positions - max_tokens;
    if prompt.len() > budget {
        // Keep the end of the prompt: it is what the next token continues.
        tracing::debug!(
            "prompt of {} tokens clipped to {budget} to fit the context",
            prompt.len()
        );
        prompt.drain(..prompt.len() - budget);
    }
    Ok(Some(Active {
        session: model.weights.new_session(),
        prompt,
        read: 0,
        logits: None,
        max_tokens,
        generated: 0,
        sampler,
        decoder: StreamDecoder::new(),
        stop_tokens: g.stop_tokens,
    }))
}

impl Active {
    /// Reads one prompt chunk or produces one token; `false` when finished.
    fn step(&mut self, model: &Model, tx: &Sender) -> Result<bool, ModelError> {
        if self.read < self.prompt.len() {
            let end = self.prompt.len().min(self.read + PREFILL_CHUNK);
            let chunk = &self.prompt[self.read..end];
            self.logits = Some(
                model
                    .weights
                    .forward(&mut self.session, chunk)
                    .map_err(backend)?,
            );
            self.read = end;
            return Ok(true);
        }
        let logits = self
            .logits
            .take()
            .expect("logits follow every forward pass");
        let mut logits = logits
            .to_dtype(DType::F32)
            .and_then(|l| l.flatten_all())
            .and_then(|l| l.to_vec1::<f32>())
            .map_err(backend)?;
        let next = self
            .sampler
            .sample(&mut logits)
            .map_err(ModelError::Backend)?;
        if self.stop_tokens.contains(&next) {
            return Ok(self.finish(tx, Finish::Stop));
        }
        self.sampler.accept(next);
        self.generated += 1;
        if let Some(text) = self.decoder.push(model.tokenizer.bytes(next)) {
            let _ = tx.send(Ok(Piece::Text(text)));
        }
        if self.generated >= self.max_tokens {
            return Ok(self.finish(tx, Finish::Length));
        }
        self.logits = Some(
            model
                .weights
                .forward(&mut self.session, &[next])
                .map_err(backend)?,
        );
        Ok(true)
    }

    fn finish(&mut self, tx: &Sender, finish: Finish) -> bool {
        if let Some(text) = self.decoder.finish() {
            let _ = tx.send(Ok(Piece::Text(text)));
        }
        let _ = tx.send(Ok(Piece::End(finish)));
        false
    }
}
