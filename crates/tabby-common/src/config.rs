//! `$TABBY_ROOT/config.toml`: every section upstream accepts, parsed strictly enough that a broken
//! file is reported with its path, line and key instead of silently falling back to defaults.
//! Unknown keys are accepted (upstream ignores them too) but logged as warnings.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use crate::{
    git_url::{canonicalize_git_url, check_git_url, local_path, mirror_dir_name},
    languages::{Language, LanguageTable},
};

#[derive(Clone, Debug, Default, Deserialize)]
pub struct Config {
    #[serde(default)]
    pub repositories: Vec<RepositoryConfig>,
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub model: ModelConfigGroup,
    #[serde(default)]
    pub completion: CompletionConfig,
    #[serde(default)]
    pub embedding: EmbeddingConfig,
    #[serde(default)]
    pub answer: AnswerConfig,
    #[serde(default)]
    pub additional_languages: Vec<Language>,
    #[serde(default)]
    pub security: SecurityConfig,
    #[serde(default)]
    pub mcp: McpConfig,
    #[serde(default)]
    pub email: EmailConfig,
    #[serde(default)]
    pub database: DatabaseConfig,
    #[serde(default)]
    pub index: IndexConfig,
}

/// `[index]`: how replicas on several machines share the index.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct IndexConfig {
    /// A directory all replicas reach (a network volume): processes that write the index
    /// (`--role worker` or `all`) publish each committed version there as an immutable
    /// snapshot, and `--role web` replicas search the newest snapshot instead of
    /// `$TABBY_ROOT/index`. The repository mirrors live there too (`repositories/`), so that
    /// every replica reads the files the worker synced. Unset: every process uses
    /// `$TABBY_ROOT/index` and `$TABBY_ROOT/repositories`.
    pub snapshot_dir: Option<PathBuf>,
}

impl Config {
    /// Where the repository mirrors are: under `[index] snapshot_dir` when replicas share
    /// one, else `$TABBY_ROOT/repositories`.
    pub fn repositories_dir(&self, paths: &crate::path::TabbyPaths) -> PathBuf {
        match &self.index.snapshot_dir {
            Some(shared) => shared.join("repositories"),
            None => paths.repositories_dir(),
        }
    }
}

/// The environment variable that overrides `[database] url`.
pub const DATABASE_URL_VAR: &str = "TABBY_DATABASE_URL";

/// `[database]`: where the enterprise layer keeps its state (users, tokens, jobs, settings).
#[derive(Clone, Default, Deserialize, PartialEq)]
pub struct DatabaseConfig {
    /// `postgres://user:password@host:port/database`: a PostgreSQL database that several
    /// replicas share. Unset: the embedded SQLite file `$TABBY_ROOT/ee/db.sqlite`.
    pub url: Option<String>,
}

impl DatabaseConfig {
    /// The URL with its password replaced by `***`, for logs and messages.
    pub fn redacted_url(&self) -> Option<String> {
        self.url.as_deref().map(redact_url_password)
    }
}

impl std::fmt::Debug for DatabaseConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseConfig")
            .field("url", &self.redacted_url())
            .finish()
    }
}

/// `scheme://user:secret@host/…` → `scheme://user:***@host/…`; other text as it is.
pub fn redact_url_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{path}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// `[email]`: how the background sender retries mail the SMTP server did not take. The SMTP
/// server itself is set in the web UI (admin settings), not here.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct EmailConfig {
    /// Attempts per mail before it is given up (and the admins are notified).
    #[serde(default = "default_email_max_attempts")]
    pub max_attempts: u32,
    /// Seconds before the first retry; each later retry waits four times longer (30 s, 2 min,
    /// 8 min, 32 min, about 2 h with the defaults).
    #[serde(default = "default_email_retry_initial_secs")]
    pub retry_initial_secs: u64,
}

fn default_email_max_attempts() -> u32 {
    6
}
fn default_email_retry_initial_secs() -> u64 {
    30
}

impl Default for EmailConfig {
    fn default() -> Self {
        Self {
            max_attempts: default_email_max_attempts(),
            retry_initial_secs: default_email_retry_initial_secs(),
        }
    }
}

/// `[mcp]`: the Model Context Protocol server at `/mcp`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct McpConfig {
    /// `Host` header values (`name` or `name:port`) `/mcp` answers to. Empty: any host when
    /// callers need a token (the default, multi-user mode), only loopback names in the open
    /// single-user mode (`--no-webserver`), where a web page could otherwise reach it through
    /// DNS rebinding.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Browser origins (`https://host:port`, `:*` for any port) allowed to call `/mcp`.
    /// Requests without an `Origin` header (agents, editors) always pass; with the default
    /// empty list every request that carries one is refused.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
}

/// `[security]`: the allow-lists that widen what GraphQL users and the crawler may reach, and
/// the bounds on sign-in related work.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct SecurityConfig {
    /// Absolute directories under which a repository added through GraphQL may be a
    /// `file://` URL or an absolute path. Empty: only remote URLs over GraphQL (config.toml's
    /// own `[[repositories]]` may always be local).
    #[serde(default)]
    pub local_repository_roots: Vec<PathBuf>,
    /// Hosts (names or IP addresses) and CIDR ranges the web crawler may fetch even though
    /// they resolve to loopback, private, link-local or other internal addresses.
    #[serde(default)]
    pub fetch_allowed_hosts: Vec<String>,
    /// Operations a GraphQL batch (a JSON array of requests) may hold.
    #[serde(default = "default_graphql_max_batch")]
    pub graphql_max_batch: usize,
    /// Days an invitation code can be used to register.
    #[serde(default = "default_invitation_expiry_days")]
    pub invitation_expiry_days: u32,
    /// When set, `GET /metrics` requires `Authorization: Bearer <metrics_token>`
    /// (`TABBY_METRICS_TOKEN` overrides it). Unset: `/metrics` is open.
    #[serde(default)]
    pub metrics_token: Option<String>,
    /// Active accounts the server allows (the seats); unset: no limit. Registration and
    /// re-activation beyond it are refused.
    #[serde(default)]
    pub max_users: Option<u32>,
    /// Active admins allowed (the owner counts); unset: no limit.
    #[serde(default)]
    pub max_admins: Option<u32>,
}

