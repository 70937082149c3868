//! A run's log file, which also passes an indexing run's progress on.

use std::{
    io::Write,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use anyhow::Context as _;
use chrono::Utc;
use tabby_common::git_url::redact_urls_in;
use tabby_index::{IndexProgress, RepositorySummary};

use super::progress::RunProgress;

/// A run's log: `<RFC 3339 time> [LEVEL]: message` lines.
pub struct JobLog {
    file: Mutex<std::fs::File>,
    /// Where an indexing run's progress goes while it runs (GraphQL `JobRun.progress`).
    progress: Option<Arc<RunProgress>>,
}

impl JobLog {
    pub fn path(jobs_dir: &Path, run_id: i64) -> PathBuf {
        jobs_dir
            .join(tabby_schema::encode_id(run_id))
            .join("stdout.log")
    }

    pub(super) fn create(jobs_dir: &Path, run_id: i64) -> anyhow::Result<Self> {
        let path = Self::path(jobs_dir, run_id);
        std::fs::create_dir_all(path.parent().expect("has a parent"))?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        Ok(Self {
            file: Mutex::new(file),
            progress: None,
        })
    }

    pub(super) fn with_progress(self, progress: Arc<RunProgress>) -> Self {
        Self {
            progress: Some(progress),
            ..self
        }
    }

    /// Every line is written with the credentials of its URLs redacted.
    fn write(&self, level: &str, message: &str) {
        let message = redact_urls_in(message);
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        for line in message.lines() {
            let _ = writeln!(file, "{} [{level}]: {line}", Utc::now().to_rfc3339());
        }
    }

    pub fn info(&self, message: impl AsRef<str>) {
        self.write("INFO", message.as_ref());
    }

    pub fn warn(&self, message: impl AsRef<str>) {
        self.write("WARN", message.as_ref());
    }
}

impl IndexProgress for JobLog {
    fn start(&self, repository: &str, files: usize) {
        self.info(format!("indexing {repository}: {files} files"));
        if let Some(p) = &self.progress {
            p.start(repository, files);
        }
    }
    fn file(&self, bytes: u64, _chunks: usize) {
        if let Some(p) = &self.progress {
            p.file(bytes);
        }
    }
    fn finish(&self, summary: &RepositorySummary) {
        self.info(summary.to_string());
    }
}
