//! Generation off the async runtime, on the crate's [`InferencePool`]: a request runs as a
//! chain of short jobs (tokenize, one prompt chunk, one decoding step), each queued when the
//! previous one is done, so concurrent requests take turns token by token in arrival order and
//! `parallelism` of them make progress at once. Each request has its own KV cache
//! ([`Session`]) over the shared weights.
//!
//! Finished requests leave their sessions in the [`PromptCache`]: a new request starts from
//! the idle session that shares the longest token prefix with its prompt and reads only the
//! rest, which is what an editor asking after every pause in typing repeats least.
//!
//! A request ends when its stream is dropped (the client went away): every job first checks
//! that its receiver is still there.
//!
//! Greedy requests draft tokens from their own context (prompt lookup): when the last few
//! tokens occurred before, the tokens that followed them then are forwarded along with the
//! next one, and each is kept while it is what the model picks after the one before. A pass
//! over a few tokens costs little more than one (decoding reads every weight per pass), so each
//! accepted token saves a pass; the text is the same as without drafts, token for token.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use candle_core::{DType, Tensor};
use futures::stream::BoxStream;
use tabby_inference::{FirstNames, ModelError, NameState};
use tokio::sync::mpsc;

use super::model::{Session, Weights};
use super::sampler::{Sampler, SamplingParams};
use super::tokenizer::{GgufTokenizer, StreamDecoder};
use crate::pool::InferencePool;

/// Prompt tokens per forward pass (and per job) while reading the prompt; bounds the attention
/// scratch and how long other requests wait for a turn.
const PREFILL_CHUNK: usize = 256;

/// Longest and shortest run of last tokens looked up for a draft.
const DRAFT_NGRAM_MAX: usize = 4;
const DRAFT_NGRAM_MIN: usize = 2;

/// One generation request, prompt still as text (tokenizing is CPU work too).
pub struct Generation {
    pub prompt: String,
    /// `None`: until a stop token or the end of the context.
    pub max_tokens: Option<usize>,
    pub sampling: SamplingParams,
    pub stop_tokens: Arc<[u32]>,
    /// The names the reply must start with: until one is written whole, tokens that would
    /// leave them are masked.
    pub first_names: Option<Arc<FirstNames>>,
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
    cache: PromptCache,
    /// Most tokens drafted per pass for greedy requests (0: none).
    draft_tokens: usize,
}

/// Prompt tokens the engine has read, in all: computed by the model, or found in a cached
/// session.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PromptStats {
    pub computed: u64,
    pub reused: u64,
    /// Bytes the idle sessions hold now.
    pub cached_bytes: usize,
    /// Tokens generated (sampled), in all.
    pub generated: u64,
    /// Seconds spent in forward passes over prompt chunks, and over generated tokens.
    pub prompt_seconds: f64,
    pub decode_seconds: f64,
    /// Drafted tokens forwarded, and those of them the model then picked.
    pub drafted: u64,
    pub accepted: u64,
}

/// Idle sessions of finished requests, least recently used first, holding at most `budget`
/// bytes of KV cache.
struct PromptCache {
    idle: Mutex<Vec<Session>>,
    budget: usize,
    computed: AtomicU64,
    reused: AtomicU64,
    generated: AtomicU64,
    prompt_nanos: AtomicU64,
    decode_nanos: AtomicU64,
    drafted: AtomicU64,
    accepted: AtomicU64,
}

/// Every engine started in this process, by model id, for [`loaded_prompt_stats`].
static ENGINES: Mutex<Vec<(String, Weak<Model>)>> = Mutex::new(Vec::new());

/// The prompt statistics of every engine still loaded, by model id (what `/metrics` shows).
pub fn loaded_prompt_stats() -> Vec<(String, PromptStats)> {
    let mut engines = ENGINES.lock().unwrap_or_else(|e| e.into_inner());
    engines.retain(|(_, model)| model.strong_count() > 0);
    engines
        .iter()
        .filter_map(|(id, model)| Some((id.clone(), model.upgrade()?.cache.stats())))
        .collect()
}

