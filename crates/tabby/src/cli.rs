//! The one-shot commands: `tabby index`, `tabby search`, `tabby eval`.

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Instant,
};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use tabby_common::{config::Config, path::TabbyPaths};
use tabby_index::{HashEmbedding, IndexProgress, RepositorySummary};

use crate::{
    eval::{self, EvalOptions, Leg},
    indexing::{self, configured_repositories},
    services::{
        code::{CodeSearchEmbedding, CodeSearchService, QueryStrategy},
        model::{load_models, with_local_defaults},
    },
};

pub fn load_config(paths: &TabbyPaths, config: Option<PathBuf>) -> anyhow::Result<Config> {
    let path = config.unwrap_or_else(|| paths.config_file());
    Ok(Config::load(&path)?)
}

/// `tabby db migrate-sqlite-to-postgres`: copies the SQLite database (`from`, default
/// `$TABBY_ROOT/ee/db.sqlite`) into the PostgreSQL database `to` (default: `[database] url`).
#[cfg(feature = "ee")]
pub async fn migrate_sqlite_to_postgres(
    config: Option<PathBuf>,
    from: Option<PathBuf>,
    to: Option<String>,
) -> anyhow::Result<()> {
    use tabby_common::config::redact_url_password;
    let paths = TabbyPaths::from_env();
    let config = load_config(&paths, config)?;
    let Some(to) = to.or(config.database.url.clone()) else {
        anyhow::bail!("no PostgreSQL database to copy into: give --to or set [database] url");
    };
    if !(to.starts_with("postgres://") || to.starts_with("postgresql://")) {
        anyhow::bail!("--to must be a postgres:// or postgresql:// URL");
    }
    let shown = redact_url_password(&to);
    let from = from.unwrap_or_else(|| paths.ee_db_file());
    if !from.is_file() {
        anyhow::bail!("{} does not exist: nothing to copy", from.display());
    }
    // Opening migrates the file to this version (after backing it up) like a server start.
    let source = tabby_db::DbConn::open(&from)
        .await
        .with_context(|| format!("cannot open {}", from.display()))?;
    let target = tabby_db::DbConn::connect_postgres(&to)
        .await
        .with_context(|| format!("cannot open {shown}"))?;
    let copied = source.copy_into_postgres(&target).await;
    source.close().await;
    target.close().await;
    let copied = copied?;
    let rows: u64 = copied.iter().map(|(_, n)| n).sum();
    for (table, n) in &copied {
        println!("{table}: {n} rows");
    }
    println!(
        "copied {rows} rows of {} tables from {} into {shown}; set [database] url in \
         config.toml and start the servers",
        copied.len(),
        from.display()
    );
    Ok(())
}

/// A terminal progress bar: files, chunks and MB/s.
struct BarProgress {
    bar: ProgressBar,
    bytes: AtomicU64,
    chunks: AtomicUsize,
    started: std::sync::Mutex<Instant>,
}

impl BarProgress {
    fn new() -> Self {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} files {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        Self {
            bar,
            bytes: AtomicU64::new(0),
            chunks: AtomicUsize::new(0),
            started: std::sync::Mutex::new(Instant::now()),
        }
    }
}

