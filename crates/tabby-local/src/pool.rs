//! A dedicated pool of inference threads, so that model work never runs on (or blocks) the async
//! runtime.
//!
//! Jobs wait in one FIFO queue and run on `parallelism` OS threads, so requests are served in
//! the order they arrive. A model that does long work (a whole generation, a large embedding
//! call) should submit it as a sequence of short jobs (a decoding step, a sub-batch), each one
//! queued after the previous finished: concurrent requests then interleave instead of waiting
//! for each other. A job whose caller has gone away (the future from [`InferencePool::run`] was
//! dropped) is skipped when its turn comes.
//!
//! The numeric kernels (candle's gemm) parallelise inside a job on rayon's global pool; the
//! parallelism here is how many jobs make progress at once, not how many cores one job uses.

use std::{
    any::Any,
    future::Future,
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{Arc, Mutex, PoisonError, mpsc},
    thread,
};

use tokio::sync::oneshot;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Why a job submitted to an [`InferencePool`] produced no result.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("the inference thread pool has shut down")]
    Closed,
    #[error("inference failed unexpectedly: {0}")]
    Panicked(String),
}

/// A fixed set of named OS threads running inference jobs from one FIFO queue.
///
/// Dropping the pool lets the threads finish the queued jobs and exit; it does not wait for them.
pub struct InferencePool {
    sender: mpsc::Sender<Job>,
    parallelism: usize,
}

impl InferencePool {
    /// Starts `parallelism` threads (at least one) named `{name}-{i}`.
    pub fn new(name: &str, parallelism: usize) -> std::io::Result<Self> {
        let parallelism = parallelism.max(1);
        let (sender, receiver) = mpsc::channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        for i in 0..parallelism {
            let receiver = receiver.clone();
            thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || worker(&receiver))?;
        }
        Ok(Self {
            sender,
            parallelism,
        })
    }

    pub fn parallelism(&self) -> usize {
        self.parallelism
    }

    /// Queues `job` now and resolves with its result.
    ///
    /// Dropping the returned future before the job starts skips the job. A panic inside the job
    /// becomes [`PoolError::Panicked`]; the thread survives it.
    pub fn run<T, F>(&self, job: F) -> impl Future<Output = Result<T, PoolError>> + Send + 'static
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let submitted = self.submit(Box::new(move || {
            if tx.is_closed() {
                return;
            }
            let result = catch_unwind(AssertUnwindSafe(job)).map_err(panic_message);
            let _ = tx.send(result);
        }));
        async move {
            submitted?;
            match rx.await {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(message)) => Err(PoolError::Panicked(message)),
                Err(_) => Err(PoolError::Closed),
            }
        }
    }

    /// Queues a job that reports through its own channel (e.g. a decoding step that sends tokens
    /// to a stream). The job should check that its receiver is still there before working.
    /// A panic is logged and swallowed.
    pub fn spawn(&self, job: impl FnOnce() + Send + 'static) -> Result<(), PoolError> {
        self.submit(Box::new(move || {
            if let Err(panic) = catch_unwind(AssertUnwindSafe(job)) {
                tracing::error!("inference job panicked: {}", panic_message(panic));
            }
        }))
    }

    fn submit(&self, job: Job) -> Result<(), PoolError> {
        self.sender.send(job).map_err(|_| PoolError::Closed)
    }
}

fn worker(receiver: &Mutex<mpsc::Receiver<Job>>) {
    loop {
        // The lock is held only while waiting, so exactly one idle thread takes the next job.
        let job = receiver
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .recv();
        match job {
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

fn panic_message(panic: Box<dyn Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a model thread panicked".to_string()
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::atomic::{AtomicUsize, Ordering},
        time::Duration,
    };

    use super::*;

    #[tokio::test]
    async fn runs_jobs_off_the_runtime_and_returns_results() {
        let pool = InferencePool::new("test-pool", 2).unwrap();
        let name = pool
            .run(|| thread::current().name().map(str::to_string))
            .await
            .unwrap();
        assert!(name.unwrap().starts_with("test-pool-"));
        assert_eq!(pool.run(|| 6 * 7).await.unwrap(), 42);
    }

    #[tokio::test]
    async fn a_panic_is_an_error_and_the_pool_keeps_working() {
        let pool = InferencePool::new("test-pool", 1).unwrap();
        let err = pool.run(|| panic!("boom")).await.unwrap_err();
        assert!(
            matches!(&err, PoolError::Panicked(m) if m == "boom"),
            "{err}"
        );
        assert_eq!(pool.run(|| 1).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn jobs_run_in_arrival_order() {
        let pool = InferencePool::new("test-pool", 1).unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let futures: Vec<_> = (0..5)
            .map(|i| {
                let order = order.clone();
                pool.run(move || order.lock().unwrap().push(i))
            })
            .collect();
        futures::future::join_all(futures).await;
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    }

    #[tokio::test]
    async fn a_job_whose_caller_went_away_is_skipped() {
        let pool = InferencePool::new("test-pool", 1).unwrap();
        let (release, blocked) = std::sync::mpsc::channel::<()>();
        let busy = pool.run(move || blocked.recv_timeout(Duration::from_secs(10)));
        let ran = Arc::new(AtomicUsize::new(0));
        let abandoned = {
            let ran = ran.clone();
            pool.run(move || ran.fetch_add(1, Ordering::SeqCst))
        };
        drop(abandoned);
        release.send(()).unwrap();
        busy.await.unwrap().unwrap();
        // The queue is FIFO with one thread: once this runs, the abandoned job had its turn.
        pool.run(|| ()).await.unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 0);
    }
}
