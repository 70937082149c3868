//! The event log: one JSON object per line in `$TABBY_ROOT/events/YYYY-MM-DD.json` (UTC date).
//! Callers never wait on disk: entries go through a channel to one writer task that flushes
//! every 5 seconds, on demand, and when the server shuts down.

use std::{
    path::PathBuf,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use chrono::Utc;
use tabby_common::api::event::{Event, EventLogger, LogEntry};
use tokio::{
    fs::{File, OpenOptions},
    io::{AsyncWriteExt, BufWriter},
    sync::{mpsc, oneshot},
};
use tracing::warn;

const FLUSH_INTERVAL: Duration = Duration::from_secs(5);

enum Message {
    // Boxed: an entry is a few hundred bytes, a flush one pointer.
    Entry(Box<LogEntry>),
    Flush(oneshot::Sender<()>),
}

/// Handle to the event writer; cheap to share.
#[derive(Clone)]
pub struct FileEventLogger {
    tx: mpsc::UnboundedSender<Message>,
}

impl FileEventLogger {
    /// Starts the writer task on the current tokio runtime.
    pub fn start(events_dir: PathBuf) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(writer_loop(events_dir, rx));
        Self { tx }
    }

    /// Writes everything logged so far to disk before returning.
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Message::Flush(done)).is_ok() {
            let _ = wait.await;
        }
    }
}

impl EventLogger for FileEventLogger {
    fn log(&self, user: Option<String>, event: Event) {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default();
        let _ = self
            .tx
            .send(Message::Entry(Box::new(LogEntry { user, ts, event })));
    }
}

struct DailyFile {
    date: String,
    writer: BufWriter<File>,
}

async fn writer_loop(dir: PathBuf, mut rx: mpsc::UnboundedReceiver<Message>) {
    let mut current: Option<DailyFile> = None;
    let mut ticker = tokio::time::interval(FLUSH_INTERVAL);
    loop {
        tokio::select! {
            message = rx.recv() => match message {
                Some(Message::Entry(entry)) => {
                    if let Err(e) = write_entry(&dir, &mut current, &entry).await {
                        warn!("cannot write event to {}: {e}", dir.display());
                    }
                }
                Some(Message::Flush(done)) => {
                    flush(&mut current).await;
                    let _ = done.send(());
                }
                None => {
                    flush(&mut current).await;
                    return;
                }
            },
            _ = ticker.tick() => flush(&mut current).await,
        }
    }
}

async fn write_entry(
    dir: &PathBuf,
    current: &mut Option<DailyFile>,
    entry: &LogEntry,
) -> std::io::Result<()> {
    let date = Utc::now().format("%Y-%m-%d").to_string();
    if current.as_ref().is_none_or(|f| f.date != date) {
        flush(current).await;
        tokio::fs::create_dir_all(dir).await?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("{date}.json")))
            .await?;
        *current = Some(DailyFile {
            date,
            writer: BufWriter::new(file),
        });
    }
    let mut line = serde_json::to_vec(entry)?;
    line.push(b'\n');
    if let Some(file) = current.as_mut() {
        file.writer.write_all(&line).await?;
    }
    Ok(())
}

async fn flush(current: &mut Option<DailyFile>) {
    if let Some(file) = current.as_mut()
        && let Err(e) = file.writer.flush().await
    {
        warn!("cannot flush event log: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn entries_are_json_lines_in_a_dated_file() {
        let dir = tempfile::tempdir().unwrap();
        let logger = FileEventLogger::start(dir.path().to_path_buf());
        logger.log(
            Some("u1".into()),
            Event::View {
                completion_id: "cmpl-1".into(),
                choice_index: 0,
                view_id: None,
            },
        );
        logger.log(None, Event::ChatCompletion {});
        logger.flush().await;
        let name = format!("{}.json", Utc::now().format("%Y-%m-%d"));
        let text = std::fs::read_to_string(dir.path().join(name)).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["user"], "u1");
        assert_eq!(
            lines[0]["event"],
            serde_json::json!({"view": {"completion_id": "cmpl-1", "choice_index": 0}})
        );
        assert!(lines[0]["ts"].as_u64().unwrap() > 1_600_000_000_000);
        assert_eq!(lines[1]["user"], serde_json::Value::Null);
        assert_eq!(
            lines[1]["event"],
            serde_json::json!({"chat_completion": {}})
        );
    }
}
