//! Background jobs stored in SQLite (`job_runs`).
//!
//! A job is a row whose `command` is a serialized [`BackgroundJobEvent`] (upstream's JSON, so
//! `triggerJobRun` takes the same strings). Cron and user actions only enqueue; one worker
//! takes pending rows in order, sets `started_at`, runs the job with a log file at
//! `$TABBY_ROOT/ee/jobs/<id>/stdout.log`, and records the exit code. A failed job notifies the
//! admins and the worker goes on. Of the processes that share a database, the one holding
//! the `worker` lease (renewed every 5 s, run out after 15 s) is the worker and enqueues the
//! scheduled jobs; the others stand by. A process that becomes the worker first marks the runs
//! left running (by itself before a restart, or by the worker it takes over from) failed and
//! enqueues their commands again.
//!
//! One file per job (`index_repository`, `index_provided`, `web_crawler`, `garbage_collection`, `ingestion`,
//! `maintenance` for hourly and daily); `event` is the command, `sources` reads the rows a job
//! runs on, `schedule` the cron side, `log` and `progress` what a run reports, `graphql` the
//! GraphQL service.

mod event;
mod garbage_collection;
mod graphql;
mod index_provided;
mod index_repository;
mod ingestion;
mod log;
mod maintenance;
pub(crate) mod progress;
mod schedule;
mod sources;
mod web_crawler;

use std::{
    path::{Path, PathBuf},
    sync::{Arc, OnceLock},
    time::Duration,
};

use anyhow::Context as _;
use tabby_common::git_url::redact_urls_in;
use tabby_db::{DbConn, JobRunDAO};
use tabby_index::EmbeddingSetup;
use tokio::sync::Notify;
use tracing::{info, warn};

use self::progress::LiveRuns;
pub use self::{
    event::{BackgroundJobEvent, CodeRepositoryJob, JobRequest, SourceRef, WebCrawlerJob},
    graphql::job_run,
    index_repository::COMMITS_PER_REPOSITORY,
    ingestion::{ingested_doc_id, ingested_source_id},
    log::JobLog,
    maintenance::{JOB_RUN_RETENTION_DAYS, PASSWORD_RESET_LIFETIME_HOURS},
    schedule::{DAILY, HOURLY, INGESTION_CHECK},
    sources::web_document_source_id,
    web_crawler::{CrawledPage, HttpCrawler, WebCrawler},
};
use crate::directory::Directory;

/// Pending runs are looked for at least this often (a trigger wakes the worker at once).
const POLL_INTERVAL: Duration = Duration::from_secs(5);

/// The lease that makes one of the processes sharing a database the worker.
const WORKER_LEASE: &str = "worker";
/// How long the worker lease lasts without a renewal; the worker renews it at a third of that
/// (also while a job runs), and a standby process tries to take it as often.
const WORKER_LEASE_SECS: u32 = 15;
const WORKER_LEASE_RENEW: Duration = Duration::from_secs(5);

/// What jobs need from the server: where things are and the embedding model.
pub struct JobDeps {
    pub index_dir: PathBuf,
    pub repositories_dir: PathBuf,
    pub embedding: Option<EmbeddingSetup>,
    pub languages: tabby_common::languages::LanguageTable,
}

pub struct JobService {
    db: DbConn,
    directory: Arc<Directory>,
    jobs_dir: PathBuf,
    deps: OnceLock<Arc<JobDeps>>,
    crawler: OnceLock<Arc<dyn WebCrawler>>,
    mailer: OnceLock<Arc<crate::mail::Mailer>>,
    integrations: OnceLock<Arc<crate::integration::IntegrationSync>>,
    wake: Notify,
    live: LiveRuns,
    /// This process among those that share the database, as the holder of leases.
    instance: String,
}

impl JobService {
    pub fn new(db: DbConn, directory: Arc<Directory>, jobs_dir: PathBuf) -> Self {
        Self {
            db,
            directory,
            jobs_dir,
            deps: OnceLock::new(),
            crawler: OnceLock::new(),
            mailer: OnceLock::new(),
            integrations: OnceLock::new(),
            wake: Notify::new(),
            live: LiveRuns::default(),
            instance: format!("{}-{}", std::process::id(), uuid::Uuid::new_v4().simple()),
        }
    }