/// Tokens at the start of both.
fn shared_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl PromptCache {
    fn new(budget: usize) -> Self {
        Self {
            idle: Mutex::new(Vec::new()),
            budget,
            computed: AtomicU64::new(0),
            reused: AtomicU64::new(0),
            generated: AtomicU64::new(0),
            prompt_nanos: AtomicU64::new(0),
            decode_nanos: AtomicU64::new(0),
            drafted: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
        }
    }

    /// Counts one forward pass that took `elapsed`, over prompt tokens or a generated one.
    fn count_pass(&self, prompt: bool, elapsed: Duration) {
        let counter = if prompt {
            &self.prompt_nanos
        } else {
            &self.decode_nanos
        };
        counter.fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
    }

    /// A session for `prompt` and how many of its tokens it already holds: the idle session
    /// sharing the longest prefix (cut back to it), or a fresh one. At least the last prompt
    /// token is always left to read, since its logits start the reply.
    fn take(&self, weights: &Weights, prompt: &[u32]) -> (Session, usize) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let best = idle
            .iter()
            .enumerate()
            .map(|(i, s)| (i, shared_prefix(s.tokens(), prompt).min(prompt.len() - 1)))
            .filter(|&(_, shared)| shared > 0)
            .max_by_key(|&(i, shared)| (shared, i));
        let (mut session, shared) = match best {
            // Sharing less than half of it (the editor moved elsewhere): copy the shared
            // part and keep the original for when the editor comes back.
            Some((i, shared)) if shared * 2 < idle[i].tokens().len() => {
                match idle[i].fork(shared) {
                    Ok(copy) => (copy, shared),
                    Err(_) => (weights.new_session(), 0),
                }
            }
            Some((i, shared)) => (idle.remove(i), shared),
            None => (weights.new_session(), 0),
        };
        tracing::debug!(
            "prompt of {} tokens: {shared} from a cached session ({} idle)",
            prompt.len(),
            idle.len()
        );
        drop(idle);
        session.truncate(shared);
        self.reused.fetch_add(shared as u64, Ordering::Relaxed);
        self.computed
            .fetch_add((prompt.len() - shared) as u64, Ordering::Relaxed);
        (session, shared)
    }

    /// Keeps `session` for later prompts, evicting the least recently used beyond the budget.
    fn put(&self, session: Session) {
        if self.budget == 0 {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.push(session);
        let mut total: usize = idle.iter().map(Session::bytes).sum();
        while total > self.budget && !idle.is_empty() {
            total -= idle.remove(0).bytes();
        }
    }

    fn stats(&self) -> PromptStats {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        PromptStats {
            computed: self.computed.load(Ordering::Relaxed),
            reused: self.reused.load(Ordering::Relaxed),
            cached_bytes: idle.iter().map(Session::bytes).sum(),
            generated: self.generated.load(Ordering::Relaxed),
            prompt_seconds: self.prompt_nanos.load(Ordering::Relaxed) as f64 * 1e-9,
            decode_seconds: self.decode_nanos.load(Ordering::Relaxed) as f64 * 1e-9,
            drafted: self.drafted.load(Ordering::Relaxed),
            accepted: self.accepted.load(Ordering::Relaxed),
        }
    }
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
    /// Starts the pool; up to `prompt_cache_bytes` of finished requests' KV caches are kept
    /// for reuse (0: none); greedy requests draft up to `draft_tokens` per pass (0: none).
    pub fn start(
        name: &str,
        weights: Weights,
        tokenizer: GgufTokenizer,
        parallelism: usize,
        prompt_cache_bytes: usize,
        draft_tokens: usize,
    ) -> std::io::Result<Self> {
        let pool = Arc::new(InferencePool::new("llm", parallelism)?);
        let model = Arc::new(Model {
            weights,
            tokenizer,
            pool: Arc::downgrade(&pool),
            in_flight: Arc::new(AtomicUsize::new(0)),
            cache: PromptCache::new(prompt_cache_bytes),
            draft_tokens,
        });
        ENGINES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name.to_string(), Arc::downgrade(&model)));
        Ok(Self { pool, model })
    }

    /// Prompt tokens computed and reused so far, and the cache's size now.
    pub fn prompt_stats(&self) -> PromptStats {
        self.model.cache.stats()
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
        // Cancelled while this step ran: the session goes back to the cache now (dropping
        // `next`), not after jobs queued meanwhile, such as the next keystroke's request,
        // which would then miss it.
        Ok(Ok(Some(_))) if request.tx.is_closed() => return,
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

/// A request past tokenization. Its session goes back to the prompt cache however it ends
/// (finished, failed before a forward pass began, cancelled).
struct Active {
    session: Option<Session>,
    model: Arc<Model>,
    prompt: Vec<u32>,
    /// Prompt tokens already in the KV cache.
    read: usize,
    /// Logits of the last pass, one row per token to pick (`draft.len() + 1`).
    logits: Option<Tensor>,
    /// The drafted tokens that last pass forwarded after the generated one.
    draft: Vec<u32>,
    max_tokens: usize,
    generated: usize,
    sampler: Sampler,
    decoder: StreamDecoder,
    stop_tokens: Arc<[u32]>,
    /// The names the reply must start with and where the reply stands against them, until a
    /// whole name is written.
    first_names: Option<(Arc<FirstNames>, NameState)>,
}

impl Task {
    /// One unit of work; `None` when the request is finished (its end already sent).
    fn step(self, model: &Arc<Model>, tx: &Sender) -> Result<Option<Task>, ModelError> {
        match self {
            Task::Start(g) => Ok(start(model, g, tx)?.map(|a| Task::Active(Box::new(a)))),
            Task::Active(mut a) => Ok(a.step(model, tx)?.then_some(Task::Active(a))),
        }
    }
}

fn start(model: &Arc<Model>, g: Generation, tx: &Sender) -> Result<Option<Active>, ModelError> {
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
    let (session, reused) = model.cache.take(&model.weights, &prompt);
    Ok(Some(Active {
        session: Some(session),
        model: model.clone(),
        prompt,
        read: reused,
        logits: None,
        draft: Vec::new(),
        max_tokens,
        generated: 0,
        sampler,
        decoder: StreamDecoder::new(),
        stop_tokens: g.stop_tokens,
        first_names: g.first_names.map(|names| {
            let start = names.start();
            (names, start)
        }),
    }))
}

impl Active {
    /// Reads one prompt chunk or produces one token; `false` when finished.
    fn step(&mut self, model: &Model, tx: &Sender) -> Result<bool, ModelError> {
        if self.read < self.prompt.len() {
            let end = self.prompt.len().min(self.read + PREFILL_CHUNK);
            let chunk = &self.prompt[self.read..end];
            let session = self.session.as_mut().expect("a session until dropped");
            let started = Instant::now();
            let logits = model.weights.forward(session, chunk);
            model.cache.count_pass(true, started.elapsed());
            self.logits = Some(logits.map_err(|e| self.failed(e))?);
            self.read = end;
            return Ok(true);
        }
        let mut logits = self
            .logits
            .take()
            .expect("logits follow every forward pass")
            .to_dtype(DType::F32)
            .and_then(|l| l.flatten_all())
            .and_then(|l| l.to_vec1::<f32>())
            .map_err(backend)?;
        let draft = std::mem::take(&mut self.draft);
        let vocabulary = logits.len() / (draft.len() + 1);
        let mut next = None;
        for (i, row) in logits.chunks_exact_mut(vocabulary).enumerate() {
            if let Some((names, state)) = &self.first_names {
                mask_outside_names(row, names, *state, &model.tokenizer, &self.stop_tokens);
            }
            let token = self.sampler.sample(row).map_err(ModelError::Backend)?;
            if let Some((names, state)) = self.first_names.take() {
                // Past a whole name (or off the names, when nothing could stay in them) the
                // reply is free.
                if let Some(next @ NameState::Open(_)) =
                    names.advance(state, model.tokenizer.bytes(token))
                {
                    self.first_names = Some((names, next));
                }
            }
            if self.stop_tokens.contains(&token) {
                return Ok(self.finish(tx, Finish::Stop));
            }
            self.sampler.accept(token);
            self.generated += 1;
            model.cache.generated.fetch_add(1, Ordering::Relaxed);
            if let Some(text) = self.decoder.push(model.tokenizer.bytes(token)) {
                let _ = tx.send(Ok(Piece::Text(text)));
            }
            if self.generated >= self.max_tokens {
                return Ok(self.finish(tx, Finish::Length));
            }
            if draft.get(i) == Some(&token) {
                // Already forwarded: the next row is what follows it.
                model.cache.accepted.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            // The drafted tokens after this position are not what was generated.
            let session = self.session.as_mut().expect("a session until dropped");
            session.truncate(session.tokens().len() - (draft.len() - i));
            next = Some(token);
            break;
        }
        let next = next.expect("the last row is never a drafted token's");
        let session = self.session.as_mut().expect("a session until dropped");
        let mut tokens = vec![next];
        if self.sampler.is_greedy() && model.draft_tokens > 0 {
            // Each row picks a token: no more rows than tokens left, nor positions.
            let room = (self.max_tokens - self.generated - 1)
                .min(
                    model
                        .weights
                        .max_positions
                        .saturating_sub(session.tokens().len() + 1),
                )
                .min(model.draft_tokens);
            let mut history = session.tokens().to_vec();
            history.push(next);
            self.draft = lookup_draft(&history, room);
            model
                .cache
                .drafted
                .fetch_add(self.draft.len() as u64, Ordering::Relaxed);
            tokens.extend_from_slice(&self.draft);
        }
        let started = Instant::now();
        let logits = model.weights.forward_rows(session, &tokens, tokens.len());
        model.cache.count_pass(false, started.elapsed());
        self.logits = Some(logits.map_err(|e| self.failed(e))?);
        Ok(true)
    }

    /// A failed forward pass may have left the session half-written: it is not kept.
    fn failed(&mut self, e: candle_core::Error) -> ModelError {
        self.session = None;
        backend(e)
    }

    fn finish(&mut self, tx: &Sender, finish: Finish) -> bool {
        // The sampled last token was never forwarded; the session holds prompt + reply so far.
        if let Some(text) = self.decoder.finish() {
            let _ = tx.send(Ok(Piece::Text(text)));
        }
        let _ = tx.send(Ok(Piece::End(finish)));
        false
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            self.model.cache.put(session);
        }
    }
}

/// For an open set ([`FirstNames::is_open`]) only mixes its prior in. Otherwise: sets to
/// minus infinity the logit of every token that would take the reply out of `names`
/// from `state`: bytes that leave them, or a stop token before a whole name. Tokens are looked
/// through by their first byte: a byte no name continues with rules out all its tokens at
/// once, and a byte that ends a whole name lets all of them through, so only the tokens that
/// go on within a name are walked down the trie. When no token would stay in the names (a
/// vocabulary that cannot spell them), the row is left as it is.
fn mask_outside_names(
    row: &mut [f32],
    names: &FirstNames,
    state: NameState,
    tokenizer: &GgufTokenizer,
    stop_tokens: &[u32],
) {
    if names.is_open() {
        // A prior alone: nothing is masked.
        if let Some(weight) = names.prior_weight(state) {
            mix_prior(row, names, state, weight, tokenizer, stop_tokens);
        }
        return;
    }
    let mut keep = vec![false; row.len()];
    for (first, ids) in tokenizer.ids_by_first_byte().iter().enumerate() {
        match names.advance(state, &[first as u8]) {
            None => {}
            Some(NameState::Done) => {
                for &id in ids {
                    if let Some(k) = keep.get_mut(id as usize) {
                        *k = true;
                    }
                }
            }
            Some(NameState::Open(_)) => {
                for &id in ids {
                    if let Some(k) = keep.get_mut(id as usize)
                        && names.advance(state, tokenizer.bytes(id)).is_some()
                    {
                        *k = true;
                    }
                }
            }
        }
    }
    // A stop token (no bytes, or bytes the loop above let through) ends the reply: only after
    // a whole name.
    let may_end = names.may_end(state);
    for &id in stop_tokens {
        if let Some(k) = keep.get_mut(id as usize) {
            *k = may_end;
        }
    }
    if !keep
        .iter()
        .zip(row.iter())
        .any(|(&k, l)| k && l.is_finite())
    {
        return;
    }
    for (logit, keep) in row.iter_mut().zip(keep) {
        if !keep {
            *logit = f32::NEG_INFINITY;
        }
    }
    if let Some(weight) = names.prior_weight(state) {
        mix_prior(row, names, state, weight, tokenizer, stop_tokens);
    }
}

/// Replaces each allowed token's logit by the log of the mixture `(1 - weight) · p_model +
/// weight · p_prior` ([`FirstNames::prior_share`]; a stop token ends the name, so it keeps
/// the mass of the name that ends here). The row's masked tokens stay masked.
fn mix_prior(
    row: &mut [f32],
    names: &FirstNames,
    state: NameState,
    weight: f32,
    tokenizer: &GgufTokenizer,
    stop_tokens: &[u32],
) {
    let max = row
        .iter()
        .copied()
        .filter(|l| l.is_finite())
        .fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return;
    }
    let total: f32 = row
        .iter()
        .filter(|l| l.is_finite())
        .map(|l| (l - max).exp())
        .sum();
    // Each token's prior share, looked up by first byte as the mask does: a byte that leaves
    // the prior's names leaves all its tokens at 0 (a longer text never keeps more mass), a
    // byte that ends a name gives all its tokens that name's share, and only the tokens that
    // go on within a name walk the trie. Control tokens write no name; a stop token ends it.
    let mut prior = vec![0.0f32; row.len()];
    for (first, ids) in tokenizer.ids_by_first_byte().iter().enumerate() {
        let share = names.prior_share(state, &[first as u8]);
        if share == 0.0 {
            continue;
        }
        let ends = names.advance(state, &[first as u8]) == Some(NameState::Done);
        for &id in ids {
            if let Some(p) = prior.get_mut(id as usize) {
                *p = if ends {
                    share
                } else {
                    names.prior_share(state, tokenizer.bytes(id))
                };
            }
        }
    }
    let ended = names.prior_share(state, b" ");
    for &id in stop_tokens {
        if let Some(p) = prior.get_mut(id as usize) {
            *p = ended;
        }
    }
    for (logit, p_prior) in row.iter_mut().zip(prior) {
        if logit.is_finite() {
            let p_model = (*logit - max).exp() / total;
            *logit = ((1.0 - weight) * p_model + weight * p_prior).ln();
        }
    }
}

