//! `tabby serve`: load the config, build the services and the router, listen, and shut down
//! gracefully (in-flight requests finish, the event log is flushed).

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context;
use axum::{Router, middleware, routing::get};
use tabby_common::{
    api::{
        code::{AllowedCodeRepository, CodeRepository, CodeSearch},
        event::{ComposedLogger, EventLogger},
    },
    config::{Config, config_index_to_source_id},
    path::TabbyPaths,
};
use tabby_index::snapshot::IndexLocation;
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::{
    routes::{self, ApiState, metrics::Metrics, openapi::ApiDoc},
    services::code::CodeSearchEmbedding,
    services::{
        chat::ChatService,
        code::CodeSearchService,
        completion::CompletionService,
        event::FileEventLogger,
        health::HealthState,
        model::{load_models, with_local_defaults},
    },
};

/// How long shutdown waits for open connections (e.g. chat streams) before closing them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Overrides `[security] metrics_token`.
const METRICS_TOKEN_ENV: &str = "TABBY_METRICS_TOKEN";

pub struct ServeOptions {
    pub host: String,
    pub port: u16,
    pub config: Option<PathBuf>,
    pub no_webserver: bool,
    pub role: Role,
}

/// What one `tabby serve` process does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// Serve and run jobs (indexing): one process does everything.
    All,
    /// Serve the API, GraphQL and the web UI; never run jobs or index.
    Web,
    /// Run jobs and index; serve only `/healthz` and `/readyz` (no models are loaded).
    Worker,
}

impl Role {
    fn serves(self) -> bool {
        self != Role::Worker
    }

    fn runs_jobs(self) -> bool {
        self != Role::Web
    }
}

/// The assembled application.
pub struct App {
    pub router: Router,
    pub logger: FileEventLogger,
    /// Every sink of events (the file log plus the layers' loggers).
    pub event_logger: Arc<dyn EventLogger>,
    /// The chat model, when one loaded.
    pub chat_engine: Option<Arc<dyn tabby_inference::ChatCompletionStream>>,
    /// Evidence packs, when code search exists (the Answer Engine's code context).
    pub context: Option<Arc<crate::services::context::ContextService>>,
}

/// What another layer (the enterprise webserver) adds to the application.
#[derive(Default)]
pub struct Layers {
    /// More sinks for editor events, besides the JSON-lines log.
    pub event_loggers: Vec<Arc<dyn EventLogger>>,
    /// Wraps the `/v1*` router (authentication).
    pub protect_api: Option<Box<dyn FnOnce(Router) -> Router + Send>>,
    /// More routes (GraphQL, subscriptions).
    pub routes: Option<Router>,
    /// Answers paths no route serves (the web UI); default: a JSON 404.
    pub fallback: Option<axum::routing::MethodRouter>,
    /// What `/readyz` checks besides the process itself (the database).
    pub readiness: Option<routes::health::ReadinessCheck>,
}

/// `/healthz` and `/readyz`.
fn probes(
    readiness: Option<routes::health::ReadinessCheck>,
    code_search: Option<Arc<CodeSearchService>>,
) -> Router {
    Router::new()
        .route("/healthz", get(routes::health::healthz))
        .route(
            "/readyz",
            get(routes::health::readyz).with_state(routes::health::Readiness {
                check: readiness,
                last: Default::default(),
                code_search,
            }),
        )
}

