//! Background jobs stored in SQLite (`job_runs`).
//!
//! A job is a row whose `command` is a serialized [`BackgroundJobEvent`] (upstream's JSON, so
//! `triggerJobRun` takes the same strings). Cron and user actions only enqueue; one worker
//! takes pending rows in order, sets `started_at`, runs the job with a log file at
//! `$TABBY_ROOT/ee/jobs/<id>/stdout.log`, and records the exit code. A failed job notifies the
//! admins and the worker goes on. At start-up, runs that were running when the server stopped
//! are marked failed and their commands enqueued again.

use std::{
    io::Write,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use anyhow::{Context as _, bail};
use chrono::Utc;
use serde::{Deserialize, Serialize};
use tabby_common::git_url::{redact_url, redact_urls_in};
use tabby_db::{DbConn, JobRunDAO, Pagination};
use tabby_index::{
    CodeIndexer, EmbeddingSetup, IndexProgress, RepositorySummary, RepositoryToIndex,
    doc::{DocFields, DocIndexer, StructuredDoc, recent_commits},
};
use tokio::sync::Notify;
use tracing::{info, warn};

use crate::{
    directory::Directory,
    job_progress::{LiveRuns, RunProgress},
};

/// Pending runs are looked for at least this often (a trigger wakes the worker at once).
const POLL_INTERVAL: Duration = Duration::from_secs(5);
/// Finished runs older than this are deleted by the hourly job.
pub const JOB_RUN_RETENTION_DAYS: u32 = 90;
/// Commits indexed per repository (newest first).
pub const COMMITS_PER_REPOSITORY: usize = 1000;
/// Password reset codes older than this are removed by the hourly job.
pub const PASSWORD_RESET_LIFETIME_HOURS: u32 = 24;
/// Ingested documents indexed per ingestion run.
const INGESTION_BATCH: usize = 500;

/// A repository to index, as upstream serializes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeRepositoryJob {
    pub git_url: String,
    pub source_id: String,
    #[serde(default)]
    pub git_refs: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebCrawlerJob {
    pub source_id: String,
    pub url: String,
    #[serde(default)]
    pub url_prefix: Option<String>,
}

/// A job's command (upstream's externally tagged enum).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BackgroundJobEvent {
    SchedulerGitRepository(CodeRepositoryJob),
    WebCrawler(WebCrawlerJob),
    IndexGarbageCollection,
    SyncIngestionIndex,
    Hourly,
    Daily,
}

impl BackgroundJobEvent {
    pub fn name(&self) -> &'static str {
        match self {
            BackgroundJobEvent::SchedulerGitRepository(_) => "scheduler_git",
            BackgroundJobEvent::WebCrawler(_) => "web_crawler",
            BackgroundJobEvent::IndexGarbageCollection => "index_garbage_collection",
            BackgroundJobEvent::SyncIngestionIndex => "ingestion_index_sync",
            BackgroundJobEvent::Hourly => "hourly",
            BackgroundJobEvent::Daily => "daily",
        }
    }

    /// The command stored in `job_runs` and shown to admins: upstream's JSON with every URL's
    /// credentials redacted. The worker never runs a URL from a command: it looks the source
    /// up by its id when the run starts.
    pub fn to_command(&self) -> String {
        let mut event = self.clone();
        match &mut event {
            BackgroundJobEvent::SchedulerGitRepository(job) => {
                job.git_url = redact_url(&job.git_url)
            }
            BackgroundJobEvent::WebCrawler(job) => job.url = redact_url(&job.url),
            _ => {}
        }
        serde_json::to_string(&event).expect("job events serialize")
    }

    pub fn from_command(command: &str) -> anyhow::Result<Self> {
        serde_json::from_str(command)
            .with_context(|| format!("not a job command: {}", redact_urls_in(command)))
    }
}

/// What `triggerJobRun` accepts: a job that carries no data, or a reference to an existing
/// row by its source id. Any other field of the caller's JSON (a `git_url`, a `url`, refs) is
/// skipped unread; the job is built from the row.
#[derive(Debug, Deserialize)]
pub enum JobRequest {
    SchedulerGitRepository(SourceRef),
    WebCrawler(SourceRef),
    IndexGarbageCollection,
    SyncIngestionIndex,
    Hourly,
    Daily,
}