/// The tokens that followed the latest earlier occurrence of `history`'s last
/// [`DRAFT_NGRAM_MAX`] tokens (else of fewer, down to [`DRAFT_NGRAM_MIN`]), at most `max`;
/// empty when none occurred before.
fn lookup_draft(history: &[u32], max: usize) -> Vec<u32> {
    if max == 0 {
        return Vec::new();
    }
    for n in (DRAFT_NGRAM_MIN..=DRAFT_NGRAM_MAX).rev() {
        let Some(start) = history.len().checked_sub(n) else {
            continue;
        };
        let tail = &history[start..];
        if let Some(at) = (0..start).rev().find(|&i| &history[i..i + n] == tail) {
            let from = at + n;
            return history[from..(from + max).min(history.len())].to_vec();
        }
    }
    Vec::new()
}

#[cfg(test)]
mod draft_tests {
    use super::lookup_draft;

    #[test]
    fn drafts_follow_the_latest_longest_match() {
        // The tail "2 3" occurred twice before: what followed the later one is drafted.
        let h = [1, 2, 3, 4, 9, 2, 3, 5, 6, 7, 2, 3];
        assert_eq!(lookup_draft(&h, 3), vec![5, 6, 7]);
        assert_eq!(lookup_draft(&h, 1), vec![5]);
        // A 3-token tail beats a more recent 2-token one.
        let h = [7, 2, 3, 4, 5, 2, 3, 9, 7, 2, 3];
        assert_eq!(lookup_draft(&h, 2), vec![4, 5]);
        // The draft stops at the end of the history.
        let h = [1, 2, 1, 2];
        assert_eq!(lookup_draft(&h, 5), vec![1, 2]);
    }

    #[test]
    fn no_draft_without_an_earlier_match_or_room() {
        assert!(lookup_draft(&[1, 2, 3, 4, 5], 4).is_empty());
        assert!(lookup_draft(&[1, 2, 1, 2], 0).is_empty());
        assert!(lookup_draft(&[1], 4).is_empty());
        assert!(lookup_draft(&[], 4).is_empty());
        // One token repeated is not enough.
        assert!(lookup_draft(&[5, 6, 7, 5], 4).is_empty());
    }
}