/// Builds the router and services for `config`. `code_search` is plugged in by the indexing
/// layer when one exists.
pub fn build_app(
    config: &Config,
    paths: &TabbyPaths,
    webserver: Option<bool>,
    code_search: Option<Arc<CodeSearchService>>,
    layers: Layers,
) -> anyhow::Result<App> {
    let ready_search = code_search.clone();
    let index_location: IndexLocation = code_search
        .as_ref()
        .map(|c| c.index().clone())
        .unwrap_or_else(|| paths.index_dir().into());
    let logger = FileEventLogger::start(paths.events_dir());
    let shared_logger: Arc<dyn EventLogger> = if layers.event_loggers.is_empty() {
        Arc::new(logger.clone())
    } else {
        let mut all: Vec<Arc<dyn EventLogger>> = vec![Arc::new(logger.clone())];
        all.extend(layers.event_loggers);
        Arc::new(ComposedLogger(all))
    };
    let shared_logger_for_app = shared_logger.clone();
    let effective_models = with_local_defaults(&config.model);
    let models = load_models(&effective_models, &paths.models_dir())?;
    let languages = Arc::new(config.language_table());

    let completion = models.completion.map(|model| {
        Arc::new(CompletionService::new(
            model,
            languages.clone(),
            config.completion.clone(),
            code_search.clone().map(|c| c as Arc<dyn CodeSearch>),
            shared_logger.clone(),
        ))
    });
    // The Answer Engine only gets a chat model that can answer; the chat route keeps the
    // stand-in of a missing one, which answers 503.
    let chat_engine = models.chat.clone().filter(|_| models.chat_loaded);
    let chat = models
        .chat
        .map(|engine| Arc::new(ChatService::new(engine, shared_logger.clone())));
    let repositories = AllowedCodeRepository {
        list: config
            .repositories
            .iter()
            .enumerate()
            .map(|(i, repo)| CodeRepository {
                git_url: repo.canonical_git_url(),
                source_id: config_index_to_source_id(i),
            })
            .collect(),
    };
    let files = Arc::new(tabby_index::repo_files::RepoFiles::new(
        config.repositories_dir(paths),
    ));
    let context = code_search.clone().map(|code_search| {
        Arc::new(crate::services::context::ContextService {
            code_search,
            files: files.clone(),
            search_params: config.answer.code_search_params.clone(),
        })
    });
    let state = Arc::new(ApiState {
        completion,
        chat,
        logger: shared_logger,
        health: HealthState::new(&effective_models, webserver),
        models: ApiState::model_list(&config.model),
        repositories,
        completion_timeout: Duration::from_secs(config.server.completion_timeout),
        code_search,
        search_params: config.answer.code_search_params.clone(),
        context: context.clone(),
    });

    let metrics_token = std::env::var(METRICS_TOKEN_ENV)
        .ok()
        .filter(|t| !t.trim().is_empty())
        .or_else(|| config.security.metrics_token.clone());
    let metrics = Metrics::new(metrics_token.as_deref().map(str::trim));
    let openapi = serde_json::to_value(<ApiDoc as utoipa::OpenApi>::openapi())
        .context("cannot render the OpenAPI document")?;
    let protected = layers.protect_api.is_some();
    let mcp_state = Arc::new(crate::mcp::McpState {
        code_search: state.code_search.clone(),
        open_repositories: (!protected).then(|| state.repositories.clone()),
        files,
        search_params: config.answer.code_search_params.clone(),
        languages: languages.clone(),
        context: context.clone(),
        docs: Some(Arc::new(crate::services::doc::DocSearchService::new(
            index_location,
        ))),
    });
    let mcp_context = context;
    let mut api = routes::api_router(state).nest_service(
        "/mcp",
        crate::mcp::service(mcp_state, &config.mcp, protected),
    );
    if let Some(protect) = layers.protect_api {
        api = protect(api);
    }
    if let Some(extra) = layers.routes {
        api = api.merge(extra);
    }
    let router = api
        .route(
            "/api-docs/openapi.json",
            get(move || {
                let doc = openapi.clone();
                async move { axum::Json(doc) }
            }),
        )
        .fallback_service(
            layers
                .fallback
                .unwrap_or_else(|| axum::routing::any(routes::not_found)),
        )
        .layer(middleware::from_fn_with_state(
            metrics.clone(),
            routes::metrics::track,
        ))
        .route("/metrics", get(routes::metrics::render).with_state(metrics))
        // Probes for load balancers and orchestrators: outside the token layer, no detail.
        .merge(probes(layers.readiness, ready_search));
    Ok(App {
        router,
        logger,
        event_logger: shared_logger_for_app,
        chat_engine,
        context: mcp_context,
    })
}

/// How often the writing process looks for a new commit to publish as a snapshot.
const SNAPSHOT_INTERVAL: Duration = Duration::from_secs(2);

/// Publishes the index in `index_dir` under `shared` whenever it has a new commit (checked
/// every [`SNAPSHOT_INTERVAL`]); a failed attempt (a commit landing during the copy, the
/// volume away) is logged and tried again at the next tick.
fn spawn_snapshot_publisher(index_dir: PathBuf, shared: PathBuf) {
    info!("publishing index snapshots to {}", shared.display());
    tokio::spawn(async move {
        let mut last_error = String::new();
        loop {
            let (index_dir, shared_dir) = (index_dir.clone(), shared.clone());
            let result = tokio::task::spawn_blocking(move || {
                tabby_index::snapshot::publish(&index_dir, &shared_dir)
            })
            .await;
            match result {
                Ok(Ok(Some(version))) => {
                    info!("published index snapshot {}", version.display());
                    last_error.clear();
                }
                Ok(Ok(None)) => last_error.clear(),
                Ok(Err(e)) => {
                    let message = format!("{e:#}");
                    if message != last_error {
                        warn!("cannot publish an index snapshot (retrying): {message}");
                        last_error = message;
                    }
                }
                Err(e) => warn!("the snapshot publisher failed: {e}"),
            }
            tokio::time::sleep(SNAPSHOT_INTERVAL).await;
        }
    });
}