impl IndexProgress for BarProgress {
    fn start(&self, repository: &str, files: usize) {
        self.bar.reset();
        self.bar.set_length(files as u64);
        self.bar.set_prefix(repository.to_string());
        self.bytes.store(0, Ordering::Relaxed);
        self.chunks.store(0, Ordering::Relaxed);
        *self.started.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    fn file(&self, bytes: u64, chunks: usize) {
        let total = self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        let chunks = self.chunks.fetch_add(chunks, Ordering::Relaxed) + chunks;
        let secs = self
            .started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
            .as_secs_f64()
            .max(1e-3);
        self.bar.inc(1);
        self.bar.set_message(format!(
            "{chunks} chunks, {:.2} MB/s",
            total as f64 / 1e6 / secs
        ));
    }

    fn finish(&self, _summary: &RepositorySummary) {
        self.bar.finish_and_clear();
    }
}

pub async fn index(config: Option<PathBuf>, repo: Option<String>) -> anyhow::Result<()> {
    let paths = TabbyPaths::from_env();
    let config = load_config(&paths, config)?;
    let extra = indexing::db_repositories(&paths, config.database.url.as_deref()).await?;
    if config.repositories.is_empty() && extra.is_empty() {
        anyhow::bail!(
            "no [[repositories]] in the config and none added in the web UI: nothing to index"
        );
    }
    let total = configured_repositories(&config).len() + extra.len();
    let embedding = indexing::embedding_from_config(&paths, &config)?;
    if embedding.is_none() {
        eprintln!("note: no [model.embedding] configured: indexing BM25 tokens only");
    }
    let started = Instant::now();
    let progress = BarProgress::new();
    let summaries = indexing::index_configured(
        &paths,
        &config,
        extra,
        embedding,
        repo.as_deref(),
        &progress,
    )
    .await?;
    for summary in &summaries {
        print!("{summary}");
    }
    let files: usize = summaries.iter().map(|s| s.files_indexed).sum();
    let chunks: usize = summaries.iter().map(|s| s.chunks).sum();
    println!(
        "done: {} repositories, {files} files, {chunks} chunks in {:.1} s",
        summaries.len(),
        started.elapsed().as_secs_f64()
    );
    if summaries.len() < total && repo.is_none() {
        anyhow::bail!("some repositories failed to index (see the log above)");
    }
    Ok(())
}

pub async fn search(
    config: Option<PathBuf>,
    repo: Option<String>,
    language: Option<String>,
    json: bool,
    limit: usize,
    query: String,
) -> anyhow::Result<()> {
    let paths = TabbyPaths::from_env();
    let config = load_config(&paths, config)?;
    let embedding = indexing::embedding_from_config(&paths, &config)?;
    let service = CodeSearchService::new(
        paths.index_dir(),
        embedding,
        Arc::new(config.language_table()),
    );
    let repos = configured_repositories(&config);
    let sources: Vec<String> = match &repo {
        Some(wanted) => {
            let found = repos.iter().find(|r| indexing::matches(r, wanted));
            vec![
                found
                    .with_context(|| format!("no configured repository matches {wanted:?}"))?
                    .source_id
                    .clone(),
            ]
        }
        None => repos.iter().map(|r| r.source_id.clone()).collect(),
    };
    // Interactive search ranks every candidate and shows the scores: no thresholds.
    let params = tabby_common::config::CodeSearchParams::without_thresholds(limit, limit.max(100));
    let hits = service
        .search_repositories(&query, &sources, language.as_deref(), None, &params, false)
        .await
        .map_err(|e| anyhow::anyhow!("{e} (run `tabby index` first)"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&hits)?);
        return Ok(());
    }
    if hits.is_empty() {
        println!("no results");
    }
    for hit in hits {
        let start = hit.doc.start_line.unwrap_or(1);
        println!(
            "{}:{}  [{}]  rrf={:.4} bm25={:.2} embedding={:.3}",
            hit.doc.filepath,
            start,
            hit.doc.language,
            hit.scores.rrf,
            hit.scores.bm25,
            hit.scores.embedding
        );
        for line in hit.doc.body.lines().take(8) {
            println!("    {line}");
        }
        println!();
    }
    Ok(())
}

/// The chunk sizes `tabby eval --chunk-size` accepts: from a line or two to a few hundred lines.
const EVAL_CHUNK_SIZES: std::ops::RangeInclusive<usize> = 64..=16384;

/// What `tabby eval` was asked.
pub struct EvalArgs {
    pub config: Option<PathBuf>,
    pub queries: PathBuf,
    pub corpus: PathBuf,
    pub legs: String,
    pub out: Option<PathBuf>,
    pub embedding: String,
    pub strategy: QueryStrategy,
    pub num_to_score: usize,
    pub thresholds: bool,
    pub ranker: Option<PathBuf>,
    /// `--nl-expansion`: a table's path, or `none`.
    pub nl_expansion: Option<String>,
    pub features_out: Option<PathBuf>,
    /// `--chunk-size`: another chunk size for the languages that set none.
    pub chunk_size: Option<usize>,
    /// `--mode completion`: what to run.
    pub completion: Option<CompletionEvalArgs>,
}

/// What `tabby eval --mode completion` was asked.
pub struct CompletionEvalArgs {
    pub variants: String,
    pub limit: Option<usize>,
    /// A file of the query ids the model runs on (`--only`).
    pub only: Option<PathBuf>,
    pub prompts_only: bool,
}