#[derive(Debug, Deserialize)]
pub struct SourceRef {
    pub source_id: String,
}

impl JobRequest {
    pub fn parse(command: &str) -> Option<JobRequest> {
        serde_json::from_str(command).ok()
    }
}

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

    fn create(jobs_dir: &Path, run_id: i64) -> anyhow::Result<Self> {
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

    fn with_progress(self, progress: Arc<RunProgress>) -> Self {
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

/// What jobs need from the server: where things are and the embedding model.
pub struct JobDeps {
    pub index_dir: PathBuf,
    pub repositories_dir: PathBuf,
    pub embedding: Option<EmbeddingSetup>,
    pub languages: tabby_common::languages::LanguageTable,
}

/// Crawls a site into pages (plugged in by the server).
#[async_trait::async_trait]
pub trait WebCrawler: Send + Sync {
    async fn crawl(
        &self,
        url: &str,
        url_prefix: Option<&str>,
        log: &JobLog,
    ) -> anyhow::Result<Vec<CrawledPage>>;

    /// Why `url` may never be crawled (it resolves to an internal address that is not
    /// allow-listed), checked when a user adds it; `None` when it may be tried.
    async fn refusal(&self, _url: &str) -> Option<String> {
        None
    }
}

/// The crawler of `tabby-index` over HTTP, with its default limits, reaching only public
/// addresses and those `[security] fetch_allowed_hosts` allows.
#[derive(Default)]
pub struct HttpCrawler {
    pub limits: tabby_index::crawl::CrawlLimits,
    pub guard: tabby_index::crawl::FetchGuard,
}

impl HttpCrawler {
    pub fn new(fetch_allowed_hosts: &[String]) -> Self {
        Self {
            limits: Default::default(),
            guard: tabby_index::crawl::FetchGuard::new(fetch_allowed_hosts),
        }
    }
}

#[async_trait::async_trait]
impl WebCrawler for HttpCrawler {
    async fn crawl(
        &self,
        url: &str,
        url_prefix: Option<&str>,
        log: &JobLog,
    ) -> anyhow::Result<Vec<CrawledPage>> {
        let pages = tabby_index::crawl::crawl(url, url_prefix, self.limits, &self.guard, &|line| {
            log.info(line)
        })
        .await?;
        Ok(pages
            .into_iter()
            .map(|p| CrawledPage {
                url: p.url,
                title: p.title,
                text: p.text,
            })
            .collect())
    }

    async fn refusal(&self, url: &str) -> Option<String> {
        self.guard.internal_refusal(url).await
    }
}

#[derive(Clone, Debug)]
pub struct CrawledPage {
    pub url: String,
    pub title: String,
    pub text: String,
}

pub struct JobService {
    db: DbConn,
    directory: Arc<Directory>,
    jobs_dir: PathBuf,
    deps: OnceLock<Arc<JobDeps>>,
    crawler: OnceLock<Arc<dyn WebCrawler>>,
    wake: Notify,
    live: LiveRuns,
}

impl JobService {
    pub fn new(db: DbConn, directory: Arc<Directory>, jobs_dir: PathBuf) -> Self {
        Self {
            db,
            directory,
            jobs_dir,
            deps: OnceLock::new(),
            crawler: OnceLock::new(),
            wake: Notify::new(),
            live: LiveRuns::default(),
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

    fn is_config_source(&self, source_id: &str) -> bool {
        self.directory
            .config_repositories()
            .iter()
            .any(|r| r.source_id == source_id)
    }

    /// Every repository (config and GraphQL) as index jobs.
    async fn repository_jobs(&self) -> anyhow::Result<Vec<CodeRepositoryJob>> {
        let snapshot = self.directory.snapshot().await?;
        let mut jobs: Vec<CodeRepositoryJob> = self
            .directory
            .config_repositories()
            .iter()
            .map(|r| CodeRepositoryJob {
                git_url: r.git_url.clone(),
                source_id: r.source_id.clone(),
                git_refs: r.refs.clone(),
            })
            .collect();
        jobs.extend(snapshot.db_repositories.iter().map(|r| CodeRepositoryJob {
            git_url: r.git_url.clone(),
            source_id: crate::directory::git_source_id(r.id),
            git_refs: r.refs.clone(),
        }));
        Ok(jobs)
    }

    /// The repository with `source_id` as it is now (URL with its credentials, current refs).
    async fn repository_job(&self, source_id: &str) -> anyhow::Result<Option<CodeRepositoryJob>> {
        Ok(self
            .repository_jobs()
            .await?
            .into_iter()
            .find(|r| r.source_id == source_id))
    }

    /// The crawl of the web document with `source_id`, from its row.
    async fn web_crawler_job(&self, source_id: &str) -> anyhow::Result<Option<WebCrawlerJob>> {
        let Some(id) = source_id
            .strip_prefix("custom_web_document:")
            .and_then(tabby_schema::decode_id)
        else {
            return Ok(None);
        };
        Ok(self
            .db
            .get_web_document(id)
            .await?
            .map(|dao| WebCrawlerJob {
                source_id: web_document_source_id(dao.id),
                url: dao.url,
                url_prefix: None,
            }))
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
            JobRequest::IndexGarbageCollection => BackgroundJobEvent::IndexGarbageCollection,
            JobRequest::SyncIngestionIndex => BackgroundJobEvent::SyncIngestionIndex,
            JobRequest::Hourly => BackgroundJobEvent::Hourly,
            JobRequest::Daily => BackgroundJobEvent::Daily,
        })
    }

    /// Enqueues indexing of every repository.
    pub async fn trigger_all_repositories(&self) -> anyhow::Result<()> {
        for job in self.repository_jobs().await? {
            self.trigger(&BackgroundJobEvent::SchedulerGitRepository(job))
                .await?;
        }
        Ok(())
    }

    /// Starts the worker and the schedules. At start: stale runs are failed and re-enqueued,
    /// then every repository is enqueued for indexing.
    pub fn start(self: &Arc<Self>) {
        let service = self.clone();
        tokio::spawn(async move {
            match service.db.finalize_stale_job_runs().await {
                Ok(stale) => {
                    for run in stale {
                        warn!(
                            "job run {} ({}) was interrupted by a restart: marked failed, enqueued again",
                            run.id, run.job
                        );
                        // Commands of older versions may carry credentials: store the
                        // redacted form.
                        let command = BackgroundJobEvent::from_command(&run.command)
                            .map(|e| e.to_command())
                            .unwrap_or(run.command);
                        if let Err(e) = service.db.create_job_run(&run.job, &command).await {
                            warn!("cannot re-enqueue job run {}: {e}", run.id);
                        }
                    }
                }
                Err(e) => warn!("cannot finalize stale job runs: {e}"),
            }
            if let Err(e) = service.trigger_all_repositories().await {
                warn!("cannot enqueue repository indexing: {e:#}");
            }
            service.worker().await;
        });
        self.clone().spawn_schedules();
    }

    fn spawn_schedules(self: Arc<Self>) {
        let hourly = self.clone();
        spawn_cron(HOURLY, move || {
            let service = hourly.clone();
            async move {
                if let Err(e) = service.trigger(&BackgroundJobEvent::Hourly).await {
                    warn!("cannot enqueue the hourly job: {e:#}");
                }
            }
        });
        let daily = self.clone();
        spawn_cron(DAILY, move || {
            let service = daily.clone();
            async move {
                if let Err(e) = service.trigger(&BackgroundJobEvent::Daily).await {
                    warn!("cannot enqueue the daily job: {e:#}");
                }
            }
        });
        // Index ingested documents when some are pending or expired.
        spawn_cron(INGESTION_CHECK, move || {
            let service = self.clone();
            async move {
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

    async fn worker(&self) {
        loop {
            let run = match self.db.claim_next_job_run().await {
                Ok(Some(run)) => run,
                Ok(None) => {
                    let _ = tokio::time::timeout(POLL_INTERVAL, self.wake.notified()).await;
                    continue;
                }
                Err(e) => {
                    warn!("cannot read pending job runs: {e}");
                    tokio::time::sleep(POLL_INTERVAL).await;
                    continue;
                }
            };
            let exit_code = self.execute(&run).await;
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
            BackgroundJobEvent::WebCrawler(job) => {
                let job = self
                    .web_crawler_job(&job.source_id)
                    .await?
                    .with_context(|| format!("web document {} no longer exists", job.source_id))?;
                self.crawl(&job, log).await
            }
            BackgroundJobEvent::IndexGarbageCollection => self.garbage_collect(log).await,
            BackgroundJobEvent::SyncIngestionIndex => self.sync_ingestion(log).await,
            BackgroundJobEvent::Hourly => self.hourly(log).await,
            BackgroundJobEvent::Daily => self.daily(log).await,
        }
    }

    async fn index_repository(&self, job: &CodeRepositoryJob, log: &JobLog) -> anyhow::Result<()> {
        let deps = self.deps()?;
        // The allow-list may have shrunk since the repository was added.
        if !self.is_config_source(&job.source_id) {
            crate::service::repository::check_local_repository(
                self.directory.security(),
                &job.git_url,
            )
            .map_err(anyhow::Error::msg)?;
        }
        let repo = RepositoryToIndex {
            source_id: job.source_id.clone(),
            git_url: job.git_url.clone(),
            refs: job.git_refs.clone(),
        };
        {
            let mut indexer = CodeIndexer::open(
                &deps.index_dir,
                deps.embedding.clone(),
                deps.languages.clone(),
            )
            .await?;
            indexer
                .index_repository(&repo, &deps.repositories_dir, log)
                .await?;
            tokio::task::spawn_blocking(move || indexer.finish()).await??;
        }
        // Commits go into the structured-doc corpus under the repository's source id.
        match recent_commits(
            &job.git_url,
            &deps.repositories_dir,
            &job.git_refs,
            COMMITS_PER_REPOSITORY,
        ) {
            Ok(commits) => {
                let mut docs = DocIndexer::open(&deps.index_dir, deps.embedding.clone())?;
                let known = docs.doc_ids(&job.source_id)?;
                let mut added = 0;
                for commit in commits {
                    let id = format!("{}:commit:{}", job.source_id, commit.sha);
                    if known.contains(&id) {
                        continue;
                    }
                    docs.add(&StructuredDoc {
                        source_id: job.source_id.clone(),
                        id,
                        fields: DocFields::Commit {
                            sha: commit.sha,
                            message: commit.message,
                            author_email: commit.author_email,
                            author_at: commit.author_at,
                        },
                    })
                    .await?;
                    added += 1;
                }
                docs.commit()?;
                log.info(format!("indexed {added} new commits"));
            }
            // A plain directory has no commits.
            Err(e) => log.info(format!("no commits indexed: {e:#}")),
        }
        Ok(())
    }

    async fn crawl(&self, job: &WebCrawlerJob, log: &JobLog) -> anyhow::Result<()> {
        let deps = self.deps()?;
        let Some(crawler) = self.crawler.get().cloned() else {
            bail!("no web crawler is set up");
        };
        let pages = crawler
            .crawl(&job.url, job.url_prefix.as_deref(), log)
            .await?;
        if pages.is_empty() {
            bail!("no page could be fetched from {}", job.url);
        }
        let mut docs = DocIndexer::open(&deps.index_dir, deps.embedding.clone())?;
        docs.delete_source(&job.source_id)?;
        for page in &pages {
            docs.add(&StructuredDoc {
                source_id: job.source_id.clone(),
                id: format!("{}:{}", job.source_id, page.url),
                fields: DocFields::Web {
                    title: page.title.clone(),
                    link: page.url.clone(),
                    body: page.text.clone(),
                },
            })
            .await?;
        }
        docs.commit()?;
        log.info(format!("indexed {} pages of {}", pages.len(), job.url));
        Ok(())
    }

    /// Removes code and docs of sources that no longer exist: repositories dropped from the
    /// config or deleted, deleted web documents, deleted ingested documents.
    async fn garbage_collect(&self, log: &JobLog) -> anyhow::Result<()> {
        let deps = self.deps()?;
        let jobs = self.repository_jobs().await?;
        let urls: Vec<String> = jobs.iter().map(|r| r.git_url.clone()).collect();
        let repositories_dir = deps.repositories_dir.clone();
        let removed = tokio::task::spawn_blocking(move || {
            tabby_index::remove_stale_mirrors(&repositories_dir, &urls)
        })
        .await?;
        if !removed.is_empty() {
            log.info(format!(
                "removed {} mirrors of repositories that are gone (or named by an older version)",
                removed.len()
            ));
        }
        let repositories: Vec<String> = jobs.into_iter().map(|r| r.source_id).collect();
        {
            let mut indexer = CodeIndexer::open(
                &deps.index_dir,
                deps.embedding.clone(),
                deps.languages.clone(),
            )
            .await?;
            for removed in indexer.remove_other_sources(&repositories)? {
                log.info(format!("removed code of {removed}: no longer a repository"));
            }
        }
        let web: Vec<String> = self
            .db
            .list_web_documents(&[], None, Pagination::all())
            .await?
            .iter()
            .map(|d| web_document_source_id(d.id))
            .collect();
        let mut docs = DocIndexer::open(&deps.index_dir, deps.embedding.clone())?;
        let mut removed = 0;
        for source in docs.sources()? {
            if let Some(name) = source.strip_prefix("ingested:") {
                let keep: std::collections::HashSet<String> = self
                    .db
                    .list_ingested_doc_ids(name)
                    .await?
                    .iter()
                    .map(|id| ingested_doc_id(name, id))
                    .collect();
                for id in docs.doc_ids(&source)? {
                    if !keep.contains(&id) {
                        docs.delete(&id);
                        removed += 1;
                    }
                }
            } else if !repositories.contains(&source) && !web.contains(&source) {
                docs.delete_source(&source)?;
                log.info(format!(
                    "removed the documents of {source}: the source is gone"
                ));
            }
        }
        docs.commit()?;
        if removed > 0 {
            log.info(format!("removed {removed} deleted ingested documents"));
        }
        Ok(())
    }

    async fn sync_ingestion(&self, log: &JobLog) -> anyhow::Result<()> {
        let deps = self.deps()?;
        let mut docs = DocIndexer::open(&deps.index_dir, deps.embedding.clone())?;
        let expired = self
            .db
            .delete_expired_ingested_documents(Utc::now().timestamp())
            .await?;
        for (source, doc_id) in &expired {
            docs.delete(&ingested_doc_id(source, doc_id));
        }
        if !expired.is_empty() {
            log.info(format!("removed {} expired documents", expired.len()));
        }
        let pending = self
            .db
            .list_pending_ingested_documents(INGESTION_BATCH)
            .await?;
        let mut indexed = 0;
        for doc in &pending {
            let result = docs
                .add(&StructuredDoc {
                    source_id: ingested_source_id(&doc.source),
                    id: ingested_doc_id(&doc.source, &doc.doc_id),
                    fields: DocFields::Ingested {
                        doc_id: doc.doc_id.clone(),
                        title: doc.title.clone(),
                        link: doc.link.clone(),
                        body: doc.body.clone(),
                    },
                })
                .await;
            let status = match result {
                Ok(_) => {
                    indexed += 1;
                    "indexed"
                }
                Err(e) => {
                    log.warn(format!("{}/{}: {e:#}", doc.source, doc.doc_id));
                    "failed"
                }
            };
            // Commit before marking, so "indexed" is never ahead of the index.
            docs.commit()?;
            self.db.set_ingested_document_status(doc, status).await?;
        }
        docs.commit()?;
        log.info(format!(
            "indexed {indexed} of {} pending documents",
            pending.len()
        ));
        Ok(())
    }

    async fn hourly(&self, log: &JobLog) -> anyhow::Result<()> {
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
        log.info(format!(
            "db maintenance: {threads} idle threads, {tokens} expired refresh tokens, {resets} stale password resets, {runs} old job runs removed"
        ));
        self.trigger_all_repositories().await?;
        self.trigger(&BackgroundJobEvent::IndexGarbageCollection)
            .await?;
        Ok(())
    }

    async fn daily(&self, log: &JobLog) -> anyhow::Result<()> {
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

/// Index source id of a client's ingestion source.
pub fn ingested_source_id(source: &str) -> String {
    format!("ingested:{source}")
}

/// Index document id of an ingested document (the client's id, URL-encoded).
pub fn ingested_doc_id(source: &str, doc_id: &str) -> String {
    let encoded: String = doc_id
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect();
    format!("ingested:{source}:{encoded}")
}

/// Source id of a web document.
pub fn web_document_source_id(id: i64) -> String {
    format!("custom_web_document:{}", tabby_schema::encode_id(id))
}

/// Upstream's schedules (6-field cron, UTC). Cron only enqueues; the worker runs.
pub const HOURLY: &str = "0 0 * * * *";
pub const DAILY: &str = "0 0 0 * * *";
pub const INGESTION_CHECK: &str = "*/10 * * * * *";

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
    fn commands_are_upstreams_json() {
        let git = BackgroundJobEvent::SchedulerGitRepository(CodeRepositoryJob {
            git_url: "https://example.com/r".into(),
            source_id: "git:abc".into(),
            git_refs: vec!["main".into()],
        });
        assert_eq!(
            git.to_command(),
            r#"{"SchedulerGitRepository":{"git_url":"https://example.com/r","source_id":"git:abc","git_refs":["main"]}}"#
        );
        assert_eq!(BackgroundJobEvent::Hourly.to_command(), r#""Hourly""#);
        assert_eq!(
            BackgroundJobEvent::from_command(
                r#"{"WebCrawler":{"source_id":"s","url":"http://x","url_prefix":null}}"#
            )
            .unwrap()
            .name(),
            "web_crawler"
        );
        assert!(BackgroundJobEvent::from_command("\"SyncPagesIndex\"").is_err());
        assert_eq!(ingested_doc_id("wiki", "a b/c"), "ingested:wiki:a%20b%2Fc");
    }

    #[test]
    fn commands_carry_no_credentials() {
        let git = BackgroundJobEvent::SchedulerGitRepository(CodeRepositoryJob {
            git_url: "https://oauth2:glpat-SECRET@gitlab.example/g/r".into(),
            source_id: "git:abc".into(),
            git_refs: vec![],
        });
        let command = git.to_command();
        assert!(!command.contains("SECRET"), "{command}");
        assert!(
            command.contains(r#""git_url":"https://gitlab.example/g/r""#),
            "{command}"
        );
        let web = BackgroundJobEvent::WebCrawler(WebCrawlerJob {
            source_id: "custom_web_document:x".into(),
            url: "https://docs.example/?private_token=SECRET".into(),
            url_prefix: None,
        });
        assert!(!web.to_command().contains("SECRET"), "{}", web.to_command());
        let err = BackgroundJobEvent::from_command(r#"{"X":"https://u:SECRET@h/"}"#)
            .unwrap_err()
            .to_string();
        assert!(!err.contains("SECRET"), "{err}");
    }

    /// A caller's URL in a `triggerJobRun` command is never read: only the source id.
    #[test]
    fn job_requests_reference_rows() {
        let attack = r#"{"SchedulerGitRepository":{"git_url":"--upload-pack=touch /tmp/pwned","source_id":"git:abc","git_refs":["--x"]}}"#;
        match JobRequest::parse(attack) {
            Some(JobRequest::SchedulerGitRepository(r)) => assert_eq!(r.source_id, "git:abc"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            JobRequest::parse(
                r#"{"WebCrawler":{"source_id":"custom_web_document:x","url":"http://169.254.169.254/"}}"#
            ),
            Some(JobRequest::WebCrawler(_))
        ));
        assert!(matches!(
            JobRequest::parse(r#""Daily""#),
            Some(JobRequest::Daily)
        ));
        for bad in [
            r#"{"SchedulerGitRepository":{}}"#,
            r#""SyncPagesIndex""#,
            "Daily",
            "",
        ] {
            assert!(JobRequest::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn schedules_parse() {
        for expression in [HOURLY, DAILY, INGESTION_CHECK] {
            assert!(crate::cron::Cron::parse(expression).is_ok(), "{expression}");
        }
    }
}

// ---- the GraphQL side ----

mod graphql {
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

    use super::{
        BackgroundJobEvent, JobRequest, JobService, WebCrawlerJob, web_document_source_id,
    };

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
            let request = JobRequest::parse(command).ok_or_else(|| {
                CoreError::invalid(
                    "command",
                    "Not a job command this server runs: \"Hourly\", \"Daily\", \
                     \"IndexGarbageCollection\", \"SyncIngestionIndex\", or an existing \
                     source by id: {\"SchedulerGitRepository\": {\"source_id\": \"git:…\"}}, \
                     {\"WebCrawler\": {\"source_id\": \"custom_web_document:…\"}}",
                )
            })?;
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
}

pub use graphql::job_run;