pub async fn serve(options: ServeOptions) -> anyhow::Result<()> {
    let paths = TabbyPaths::from_env();
    ensure_root(&paths)?;
    let config_path = options
        .config
        .clone()
        .unwrap_or_else(|| paths.config_file());
    let config = Config::load(&config_path)?;
    let embedding = crate::indexing::embedding_from_config(&paths, &config)?;
    let enterprise = if options.no_webserver {
        None
    } else {
        start_enterprise(&paths, &config).await?
    };
    let webserver = enterprise
        .as_ref()
        .map(|e| e.health_flag)
        .or(options.no_webserver.then_some(false));
    let role = options.role;
    // A web replica with `[index] snapshot_dir` searches the newest published snapshot;
    // every other process the index it writes.
    let index_location = match (&config.index.snapshot_dir, role.runs_jobs()) {
        (Some(shared), false) => {
            info!("searching the index snapshots in {}", shared.display());
            IndexLocation::Snapshots(shared.clone())
        }
        _ => IndexLocation::Local(paths.index_dir()),
    };
    // With the webserver, repositories can be added at run time: search must always exist.
    let code_search = (!config.repositories.is_empty() || enterprise.is_some()).then(|| {
        let mut service = CodeSearchService::new(
            index_location.clone(),
            embedding.clone(),
            Arc::new(config.language_table()),
        );
        service.files = Some(Arc::new(tabby_index::repo_files::RepoFiles::new(
            config.repositories_dir(&paths),
        )));
        Arc::new(service)
    });
    let (layers, start_jobs, answer) = match enterprise {
        Some(e) => (e.layers, Some(e.start_jobs), Some(e.enable_answer)),
        None => (Layers::default(), None, None),
    };
    let (router, logger) = if role.serves() {
        let app = build_app(&config, &paths, webserver, code_search.clone(), layers)?;
        if let (Some(enable), Some(chat)) = (answer, app.chat_engine.clone()) {
            enable(AnswerSetup {
                chat,
                code_search: code_search.clone().map(|c| c as Arc<dyn CodeSearch>),
                code_context: app.context.clone().map(|c| {
                    Arc::new(crate::services::context::AnswerContext(c))
                        as Arc<dyn tabby_common::api::code::CodeContext>
                }),
                doc_search: Arc::new(crate::services::doc::DocSearchService::new(
                    index_location.clone(),
                )),
                logger: app.event_logger.clone(),
                config: config.answer.clone(),
            });
        }
        (app.router, Some(app.logger))
    } else {
        // A worker loads no completion or chat model and answers only the probes.
        info!("role worker: running jobs and indexing; serving /healthz and /readyz only");
        (
            probes(layers.readiness, code_search.clone()).fallback(routes::not_found),
            None,
        )
    };
    // The enterprise layer indexes through its background jobs; community mode runs the
    // indexer at start and hourly. A web replica does neither (a worker does).
    let indexing = match (role.runs_jobs(), start_jobs) {
        (false, _) => {
            info!("role web: no jobs and no indexing in this process");
            None
        }
        (true, Some(start)) => {
            start(embedding);
            None
        }
        (true, None) => Some(crate::indexing::spawn_background_indexing(
            paths.clone(),
            Arc::new(config.clone()),
            embedding,
        )),
    };
    // The process that writes the index publishes each commit for web replicas elsewhere.
    if let (Some(shared), true) = (&config.index.snapshot_dir, role.runs_jobs()) {
        spawn_snapshot_publisher(paths.index_dir(), shared.clone());
    }

    let addr = format!("{}:{}", options.host, options.port);
    let listener = TcpListener::bind(&addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let local = listener.local_addr()?;
    // Without TCP_NODELAY a response written in two segments waits for the client's delayed
    // ACK (~40 ms per request).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    info!(
        "tabby {} listening on http://{local}",
        env!("CARGO_PKG_VERSION")
    );
    println!("Listening at http://{local}");

    let shutdown = Arc::new(tokio::sync::Notify::new());
    let server = axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown({
        let shutdown = shutdown.clone();
        async move {
            shutdown_signal().await;
            info!("shutting down: finishing in-flight requests");
            shutdown.notify_waiters();
        }
    });
    let grace = {
        let shutdown = shutdown.clone();
        async move {
            shutdown.notified().await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        }
    };
    tokio::select! {
        result = server => result.context("server error")?,
        _ = grace => info!("closing connections still open after {SHUTDOWN_GRACE:?}"),
    }
    if let Some(indexing) = indexing {
        indexing.abort();
    }
    if let Some(logger) = logger {
        logger.flush().await;
        info!("event log flushed");
    }
    info!("bye");
    Ok(())
}

