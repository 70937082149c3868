//! Live progress of the job runs in flight: what an indexing run has gone through so far,
//! kept in memory while it runs (the database holds only the run's start and end) and read by
//! GraphQL's `JobRun.progress`.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

use tabby_common::git_url::redact_url;
use tabby_schema::job::JobRunProgress;

/// One run's counters, updated by the indexer's progress calls.
pub struct RunProgress {
    state: Mutex<Repository>,
    files_done: AtomicU64,
    bytes: AtomicU64,
}

struct Repository {
    name: String,
    files_total: u64,
    started: Instant,
}

impl RunProgress {
    fn new() -> Self {
        Self {
            state: Mutex::new(Repository {
                name: String::new(),
                files_total: 0,
                started: Instant::now(),
            }),
            files_done: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }

    /// A repository's indexing starts (counters start again).
    pub fn start(&self, repository: &str, files: usize) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        *state = Repository {
            name: redact_url(repository),
            files_total: files as u64,
            started: Instant::now(),
        };
        self.files_done.store(0, Ordering::Relaxed);
        self.bytes.store(0, Ordering::Relaxed);
    }

    /// One more file gone through, `bytes` of it indexed.
    pub fn file(&self, bytes: u64) {
        self.files_done.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// `None` before the first repository starts (a run that indexes nothing).
    fn snapshot(&self) -> Option<JobRunProgress> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.name.is_empty() {
            return None;
        }
        let elapsed = state.started.elapsed().as_secs_f64();
        let mb = self.bytes.load(Ordering::Relaxed) as f64 / 1e6;
        let clamp = |n: u64| i32::try_from(n).unwrap_or(i32::MAX);
        Some(JobRunProgress {
            repository: state.name.clone(),
            files_done: clamp(
                self.files_done
                    .load(Ordering::Relaxed)
                    .min(state.files_total),
            ),
            files_total: clamp(state.files_total),
            indexed_mb: mb,
            mb_per_second: if elapsed > 0.0 { mb / elapsed } else { 0.0 },
            elapsed_seconds: elapsed,
        })
    }
}

/// The runs in flight, by run id.
#[derive(Default)]
pub struct LiveRuns {
    runs: Mutex<HashMap<i64, Arc<RunProgress>>>,
}

/// Removes its run from [`LiveRuns`] when dropped, however the run ends.
pub struct LiveRun<'a> {
    runs: &'a LiveRuns,
    id: i64,
    pub progress: Arc<RunProgress>,
}

impl Drop for LiveRun<'_> {
    fn drop(&mut self) {
        self.runs.lock().remove(&self.id);
    }
}

impl LiveRuns {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Arc<RunProgress>>> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers run `id` as in flight until the returned guard drops.
    pub fn begin(&self, id: i64) -> LiveRun<'_> {
        let progress = Arc::new(RunProgress::new());
        self.lock().insert(id, progress.clone());
        LiveRun {
            runs: self,
            id,
            progress,
        }
    }

    /// The progress of run `id` while it is in flight and has started a repository.
    pub fn progress(&self, id: i64) -> Option<JobRunProgress> {
        let run = self.lock().get(&id).cloned()?;
        run.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lives_while_the_run_does_and_hides_credentials() {
        let live = LiveRuns::default();
        {
            let run = live.begin(7);
            assert_eq!(live.progress(7), None, "no repository started yet");
            run.progress
                .start("https://user:secret@git.example.com/acme/app.git", 4);
            run.progress.file(1_500_000);
            run.progress.file(0);
            let p = live.progress(7).unwrap();
            assert_eq!((p.files_done, p.files_total), (2, 4));
            assert!((p.indexed_mb - 1.5).abs() < 1e-9);
            assert!(!p.repository.contains("secret"), "{}", p.repository);
            assert!(p.repository.contains("git.example.com/acme/app.git"));
            assert!(p.mb_per_second >= 0.0 && p.elapsed_seconds >= 0.0);
            assert_eq!(live.progress(8), None);
            // A second repository of the same run starts its counters again.
            run.progress.start("file:///srv/other", 10);
            assert_eq!(live.progress(7).unwrap().files_done, 0);
        }
        assert_eq!(live.progress(7), None, "gone once the run ends");
    }
}
