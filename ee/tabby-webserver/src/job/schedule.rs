//! Upstream's schedules (6-field cron, UTC). Cron only enqueues, and only in the process that
//! holds the worker lease (so that the runs do not multiply with the processes); the worker
//! runs.

use std::sync::Arc;

use chrono::Utc;
use tracing::warn;

use super::{BackgroundJobEvent, JobService};

pub const HOURLY: &str = "0 0 * * * *";
pub const DAILY: &str = "0 0 0 * * *";
pub const INGESTION_CHECK: &str = "*/10 * * * * *";

impl JobService {
    pub(super) fn spawn_schedules(self: Arc<Self>) {
        let hourly = self.clone();
        spawn_cron(HOURLY, move || {
            let service = hourly.clone();
            async move {
                if !service.schedules_here().await {
                    return;
                }
                if let Err(e) = service.trigger(&BackgroundJobEvent::Hourly).await {
                    warn!("cannot enqueue the hourly job: {e:#}");
                }
            }
        });
        let daily = self.clone();
        spawn_cron(DAILY, move || {
            let service = daily.clone();
            async move {
                if !service.schedules_here().await {
                    return;
                }
                if let Err(e) = service.trigger(&BackgroundJobEvent::Daily).await {
                    warn!("cannot enqueue the daily job: {e:#}");
                }
            }
        });
        // Index ingested documents when some are pending or expired.
        spawn_cron(INGESTION_CHECK, move || {
            let service = self.clone();
            async move {
                if !service.schedules_here().await {
                    return;
                }
                match service.db.ingestion_has_work(Utc::now().timestamp()).await {
                    Ok(true) => {
                        if let Err(e) = service
                            .trigger(&BackgroundJobEvent::SyncIngestionIndex)
                            .await
                        {
                            warn!("cannot enqueue ingestion indexing: {e:#}");
                        }
                    }
                    Ok(false) => {}
                    Err(e) => warn!("cannot check pending ingested documents: {e}"),
                }
            }
        });
    }
}

/// Calls `tick` at every time `expression` matches.
fn spawn_cron<F, Fut>(expression: &'static str, tick: F)
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let schedule = crate::cron::Cron::parse(expression).expect("the built-in schedules parse");
    tokio::spawn(async move {
        loop {
            let now = Utc::now();
            let Some(next) = schedule.next_after(now) else {
                return;
            };
            tokio::time::sleep((next - now).to_std().unwrap_or_default()).await;
            tick().await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_parse() {
        for expression in [HOURLY, DAILY, INGESTION_CHECK] {
            assert!(crate::cron::Cron::parse(expression).is_ok(), "{expression}");
        }
    }
}