fn default_graphql_max_batch() -> usize {
    10
}
fn default_invitation_expiry_days() -> u32 {
    7
}

impl Default for SecurityConfig {
    fn default() -> Self {
        Self {
            local_repository_roots: Vec::new(),
            fetch_allowed_hosts: Vec::new(),
            graphql_max_batch: default_graphql_max_batch(),
            invitation_expiry_days: default_invitation_expiry_days(),
            metrics_token: None,
            max_users: None,
            max_admins: None,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct RepositoryConfig {
    pub git_url: String,
    #[serde(default)]
    pub refs: Vec<String>,
}

impl RepositoryConfig {
    /// The remote URL without credentials or `.git`.
    pub fn canonical_git_url(&self) -> String {
        canonicalize_git_url(&self.git_url)
    }

    /// A `file://` URL or an absolute path: indexed in place.
    pub fn local_path(&self) -> Option<PathBuf> {
        local_path(&self.git_url)
    }

    /// Where the repository's files are: the local path, or the mirror directory under `repositories_dir`.
    pub fn dir(&self, repositories_dir: &Path) -> PathBuf {
        self.local_path()
            .unwrap_or_else(|| repositories_dir.join(mirror_dir_name(&self.git_url)))
    }
}

/// Source id of the `index`-th `[[repositories]]` entry: `config:<hashid(index)>`.
pub fn config_index_to_source_id(index: usize) -> String {
    let harsh = harsh::Harsh::builder()
        .salt("tabby-config-id-serializer")
        .length(6)
        .build()
        .expect("static hashids parameters are valid");
    format!("config:{}", harsh.encode(&[index as u64]))
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ServerConfig {
    /// Seconds before `/v1/completions` answers 408. (Upstream requires this key whenever
    /// `[server]` is present; here it defaults like every other key.)
    #[serde(default = "default_completion_timeout")]
    pub completion_timeout: u64,
}

fn default_completion_timeout() -> u64 {
    30
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            completion_timeout: default_completion_timeout(),
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct ModelConfigGroup {
    pub completion: Option<ModelConfig>,
    pub chat: Option<ModelConfig>,
    pub embedding: Option<ModelConfig>,
}

/// `[model.<role>.http]` or `[model.<role>.local]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum ModelConfig {
    Http(HttpModelConfig),
    Local(LocalModelConfig),
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct HttpModelConfig {
    pub kind: String,
    pub api_endpoint: Option<String>,
    pub api_key: Option<String>,
    #[serde(default)]
    pub rate_limit: RateLimit,
    pub model_name: Option<String>,
    pub prompt_template: Option<String>,
    pub chat_template: Option<String>,
    pub supported_models: Option<Vec<String>>,
    #[serde(default)]
    pub additional_stop_words: Vec<String>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct RateLimit {
    #[serde(default = "default_request_per_minute")]
    pub request_per_minute: u64,
}

fn default_request_per_minute() -> u64 {
    1200
}

impl Default for RateLimit {
    fn default() -> Self {
        Self {
            request_per_minute: default_request_per_minute(),
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct LocalModelConfig {
    /// A model id (`Org/Name` or `Name`) under `$TABBY_ROOT/models`, or a path to a model directory.
    pub model_id: String,
    #[serde(default = "default_parallelism")]
    pub parallelism: u8,
    #[serde(default = "default_num_gpu_layers")]
    pub num_gpu_layers: u16,
    pub enable_fast_attention: Option<bool>,
    #[serde(default = "default_context_size")]
    pub context_size: usize,
    /// MiB of finished requests' KV caches the embedded runtime keeps, so that the next
    /// keystroke's prompt reads only what changed (0: none).
    #[serde(default = "default_prompt_cache_mib")]
    pub prompt_cache_mib: usize,
    /// Most tokens a greedy request drafts per forward pass from its own prompt and output
    /// (prompt lookup; the text stays the same, token for token). 0: none.
    #[serde(default = "default_draft_tokens")]
    pub draft_tokens: usize,
    /// The FIM template, instead of the model directory's `tabby.json` (e.g. the suffix-first
    /// `<|fim_suffix|>{suffix}<|fim_prefix|>{prefix}<|fim_middle|>` for Qwen2.5-Coder).
    #[serde(default)]
    pub prompt_template: Option<String>,
    #[serde(default)]
    pub additional_stop_words: Vec<String>,
}

pub const DEFAULT_PROMPT_CACHE_MIB: usize = 256;

fn default_prompt_cache_mib() -> usize {
    DEFAULT_PROMPT_CACHE_MIB
}

pub const DEFAULT_DRAFT_TOKENS: usize = 4;
pub const MAX_DRAFT_TOKENS: usize = 32;

fn default_draft_tokens() -> usize {
    DEFAULT_DRAFT_TOKENS
}

fn default_parallelism() -> u8 {
    4
}
fn default_num_gpu_layers() -> u16 {
    9999
}
fn default_context_size() -> usize {
    4096
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct CompletionConfig {
    /// Bytes of the whole prompt, shared out between snippets, prefix and suffix.
    #[serde(default = "default_max_input_length")]
    pub max_input_length: usize,
    #[serde(default = "default_max_decoding_tokens")]
    pub max_decoding_tokens: usize,
    #[serde(default = "CodeSearchParams::completion_default")]
    pub code_search_params: CodeSearchParams,
    /// Most bytes of written snippets while the prefix needs the room (more when it is short).
    #[serde(default = "default_snippet_bytes")]
    pub snippet_bytes: usize,
    /// Most bytes of suffix while the prefix needs the room.
    #[serde(default = "default_suffix_bytes")]
    pub suffix_bytes: usize,
    /// The prefix starts at an anchor line, about one in this many lines chosen by content,
    /// up to `2 * N - 1` lines below its best start (where the budget clips it, else where the
    /// editor's text starts; 1: the best line start). More keeps the prompt's start, and so
    /// the model's prompt cache, across more keystrokes and lines, at the price of a few lines
    /// less context (4: the typing replay's p90 1,000 → 846 ms, the completion eval within a
    /// query of 1; README).
    #[serde(default = "default_prefix_clip_lines")]
    pub prefix_clip_lines: usize,
    /// A candidate too large for the room left is written as its first lines (at most this
    /// many, whole lines, marked `…`) instead of being passed over; 0: whole snippets only.
    #[serde(default = "default_snippet_head_lines")]
    pub snippet_head_lines: usize,
    #[serde(default)]
    pub snippet_format: SnippetFormat,
    /// Snippets are chosen in priority order either way; with this set they are written with
    /// the best one last, nearest the current file (the eval's `bestlast` variant).
    #[serde(default)]
    pub snippets_best_last: bool,
    /// Hybrid-search hits become snippets only when both legs (BM25 and embedding) found them
    /// (the eval's `agree` variant); import candidates are not affected.
    #[serde(default)]
    pub search_hits_from_both_legs: bool,
    /// Code-search hits (and import candidates) become snippets only when they come from a
    /// file the edited file imports (in Go, also a file of its own package) or define a name
    /// (tree-sitter tags) that the editor's text uses: its prefix, its suffix or the file's
    /// import statements (the eval's `usednames` variant). Editor snippets and outlines are
    /// not affected; a language without tags keeps every hit, and so does a file the index
    /// does not hold yet; the name being typed at the cursor counts as a use of every name it
    /// starts. On by default since session 30: on the completion eval it raised mobx 1.36× →
    /// 1.73× over no retrieval and kept every other set at or above 1.5× (README, "What
    /// context does to completions").
    #[serde(default = "default_true")]
    pub snippets_of_used_names: bool,
    /// On a new line of a file, the previous line's snippets that the new search still ranks
    /// high stay first, in their order, so that the prompt's start (and the model's prompt
    /// cache) survives the line change.
    #[serde(default = "default_true")]
    pub steady_snippets: bool,
    /// Candidates from the files the edited file imports, ahead of the other search hits
    /// (0: none).
    #[serde(default = "default_import_snippets")]
    pub import_snippets: usize,
    /// Most bytes of the edited file's own import statements (from its indexed version) written
    /// above the prefix when the editor's window does not show them, the ones of the
    /// repository's own modules first (0: none).
    #[serde(default = "default_import_header_bytes")]
    pub import_header_bytes: usize,
    /// Most bytes of the outline of what the name before the cursor leads to (`util.`,
    /// `crate::error::Error::`, `self.parser.`): the signature lines of a module's top-level
    /// definitions or a type's members, written as a snippet nearest the current file (0: none).
    #[serde(default = "default_outline_bytes")]
    pub outline_bytes: usize,
    /// After `module.` / `module::`, where the module is a file of the repository that names
    /// every name it offers (an ES module through `import * as`, a Python module that is not a
    /// package, a Rust module without a glob re-export, a Go package), the completion must
    /// start with one of those names (or what is left of one the editor has started). Backends
    /// that pick tokens themselves (the embedded runtime) mask the others; remote backends
    /// ignore it. The eval's `free` variant turns it off.
    #[serde(default = "default_true")]
    pub member_names_only: bool,
    /// After `name.` / `name::`: how much the completion's first name follows the edited
    /// file's own habit, a cache model of the file (its indexed text outside the editor's
    /// window, and the window itself): the names that followed the same access before the
    /// cursor within a block of code (`core.map(core.` → what came after `core.map` elsewhere
    /// in the file), mixed into the model's choice with this weight (0: the model alone; 1:
    /// those names decide where the file has them). With `member_names_only` and a module's
    /// names, among those names; otherwise (a value's members, `self.`) nothing is masked.
    /// Backends that pick tokens themselves use it; others ignore it.
    #[serde(default = "default_name_cache_weight")]
    pub name_cache_weight: f32,
    /// Whether completion's code search runs the names leg (the definitions of the names the
    /// edited file uses above the editor's lines), which search with a file runs whenever
    /// the ranker weighs it. Off: its hits are found more often but did not make the
    /// embedded model's completions better (`tabby eval --mode completion`, variant `names`;
    /// README, "The file's names as a third leg").
    #[serde(default)]
    pub names_leg: bool,
    /// Whether completion's code search runs the members leg (after `name.` or `path::`, the
    /// definitions of the members of what the chain leads to), which search with a file runs
    /// whenever the ranker weighs it. Off: the embedded model's completions were no better
    /// with it (`tabby eval --mode completion`, variant `members`; README, "The members of
    /// what the cursor follows").
    #[serde(default)]
    pub members_leg: bool,
}

/// Chosen by `tabby eval --mode completion` (README, "What context does to completions",
/// session 35).
fn default_name_cache_weight() -> f32 {
    0.5
}

fn default_true() -> bool {
    true
}

/// 0 since the import header and outlines: with them, the imported files' chunks cost more
/// than they gave on the completion eval (README, 106 against 110 callees named first over
/// seven sets).
fn default_import_snippets() -> usize {
    0
}

/// On the completion eval (README, "What context does to completions"), 512 bytes matched or
/// beat 256 on six of seven sets and doubled identifier match on click and markdown.
fn default_import_header_bytes() -> usize {
    512
}

/// On the completion eval (README), 256 bytes named the callee in more prompts on every set and
/// raised identifier match on packaging 0.179 → 0.308; 384 did no better.
fn default_outline_bytes() -> usize {
    256
}

/// How snippets are written into a completion prompt.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SnippetFormat {
    /// `FileSep` for Qwen2.5-Coder's FIM template, `Comment` for others.
    #[default]
    Auto,
    /// Line comments above the prefix (`# Path: a.py`, `# <line>`), as upstream.
    Comment,
    /// `<|repo_name|>` and one `<|file_sep|>path` per snippet ahead of the current file.
    FileSep,
}

fn default_snippet_bytes() -> usize {
    512
}
fn default_prefix_clip_lines() -> usize {
    4
}
fn default_snippet_head_lines() -> usize {
    0
}

fn default_suffix_bytes() -> usize {
    256
}

fn default_max_input_length() -> usize {
    1536
}
fn default_max_decoding_tokens() -> usize {
    64
}

impl Default for CompletionConfig {
    fn default() -> Self {
        Self {
            max_input_length: default_max_input_length(),
            max_decoding_tokens: default_max_decoding_tokens(),
            code_search_params: CodeSearchParams::completion_default(),
            snippet_bytes: default_snippet_bytes(),
            suffix_bytes: default_suffix_bytes(),
            prefix_clip_lines: default_prefix_clip_lines(),
            snippet_head_lines: default_snippet_head_lines(),
            snippet_format: SnippetFormat::default(),
            snippets_best_last: false,
            search_hits_from_both_legs: false,
            snippets_of_used_names: true,
            steady_snippets: true,
            import_snippets: default_import_snippets(),
            import_header_bytes: default_import_header_bytes(),
            outline_bytes: default_outline_bytes(),
            member_names_only: true,
            name_cache_weight: default_name_cache_weight(),
            names_leg: false,
            members_leg: false,
        }
    }
}

/// Thresholds and sizes of one code search. When given in the config, upstream's five keys are
/// required; `max_hits_per_file` is ours and optional.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub struct CodeSearchParams {
    pub min_embedding_score: f32,
    pub min_bm25_score: f32,
    pub min_rrf_score: f32,
    pub num_to_return: usize,
    pub num_to_score: usize,
    /// Hits one file may give at most; 0: no cap. Upstream caps at 2; `tabby eval` on
    /// generated sets chose no cap (README, "Learned ranking").
    #[serde(default)]
    pub max_hits_per_file: usize,
    /// Whether a code query in a file runs the names leg when the ranker weighs it (not a
    /// config key: completion sets it from `[completion] names_leg`).
    #[serde(skip, default = "default_true")]
    pub names_leg: bool,
    /// The same for the members leg (`[completion] members_leg`).
    #[serde(skip, default = "default_true")]
    pub members_leg: bool,
}

impl CodeSearchParams {
    /// No score thresholds: the prompt's snippet budget, filled in rank order, is the limit.
    /// Upstream's thresholds let no snippet through on most editor requests (`tabby eval --mode
    /// completion`, variant `upstream`); they remain as [`CodeSearchParams::upstream_completion`].
    pub fn completion_default() -> Self {
        Self::without_thresholds(20, 40)
    }

    /// Upstream Tabby's completion thresholds.
    pub fn upstream_completion() -> Self {
        Self {
            min_embedding_score: 0.75,
            min_bm25_score: 8.0,
            min_rrf_score: 0.028,
            num_to_return: 20,
            num_to_score: 40,
            max_hits_per_file: 2,
            names_leg: true,
            members_leg: true,
        }
    }

    /// Every candidate passes: for ranking experiments and interactive search.
    pub fn without_thresholds(num_to_return: usize, num_to_score: usize) -> Self {
        Self {
            min_embedding_score: f32::NEG_INFINITY,
            min_bm25_score: f32::NEG_INFINITY,
            min_rrf_score: f32::NEG_INFINITY,
            num_to_return,
            num_to_score,
            max_hits_per_file: 0,
            names_leg: true,
            members_leg: true,
        }
    }

    pub fn answer_default() -> Self {
        Self {
            min_embedding_score: 0.5,
            min_bm25_score: -1.0,
            min_rrf_score: -1.0,
            num_to_return: 10,
            num_to_score: 100,
            max_hits_per_file: 0,
            names_leg: true,
            members_leg: true,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct EmbeddingConfig {
    /// Bytes of text embedded per chunk. (Upstream's default is 0 = unlimited when the table is
    /// absent and 5120 when present; we use 5120 either way.)
    #[serde(default = "default_embedding_max_input_length")]
    pub max_input_length: usize,
}

fn default_embedding_max_input_length() -> usize {
    5120
}

impl Default for EmbeddingConfig {
    fn default() -> Self {
        Self {
            max_input_length: default_embedding_max_input_length(),
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct AnswerConfig {
    #[serde(default = "CodeSearchParams::answer_default")]
    pub code_search_params: CodeSearchParams,
    #[serde(default = "default_presence_penalty")]
    pub presence_penalty: f32,
    #[serde(default = "AnswerConfig::default_system_prompt")]
    pub system_prompt: String,
    /// Most tokens of one answer (bounds what one question costs).
    #[serde(default = "default_answer_max_tokens")]
    pub max_tokens: u32,
    /// Answer runs one user may have generating at once (over all their connections); one
    /// more is refused until a run finishes.
    #[serde(default = "default_max_runs_per_user")]
    pub max_runs_per_user: usize,
    /// Seconds an answer keeps generating after its last subscriber left; then it stops
    /// (what was streamed stays stored), unless its thread was persisted meanwhile.
    #[serde(default = "default_abandoned_run_grace_secs")]
    pub abandoned_run_grace_secs: u64,
}

fn default_abandoned_run_grace_secs() -> u64 {
    30
}

fn default_max_runs_per_user() -> usize {
    2
}

fn default_answer_max_tokens() -> u32 {
    1024
}

fn default_presence_penalty() -> f32 {
    0.5
}

impl AnswerConfig {
    pub fn default_system_prompt() -> String {
        "You are Tabby, a coding assistant for a software team. Answer questions about the team's \
         code and documentation accurately and concisely. Ground your answer in the provided \
         context and cite it with [[citation:N]] markers; when the context does not contain the \
         answer, say so rather than guessing. Prefer short code examples in fenced blocks with a \
         language tag."
            .to_string()
    }
}

impl Default for AnswerConfig {
    fn default() -> Self {
        Self {
            code_search_params: CodeSearchParams::answer_default(),
            presence_penalty: default_presence_penalty(),
            system_prompt: Self::default_system_prompt(),
            max_tokens: default_answer_max_tokens(),
            max_runs_per_user: default_max_runs_per_user(),
            abandoned_run_grace_secs: default_abandoned_run_grace_secs(),
        }
    }
}

/// A config file that could not be used, with where and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is not valid: {location}key `{key}`: {message}")]
    Invalid {
        path: PathBuf,
        /// "line L, column C, " when known.
        location: String,
        key: String,
        message: String,
    },
}

impl Config {
    /// Loads `path`. A missing file is the default config; anything unreadable or invalid is an error.
    /// `TABBY_DATABASE_URL`, when set, overrides `[database] url` (so that a container's secret
    /// can carry the database password instead of the file).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let config = match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(path, &text)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Config::default(),
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        config.with_database_url_from_env(
            path,
            std::env::var(DATABASE_URL_VAR)
                .ok()
                .filter(|v| !v.is_empty()),
        )
    }

    /// `[database] url` replaced by `value` (the environment's), checked like the file's.
    fn with_database_url_from_env(
        mut self,
        path: &Path,
        value: Option<String>,
    ) -> Result<Config, ConfigError> {
        if let Some(url) = value {
            self.database.url = Some(url);
            self.validate()
                .map_err(|(key, message)| ConfigError::Invalid {
                    path: path.to_path_buf(),
                    location: format!("{DATABASE_URL_VAR} (environment), "),
                    key,
                    message,
                })?;
        }
        Ok(self)
    }

    /// Parses and validates config text; `path` is only used in error messages.
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let invalid = |location: String, key: String, message: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            location,
            key,
            message,
        };
        let deserializer = toml::Deserializer::parse(text).map_err(|e| {
            invalid(
                span_location(text, e.span()),
                "(syntax)".into(),
                e.message().to_string(),
            )
        })?;
        let mut unknown = Vec::new();
        let mut track = |p: serde_ignored::Path<'_>| unknown.push(p.to_string());
        let ignoring = serde_ignored::Deserializer::new(deserializer, &mut track);
        let config: Config = serde_path_to_error::deserialize(ignoring).map_err(|e| {
            let key = e.path().to_string();
            let inner = e.into_inner();
            invalid(
                span_location(text, inner.span()),
                key,
                inner.message().to_string(),
            )
        })?;
        for key in unknown {
            tracing::warn!("{}: unknown key `{key}` is ignored", path.display());
        }
        config.validate().map_err(|(key, message)| {
            let location = find_key_line(text, &key)
                .map(|l| format!("line {l}, "))
                .unwrap_or_default();
            invalid(location, key, message)
        })?;
        Ok(config)
    }

    /// Semantic checks; returns the offending key and a message.
    fn validate(&self) -> Result<(), (String, String)> {
        if let Some(dir) = &self.index.snapshot_dir
            && !dir.is_absolute()
        {
            return Err((
                "index.snapshot_dir".into(),
                "must be an absolute path (a directory every replica mounts)".into(),
            ));
        }
        if let Some(url) = &self.database.url
            && !(url.starts_with("postgres://") || url.starts_with("postgresql://"))
        {
            return Err((
                "database.url".into(),
                "must be a postgres:// or postgresql:// URL (leave it out for the embedded SQLite \
                 database)"
                    .into(),
            ));
        }
        for (role, model) in [
            ("completion", &self.model.completion),
            ("chat", &self.model.chat),
            ("embedding", &self.model.embedding),
        ] {
            if let Some(ModelConfig::Http(http)) = model {
                if let (Some(supported), Some(name)) = (&http.supported_models, &http.model_name)
                    && !supported.contains(name)
                {
                    return Err((
                        format!("model.{role}.http.supported_models"),
                        format!("must contain model_name {name:?} (it lists {supported:?})"),
                    ));
                }
                if http.rate_limit.request_per_minute == 0 {
                    return Err((
                        format!("model.{role}.http.rate_limit.request_per_minute"),
                        "must be at least 1".into(),
                    ));
                }
            }
            if let Some(ModelConfig::Local(local)) = model
                && local.draft_tokens > MAX_DRAFT_TOKENS
            {
                // Every drafted token is a row of the pass that checks it.
                return Err((
                    format!("model.{role}.local.draft_tokens"),
                    format!("must be at most {MAX_DRAFT_TOKENS}"),
                ));
            }
        }
        let weight = self.completion.name_cache_weight;
        if !(0.0..=1.0).contains(&weight) {
            return Err((
                "completion.name_cache_weight".into(),
                format!("must be between 0 and 1 (it is {weight})"),
            ));
        }
        let mut dirs: HashMap<PathBuf, usize> = HashMap::new();
        for (i, repo) in self.repositories.iter().enumerate() {
            check_git_url(&repo.git_url)
                .map_err(|message| (format!("repositories[{i}].git_url"), message))?;
            if let Some(r) = repo.refs.iter().find(|r| !is_valid_ref(r)) {
                return Err((
                    format!("repositories[{i}].refs"),
                    format!("{r:?} is not a valid git ref (empty, spaces, or begins with '-')"),
                ));
            }
            let dir = repo.dir(Path::new(""));
            if let Some(first) = dirs.insert(dir, i) {
                return Err((
                    format!("repositories[{i}].git_url"),
                    format!(
                        "{:?} is the same repository as repositories[{first}] ({:?})",
                        repo.git_url, self.repositories[first].git_url
                    ),
                ));
            }
        }
        if self.server.completion_timeout == 0 {
            return Err((
                "server.completion_timeout".into(),
                "must be at least 1 second".into(),
            ));
        }
        LanguageTable::with_additional(&self.additional_languages)
            .map_err(|e| ("additional_languages".to_string(), e.to_string()))?;
        self.security.validate()?;
        if self.email.max_attempts == 0 || self.email.max_attempts > 20 {
            return Err((
                "email.max_attempts".into(),
                "must be between 1 and 20".into(),
            ));
        }
        if self.email.retry_initial_secs > 86_400 {
            return Err((
                "email.retry_initial_secs".into(),
                "must be at most 86400 (a day)".into(),
            ));
        }
        Ok(())
    }

    /// The languages table including `[[additional_languages]]` (validated at load).
    pub fn language_table(&self) -> LanguageTable {
        LanguageTable::with_additional(&self.additional_languages).unwrap_or_default()
    }
}

/// A ref name we hand to git2: not empty, no whitespace or control characters, and never
/// something an option parser could take for an option.
pub fn is_valid_ref(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('-')
        && !name.chars().any(|c| c.is_whitespace() || c.is_control())
}

impl SecurityConfig {
    fn validate(&self) -> Result<(), (String, String)> {
        if self.graphql_max_batch == 0 {
            return Err((
                "security.graphql_max_batch".into(),
                "must be at least 1".into(),
            ));
        }
        if self.invitation_expiry_days == 0 {
            return Err((
                "security.invitation_expiry_days".into(),
                "must be at least 1 day".into(),
            ));
        }
        if self
            .metrics_token
            .as_ref()
            .is_some_and(|t| t.trim().is_empty())
        {
            return Err((
                "security.metrics_token".into(),
                "must not be empty (remove the key to leave /metrics open)".into(),
            ));
        }
        for (i, root) in self.local_repository_roots.iter().enumerate() {
            let key = format!("security.local_repository_roots[{i}]");
            if !root.is_absolute() {
                return Err((key, format!("{} must be an absolute path", root.display())));
            }
            if root
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
            {
                return Err((key, format!("{} must not contain `..`", root.display())));
            }
        }
        for (key, limit) in [
            ("security.max_users", self.max_users),
            ("security.max_admins", self.max_admins),
        ] {
            if limit == Some(0) {
                return Err((key.into(), "must be at least 1 (the owner)".into()));
            }
        }
        for (i, host) in self.fetch_allowed_hosts.iter().enumerate() {
            crate::net::HostPattern::parse(host)
                .map_err(|message| (format!("security.fetch_allowed_hosts[{i}]"), message))?;
        }
        Ok(())
    }

    /// Whether a repository added through GraphQL may be the local directory `path`: it must
    /// lie below one of `local_repository_roots` once `..` and symbolic links are resolved.
    pub fn allows_local_repository(&self, path: &Path) -> bool {
        if path
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return false;
        }
        // Symbolic links are resolved where the path exists; a path that does not exist yet is
        // judged by its components (it has no `..`).
        let resolved = std::fs::canonicalize(path).ok();
        self.local_repository_roots.iter().any(|root| {
            let canonical_root = std::fs::canonicalize(root).unwrap_or_else(|_| root.clone());
            match &resolved {
                Some(resolved) => resolved.starts_with(&canonical_root),
                None => path.starts_with(root) || path.starts_with(&canonical_root),
            }
        })
    }
}

fn span_location(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    let Some(span) = span else {
        return String::new();
    };
    let start = span.start.min(text.len());
    let line = text[..start].matches('\n').count() + 1;
    let column = start - text[..start].rfind('\n').map_or(0, |i| i + 1) + 1;
    format!("line {line}, column {column}, ")
}

/// Best-effort line of the last component of a dotted key (for semantic errors).
fn find_key_line(text: &str, key: &str) -> Option<usize> {
    let leaf = key.rsplit('.').next()?;
    let leaf = leaf.split('[').next()?;
    text.lines()
        .position(|l| {
            let l = l.trim_start();
            l.starts_with(leaf) && l[leaf.len()..].trim_start().starts_with('=')
        })
        .map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(Path::new("/root/.tabby/config.toml"), text)
    }

    #[test]
    fn index_snapshot_dir_is_an_absolute_path() {
        assert_eq!(parse("").unwrap().index.snapshot_dir, None);
        let c = parse("[index]\nsnapshot_dir = \"/mnt/shared/tabby-index\"\n").unwrap();
        assert_eq!(
            c.index.snapshot_dir.as_deref(),
            Some(Path::new("/mnt/shared/tabby-index"))
        );
        let paths = crate::path::TabbyPaths::new("/root/.tabby");
        assert_eq!(
            c.repositories_dir(&paths),
            Path::new("/mnt/shared/tabby-index/repositories")
        );
        assert_eq!(
            parse("").unwrap().repositories_dir(&paths),
            Path::new("/root/.tabby/repositories")
        );
        let err = parse("[index]\nsnapshot_dir = \"shared\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("index.snapshot_dir") && err.contains("absolute"),
            "{err}"
        );
    }

    #[test]
    fn the_deployment_example_config_is_valid() {
        let text = include_str!("../../../deploy/config.toml");
        let c = parse(text).unwrap();
        assert!(matches!(c.model.completion, Some(ModelConfig::Http(_))));
        assert!(matches!(c.model.chat, Some(ModelConfig::Http(_))));
        assert_eq!(
            c.database.url, None,
            "the password comes from TABBY_DATABASE_URL"
        );
    }

    #[test]
    fn database_url_is_postgres_and_its_password_stays_out_of_debug() {
        assert_eq!(parse("").unwrap().database.url, None);
        let c = parse("[database]\nurl = \"postgres://tabby:s3cret@db.internal:5432/tabby\"\n")
            .unwrap();
        assert_eq!(
            c.database.url.as_deref(),
            Some("postgres://tabby:s3cret@db.internal:5432/tabby")
        );
        let shown = format!("{:?}", c.database);
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(
            shown.contains("postgres://tabby:***@db.internal:5432/tabby"),
            "{shown}"
        );
        for bad in [
            "sqlite:///tmp/x.db",
            "/var/lib/tabby.db",
            "mysql://a@b/c",
            "",
        ] {
            let err = parse(&format!("[database]\nurl = {bad:?}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("database.url") && err.contains("postgres://"),
                "{err}"
            );
        }
        assert_eq!(redact_url_password("postgres://u@h/d"), "postgres://u@h/d");
        // The environment's URL replaces the file's, checked the same way.
        let path = Path::new("/root/.tabby/config.toml");
        let from_env = c
            .clone()
            .with_database_url_from_env(path, Some("postgres://env@db/tabby".into()))
            .unwrap();
        assert_eq!(
            from_env.database.url.as_deref(),
            Some("postgres://env@db/tabby")
        );
        assert_eq!(
            c.clone()
                .with_database_url_from_env(path, None)
                .unwrap()
                .database,
            c.database
        );
        let err = c
            .with_database_url_from_env(path, Some("file:///tmp/x".into()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("TABBY_DATABASE_URL") && err.contains("database.url"),
            "{err}"
        );
        assert_eq!(
            redact_url_password("postgresql://u:p@w@h/d"),
            "postgresql://u:***@h/d"
        );
    }

    #[test]
    fn empty_is_default() {
        let c = parse("").unwrap();
        assert_eq!(c.server.completion_timeout, 30);
        assert_eq!(c.completion.max_input_length, 1536);
        assert_eq!(c.completion.max_decoding_tokens, 64);
        assert_eq!(
            c.completion.code_search_params,
            CodeSearchParams::completion_default()
        );
        assert_eq!(
            c.answer.code_search_params,
            CodeSearchParams::answer_default()
        );
        assert_eq!(c.answer.presence_penalty, 0.5);
        assert_eq!(c.embedding.max_input_length, 5120);
        assert!(c.model.completion.is_none());
    }

    #[test]
    fn every_section_parses() {
        let c = parse(
            r#"
[[repositories]]
git_url = "https://github.com/TabbyML/tabby.git"
refs = ["main"]
name = "ignored"

[server]
completion_timeout = 5

[model.completion.http]
kind = "llama.cpp/completion"
api_endpoint = "http://localhost:8081"
prompt_template = "<PRE> {prefix} <SUF>{suffix} <MID>"
additional_stop_words = ["<END>"]
[model.completion.http.rate_limit]
request_per_minute = 60

[model.chat.http]
kind = "openai/chat"
model_name = "gpt"
api_endpoint = "http://localhost:8082/v1"
supported_models = ["gpt", "gpt-2"]

[model.embedding.local]
model_id = "all-MiniLM-L6-v2"

[completion]
max_input_length = 2048
max_decoding_tokens = 32
[completion.code_search_params]
min_embedding_score = 0.5
min_bm25_score = 1.0
min_rrf_score = 0.01
num_to_return = 5
num_to_score = 10

[embedding]
max_input_length = 1000

[answer]
presence_penalty = 0.1
system_prompt = "be brief"

[[additional_languages]]
languages = ["zig"]
exts = ["zig"]
line_comment = "//"
top_level_keywords = ["fn"]
"#,
        )
        .unwrap();
        assert_eq!(c.repositories[0].refs, vec!["main"]);
        assert_eq!(c.server.completion_timeout, 5);
        let Some(ModelConfig::Http(http)) = &c.model.completion else {
            panic!("expected http completion model")
        };
        assert_eq!(http.rate_limit.request_per_minute, 60);
        assert_eq!(http.additional_stop_words, vec!["<END>"]);
        assert!(matches!(&c.model.embedding, Some(ModelConfig::Local(l)) if l.parallelism == 4));
        assert_eq!(c.completion.code_search_params.num_to_return, 5);
        // Upstream's five keys are enough; our per-file cap then means none.
        assert_eq!(c.completion.code_search_params.max_hits_per_file, 0);
        assert_eq!(c.answer.system_prompt, "be brief");
        assert_eq!(c.language_table().get("zig").canonical_name(), "zig");
    }

    #[test]
    fn type_error_names_file_line_and_key() {
        let err = parse("[server]\ncompletion_timeout = \"soon\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("/root/.tabby/config.toml"), "{err}");
        assert!(err.contains("line 2"), "{err}");
        assert!(err.contains("server.completion_timeout"), "{err}");
    }

    #[test]
    fn syntax_error_names_line() {
        let err = parse("[server\n").unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
    }

    #[test]
    fn missing_required_key_is_named() {
        let err = parse("[model.completion.http]\napi_endpoint = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("kind"), "{err}");
        assert!(err.contains("model.completion"), "{err}");
    }

    #[test]
    fn partial_code_search_params_is_an_error() {
        let err = parse("[completion.code_search_params]\nnum_to_return = 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("completion.code_search_params"), "{err}");
    }

    #[test]
    fn supported_models_must_contain_model_name() {
        let err = parse(
            "[model.chat.http]\nkind = \"openai/chat\"\nmodel_name = \"a\"\nsupported_models = [\"b\"]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("model.chat.http.supported_models"), "{err}");
        assert!(err.contains("line 4"), "{err}");
    }

    #[test]
    fn draft_tokens_are_bounded() {
        let local = |n: usize| {
            format!(
                "[model.completion.local]\nmodel_id = \"TabbyML/StarCoder-1B\"\ndraft_tokens = {n}\n"
            )
        };
        let err = parse(&local(MAX_DRAFT_TOKENS + 1)).unwrap_err().to_string();
        assert!(err.contains("model.completion.local.draft_tokens"), "{err}");
        assert!(err.contains("at most 32"), "{err}");
        let config = parse(&local(0)).unwrap();
        let Some(ModelConfig::Local(local)) = config.model.completion else {
            panic!("a local model");
        };
        assert_eq!(local.draft_tokens, 0);
    }

    #[test]
    fn completion_runs_no_names_leg_unless_asked_and_search_does() {
        let c = parse("").unwrap();
        assert!(!c.completion.names_leg);
        assert!(!c.completion.members_leg);
        assert!(c.answer.code_search_params.members_leg);
        assert!(c.completion.code_search_params.members_leg);
        assert!(
            parse("[completion]\nmembers_leg = true\n")
                .unwrap()
                .completion
                .members_leg
        );
        // Search params (the answer's, which /v1beta/search starts from) run it; the key is
        // not one of theirs.
        assert!(c.answer.code_search_params.names_leg);
        assert!(c.completion.code_search_params.names_leg);
        assert!(
            parse("[completion]\nnames_leg = true\n")
                .unwrap()
                .completion
                .names_leg
        );
        let c = parse(
            "[answer.code_search_params]\nmin_embedding_score = 0.1\nmin_bm25_score = 0.0\n\
             min_rrf_score = 0.0\nnum_to_return = 5\nnum_to_score = 20\n",
        )
        .unwrap();
        assert!(c.answer.code_search_params.names_leg);
    }

    #[test]
    fn the_name_cache_weight_is_a_share() {
        assert_eq!(parse("").unwrap().completion.name_cache_weight, 0.5);
        let c = parse("[completion]\nname_cache_weight = 0.0\n").unwrap();
        assert_eq!(c.completion.name_cache_weight, 0.0);
        for bad in ["1.5", "-0.1", "nan"] {
            let err = parse(&format!("[completion]\nname_cache_weight = {bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("completion.name_cache_weight"), "{bad}: {err}");
        }
    }

    #[test]
    fn duplicate_repositories_are_an_error_not_a_fallback() {
        let err = parse(
            "[[repositories]]\ngit_url = \"https://github.com/a/b.git\"\n[[repositories]]\ngit_url = \"https://github.com/a/b\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("repositories[1].git_url"), "{err}");
    }

    #[test]
    fn option_injection_through_config_is_refused() {
        let err = parse("[[repositories]]\ngit_url = \"--upload-pack=touch /tmp/pwned\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("repositories[0].git_url"), "{err}");
        assert!(err.contains("line 2"), "{err}");
        assert!(err.contains("option"), "{err}");
        let err = parse("[[repositories]]\ngit_url = \"ssh://-oProxyCommand=x/r\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("repositories[0].git_url"), "{err}");
        let err =
            parse("[[repositories]]\ngit_url = \"https://h/r\"\nrefs = [\"--output=/etc/x\"]\n")
                .unwrap_err()
                .to_string();
        assert!(err.contains("repositories[0].refs"), "{err}");
        assert!(err.contains("line 3"), "{err}");
        // Local repositories stay allowed in config.toml.
        let c = parse("[[repositories]]\ngit_url = \"file:///srv/r\"\n[[repositories]]\ngit_url = \"/srv/s\"\n")
            .unwrap();
        assert_eq!(
            c.repositories[1].local_path(),
            Some(PathBuf::from("/srv/s"))
        );
    }

    #[test]
    fn security_section() {
        let c = parse(
            "[security]\nlocal_repository_roots = [\"/srv/git\"]\nfetch_allowed_hosts = [\"docs.internal\", \"10.1.2.0/24\"]\n",
        )
        .unwrap();
        assert_eq!(
            c.security.local_repository_roots,
            vec![PathBuf::from("/srv/git")]
        );
        assert_eq!(c.security.fetch_allowed_hosts.len(), 2);
        assert_eq!(c.security.graphql_max_batch, 10);
        assert_eq!(c.security.invitation_expiry_days, 7);
        assert_eq!(parse("").unwrap().security, SecurityConfig::default());
        let err = parse("[security]\ngraphql_max_batch = 0\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("security.graphql_max_batch"), "{err}");

        let err = parse("[security]\nlocal_repository_roots = [\"srv/git\"]\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("security.local_repository_roots[0]"), "{err}");
        assert!(err.contains("line 2"), "{err}");
        let err = parse("[security]\n\nfetch_allowed_hosts = [\"10.0.0.0/99\"]\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("security.fetch_allowed_hosts[0]"), "{err}");
        assert!(err.contains("line 3"), "{err}");
        let err = parse("[security]\nfetch_allowed_hosts = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("security.fetch_allowed_hosts"), "{err}");
    }

    #[test]
    fn local_repository_roots_hold_paths_below_them() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("git");
        std::fs::create_dir_all(root.join("team/repo")).unwrap();
        let security = SecurityConfig {
            local_repository_roots: vec![root.clone()],
            ..Default::default()
        };
        assert!(security.allows_local_repository(&root.join("team/repo")));
        assert!(security.allows_local_repository(&root.join("not-yet")));
        assert!(!security.allows_local_repository(&root.join("../outside")));
        assert!(!security.allows_local_repository(Path::new("/etc")));
        assert!(!security.allows_local_repository(&dir.path().join("gitx")));
        // A symbolic link inside the root that points out of it is outside.
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc", root.join("escape")).unwrap();
            assert!(!security.allows_local_repository(&root.join("escape")));
        }
        assert!(!SecurityConfig::default().allows_local_repository(&root.join("team/repo")));
    }

    #[test]
    fn duplicate_additional_language_is_an_error() {
        let err = parse("[[additional_languages]]\nlanguages = [\"python\"]\nexts = [\"pyx\"]\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("additional_languages"), "{err}");
    }

    #[test]
    fn missing_file_is_default_and_unreadable_is_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Config::load(&dir.path().join("nope.toml")).is_ok());
        assert!(matches!(
            Config::load(dir.path()),
            Err(ConfigError::Read { .. })
        ));
    }

    #[test]
    fn config_source_ids_are_stable() {
        let a = config_index_to_source_id(0);
        assert!(
            a.starts_with("config:") && a.len() >= "config:".len() + 6,
            "{a}"
        );
        assert_ne!(a, config_index_to_source_id(1));
        assert_eq!(a, config_index_to_source_id(0));
    }
}

#[cfg(test)]
mod example_tests {
    use super::*;

    /// Every single-`#` commented key in `config.toml.example` parses when uncommented, so the
    /// documented keys and defaults cannot drift from the parser.
    #[test]
    fn config_example_parses_when_uncommented() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config.toml.example");
        let text = std::fs::read_to_string(&path).unwrap();
        let key_line = regex::Regex::new(r"^# (\[|[a-z0-9_]+ = )").unwrap();
        let uncommented: String = text
            .lines()
            .map(|l| if key_line.is_match(l) { &l[2..] } else { l })
            .collect::<Vec<_>>()
            .join("\n");
        let config = Config::parse(&path, &uncommented).unwrap();
        assert_eq!(config.repositories.len(), 1);
        assert_eq!(config.completion, CompletionConfig::default());
        assert_eq!(
            config.answer.code_search_params,
            CodeSearchParams::answer_default()
        );
        assert!(matches!(
            config.model.completion,
            Some(ModelConfig::Http(_))
        ));
        assert!(matches!(config.model.chat, Some(ModelConfig::Http(_))));
        assert!(matches!(config.model.embedding, Some(ModelConfig::Http(_))));
        assert_eq!(config.additional_languages.len(), 1);
    }
}
