//! `tabby serve`: load the config, build the services and the router, listen, and shut down
//! gracefully (in-flight requests finish, the event log is flushed).

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context;
use axum::{Router, middleware, routing::get};
use tabby_common::{
    api::code::{AllowedCodeRepository, CodeRepository, CodeSearch},
    config::{Config, config_index_to_source_id},
    path::TabbyPaths,
};
use tokio::net::TcpListener;
use tracing::info;

use crate::{
    routes::{self, ApiState, metrics::Metrics, openapi::ApiDoc},
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

pub struct ServeOptions {
    pub host: String,
    pub port: u16,
    pub config: Option<PathBuf>,
    pub no_webserver: bool,
}

/// The assembled application.
pub struct App {
    pub router: Router,
    pub logger: FileEventLogger,
}

/// Builds the router and services for `config`. `code_search` is plugged in by the indexing
/// layer when one exists.
pub fn build_app(
    config: &Config,
    paths: &TabbyPaths,
    webserver: Option<bool>,
    code_search: Option<Arc<CodeSearchService>>,
) -> anyhow::Result<App> {
    let logger = FileEventLogger::start(paths.events_dir());
    let shared_logger: Arc<dyn tabby_common::api::event::EventLogger> = Arc::new(logger.clone());
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
    });

    let metrics = Metrics::default();
    let openapi = serde_json::to_value(<ApiDoc as utoipa::OpenApi>::openapi())
        .context("cannot render the OpenAPI document")?;
    let router = routes::api_router(state)
        .route(
            "/api-docs/openapi.json",
            get(move || {
                let doc = openapi.clone();
                async move { axum::Json(doc) }
            }),
        )
        .fallback(routes::not_found)
        .layer(middleware::from_fn_with_state(
            metrics.clone(),
            routes::metrics::track,
        ))
        .route("/metrics", get(routes::metrics::render).with_state(metrics));
    Ok(App { router, logger })
}

pub async fn serve(options: ServeOptions) -> anyhow::Result<()> {
    let paths = TabbyPaths::from_env();
    ensure_root(&paths)?;
    let config_path = options
        .config
        .clone()
        .unwrap_or_else(|| paths.config_file());
    let config = Config::load(&config_path)?;
    let webserver = options.no_webserver.then_some(false);
    let embedding = crate::indexing::embedding_from_config(&paths, &config)?;
    let code_search = (!config.repositories.is_empty()).then(|| {
        Arc::new(CodeSearchService::new(
            paths.index_dir(),
            embedding.clone(),
            Arc::new(config.language_table()),
        ))
    });
    let app = build_app(&config, &paths, webserver, code_search)?;
    let indexing = crate::indexing::spawn_background_indexing(
        paths.clone(),
        Arc::new(config.clone()),
        embedding,
    );

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
        app.router
            .into_make_service_with_connect_info::<SocketAddr>(),
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
    indexing.abort();
    app.logger.flush().await;
    info!("event log flushed; bye");
    Ok(())
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
