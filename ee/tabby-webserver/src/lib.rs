//! The enterprise layer's implementations, mounted on the `tabby serve` router:
//!
//! - services over SQLite behind `tabby-schema`'s traits ([`service`]);
//! - authentication: argon2id passwords, HS256 session JWTs with a persisted secret, user auth
//!   tokens checked in constant time, sign-in rate limits ([`jwt`], [`password`],
//!   [`ratelimit`]);
//! - routes: `/graphql`, `/graphiql`, `/subscriptions`, and the token check in front of the
//!   editors' `/v1*` API ([`routes`]);
//! - usage recording of editor events into `user_events` / `user_completions`.

mod browse;
mod cron;
mod directory;
mod edge;
mod graphiql;
mod ingestion;
pub mod integration;
pub mod job;
pub mod jwt;
pub mod ldap;
pub mod mail;
pub mod oauth;
mod outbound;
pub mod password;
pub mod ratelimit;
mod routes;
pub mod secret_box;
pub mod service;
mod subscriptions;
mod ui;
mod usage_logger;

use std::{path::PathBuf, sync::Arc};

use anyhow::Context as _;
use axum::{Router, middleware, routing::get};
pub use directory::{ConfigRepository, git_source_id};
pub use ratelimit::BucketSpec;
use tabby_common::api::event::EventLogger;
use tabby_db::DbConn;
use tabby_schema::{Schema, create_schema};

use crate::{directory::Directory, ratelimit::RateLimiter, service::Services};

/// Per user on `/v1*`: 120 requests a minute on average, bursts up to 240, starting at 120.
const REST_RATE: BucketSpec = BucketSpec {
    capacity: 240.0,
    initial: 120.0,
    per_second: 2.0,
};

/// Ephemeral Answer Engine threads idle this long are removed.
pub const EPHEMERAL_THREAD_IDLE_DAYS: u32 = 7;
/// How long a readiness probe waits for the database.
const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

pub struct WebserverOptions {
    /// `$TABBY_ROOT/ee/db.sqlite`: the database unless `database_url` names another.
    pub db_path: PathBuf,
    /// `[database] url`: a PostgreSQL database shared by replicas.
    pub database_url: Option<String>,
    /// `$TABBY_ROOT/ee/jobs`: one log per job run.
    pub jobs_dir: PathBuf,
    /// Where mirrors of remote repositories live (to show the commit of each ref).
    pub repositories_dir: PathBuf,
    pub config_repositories: Vec<ConfigRepository>,
    /// `[security]` of config.toml.
    pub security: tabby_common::config::SecurityConfig,
    /// `[email]` of config.toml: the sender's retries.
    pub email: tabby_common::config::EmailConfig,
    /// The per-user limit on `/v1*`; `None`: 120 requests a minute (bursts to 240). Benches
    /// lift it to measure the server itself.
    pub rest_rate_limit: Option<BucketSpec>,
}

pub struct Webserver {
    db: DbConn,
    jobs: Arc<job::JobService>,
    services: Arc<Services>,
    directory: Arc<Directory>,
    schema: Arc<Schema>,
    rest_limiter: RateLimiter<i64>,
    usage_logger: Arc<usage_logger::DbEventLogger>,
}

impl Webserver {
    /// Opens (and migrates) the database and builds the services.
    pub async fn new(options: WebserverOptions) -> anyhow::Result<Arc<Self>> {
        let db = match &options.database_url {
            Some(url) => DbConn::connect_postgres(url).await.with_context(|| {
                format!(
                    "cannot open the database {}",
                    tabby_common::config::redact_url_password(url)
                )
            })?,
            None => DbConn::open(&options.db_path).await.with_context(|| {
                format!("cannot open the database {}", options.db_path.display())
            })?,
        };
        let jwt = Arc::new(jwt::JwtKeys::load(&db).await?);
        let secrets = Arc::new(secret_box::SecretBox::load(&db).await?);
        let mailer = Arc::new(mail::Mailer::new(
            db.clone(),
            secrets.clone(),
            options.email,
        ));
        let rest_rate_limit = options.rest_rate_limit;
        let directory = Arc::new(Directory::new(
            db.clone(),
            options.config_repositories,
            options.security,
        ));
        directory.follow_other_processes();
        let jobs = Arc::new(job::JobService::new(
            db.clone(),
            directory.clone(),
            options.jobs_dir,
        ));
        jobs.set_crawler(Arc::new(job::HttpCrawler::new(
            &directory.security().fetch_allowed_hosts,
        )));
        jobs.set_mailer(mailer.clone());
        jobs.set_integrations(Arc::new(integration::IntegrationSync::new(
            db.clone(),
            secrets.clone(),
        )));
        let auth = Arc::new(service::auth::AuthServiceImpl::new(
            db.clone(),
            jwt,
            directory.clone(),
            mailer.clone(),
        ));
        let services = Arc::new(Services {
            ldap: Arc::new(ldap::LdapServiceImpl::new(
                db.clone(),
                secrets.clone(),
                auth.clone(),
            )),
            integration: Arc::new(integration::IntegrationServiceImpl::new(
                db.clone(),
                secrets.clone(),
                jobs.clone(),
                directory.clone(),
                options.repositories_dir.clone(),
            )),
            oauth: Arc::new(oauth::OAuthServiceImpl::new(
                db.clone(),
                secrets,
                auth.clone(),
            )),
            auth,
            user_group: Arc::new(service::user_group::UserGroupServiceImpl::new(
                db.clone(),
                directory.clone(),
            )),
            repository: Arc::new(service::repository::RepositoryServiceImpl::new(
                db.clone(),
                directory.clone(),
                options.repositories_dir,
                jobs.clone(),
            )),
            usage: Arc::new(service::usage::UsageServiceImpl::new(db.clone())),
            setting: Arc::new(service::setting::SettingServiceImpl {
                db: db.clone(),
                mailer: mailer.clone(),
                is_chat_enabled: false.into(),
            }),
            mailer: mailer.clone(),
            thread: Arc::new(service::thread::ThreadServiceImpl::new(db.clone())),
            job: jobs.clone(),
            ingestion: service::ingestion::IngestionService::new(db.clone(), jobs.clone()),
        });
        mailer.start();
        Ok(Arc::new(Self {
            jobs,
            usage_logger: Arc::new(usage_logger::DbEventLogger::start(db.clone())),
            db,
            services,
            directory,
            schema: Arc::new(create_schema()),
            rest_limiter: RateLimiter::new(rest_rate_limit.unwrap_or(REST_RATE)),
        }))
    }