    pub fn jobs_dir(&self) -> &Path {
        &self.jobs_dir
    }

    pub fn set_deps(&self, deps: JobDeps) {
        let _ = self.deps.set(Arc::new(deps));
    }

    pub fn set_crawler(&self, crawler: Arc<dyn WebCrawler>) {
        let _ = self.crawler.set(crawler);
    }

    /// What `SyncThirdPartyRepositories` runs with.
    pub fn set_integrations(&self, sync: Arc<crate::integration::IntegrationSync>) {
        let _ = self.integrations.set(sync);
    }

    /// Failed jobs are mailed to the admins when mail is set up.
    pub fn set_mailer(&self, mailer: Arc<crate::mail::Mailer>) {
        let _ = self.mailer.set(mailer);
    }

    /// Enqueues `event` unless the same command is still pending; returns the run id and
    /// whether it is new.
    pub async fn trigger(&self, event: &BackgroundJobEvent) -> anyhow::Result<(i64, bool)> {
        let (id, created) = self
            .db
            .create_job_run(event.name(), &event.to_command())
            .await?;
        self.wake.notify_one();
        Ok((id, created))
    }

    /// The event a `triggerJobRun` request stands for, built from the rows it names.
    async fn requested_event(
        &self,
        request: JobRequest,
    ) -> tabby_schema::Result<BackgroundJobEvent> {
        let unknown = |what: &str, source_id: &str| {
            let shown: String = source_id.chars().take(100).collect();
            tabby_schema::CoreError::invalid(
                "command",
                format!("No {what} has source id {shown:?}"),
            )
        };
        Ok(match request {
            JobRequest::SchedulerGitRepository(r) => BackgroundJobEvent::SchedulerGitRepository(
                self.repository_job(&r.source_id)
                    .await?
                    .ok_or_else(|| unknown("repository", &r.source_id))?,
            ),
            JobRequest::WebCrawler(r) => BackgroundJobEvent::WebCrawler(
                self.web_crawler_job(&r.source_id)
                    .await?
                    .ok_or_else(|| unknown("web document", &r.source_id))?,
            ),
            JobRequest::SchedulerGithubGitlabRepository(id) => {
                let shown: String = id.chars().take(100).collect();
                let active = match tabby_schema::decode_id(&id) {
                    Some(rowid) => self
                        .db
                        .get_provided_repository(rowid)
                        .await?
                        .is_some_and(|(repo, _)| repo.active),
                    None => false,
                };
                if !active {
                    return Err(tabby_schema::CoreError::invalid(
                        "command",
                        format!("No active provided repository has id {shown:?}"),
                    ));
                }
                BackgroundJobEvent::SchedulerGithubGitlabRepository(id)
            }
            JobRequest::SyncThirdPartyRepositories(id) => {
                let shown: String = id.chars().take(100).collect();
                let rowid = tabby_schema::decode_id(&id).ok_or_else(|| {
                    tabby_schema::CoreError::invalid(
                        "command",
                        format!("No integration has id {shown:?}"),
                    )
                })?;
                if self.db.get_integration(rowid).await?.is_none() {
                    return Err(tabby_schema::CoreError::invalid(
                        "command",
                        format!("No integration has id {shown:?}"),
                    ));
                }
                BackgroundJobEvent::SyncThirdPartyRepositories(id)
            }
            JobRequest::IndexGarbageCollection => BackgroundJobEvent::IndexGarbageCollection,
            JobRequest::SyncIngestionIndex => BackgroundJobEvent::SyncIngestionIndex,
            JobRequest::Hourly => BackgroundJobEvent::Hourly,
            JobRequest::Daily => BackgroundJobEvent::Daily,
        })
    }

    /// Enqueues indexing of every repository (of the provided ones, this hour's share).
    pub async fn trigger_all_repositories(&self) -> anyhow::Result<()> {
        for job in self.repository_jobs().await? {
            self.trigger(&BackgroundJobEvent::SchedulerGitRepository(job))
                .await?;
        }
        let snapshot = self.directory.snapshot().await?;
        let ids: Vec<i64> = snapshot
            .provided_repositories
            .iter()
            .map(|p| p.repo.id)
            .collect();
        let hour = chrono::Utc::now().timestamp() / 3600;
        for id in index_provided::hourly_share(&ids, hour) {
            self.trigger(&crate::integration::index_event(id)).await?;
        }
        Ok(())
    }