pub async fn eval(args: EvalArgs) -> anyhow::Result<()> {
    let EvalArgs {
        config,
        queries,
        corpus,
        legs,
        out,
        embedding,
        strategy,
        num_to_score,
        thresholds,
        ranker,
        nl_expansion,
        features_out,
        chunk_size,
        completion,
    } = args;
    let ranker = ranker
        .map(|p| crate::services::code::ranker::Ranker::load(&p).map(Arc::new))
        .transpose()?;
    use crate::services::code::expansion::NlExpansion;
    let nl_expansion = match nl_expansion.as_deref() {
        None => None,
        Some("none") => Some(None),
        Some(path) => Some(Some(Arc::new(NlExpansion::load(Path::new(path))?))),
    };
    if nl_expansion.is_some() && completion.is_some() {
        anyhow::bail!(
            "--nl-expansion changes how questions are searched: use it with --mode retrieval"
        );
    }
    if num_to_score == 0 {
        anyhow::bail!("--num-to-score must be at least 1");
    }
    if let Some(size) = chunk_size
        && !EVAL_CHUNK_SIZES.contains(&size)
    {
        anyhow::bail!(
            "--chunk-size must be between {} and {} characters, not {size}",
            EVAL_CHUNK_SIZES.start(),
            EVAL_CHUNK_SIZES.end()
        );
    }
    let paths = TabbyPaths::from_env();
    let config = load_config(&paths, config)?;
    let embedding = match embedding.as_str() {
        "none" => None,
        "config" => indexing::embedding_from_config(&paths, &config)?,
        spec if spec.starts_with("hash") || spec.starts_with("fake") => {
            let dim = spec
                .split_once(':')
                .map(|(_, d)| d.parse::<usize>())
                .transpose()
                .context("--embedding hash:DIM needs a number")?
                .unwrap_or(384);
            let model = HashEmbedding::new(dim);
            Some(CodeSearchEmbedding {
                model_id: model.model_id(),
                model: Arc::new(model),
            })
        }
        spec if spec.starts_with("local:") => {
            let id = &spec["local:".len()..];
            let dir = tabby_local::registry::resolve_model_dir(&paths.models_dir(), id)?;
            let options = tabby_local::embedding::EmbeddingOptions::default();
            let loaded = tokio::task::spawn_blocking(move || {
                tabby_local::embedding::load_any(&dir, options)
            })
            .await??;
            Some(CodeSearchEmbedding {
                model: loaded.model,
                model_id: loaded.model_id,
            })
        }
        other => anyhow::bail!(
            "unknown --embedding {other:?}: expected none, hash[:DIM], local:MODEL_ID_OR_DIR or config"
        ),
    };
    if let Some(CompletionEvalArgs {
        variants,
        limit,
        only,
        prompts_only,
    }) = completion
    {
        let variants = eval::Variant::parse_list(&variants)?;
        let only = only
            .map(
                |path| -> anyhow::Result<std::collections::HashSet<String>> {
                    let text = std::fs::read_to_string(&path)
                        .with_context(|| format!("cannot read --only {}", path.display()))?;
                    Ok(text
                        .lines()
                        .map(str::trim)
                        .filter(|l| !l.is_empty())
                        .map(str::to_string)
                        .collect())
                },
            )
            .transpose()?;
        if limit == Some(0) {
            anyhow::bail!("--limit must be at least 1");
        }
        let mut models = with_local_defaults(&config.model);
        models.chat = None;
        let model = load_models(&models, &paths.models_dir())?
            .completion
            .context("no completion model is configured")?;
        return eval::run_completion(eval::CompletionEvalOptions {
            queries,
            corpus,
            embedding,
            strategy,
            variants,
            limit,
            only,
            prompts_only,
            out,
            config,
            model,
            ranker,
            chunk_size,
        })
        .await;
    }
    eval::run(EvalOptions {
        queries,
        corpus,
        legs: Leg::parse_list(&legs)?,
        out,
        embedding,
        strategy,
        num_to_score,
        thresholds,
        ranker,
        nl_expansion,
        features_out,
        chunk_size,
        config,
    })
    .await
}
