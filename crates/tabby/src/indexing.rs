//! Running the indexer for the configured repositories: once from `tabby index`, or in the
//! background of `tabby serve` (at start and every hour) while requests are served.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use tabby_common::{
    config::{Config, config_index_to_source_id},
    git_url::{GitUrl, redact_credentials},
    path::TabbyPaths,
};
use tabby_index::{
    CodeIndexer, EmbeddingSetup, IndexProgress, RepositorySummary, RepositoryToIndex,
};
use tracing::{info, warn};

use crate::services::code::CodeSearchEmbedding;

const REINDEX_INTERVAL: Duration = Duration::from_secs(3600);

/// The configured repositories with their source ids.
pub fn configured_repositories(config: &Config) -> Vec<RepositoryToIndex> {
    config
        .repositories
        .iter()
        .enumerate()
        .map(|(i, repo)| RepositoryToIndex {
            source_id: config_index_to_source_id(i),
            git_url: repo.git_url.clone(),
            refs: repo.refs.clone(),
        })
        .collect()
}

/// The embedding model for indexing and search: `[model.embedding]`, else the embedded default.
/// `None` indexes BM25 tokens only (the embedding leg of search is then empty).
pub fn embedding_from_config(
    paths: &TabbyPaths,
    config: &Config,
) -> anyhow::Result<Option<CodeSearchEmbedding>> {
    let models = crate::services::model::with_local_defaults(&config.model);
    Ok(
        crate::services::model::load_embedding(&models, &paths.models_dir())?
            .map(|(model, model_id)| CodeSearchEmbedding { model, model_id }),
    )
}

/// Whether `repo` is the one a user named on the command line (by URL, repository name or
/// source id).
pub fn matches(repo: &RepositoryToIndex, wanted: &str) -> bool {
    let name = |url: &str| GitUrl::parse(url).map(|u| u.name().to_string());
    repo.git_url == wanted
        || repo.source_id == wanted
        || redact_credentials(&repo.git_url) == wanted
        || name(&repo.git_url).is_some_and(|n| n == wanted || Some(n.clone()) == name(wanted))
}

/// The repositories added through GraphQL: in the `[database] url` PostgreSQL database, or in
/// `$TABBY_ROOT/ee/db.sqlite` if that file exists.
#[cfg(feature = "ee")]
pub async fn db_repositories(
    paths: &TabbyPaths,
    database_url: Option<&str>,
) -> anyhow::Result<Vec<RepositoryToIndex>> {
    let db = match database_url {
        Some(url) => tabby_db::DbConn::connect_postgres(url)
            .await
            .with_context(|| {
                format!(
                    "cannot open {}",
                    tabby_common::config::redact_url_password(url)
                )
            })?,
        None => {
            let file = paths.ee_db_file();
            if !file.exists() {
                return Ok(Vec::new());
            }
            tabby_db::DbConn::open(&file)
                .await
                .with_context(|| format!("cannot open {}", file.display()))?
        }
    };
    let repos = db
        .list_repositories(tabby_db::Pagination::all())
        .await?
        .into_iter()
        .map(|r| RepositoryToIndex {
            source_id: tabby_webserver::git_source_id(r.id),
            git_url: r.git_url,
            refs: r.refs,
        })
        .collect();
    db.close().await;
    Ok(repos)
}

/// Without the enterprise layer there are only config repositories.
#[cfg(not(feature = "ee"))]
pub async fn db_repositories(
    _paths: &TabbyPaths,
    _database_url: Option<&str>,
) -> anyhow::Result<Vec<RepositoryToIndex>> {
    Ok(Vec::new())
}

/// Indexes the configured repositories plus `extra` ones (those added through GraphQL), or
/// only the one matching `only`, and drops repositories that are in neither list (when
/// indexing all of them).
pub async fn index_configured(
    paths: &TabbyPaths,
    config: &Config,
    extra: Vec<RepositoryToIndex>,
    embedding: Option<CodeSearchEmbedding>,
    only: Option<&str>,
    progress: &dyn IndexProgress,
) -> anyhow::Result<Vec<RepositorySummary>> {
    let mut all = configured_repositories(config);
    all.extend(extra);
    let selected: Vec<_> = match only {
        Some(wanted) => {
            let selected: Vec<_> = all.iter().filter(|r| matches(r, wanted)).cloned().collect();
            if selected.is_empty() {
                let known: Vec<String> =
                    all.iter().map(|r| redact_credentials(&r.git_url)).collect();
                anyhow::bail!("no configured repository matches {wanted:?}; configured: {known:?}");
            }
            selected
        }
        None => all.clone(),
    };
    let setup = embedding.map(|e| EmbeddingSetup {
        model: e.model,
        model_id: e.model_id,
        max_input_bytes: config.embedding.max_input_length,
    });
    let mut indexer = CodeIndexer::open(&paths.index_dir(), setup, config.language_table())
        .await
        .context("cannot open the index")?;
    let mut summaries = Vec::new();
    for repo in &selected {
        match indexer
            .index_repository(repo, &config.repositories_dir(paths), progress)
            .await
        {
            Ok(summary) => summaries.push(summary),
            Err(e) => warn!(
                "indexing {} failed: {e:#}",
                redact_credentials(&repo.git_url)
            ),
        }
    }
    if only.is_none() {
        let keep: Vec<String> = all.iter().map(|r| r.source_id.clone()).collect();
        for removed in indexer.remove_other_sources(&keep)? {
            info!("removed {removed} from the index: no longer configured");
        }
    }
    tokio::task::spawn_blocking(move || indexer.finish())
        .await
        .context("index merge task failed")??;
    Ok(summaries)
}

struct LogProgress;
impl IndexProgress for LogProgress {
    fn start(&self, repository: &str, files: usize) {
        info!("indexing {repository}: {files} files");
    }
    fn finish(&self, summary: &RepositorySummary) {
        info!("{}", summary.to_string().trim_end());
    }
}

/// Indexes at start and then every hour, in the background (community mode; with the
/// enterprise layer, background jobs do this).
pub fn spawn_background_indexing(
    paths: TabbyPaths,
    config: Arc<Config>,
    embedding: Option<CodeSearchEmbedding>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if config.repositories.is_empty() {
            return;
        }
        loop {
            if let Err(e) = index_configured(
                &paths,
                &config,
                Vec::new(),
                embedding.clone(),
                None,
                &LogProgress,
            )
            .await
            {
                warn!("background indexing failed: {e:#}");
            }
            tokio::time::sleep(REINDEX_INTERVAL).await;
        }
    })
}
