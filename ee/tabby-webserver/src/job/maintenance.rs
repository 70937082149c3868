//! The `Hourly` and `Daily` jobs: database upkeep, re-indexing and re-crawling.

use tabby_db::Pagination;

use super::{
    BackgroundJobEvent, JobLog, JobService, WebCrawlerJob, sources::web_document_source_id,
};

/// Finished runs older than this are deleted by the hourly job.
pub const JOB_RUN_RETENTION_DAYS: u32 = 90;
/// A password reset code works this long; older ones are also removed by the hourly job.
pub const PASSWORD_RESET_LIFETIME_HOURS: u32 = 1;

impl JobService {
    pub(super) async fn hourly(&self, log: &JobLog) -> anyhow::Result<()> {
        let threads = self
            .db
            .delete_idle_ephemeral_threads(crate::EPHEMERAL_THREAD_IDLE_DAYS)
            .await?;
        let tokens = self.db.delete_expired_refresh_tokens().await?;
        let resets = self
            .db
            .delete_password_resets_older_than(PASSWORD_RESET_LIFETIME_HOURS)
            .await?;
        let runs = self.db.delete_old_job_runs(JOB_RUN_RETENTION_DAYS).await?;
        let mails = self
            .db
            .delete_emails_older_than(crate::mail::OUTBOX_RETENTION_DAYS)
            .await?;
        log.info(format!(
            "db maintenance: {threads} idle threads, {tokens} expired refresh tokens, {resets} stale password resets, {runs} old job runs, {mails} old mails removed"
        ));
        self.trigger_all_repositories().await?;
        for integration in self
            .db
            .list_integrations(&[], None, Pagination::all())
            .await?
        {
            self.trigger(&BackgroundJobEvent::SyncThirdPartyRepositories(
                tabby_schema::encode_id(integration.id),
            ))
            .await?;
        }
        self.trigger(&BackgroundJobEvent::IndexGarbageCollection)
            .await?;
        Ok(())
    }

    pub(super) async fn daily(&self, log: &JobLog) -> anyhow::Result<()> {
        let documents = self
            .db
            .list_web_documents(&[], None, Pagination::all())
            .await?;
        for doc in &documents {
            self.trigger(&BackgroundJobEvent::WebCrawler(WebCrawlerJob {
                source_id: web_document_source_id(doc.id),
                url: doc.url.clone(),
                url_prefix: None,
            }))
            .await?;
        }
        log.info(format!("enqueued {} web crawls", documents.len()));
        Ok(())
    }
}
