//! Records editor events in SQLite as well as in the JSON-lines log: every event of a known
//! user goes to `user_events`, completions create a `user_completions` row and views, selects
//! and dismisses bump its counters (the data behind `dailyStats`).
//!
//! `EventLogger::log` must not block a request, so events go through a channel to one writer
//! task; the channel is unbounded so that a slow disk delays rows but never drops them.

use chrono::Utc;
use tabby_common::api::event::{Event, EventLogger};
use tabby_db::{CompletionCounter, DbConn};
use tokio::sync::mpsc;
use tracing::warn;

pub struct DbEventLogger {
    tx: mpsc::UnboundedSender<(String, Event)>,
}

impl DbEventLogger {
    pub fn start(db: DbConn) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<(String, Event)>();
        tokio::spawn(async move {
            while let Some((user, event)) = rx.recv().await {
                if let Err(e) = record(&db, &user, &event).await {
                    warn!("cannot record a usage event: {e:#}");
                }
            }
        });
        Self { tx }
    }
}

fn kind(event: &Event) -> &'static str {
    match event {
        Event::View { .. } => "view",
        Event::Select { .. } => "select",
        Event::Dismiss { .. } => "dismiss",
        Event::Completion { .. } => "completion",
        Event::ChatCompletion { .. } => "chat_completion",
    }
}

async fn record(db: &DbConn, user: &str, event: &Event) -> anyhow::Result<()> {
    // The REST layer sets the header from the verified token, so this is one of ours.
    let Some(user_id) = tabby_schema::decode_id(user) else {
        return Ok(());
    };
    let now = Utc::now();
    let payload = serde_json::to_string_pretty(event)?;
    db.create_user_event(user_id, kind(event), now, &payload)
        .await?;
    match event {
        Event::Completion {
            completion_id,
            language,
            ..
        } => {
            db.create_user_completion(user_id, completion_id, language, now)
                .await?;
        }
        Event::View { completion_id, .. } => {
            db.increment_user_completion(completion_id, CompletionCounter::View)
                .await?;
        }
        Event::Select { completion_id, .. } => {
            db.increment_user_completion(completion_id, CompletionCounter::Select)
                .await?;
        }
        Event::Dismiss { completion_id, .. } => {
            db.increment_user_completion(completion_id, CompletionCounter::Dismiss)
                .await?;
        }
        Event::ChatCompletion { .. } => {}
    }
    Ok(())
}

impl EventLogger for DbEventLogger {
    fn log(&self, user: Option<String>, event: Event) {
        if let Some(user) = user {
            let _ = self.tx.send((user, event));
        }
    }
}
