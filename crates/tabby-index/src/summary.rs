//! What an indexing run did, and how it reports progress.

use std::{collections::BTreeMap, fmt};

use crate::code::filter::SkipReason;

#[derive(Clone, Debug, Default)]
pub struct RepositorySummary {
    pub repository: String,
    pub files_seen: usize,
    pub files_indexed: usize,
    pub skipped: BTreeMap<SkipReason, usize>,
    pub chunks: usize,
    pub chunks_embedded: usize,
    pub chunks_failed: usize,
    pub removed: usize,
    pub bytes: u64,
    pub seconds: f64,
    /// Busy seconds per stage (`read`, `prepare` summed over its workers, `embed`, `write`,
    /// `commit`, `merge`); stages overlap, so they add up to more than `seconds`.
    pub stages: Vec<(&'static str, f64)>,
}

impl RepositorySummary {
    pub fn new(repository: &str) -> Self {
        Self {
            repository: repository.to_string(),
            ..Default::default()
        }
    }

    pub fn skip(&mut self, reason: SkipReason) {
        *self.skipped.entry(reason).or_default() += 1;
    }

    pub fn skipped_total(&self) -> usize {
        self.skipped.values().sum()
    }
}

impl fmt::Display for RepositorySummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mb = self.bytes as f64 / 1e6;
        writeln!(
            f,
            "{}: {} files indexed ({} chunks, {} embedded, {} failed), {} skipped, {} removed, {:.2} MB in {:.1} s ({:.2} MB/s)",
            self.repository,
            self.files_indexed,
            self.chunks,
            self.chunks_embedded,
            self.chunks_failed,
            self.skipped_total(),
            self.removed,
            mb,
            self.seconds,
            if self.seconds > 0.0 {
                mb / self.seconds
            } else {
                0.0
            },
        )?;
        if !self.stages.is_empty() {
            let stages: Vec<String> = self
                .stages
                .iter()
                .map(|(stage, secs)| format!("{stage} {secs:.1}"))
                .collect();
            writeln!(f, "  stage seconds: {}", stages.join(", "))?;
        }
        for (reason, count) in &self.skipped {
            writeln!(f, "  skipped {count:>6}: {reason}")?;
        }
        Ok(())
    }
}

/// Progress callbacks; the CLI draws a bar, the server logs.
pub trait IndexProgress: Send + Sync {
    fn start(&self, _repository: &str, _files: usize) {}
    fn file(&self, _bytes: u64, _chunks: usize) {}
    fn finish(&self, _summary: &RepositorySummary) {}
}

/// Reports nothing.
pub struct NoProgress;
impl IndexProgress for NoProgress {}