/// What the Answer Engine is built from, once the models are loaded (only the enterprise
/// layer serves it).
#[cfg_attr(not(feature = "ee"), allow(dead_code))]
struct AnswerSetup {
    chat: Arc<dyn tabby_inference::ChatCompletionStream>,
    code_search: Option<Arc<dyn CodeSearch>>,
    code_context: Option<Arc<dyn tabby_common::api::code::CodeContext>>,
    doc_search: Arc<dyn tabby_common::api::doc::DocSearch>,
    logger: Arc<dyn EventLogger>,
    config: tabby_common::config::AnswerConfig,
}

/// The enterprise layer as `serve` plugs it in.
struct Enterprise {
    health_flag: bool,
    layers: Layers,
    /// Starts the job worker (which indexes every repository) with the embedding model.
    start_jobs: Box<dyn FnOnce(Option<CodeSearchEmbedding>) + Send>,
    enable_answer: Box<dyn FnOnce(AnswerSetup) + Send>,
}

#[cfg(feature = "ee")]
async fn start_enterprise(
    paths: &TabbyPaths,
    config: &Config,
) -> anyhow::Result<Option<Enterprise>> {
    use tabby_webserver::{ConfigRepository, Webserver, WebserverOptions};
    let config_repositories = config
        .repositories
        .iter()
        .enumerate()
        .map(|(i, repo)| ConfigRepository {
            source_id: config_index_to_source_id(i),
            git_url: repo.git_url.clone(),
            canonical_git_url: repo.canonical_git_url(),
            name: tabby_webserver::service::repository::repository_name(&repo.git_url),
            refs: repo.refs.clone(),
        })
        .collect();
    let server = Webserver::new(WebserverOptions {
        db_path: paths.ee_db_file(),
        database_url: config.database.url.clone(),
        jobs_dir: paths.ee_dir().join("jobs"),
        repositories_dir: config.repositories_dir(paths),
        config_repositories,
        security: config.security.clone(),
        email: config.email.clone(),
        rest_rate_limit: None,
    })
    .await?;
    info!("webserver on: /v1 needs a token; GraphQL at /graphql");
    Ok(Some(Enterprise {
        health_flag: true,
        layers: Layers {
            event_loggers: vec![server.event_logger()],
            protect_api: Some(Box::new({
                let server = server.clone();
                move |api| server.protect(api)
            })),
            routes: Some(server.routes()),
            fallback: Some(Webserver::ui_fallback()),
            readiness: Some({
                let server = server.clone();
                Arc::new(move || {
                    let server = server.clone();
                    Box::pin(async move { server.ready().await })
                })
            }),
        },
        start_jobs: Box::new({
            let server = server.clone();
            let paths = paths.clone();
            let repositories_dir = config.repositories_dir(&paths);
            let languages = config.language_table();
            let max_input_bytes = config.embedding.max_input_length;
            move |embedding: Option<CodeSearchEmbedding>| {
                server.start_jobs(tabby_webserver::job::JobDeps {
                    index_dir: paths.index_dir(),
                    repositories_dir,
                    embedding: embedding.map(|e| tabby_index::EmbeddingSetup {
                        model: e.model,
                        model_id: e.model_id,
                        max_input_bytes,
                    }),
                    languages,
                })
            }
        }),
        enable_answer: Box::new(move |setup: AnswerSetup| {
            server.enable_answer_engine(tabby_webserver::service::answer::AnswerDeps {
                chat: setup.chat,
                code: setup.code_search,
                code_context: setup.code_context,
                docs: Some(setup.doc_search),
                logger: setup.logger,
                config: setup.config,
            })
        }),
    }))
}

/// A build without the enterprise layer serves in community mode.
#[cfg(not(feature = "ee"))]
async fn start_enterprise(
    _paths: &TabbyPaths,
    _config: &Config,
) -> anyhow::Result<Option<Enterprise>> {
    Ok(None)
}

fn ensure_root(paths: &TabbyPaths) -> anyhow::Result<()> {
    let root = paths.root();
    std::fs::create_dir_all(root)
        .with_context(|| format!("cannot create TABBY_ROOT {}", root.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700));
    }
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
}