    /// Starts the worker and the schedules: every repository is enqueued for indexing, then
    /// the process runs jobs while it holds the worker lease, and stands by while another
    /// process does.
    pub fn start(self: &Arc<Self>) {
        let service = self.clone();
        tokio::spawn(async move {
            if let Err(e) = service.trigger_all_repositories().await {
                warn!("cannot enqueue repository indexing: {e:#}");
            }
            service.worker().await;
        });
        self.clone().spawn_schedules();
    }

    /// Takes or renews the worker lease; whether this process is the worker now.
    async fn hold_worker_lease(&self) -> bool {
        match self
            .db
            .take_lease(WORKER_LEASE, &self.instance, WORKER_LEASE_SECS)
            .await
        {
            Ok(held) => held,
            Err(e) => {
                warn!("cannot take the worker lease: {e}");
                false
            }
        }
    }

    /// Whether this process is the one that enqueues the scheduled jobs (the worker).
    pub(super) async fn schedules_here(&self) -> bool {
        self.hold_worker_lease().await
    }

    /// Fails the runs left running when this process became the worker (no worker runs them
    /// any more) and enqueues their commands again.
    async fn recover_stale_runs(&self) {
        match self.db.finalize_stale_job_runs().await {
            Ok(stale) => {
                for run in stale {
                    warn!(
                        "job run {} ({}) was interrupted by a restart or the loss of its worker: marked failed, enqueued again",
                        run.id, run.job
                    );
                    // Commands of older versions may carry credentials: store the redacted
                    // form.
                    let command = BackgroundJobEvent::from_command(&run.command)
                        .map(|e| e.to_command())
                        .unwrap_or(run.command);
                    if let Err(e) = self.db.create_job_run(&run.job, &command).await {
                        warn!("cannot re-enqueue job run {}: {e}", run.id);
                    }
                }
            }
            Err(e) => warn!("cannot finalize stale job runs: {e}"),
        }
    }

    async fn worker(&self) {
        let mut working = false;
        loop {
            if !self.hold_worker_lease().await {
                if working {
                    warn!("the worker lease went to another process: standing by");
                }
                working = false;
                tokio::time::sleep(WORKER_LEASE_RENEW).await;
                continue;
            }
            if !working {
                info!("this process is the job worker");
                working = true;
                self.recover_stale_runs().await;
            }
            let run = match self.db.claim_next_job_run().await {
                Ok(Some(run)) => run,
                Ok(None) => {
                    let wait = POLL_INTERVAL.min(WORKER_LEASE_RENEW);
                    let _ = tokio::time::timeout(wait, self.wake.notified()).await;
                    continue;
                }
                Err(e) => {
                    warn!("cannot read pending job runs: {e}");
                    tokio::time::sleep(POLL_INTERVAL.min(WORKER_LEASE_RENEW)).await;
                    continue;
                }
            };
            // The lease is renewed while the job runs (a long indexing run keeps it).
            let exit_code = {
                let running = self.execute(&run);
                tokio::pin!(running);
                loop {
                    tokio::select! {
                        code = &mut running => break code,
                        _ = tokio::time::sleep(WORKER_LEASE_RENEW) => {
                            if !self.hold_worker_lease().await {
                                warn!("job run {}: the worker lease could not be renewed", run.id);
                            }
                        }
                    }
                }
            };
            if let Err(e) = self.db.finish_job_run(run.id, exit_code).await {
                warn!("cannot record the end of job run {}: {e}", run.id);
            }
        }
    }

