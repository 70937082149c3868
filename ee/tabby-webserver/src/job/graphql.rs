//! The job service as GraphQL serves it: runs, stats, triggers, web documents, ingestion
//! status, notifications.

use async_trait::async_trait;
use juniper::ID;
use tabby_db::{DbError, JobRunDAO, Pagination, WebDocumentDAO};
use tabby_schema::{
    AccessPolicy, AsID, CoreError, Result,
    job::{
        CreateCustomDocumentInput, CustomDocumentConnection, CustomWebDocument, IngestionStats,
        JobInfo, JobRun, JobRunConnection, JobStats, Notification,
    },
    relay::{Page, RelayArgs},
};

use tabby_common::git_url::redact_urls_in;

use super::{BackgroundJobEvent, JobRequest, JobService, WebCrawlerJob, web_document_source_id};

/// Runs of the last week count in `jobRunStats`.
const STATS_DAYS: u32 = 7;

pub fn job_run(dao: JobRunDAO) -> JobRun {
    JobRun {
        // Rows written by older versions may still hold credentials.
        command: redact_urls_in(&dao.command),
        id: dao.id.as_id(),
        job: dao.job,
        created_at: dao.created_at,
        updated_at: dao.updated_at,
        started_at: dao.started_at,
        finished_at: dao.end_ts,
        exit_code: dao.exit_code.map(|c| c as i32),
        stdout: String::new(),
        progress: None,
    }
}

fn clamp(n: i64) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

impl JobService {
    /// The run as GraphQL shows it, with its progress while it is in flight.
    fn job_run(&self, dao: JobRunDAO) -> JobRun {
        let running = dao.started_at.is_some() && dao.exit_code.is_none();
        let id = dao.id;
        let mut run = job_run(dao);
        if running {
            run.progress = self.live.progress(id);
        }
        run
    }

    pub async fn job_info(&self, event: &BackgroundJobEvent) -> Result<JobInfo> {
        let command = event.to_command();
        Ok(JobInfo {
            last_job_run: self
                .db
                .latest_job_run(&command)
                .await?
                .map(|dao| self.job_run(dao)),
            command,
        })
    }

    fn crawl_event(dao: &WebDocumentDAO) -> BackgroundJobEvent {
        BackgroundJobEvent::WebCrawler(WebCrawlerJob {
            source_id: web_document_source_id(dao.id),
            url: dao.url.clone(),
            url_prefix: None,
        })
    }
}

#[async_trait]
impl tabby_schema::job::JobService for JobService {
    async fn list(
        &self,
        ids: Vec<i64>,
        jobs: Vec<String>,
        page: RelayArgs,
    ) -> Result<JobRunConnection> {
        let page = page
            .paginate(
                |r: &JobRun| r.id.to_string(),
                |p| async move {
                    Ok(self
                        .db
                        .list_job_runs(&ids, &jobs, p)
                        .await?
                        .into_iter()
                        .map(|dao| self.job_run(dao))
                        .collect())
                },
            )
            .await?;
        Ok(page.into())
    }

    async fn stats(&self, jobs: Vec<String>) -> Result<JobStats> {
        let stats = self.db.job_run_stats(&jobs, STATS_DAYS).await?;
        Ok(JobStats {
            success: clamp(stats.success),
            failed: clamp(stats.failed),
            pending: clamp(stats.pending),
        })
    }

    async fn trigger(&self, command: &str) -> Result<ID> {
        let request = JobRequest::parse(command)
            .ok_or_else(|| CoreError::invalid("command", JobRequest::accepted()))?;
        let event = self.requested_event(request).await?;
        let (id, _) = JobService::trigger(self, &event).await?;
        Ok(id.as_id())
    }

    async fn web_documents(
        &self,
        ids: Vec<i64>,
        reader: &AccessPolicy,
        page: RelayArgs,
    ) -> Result<CustomDocumentConnection> {
        let ids = if reader.is_admin {
            ids
        } else {
            // The readable ids (of the requested ones); a handful of rows, read whole.
            let readable: Vec<i64> = self
                .db
                .list_web_documents(&ids, Some(false), Pagination::all())
                .await?
                .into_iter()
                .map(|d| d.id)
                .filter(|id| reader.can_read(&web_document_source_id(*id)))
                .collect();
            if readable.is_empty() {
                return Ok(Page::default().into());
            }
            readable
        };
        let page = page
            .paginate(
                |d: &CustomWebDocument| d.id.to_string(),
                |p| async move {
                    let mut out = Vec::new();
                    for dao in self.db.list_web_documents(&ids, Some(false), p).await? {
                        let job_info = self.job_info(&Self::crawl_event(&dao)).await?;
                        out.push(CustomWebDocument {
                            id: dao.id.as_id(),
                            source_id: web_document_source_id(dao.id),
                            name: dao.name,
                            url: tabby_common::git_url::redact_url(&dao.url),
                            created_at: dao.created_at,
                            updated_at: dao.updated_at,
                            job_info,
                        });
                    }
                    Ok(out)
                },
            )
            .await?;
        Ok(page.into())
    }

    async fn create_web_document(&self, input: &CreateCustomDocumentInput) -> Result<ID> {
        if let Some(crawler) = self.crawler.get()
            && let Some(refusal) = crawler.refusal(input.url.trim()).await
        {
            return Err(CoreError::invalid("url", refusal));
        }
        let id = self
            .db
            .create_web_document(input.name.trim(), input.url.trim(), false)
            .await
            .map_err(|e| match e {
                DbError::AlreadyExists { .. } => CoreError::invalid(
                    "name",
                    "A web document with this name or URL already exists",
                ),
                other => other.into(),
            })?;
        let dao = self
            .db
            .get_web_document(id)
            .await?
            .ok_or(CoreError::NotFound("Web document not found"))?;
        JobService::trigger(self, &Self::crawl_event(&dao)).await?;
        Ok(id.as_id())
    }

    async fn delete_web_document(&self, id: i64) -> Result<()> {
        self.db
            .delete_web_document(id)
            .await
            .map_err(CoreError::not_found_as("Web document not found"))?;
        JobService::trigger(self, &BackgroundJobEvent::IndexGarbageCollection).await?;
        Ok(())
    }

    async fn ingestion_status(&self, sources: Vec<String>) -> Result<Vec<IngestionStats>> {
        Ok(self
            .db
            .ingestion_stats(&sources)
            .await?
            .into_iter()
            .map(|s| IngestionStats {
                source: s.source,
                pending: clamp(s.pending),
                indexed: clamp(s.indexed),
                failed: clamp(s.failed),
                total: clamp(s.total),
            })
            .collect())
    }

    async fn notifications(&self, user_id: i64, is_admin: bool) -> Result<Vec<Notification>> {
        Ok(self
            .db
            .list_notifications_for(user_id, is_admin)
            .await?
            .into_iter()
            .map(|n| Notification {
                id: n.id.as_id(),
                content: n.content,
                read: n.read,
                created_at: n.created_at,
            })
            .collect())
    }

    async fn mark_notifications_read(
        &self,
        user_id: i64,
        is_admin: bool,
        id: Option<i64>,
    ) -> Result<()> {
        self.db
            .mark_notifications_read(user_id, is_admin, id)
            .await
            .map_err(CoreError::not_found_as("Notification not found"))
    }
}
