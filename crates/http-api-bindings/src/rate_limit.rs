//! `rate_limit.request_per_minute` for remote backends: a token bucket that callers wait on
//! asynchronously, and wrappers that put one in front of each model trait.
//!
//! The bucket holds at most ceil(rpm/60) tokens (the per-second budget, so a burst never exceeds
//! one second's worth) and refills one token every 60/rpm seconds, so over any minute at most
//! about `rpm` requests start. Waiting is a single timer per caller: a caller reserves its slot
//! under a lock and sleeps until it is due, so callers are served in arrival order without polling.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use async_openai::types::chat::{CreateChatCompletionRequest, CreateChatCompletionStreamResponse};
use async_trait::async_trait;
use futures::stream::BoxStream;
use tabby_inference::{
    ChatCompletionStream, CompletionOptions, CompletionStream, Embedding, ModelError,
};
use tokio::time::Instant;

/// Limits how many requests start per minute.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    /// Time between two tokens.
    interval: Duration,
    /// How far ahead of its due time a request may start (the burst allowance).
    burst: Duration,
    /// When the next token is due if nobody has borrowed from the burst allowance.
    next_due: Mutex<Option<Instant>>,
}

impl RateLimiter {
    pub(crate) fn per_minute(request_per_minute: u64) -> Self {
        let rpm = request_per_minute.max(1);
        let capacity = rpm.div_ceil(60);
        let interval = Duration::from_secs(60) / u32::try_from(rpm).unwrap_or(u32::MAX);
        Self {
            interval,
            burst: interval * u32::try_from(capacity - 1).unwrap_or(u32::MAX),
            next_due: Mutex::new(None),
        }
    }

    /// Waits until a request may start.
    pub(crate) async fn acquire(&self) {
        let start_at = {
            let mut next_due = self
                .next_due
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let now = Instant::now();
            // An idle bucket refills up to its capacity, never beyond.
            let due = next_due.map_or(now, |due| due.max(now));
            *next_due = Some(due + self.interval);
            due.checked_sub(self.burst).unwrap_or(now).max(now)
        };
        tokio::time::sleep_until(start_at).await;
    }
}

/// A backend behind a [`RateLimiter`].
pub(crate) struct RateLimited<T: ?Sized> {
    limiter: RateLimiter,
    inner: Arc<T>,
}

impl<T: ?Sized> RateLimited<T> {
    pub(crate) fn new(inner: Arc<T>, request_per_minute: u64) -> Self {
        Self {
            limiter: RateLimiter::per_minute(request_per_minute),
            inner,
        }
    }
}

#[async_trait]
impl<T: CompletionStream + ?Sized> CompletionStream for RateLimited<T> {
    async fn generate(
        &self,
        prompt: &str,
        options: CompletionOptions,
    ) -> BoxStream<'static, Result<String, ModelError>> {
        self.limiter.acquire().await;
        self.inner.generate(prompt, options).await
    }
}

#[async_trait]
impl<T: ChatCompletionStream + ?Sized> ChatCompletionStream for RateLimited<T> {
    async fn chat_stream(
        &self,
        request: CreateChatCompletionRequest,
    ) -> Result<
        BoxStream<'static, Result<CreateChatCompletionStreamResponse, ModelError>>,
        ModelError,
    > {
        self.limiter.acquire().await;
        self.inner.chat_stream(request).await
    }
}

#[async_trait]
impl<T: Embedding + ?Sized> Embedding for RateLimited<T> {
    async fn embed(&self, inputs: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        self.limiter.acquire().await;
        self.inner.embed(inputs).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Start times (relative to the first call) of `n` back-to-back acquires.
    async fn start_times(limiter: &RateLimiter, n: usize) -> Vec<Duration> {
        let t0 = Instant::now();
        let mut times = Vec::new();
        for _ in 0..n {
            limiter.acquire().await;
            times.push(t0.elapsed());
        }
        times
    }

    fn ms(values: &[u64]) -> Vec<Duration> {
        values.iter().map(|&v| Duration::from_millis(v)).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn burst_of_one_second_then_steady_rate() {
        // 120 rpm: two per second, one every 500 ms, bursts of two.
        let limiter = RateLimiter::per_minute(120);
        assert_eq!(start_times(&limiter, 5).await, ms(&[0, 0, 500, 1000, 1500]));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_time_refills_only_up_to_capacity() {
        let limiter = RateLimiter::per_minute(120);
        start_times(&limiter, 2).await;
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(start_times(&limiter, 3).await, ms(&[0, 0, 500]));
    }

    #[tokio::test(start_paused = true)]
    async fn low_rates_wait_whole_minutes() {
        let limiter = RateLimiter::per_minute(2);
        assert_eq!(start_times(&limiter, 3).await, ms(&[0, 30_000, 60_000]));
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_rpm_plus_burst_requests_start_in_a_minute() {
        let limiter = Arc::new(RateLimiter::per_minute(1200));
        let started = Arc::new(AtomicUsize::new(0));
        for _ in 0..2000 {
            let (limiter, started) = (limiter.clone(), started.clone());
            tokio::spawn(async move {
                limiter.acquire().await;
                started.fetch_add(1, Ordering::SeqCst);
            });
        }
        tokio::time::sleep(Duration::from_millis(59_999)).await;
        let count = started.load(Ordering::SeqCst);
        // 20 at once, then one every 50 ms.
        assert_eq!(count, 20 + 1199);
    }

    struct CountingEmbedding(AtomicUsize);

    #[async_trait]
    impl Embedding for CountingEmbedding {
        async fn embed(&self, _inputs: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(vec![])
        }
    }

    #[tokio::test(start_paused = true)]
    async fn wrapper_waits_before_calling_the_backend() {
        let inner = Arc::new(CountingEmbedding(AtomicUsize::new(0)));
        let limited = RateLimited::new(inner.clone() as Arc<dyn Embedding>, 60);
        let t0 = Instant::now();
        for _ in 0..3 {
            limited.embed(&[]).await.expect("embed");
        }
        assert_eq!(inner.0.load(Ordering::SeqCst), 3);
        assert_eq!(t0.elapsed(), Duration::from_secs(2));
    }
}