    /// Runs one job; its exit code: 0 success, 1 failure, -1 unreadable command.
    async fn execute(&self, run: &JobRunDAO) -> i64 {
        let live = self.live.begin(run.id);
        let log = match JobLog::create(&self.jobs_dir, run.id) {
            Ok(log) => log.with_progress(live.progress.clone()),
            Err(e) => {
                warn!("job run {}: {e:#}", run.id);
                return 1;
            }
        };
        let event = match BackgroundJobEvent::from_command(&run.command) {
            Ok(event) => event,
            Err(e) => {
                log.warn(format!("{e:#}"));
                return -1;
            }
        };
        info!("job run {} ({}) started", run.id, run.job);
        log.info(format!("running {}", run.command));
        // A panicking job must not take the worker down.
        let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
            self.run_job(&event, &log),
        ))
        .await;
        let error = match outcome {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(format!("{e:#}")),
            Err(_) => Some("the job panicked".to_string()),
        };
        match error {
            None => {
                log.info("finished");
                info!("job run {} ({}) finished", run.id, run.job);
                0
            }
            Some(message) => {
                let message = redact_urls_in(&message);
                log.warn(format!("failed: {message}"));
                warn!("job run {} ({}) failed: {message}", run.id, run.job);
                let content = format!(
                    "Job **{}** (run {}) failed: {message}\n\nSee `/background-jobs/{}/logs`.",
                    run.job,
                    tabby_schema::encode_id(run.id),
                    tabby_schema::encode_id(run.id)
                );
                if let Err(e) = self.db.create_notification("admin", &content).await {
                    warn!("cannot notify admins: {e}");
                }
                if let Some(mailer) = self.mailer.get() {
                    let run_id = tabby_schema::encode_id(run.id);
                    let external_url = mailer
                        .external_url()
                        .await
                        .unwrap_or_else(|_| "http://localhost:8080".into());
                    mailer
                        .notify_admins(crate::mail::templates::JOB_FAILED, || {
                            crate::mail::templates::job_failed(
                                &external_url,
                                &run.job,
                                &run_id,
                                &message,
                            )
                        })
                        .await;
                }
                1
            }
        }
    }

    fn deps(&self) -> anyhow::Result<Arc<JobDeps>> {
        self.deps
            .get()
            .cloned()
            .context("the indexing setup is not ready yet")
    }

    async fn run_job(&self, event: &BackgroundJobEvent, log: &JobLog) -> anyhow::Result<()> {
        match event {
            BackgroundJobEvent::SchedulerGitRepository(job) => {
                let job = self
                    .repository_job(&job.source_id)
                    .await?
                    .with_context(|| format!("repository {} no longer exists", job.source_id))?;
                self.index_repository(&job, log).await
            }
            BackgroundJobEvent::SchedulerGithubGitlabRepository(id) => {
                let rowid = tabby_schema::decode_id(id)
                    .with_context(|| format!("{id:?} is not a provided repository id"))?;
                self.index_provided_repository(rowid, log).await
            }
            BackgroundJobEvent::WebCrawler(job) => {
                let job = self
                    .web_crawler_job(&job.source_id)
                    .await?
                    .with_context(|| format!("web document {} no longer exists", job.source_id))?;
                self.crawl(&job, log).await
            }
            BackgroundJobEvent::SyncThirdPartyRepositories(id) => {
                let rowid = tabby_schema::decode_id(id)
                    .with_context(|| format!("{id:?} is not an integration id"))?;
                let sync = self
                    .integrations
                    .get()
                    .context("integrations are not set up in this server")?;
                let counts = sync.sync(rowid).await?;
                log.info(format!(
                    "repositories: {} added, {} updated, {} removed",
                    counts.added, counts.updated, counts.removed
                ));
                // Renamed or moved repositories are indexed again under their new URL;
                // removed ones leave the index.
                self.directory.invalidate();
                if counts.updated > 0 {
                    for p in &self.directory.snapshot().await?.provided_repositories {
                        if p.repo.integration_id == rowid {
                            self.trigger(&crate::integration::index_event(p.repo.id))
                                .await?;
                        }
                    }
                }
                if counts.removed > 0 {
                    self.trigger(&BackgroundJobEvent::IndexGarbageCollection)
                        .await?;
                }
                Ok(())
            }
            BackgroundJobEvent::IndexGarbageCollection => self.garbage_collect(log).await,
            BackgroundJobEvent::SyncIngestionIndex => self.sync_ingestion(log).await,
            BackgroundJobEvent::Hourly => self.hourly(log).await,
            BackgroundJobEvent::Daily => self.daily(log).await,
        }
    }
}