    /// Turns the Answer Engine on (once the chat model and the searches exist).
    pub fn enable_answer_engine(&self, deps: service::answer::AnswerDeps) {
        let engine = Arc::new(service::answer::AnswerEngine::new(
            self.db.clone(),
            self.directory.clone(),
            deps,
        ));
        if self.services.thread.answer.set(engine).is_ok() {
            self.services
                .setting
                .is_chat_enabled
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Starts the job worker and schedules with what jobs need (index location, embedding):
    /// repositories are enqueued for indexing right away.
    pub fn start_jobs(&self, deps: job::JobDeps) {
        self.jobs.set_deps(deps);
        self.jobs.start();
    }

    /// Records editor events of signed-in users in the database.
    pub fn event_logger(&self) -> Arc<dyn EventLogger> {
        self.usage_logger.clone()
    }

    /// Puts the token check in front of the editors' API router.
    pub fn protect(self: &Arc<Self>, api: Router) -> Router {
        api.layer(middleware::from_fn_with_state(
            self.clone(),
            routes::require_token,
        ))
    }

    /// `/graphql`, `/graphiql` and `/subscriptions`.
    pub fn routes(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/graphql", get(routes::graphql).post(routes::graphql))
            .route("/graphiql", get(graphiql::page))
            .route("/graphiql/assets/{name}", get(graphiql::asset))
            .route("/subscriptions", get(routes::subscriptions))
            .route("/background-jobs/{id}/logs", get(routes::job_logs))
            .route(
                "/repositories/{kind}/{id}/rev/{rev}/",
                get(routes::repository_file),
            )
            .route(
                "/repositories/{kind}/{id}/rev/{rev}/{*path}",
                get(routes::repository_file),
            )
            .route(
                "/repositories/{kind}/{id}/resolve/",
                get(routes::repository_file),
            )
            .route(
                "/repositories/{kind}/{id}/resolve/{*path}",
                get(routes::repository_file),
            )
            .route("/oauth/providers", get(oauth::routes::providers))
            .route("/oauth/signin", get(oauth::routes::signin))
            .route("/oauth/callback/{provider}", get(oauth::routes::callback))
            .merge(
                Router::new()
                    .route("/v1beta/ingestion", axum::routing::post(ingestion::ingest))
                    .route(
                        "/v1beta/ingestion/{source}",
                        axum::routing::delete(ingestion::delete_source),
                    )
                    .route(
                        "/v1beta/ingestion/{source}/{id}",
                        axum::routing::delete(ingestion::delete_document),
                    )
                    .layer(axum::extract::DefaultBodyLimit::max(
                        service::ingestion::MAX_INGESTION_BODY_BYTES,
                    )),
            )
            .with_state(self.clone())
    }

    /// The web UI: the router's fallback (non-API paths).
    pub fn ui_fallback() -> axum::routing::MethodRouter {
        axum::routing::any(ui::fallback)
    }

    /// The GraphQL schema in SDL.
    pub fn schema_sdl(&self) -> String {
        self.schema.as_sdl()
    }

    pub async fn close(&self) {
        self.db.close().await;
    }

    /// Whether this replica can serve its enterprise state: the database answers within
    /// `READY_TIMEOUT`. The error names what is not ready (never a path or a message from
    /// the database).
    pub async fn ready(&self) -> Result<(), &'static str> {
        match tokio::time::timeout(READY_TIMEOUT, self.db.ping()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                tracing::warn!("readiness: the database does not answer: {e}");
                Err("database")
            }
            Err(_) => {
                tracing::warn!("readiness: the database took longer than {READY_TIMEOUT:?}");
                Err("database")
            }
        }
    }
}
