//! The MCP tools: what each takes (JSON schema), checks and returns. Every tool is read-only,
//! sees only the repositories the caller may read, caps what it returns, and cites repository,
//! path, lines and commit for every item.
//!
//! Arguments that are malformed (wrong types, limits over the maximum, a path that is not a
//! clean repository-relative one, an invalid regex or glob) are JSON-RPC errors (`-32602`);
//! a well-formed request that finds nothing (unknown repository, file or ref) is a tool result
//! with `isError`, which the agent reads.

use std::{sync::Arc, time::Instant};

use globset::{Glob, GlobMatcher};
use rmcp::{
    ErrorData as McpError,
    model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations},
};
use serde::{Deserialize, de::DeserializeOwned};
use serde_json::{Value, json};
use tabby_common::{
    api::code::{AllowedCodeRepository, CodeRepository, CodeSearchError},
    git_url::redact_credentials,
    index::code::is_test_path,
};
use tabby_index::{
    code::intelligence::{Tag, find_definitions},
    repo_files::{RepoFileError, Snapshot, clean_path},
};

use super::{Access, McpState};
use crate::services::{
    code::symbols::SymbolUse,
    context::{
        self, ContextRequest, DEFAULT_BUDGET_CHARS, DEFAULT_DEPTH, DEFAULT_MAX_ITEMS,
        MAX_BUDGET_CHARS, MAX_DEPTH, MAX_ITEMS, Pack, name_line, occurrences, repository_name,
    },
};

/// Most bytes of text one tool result carries.
const MAX_RESULT_BYTES: usize = 256 * 1024;
/// Lines `read_file` gives by default and at most.
const DEFAULT_READ_LINES: usize = 500;
const MAX_READ_LINES: usize = 2000;
/// Hits, files and matches.
const MAX_SEARCH_HITS: usize = 50;
const MAX_LISTED_FILES: usize = 5000;
const MAX_GREP_MATCHES: usize = 1000;
const MAX_SYMBOL_RESULTS: usize = 200;
/// What one `grep` may read, and for how long.
const GREP_MAX_BYTES: u64 = 128 * 1024 * 1024;
const GREP_MAX_SECONDS: f64 = 10.0;
/// Characters of one matching line shown.
const MAX_LINE_CHARS: usize = 300;
/// Files read to confirm definitions or find references of a symbol.
const MAX_SYMBOL_FILES: usize = 40;

/// The tools, as `tools/list` shows them.
pub fn definitions() -> Vec<Tool> {
    let read_only = || ToolAnnotations::new().read_only(true);
    let tool = |name: &'static str, description: &'static str, schema: Value| {
        let Value::Object(schema) = schema else {
            unreachable!("tool schemas are objects")
        };
        Tool::new(name, description, Arc::new(schema)).annotate(read_only())
    };
    let repository = json!({
        "type": "string",
        "description": "A repository from list_repositories: its name, source_id or git URL."
    });
    let reference = json!({
        "type": "string",
        "description": "Branch, tag or commit to read (default: the default branch). Plain directories have none."
    });
    vec![
        tool(
            "list_repositories",
            "List the code repositories you may read: name, source_id and git URL. Start here \
             to learn what the other tools' `repository` argument accepts.",
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
        ),
        tool(
            "search_code",
            "Hybrid search (keywords + embeddings) over the indexed code: give a natural-language \
             description or a code fragment; returns the best matching chunks with repository, \
             path, line range, commit and the chunk text. Use it to find where something is \
             implemented when you do not know the names.",
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to look for: words, a question or code."},
                    "repository": repository,
                    "language": {"type": "string", "description": "Only this language, e.g. python, rust, go, java, javascript-typescript."},
                    "path": {"type": "string", "description": "Only files matching this glob, e.g. `src/**/*.py`."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_HITS, "default": 10},
                    "include_generated": {"type": "boolean", "default": false, "description": "Also generated code (`@generated`, `Code generated … DO NOT EDIT`, `*_pb2.py`, `*.min.js` …) and vendored code (`vendor/`, `third_party/`, `node_modules/`), which are left out by default."}
                },
                "required": ["query"],
                "additionalProperties": false
            }),
        ),
        tool(
            "search_docs",
            "Search the team's indexed documentation you may read: crawled web pages, documents \
             pushed through the ingestion API and repository commit messages. Returns the title \
             and link (or the commit's sha, author and date) with the matching excerpt. Use it \
             for how-tos, design notes and why code changed, not for the code itself.",
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to look for, in words."},
                    "kind": {"type": "string", "enum": ["web", "ingested", "commit", "issue", "pull"], "description": "Only this kind of document."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_DOC_HITS, "default": 5}
                },
                "required": ["query"],
                "additionalProperties": false
            }),
        ),
        tool(
            "grep",
            "Search the files of a repository (or of all you may read) for a regular expression \
             (Rust regex syntax) or a literal string, line by line; returns path, line number \
             and line for each match. Use it for exact names, strings and patterns.",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Regular expression, or a literal string with `literal: true`."},
                    "literal": {"type": "boolean", "default": false},
                    "case_insensitive": {"type": "boolean", "default": false},
                    "repository": repository,
                    "path": {"type": "string", "description": "Only files matching this glob, e.g. `**/*.rs`."},
                    "ref": reference,
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_GREP_MATCHES, "default": 100}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        ),
        tool(
            "read_file",
            "Read a file of a repository, whole or a line range, with line numbers; cites the \
             commit read.",
            json!({
                "type": "object",
                "properties": {
                    "repository": repository,
                    "path": {"type": "string", "description": "Path relative to the repository root."},
                    "start_line": {"type": "integer", "minimum": 1, "description": "First line (1-based, default 1)."},
                    "end_line": {"type": "integer", "minimum": 1, "description": format!("Last line (default: {DEFAULT_READ_LINES} lines from start_line; at most {MAX_READ_LINES} lines a call).")},
                    "ref": reference
                },
                "required": ["repository", "path"],
                "additionalProperties": false
            }),
        ),
        tool(
            "list_files",
            "List the files of a repository, optionally only those matching a glob \
             (`**/*.py`, `src/*/mod.rs`).",
            json!({
                "type": "object",
                "properties": {
                    "repository": repository,
                    "glob": {"type": "string", "description": "Glob over the relative path; `**` crosses directories."},
                    "ref": reference,
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LISTED_FILES, "default": 500}
                },
                "required": ["repository"],
                "additionalProperties": false
            }),
        ),
        tool(
            "find_definition",
            "Find where a function, method, class, struct, trait, interface or other symbol is \
             defined (from tree-sitter tags of the indexed files): path, kind, line range and \
             the definition's text. Give the bare name (`parse_config`, `Client`); a qualified \
             one (`Client.get`, `mod::Type`) is looked up by its last part.",
            json!({
                "type": "object",
                "properties": {
                    "symbol": {"type": "string"},
                    "repository": repository,
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SYMBOL_RESULTS, "default": 10}
                },
                "required": ["symbol"],
                "additionalProperties": false
            }),
        ),
        tool(
            "get_context",
            "Evidence for a task, in one call: the code that bears on it within a character \
             budget. Entry points are search hits for the task and the definitions of the \
             symbols it names, and the files given; from them the pack follows typed edges one \
             or two steps: references (callers, with their enclosing function), \
             implementations of the interfaces and traits they define and the interfaces their \
             types implement, the definitions of the names their files import, tests (by name, \
             by import and by use), and for changed files their dependents and build files. \
             Each item says why it was taken (search scores and matched words, or which edge \
             from which item, and at what depth); \
             overlapping pieces are merged; `gaps` lists task words nothing matched and symbols \
             defined nowhere. Prefer this to many searches when starting on a task.",
            json!({
                "type": "object",
                "properties": {
                    "task": {"type": "string", "description": "The task or question, in words; code names in it are looked up as symbols."},
                    "repository": repository,
                    "symbols": {"type": "array", "items": {"type": "string"}, "maxItems": 20, "description": "Symbols whose definitions to include."},
                    "paths": {"type": "array", "items": {"type": "string"}, "maxItems": 20, "description": "Files to include (needs `repository`)."},
                    "changed_files": {"type": "array", "items": {"type": "string"}, "maxItems": 20, "description": "Files being changed (needs `repository`): included with the files that import them, their tests and their build files."},
                    "budget_chars": {"type": "integer", "minimum": 500, "maximum": MAX_BUDGET_CHARS, "default": DEFAULT_BUDGET_CHARS},
                    "max_items": {"type": "integer", "minimum": 1, "maximum": MAX_ITEMS, "default": DEFAULT_MAX_ITEMS},
                    "depth": {"type": "integer", "minimum": 0, "maximum": MAX_DEPTH, "default": DEFAULT_DEPTH, "description": "Expansion steps from the entry points (0: entry points only; 2 adds callers of callers and the like, worth a larger budget)."},
                    "include_generated": {"type": "boolean", "default": false, "description": "Also generated code (`@generated`, `Code generated … DO NOT EDIT`, `*_pb2.py`, `*.min.js` …) and vendored code (`vendor/`, `third_party/`, `node_modules/`), which are left out by default."}
                },
                "required": ["task"],
                "additionalProperties": false
            }),
        ),
        tool(
            "find_references",
            "Find where a symbol is used: every line of the indexed files where the identifier \
             occurs as a whole word, except its definitions; path, line number and line.",
            json!({
                "type": "object",
                "properties": {
                    "symbol": {"type": "string"},
                    "repository": repository,
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SYMBOL_RESULTS, "default": 50}
                },
                "required": ["symbol"],
                "additionalProperties": false
            }),
        ),
    ]
}

/// Runs tool `name` for a caller with `access`.
pub async fn call(
    state: &Arc<McpState>,
    access: &Access,
    name: &str,
    args: JsonObject,
) -> Result<CallToolResult, McpError> {
    let allowed = &access.repositories;
    match name {
        "search_docs" => search_docs(state, &access.docs, parse(name, args)?).await,
        "list_repositories" => {
            let _: NoArgs = parse(name, args)?;
            Ok(list_repositories(allowed))
        }
        "search_code" => search_code(state, allowed, parse(name, args)?).await,
        "get_context" => get_context(state, allowed, parse(name, args)?).await,
        "grep" => {
            let (state, allowed, args) = (state.clone(), allowed.clone(), parse(name, args)?);
            blocking(move || grep(&state, &allowed, args)).await
        }
        "read_file" => {
            let (state, allowed, args) = (state.clone(), allowed.clone(), parse(name, args)?);
            blocking(move || read_file(&state, &allowed, args)).await
        }
        "list_files" => {
            let (state, allowed, args) = (state.clone(), allowed.clone(), parse(name, args)?);
            blocking(move || list_files(&state, &allowed, args)).await
        }
        "find_definition" | "find_references" => {
            let kind = if name == "find_definition" {
                SymbolUse::Definition
            } else {
                SymbolUse::Occurrence
            };
            let (state, allowed, args) = (state.clone(), allowed.clone(), parse(name, args)?);
            blocking(move || find_symbol(&state, &allowed, args, kind)).await
        }
        _ => Err(McpError::invalid_params(
            format!("unknown tool {name:?}; tools/list names the tools"),
            None,
        )),
    }
}

async fn blocking(
    f: impl FnOnce() -> Result<CallToolResult, McpError> + Send + 'static,
) -> Result<CallToolResult, McpError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| McpError::internal_error("the tool failed", None))?
}

fn parse<T: DeserializeOwned>(tool: &str, args: JsonObject) -> Result<T, McpError> {
    serde_json::from_value(Value::Object(args))
        .map_err(|e| McpError::invalid_params(format!("invalid arguments for {tool}: {e}"), None))
}

fn check_limit(limit: Option<usize>, default: usize, max: usize) -> Result<usize, McpError> {
    match limit {
        None => Ok(default),
        Some(0) => Err(McpError::invalid_params("limit must be at least 1", None)),
        Some(n) if n > max => Err(McpError::invalid_params(
            format!("limit must be at most {max}"),
            None,
        )),
        Some(n) => Ok(n),
    }
}

fn glob(pattern: Option<&str>) -> Result<Option<GlobMatcher>, McpError> {
    let Some(pattern) = pattern else {
        return Ok(None);
    };
    if pattern.len() > 1024 {
        return Err(McpError::invalid_params(
            "glob longer than 1024 bytes",
            None,
        ));
    }
    Glob::new(pattern)
        .map(|g| Some(g.compile_matcher()))
        .map_err(|e| McpError::invalid_params(format!("invalid glob {pattern:?}: {e}"), None))
}

fn path_arg(path: &str) -> Result<String, McpError> {
    clean_path(path).map_err(|e| McpError::invalid_params(e.to_string(), None))
}

/// A tool result: text for the agent and the same facts as structured content.
fn result(text: String, structured: Value) -> CallToolResult {
    let mut out = CallToolResult::structured(structured);
    out.content = vec![ContentBlock::text(cap(text))];
    out
}

fn tool_error(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

fn cap(mut text: String) -> String {
    if text.len() > MAX_RESULT_BYTES {
        let mut end = MAX_RESULT_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("\n… (result cut at 256 KiB)");
    }
    text
}

/// The repository an argument names, among those the caller may read. The answer for one that
/// exists but may not be read is the same as for one that does not exist.
fn resolve<'a>(
    allowed: &'a AllowedCodeRepository,
    wanted: &str,
) -> Result<&'a CodeRepository, CallToolResult> {
    let unknown = || {
        tool_error(format!(
            "no repository {wanted:?} among those you may read (list_repositories names them)"
        ))
    };
    if let Some(repo) = allowed.list.iter().find(|r| r.source_id == wanted) {
        return Ok(repo);
    }
    let by_name: Vec<&CodeRepository> = allowed
        .list
        .iter()
        .filter(|r| repository_name(r).eq_ignore_ascii_case(wanted))
        .collect();
    match by_name.as_slice() {
        [one] => return Ok(one),
        [] => {}
        several => {
            return Err(tool_error(format!(
                "{wanted:?} names {} repositories; give a source_id: {}",
                several.len(),
                several
                    .iter()
                    .map(|r| r.source_id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    if wanted.contains(['/', ':']) {
        let canonical = tabby_common::git_url::canonicalize_git_url(wanted);
        if let Some(repo) = allowed
            .list
            .iter()
            .find(|r| tabby_common::git_url::canonicalize_git_url(&r.git_url) == canonical)
        {
            return Ok(repo);
        }
    }
    Err(unknown())
}

/// The repositories a call covers: the one named, or all the caller may read.
fn scope<'a>(
    allowed: &'a AllowedCodeRepository,
    wanted: Option<&str>,
) -> Result<Vec<&'a CodeRepository>, CallToolResult> {
    match wanted {
        Some(wanted) => Ok(vec![resolve(allowed, wanted)?]),
        None => Ok(allowed.list.iter().collect()),
    }
}

fn snapshot_error(repo: &CodeRepository, e: RepoFileError) -> CallToolResult {
    match e {
        RepoFileError::Other(e) => {
            tracing::warn!(
                "mcp: cannot read {}: {e:#}",
                redact_credentials(&repo.git_url)
            );
            tool_error(format!(
                "cannot read repository {:?} now",
                repository_name(repo)
            ))
        }
        e => tool_error(format!("{}: {e}", repository_name(repo))),
    }
}

fn citation(repo: &CodeRepository, snapshot_commit: Option<&str>) -> Value {
    json!({
        "repository": repository_name(repo),
        "source_id": repo.source_id,
        "git_url": redact_credentials(&repo.git_url),
        "commit": snapshot_commit,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

fn list_repositories(allowed: &AllowedCodeRepository) -> CallToolResult {
    let repos: Vec<Value> = allowed
        .list
        .iter()
        .map(|r| {
            json!({
                "name": repository_name(r),
                "source_id": r.source_id,
                "git_url": redact_credentials(&r.git_url),
            })
        })
        .collect();
    let mut text = format!("{} repositories you may read:\n", repos.len());
    for r in &allowed.list {
        text.push_str(&format!(
            "- {} (source_id {}, {})\n",
            repository_name(r),
            r.source_id,
            redact_credentials(&r.git_url)
        ));
    }
    result(text, json!({ "repositories": repos }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    query: String,
    repository: Option<String>,
    language: Option<String>,
    path: Option<String>,
    limit: Option<usize>,
    #[serde(default)]
    include_generated: bool,
}

/// A file's text and its definitions.
type ParsedFile = (String, Vec<Tag>);

async fn search_code(
    state: &Arc<McpState>,
    allowed: &AllowedCodeRepository,
    args: SearchArgs,
) -> Result<CallToolResult, McpError> {
    let limit = check_limit(args.limit, 10, MAX_SEARCH_HITS)?;
    let path = glob(args.path.as_deref())?;
    if args.query.trim().is_empty() {
        return Err(McpError::invalid_params("query must not be empty", None));
    }
    let query: String = args.query.chars().take(8192).collect();
    let Some(service) = &state.code_search else {
        return Ok(tool_error(
            "code search is not available: no repositories are configured",
        ));
    };
    let repos = match scope(allowed, args.repository.as_deref()) {
        Ok(repos) => repos,
        Err(e) => return Ok(e),
    };
    let sources: Vec<String> = repos.iter().map(|r| r.source_id.clone()).collect();
    let mut params = state.search_params.clone();
    params.num_to_return = if path.is_some() { 200 } else { limit };
    let language = args.language.as_deref().map(|l| {
        state
            .languages
            .get(&l.to_ascii_lowercase())
            .canonical_name()
            .to_string()
    });
    let hits = match service
        .search_repositories(
            &query,
            &sources,
            language.as_deref(),
            None,
            &params,
            args.include_generated,
        )
        .await
    {
        Ok(hits) => hits,
        Err(CodeSearchError::NotReady) => {
            return Ok(tool_error(
                "the code index is not ready yet: indexing has not finished its first run",
            ));
        }
        Err(CodeSearchError::Other(e)) => {
            tracing::warn!("mcp search_code failed: {e:#}");
            return Ok(tool_error("code search failed"));
        }
    };
    // Reading and parsing the hits' files is blocking work: off the async threads.
    let (items, mut text) = {
        let (state, allowed) = (state.clone(), allowed.clone());
        let repos: Vec<CodeRepository> = repos.into_iter().cloned().collect();
        tokio::task::spawn_blocking(move || {
            hit_items(&state, &allowed, &repos, hits, path.as_ref(), limit)
        })
        .await
        .map_err(|_| McpError::internal_error("the tool failed", None))?
    };
    if items.is_empty() {
        text = format!("no code matched {query:?}");
    }
    Ok(result(
        text,
        json!({ "hits": items, "index": service.index_versions() }),
    ))
}

/// The items and text of `search_code`'s hits: each cited, with what it defines and lives in
/// (its file read and parsed once per call).
fn hit_items(
    state: &McpState,
    allowed: &AllowedCodeRepository,
    repos: &[CodeRepository],
    hits: Vec<tabby_common::api::code::CodeSearchHit>,
    path: Option<&GlobMatcher>,
    limit: usize,
) -> (Vec<Value>, String) {
    let mut items = Vec::new();
    let mut text = String::new();
    // One snapshot of the default branch per repository and one parse per file, not per hit.
    let mut snapshots: std::collections::HashMap<String, Option<Arc<Snapshot>>> =
        Default::default();
    let mut parsed: std::collections::HashMap<(String, String), Option<ParsedFile>> =
        Default::default();
    for hit in hits {
        if items.len() == limit {
            break;
        }
        if path
            .as_ref()
            .is_some_and(|g| !g.is_match(&hit.doc.filepath))
        {
            continue;
        }
        let Some(repo) = allowed
            .list
            .iter()
            .find(|r| hit.doc.file_id.starts_with(&format!("{}:::", r.source_id)))
            .or_else(|| repos.first().filter(|_| repos.len() == 1))
        else {
            continue;
        };
        let snapshot = snapshots
            .entry(repo.source_id.clone())
            .or_insert_with(|| state.files.snapshot(&repo.git_url, None).ok())
            .clone();
        let commit = snapshot.as_ref().and_then(|s| s.commit.clone());
        let start = hit.doc.start_line.unwrap_or(1);
        let end = start + hit.doc.body.lines().count().max(1) - 1;
        text.push_str(&format!(
            "## {}:{}:{}-{} ({}, score {:.3}){}\n```\n{}\n```\n",
            repository_name(repo),
            hit.doc.filepath,
            start,
            end,
            hit.doc.language,
            hit.scores.rrf,
            commit
                .as_deref()
                .map(|c| format!(" @ {}", &c[..c.len().min(12)]))
                .unwrap_or_default(),
            hit.doc.body
        ));
        let mut item = citation(repo, commit.as_deref());
        item["path"] = json!(hit.doc.filepath);
        item["language"] = json!(hit.doc.language);
        item["origin"] = json!(hit.doc.origin);
        item["in_test"] = json!(is_test_path(&hit.doc.filepath));
        item["ref"] = json!(snapshot.as_ref().and_then(|s| s.reference.clone()));
        let file = parsed
            .entry((repo.source_id.clone(), hit.doc.filepath.clone()))
            .or_insert_with(|| {
                let text = snapshot
                    .as_ref()?
                    .read(&hit.doc.filepath)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())?;
                let tags = find_definitions(&hit.doc.language, &text);
                Some((text, tags))
            });
        // What the hit defines and lives in, from the file it was read from (none when the
        // file changed since it was indexed).
        if let Some((text, tags)) = file
            && text.contains(hit.doc.body.as_str())
        {
            let structure = context::structure(text, tags, start, end);
            item["symbols"] = json!(structure.symbols);
            item["enclosing"] = json!(structure.enclosing);
            item["byte_range"] = json!(structure.byte_range);
        }
        item["start_line"] = json!(start);
        item["end_line"] = json!(end);
        item["scores"] = json!({"rrf": hit.scores.rrf, "bm25": hit.scores.bm25, "embedding": hit.scores.embedding});
        item["text"] = json!(hit.doc.body);
        items.push(item);
    }
    (items, text)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    repository: String,
    path: String,
    start_line: Option<usize>,
    end_line: Option<usize>,
    #[serde(rename = "ref")]
    reference: Option<String>,
}

fn open(
    state: &McpState,
    repo: &CodeRepository,
    reference: Option<&str>,
) -> Result<Arc<Snapshot>, CallToolResult> {
    state
        .files
        .snapshot(&repo.git_url, reference)
        .map_err(|e| snapshot_error(repo, e))
}

fn read_file(
    state: &McpState,
    allowed: &AllowedCodeRepository,
    args: ReadArgs,
) -> Result<CallToolResult, McpError> {
    let path = path_arg(&args.path)?;
    let start = args.start_line.unwrap_or(1);
    if start == 0 || args.end_line == Some(0) {
        return Err(McpError::invalid_params("lines are 1-based", None));
    }
    let end = args
        .end_line
        .unwrap_or(start.saturating_add(DEFAULT_READ_LINES - 1));
    if end < start {
        return Err(McpError::invalid_params(
            "end_line is before start_line",
            None,
        ));
    }
    let repo = match resolve(allowed, &args.repository) {
        Ok(repo) => repo,
        Err(e) => return Ok(e),
    };
    let snapshot = match open(state, repo, args.reference.as_deref()) {
        Ok(s) => s,
        Err(e) => return Ok(e),
    };
    let bytes = match snapshot.read(&path) {
        Ok(b) => b,
        Err(e) => return Ok(snapshot_error(repo, e)),
    };
    let Ok(content) = String::from_utf8(bytes) else {
        return Ok(tool_error(format!("{path:?} is not a UTF-8 text file")));
    };
    let lines: Vec<&str> = content.lines().collect();
    let total = lines.len();
    if start > total.max(1) {
        return Ok(tool_error(format!(
            "{path:?} has {total} lines; start_line {start} is past its end"
        )));
    }
    let last = end.min(total).min(start + MAX_READ_LINES - 1);
    let shown = &lines[(start - 1).min(total)..last];
    let truncated = last < end.min(total);
    let mut text = format!(
        "{}:{} lines {}-{} of {}{}\n",
        repository_name(repo),
        path,
        start,
        last,
        total,
        snapshot
            .commit
            .as_deref()
            .map(|c| format!(" @ {c}"))
            .unwrap_or_default()
    );
    for (i, line) in shown.iter().enumerate() {
        text.push_str(&format!("{:>6}\t{line}\n", start + i));
    }
    if truncated {
        text.push_str(&format!(
            "… {MAX_READ_LINES} lines at most per call: ask for start_line {} next\n",
            last + 1
        ));
    }
    let mut out = citation(repo, snapshot.commit.as_deref());
    out["path"] = json!(path);
    out["start_line"] = json!(start);
    out["end_line"] = json!(last);
    out["total_lines"] = json!(total);
    out["truncated"] = json!(truncated);
    out["content"] = json!(cap(shown.join("\n")));
    Ok(result(text, out))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    repository: String,
    glob: Option<String>,
    #[serde(rename = "ref")]
    reference: Option<String>,
    limit: Option<usize>,
}

fn list_files(
    state: &McpState,
    allowed: &AllowedCodeRepository,
    args: ListArgs,
) -> Result<CallToolResult, McpError> {
    let limit = check_limit(args.limit, 500, MAX_LISTED_FILES)?;
    let matcher = glob(args.glob.as_deref())?;
    let repo = match resolve(allowed, &args.repository) {
        Ok(repo) => repo,
        Err(e) => return Ok(e),
    };
    let snapshot = match open(state, repo, args.reference.as_deref()) {
        Ok(s) => s,
        Err(e) => return Ok(e),
    };
    let matching: Vec<&String> = snapshot
        .files
        .iter()
        .filter(|f| matcher.as_ref().is_none_or(|g| g.is_match(f.as_str())))
        .collect();
    let total = matching.len();
    let shown: Vec<&String> = matching.into_iter().take(limit).collect();
    let mut text = format!(
        "{} files in {}{}{}\n",
        total,
        repository_name(repo),
        args.glob
            .as_deref()
            .map(|g| format!(" matching {g:?}"))
            .unwrap_or_default(),
        snapshot
            .commit
            .as_deref()
            .map(|c| format!(" @ {c}"))
            .unwrap_or_default()
    );
    for f in &shown {
        text.push_str(f);
        text.push('\n');
    }
    if total > shown.len() {
        text.push_str(&format!(
            "… {} more (raise limit or narrow the glob)\n",
            total - shown.len()
        ));
    }
    let mut out = citation(repo, snapshot.commit.as_deref());
    out["files"] = json!(shown);
    out["total"] = json!(total);
    out["truncated"] = json!(total > shown.len());
    Ok(result(text, out))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrepArgs {
    pattern: String,
    #[serde(default)]
    literal: bool,
    #[serde(default)]
    case_insensitive: bool,
    repository: Option<String>,
    path: Option<String>,
    #[serde(rename = "ref")]
    reference: Option<String>,
    limit: Option<usize>,
}

fn grep(
    state: &McpState,
    allowed: &AllowedCodeRepository,
    args: GrepArgs,
) -> Result<CallToolResult, McpError> {
    let limit = check_limit(args.limit, 100, MAX_GREP_MATCHES)?;
    let matcher = glob(args.path.as_deref())?;
    if args.pattern.is_empty() || args.pattern.len() > 4096 {
        return Err(McpError::invalid_params(
            "pattern must be 1 to 4096 bytes",
            None,
        ));
    }
    let source = if args.literal {
        regex::escape(&args.pattern)
    } else {
        args.pattern.clone()
    };
    let regex = regex::RegexBuilder::new(&source)
        .case_insensitive(args.case_insensitive)
        .size_limit(1 << 20)
        .dfa_size_limit(8 << 20)
        .build()
        .map_err(|e| McpError::invalid_params(format!("invalid regex: {e}"), None))?;
    let repos = match scope(allowed, args.repository.as_deref()) {
        Ok(repos) => repos,
        Err(e) => return Ok(e),
    };
    let started = Instant::now();
    let mut scanned: u64 = 0;
    let mut stopped = None;
    let mut matches = Vec::new();
    let mut text = String::new();
    'repos: for repo in repos {
        let snapshot = match open(state, repo, args.reference.as_deref()) {
            Ok(s) => s,
            // A ref that one of several repositories lacks is not an error for the others.
            Err(e) if args.repository.is_some() => return Ok(e),
            Err(_) => continue,
        };
        for path in &snapshot.files {
            if matcher.as_ref().is_some_and(|g| !g.is_match(path.as_str())) {
                continue;
            }
            if scanned > GREP_MAX_BYTES {
                stopped = Some("128 MiB read");
                break 'repos;
            }
            if started.elapsed().as_secs_f64() > GREP_MAX_SECONDS {
                stopped = Some("10 s spent");
                break 'repos;
            }
            let Ok(bytes) = snapshot.read(path) else {
                continue;
            };
            scanned += bytes.len() as u64;
            if tabby_index::code::filter::looks_binary(&bytes) {
                continue;
            }
            let content = String::from_utf8_lossy(&bytes);
            for (n, line) in content.lines().enumerate() {
                if !regex.is_match(line) {
                    continue;
                }
                if matches.len() == limit {
                    stopped = Some("limit reached");
                    break 'repos;
                }
                let shown: String = line.chars().take(MAX_LINE_CHARS).collect();
                text.push_str(&format!(
                    "{}:{}:{}: {}\n",
                    repository_name(repo),
                    path,
                    n + 1,
                    shown
                ));
                let mut item = citation(repo, snapshot.commit.as_deref());
                item["path"] = json!(path);
                item["line"] = json!(n + 1);
                item["text"] = json!(shown);
                matches.push(item);
            }
        }
    }
    if matches.is_empty() {
        text = format!("no line matches {:?}\n", args.pattern);
    }
    if let Some(why) = stopped {
        text.push_str(&format!("… stopped early ({why}); narrow the search\n"));
    }
    Ok(result(
        text,
        json!({ "matches": matches, "truncated": stopped.is_some(), "stopped": stopped }),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ContextArgs {
    task: String,
    repository: Option<String>,
    #[serde(default)]
    symbols: Vec<String>,
    #[serde(default)]
    paths: Vec<String>,
    #[serde(default)]
    changed_files: Vec<String>,
    budget_chars: Option<usize>,
    max_items: Option<usize>,
    depth: Option<u8>,
    #[serde(default)]
    include_generated: bool,
}

async fn get_context(
    state: &Arc<McpState>,
    allowed: &AllowedCodeRepository,
    args: ContextArgs,
) -> Result<CallToolResult, McpError> {
    let budget_chars = match args.budget_chars {
        None => DEFAULT_BUDGET_CHARS,
        Some(n) if (500..=MAX_BUDGET_CHARS).contains(&n) => n,
        Some(_) => {
            return Err(McpError::invalid_params(
                format!("budget_chars must be 500 to {MAX_BUDGET_CHARS}"),
                None,
            ));
        }
    };
    let max_items = check_limit(args.max_items, DEFAULT_MAX_ITEMS, MAX_ITEMS)?;
    let max_depth = args.depth.unwrap_or(DEFAULT_DEPTH);
    if max_depth > MAX_DEPTH {
        return Err(McpError::invalid_params(
            format!("depth must be 0 to {MAX_DEPTH}"),
            None,
        ));
    }
    if args.task.trim().is_empty()
        && args.symbols.is_empty()
        && args.paths.is_empty()
        && args.changed_files.is_empty()
    {
        return Err(McpError::invalid_params(
            "give a task, symbols, paths or changed_files",
            None,
        ));
    }
    if args.symbols.len() > 20 || args.paths.len() > 20 || args.changed_files.len() > 20 {
        return Err(McpError::invalid_params(
            "at most 20 symbols, 20 paths and 20 changed_files",
            None,
        ));
    }
    let symbols = args
        .symbols
        .iter()
        .map(|s| symbol_name(s).map(str::to_string))
        .collect::<Result<Vec<_>, _>>()?;
    let paths = args
        .paths
        .iter()
        .map(|p| path_arg(p))
        .collect::<Result<Vec<_>, _>>()?;
    let changed_files = args
        .changed_files
        .iter()
        .map(|p| path_arg(p))
        .collect::<Result<Vec<_>, _>>()?;
    if (!paths.is_empty() || !changed_files.is_empty()) && args.repository.is_none() {
        return Err(McpError::invalid_params(
            "paths and changed_files need a repository",
            None,
        ));
    }
    let Some(context) = &state.context else {
        return Ok(tool_error(
            "code search is not available: no repositories are configured",
        ));
    };
    let repos: Vec<CodeRepository> = match scope(allowed, args.repository.as_deref()) {
        Ok(repos) => repos.into_iter().cloned().collect(),
        Err(e) => return Ok(e),
    };
    let request = ContextRequest {
        task: args.task.chars().take(8192).collect(),
        symbols,
        paths,
        changed_files,
        budget_chars,
        max_items,
        max_depth,
        exclude_path: None,
        include_generated: args.include_generated,
    };
    match context.build(repos, request).await {
        Ok(pack) => {
            let mut structured = json!(pack);
            structured["index"] = json!(context.code_search.index_versions());
            Ok(result(pack_text(&pack), structured))
        }
        Err(CodeSearchError::NotReady) => Ok(tool_error(
            "the code index is not ready yet: indexing has not finished its first run",
        )),
        Err(CodeSearchError::Other(e)) => {
            tracing::warn!("mcp get_context failed: {e:#}");
            Ok(tool_error("building the context failed"))
        }
    }
}

/// Most documents `search_docs` returns, and characters of one excerpt.
const MAX_DOC_HITS: usize = 20;
const MAX_DOC_EXCERPT_CHARS: usize = 2000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DocsArgs {
    query: String,
    #[serde(default)]
    kind: Option<DocKind>,
    #[serde(default)]
    limit: Option<usize>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum DocKind {
    Web,
    Ingested,
    Commit,
    Issue,
    Pull,
}

async fn search_docs(
    state: &Arc<McpState>,
    allowed: &tabby_common::api::doc::AllowedDocSources,
    args: DocsArgs,
) -> Result<CallToolResult, McpError> {
    use tabby_common::api::doc::{DocSearch, DocSearchDocument};
    let limit = check_limit(args.limit, 5, MAX_DOC_HITS)?;
    if args.query.trim().is_empty() {
        return Err(McpError::invalid_params("the query is empty", None));
    }
    let Some(docs) = &state.docs else {
        return Ok(tool_error("no documentation index in this server"));
    };
    let sources: Vec<String> = match docs.source_ids() {
        Ok(ids) => ids.into_iter().filter(|s| allowed.can_read(s)).collect(),
        Err(e) => {
            tracing::warn!("mcp search_docs: cannot list sources: {e:#}");
            return Ok(tool_error("the documentation index cannot be read now"));
        }
    };
    let query: String = args.query.chars().take(2048).collect();
    // Fetched beyond `limit` so that a kind filter still fills it.
    let fetch = if args.kind.is_some() {
        limit * 4
    } else {
        limit
    };
    let hits = match docs.search(&sources, &query, fetch).await {
        Ok(hits) => hits,
        Err(e) => {
            tracing::warn!("mcp search_docs failed: {e:#}");
            return Ok(tool_error("the documentation search failed"));
        }
    };
    let excerpt = |t: &str| -> String { t.chars().take(MAX_DOC_EXCERPT_CHARS).collect() };
    let mut items = Vec::new();
    let mut text = String::new();
    for hit in hits {
        let (kind, item) = match &hit.doc {
            DocSearchDocument::Web {
                title,
                link,
                content,
            } => (
                DocKind::Web,
                json!({"kind": "web", "title": title, "link": link, "excerpt": excerpt(content)}),
            ),
            DocSearchDocument::Ingested {
                id,
                title,
                body,
                link,
            } => (
                DocKind::Ingested,
                json!({"kind": "ingested", "id": id, "title": title, "link": link, "excerpt": excerpt(body)}),
            ),
            DocSearchDocument::Commit {
                sha,
                message,
                author_email,
                author_at,
            } => (
                DocKind::Commit,
                json!({"kind": "commit", "sha": sha, "message": excerpt(message),
                       "author_email": author_email, "author_at": author_at.to_rfc3339()}),
            ),
            DocSearchDocument::Issue {
                title,
                link,
                author,
                body,
                closed,
            } => (
                DocKind::Issue,
                json!({"kind": "issue", "title": title, "link": link, "author": author,
                       "closed": closed, "excerpt": excerpt(body)}),
            ),
            DocSearchDocument::Pull {
                title,
                link,
                author,
                body,
                diff,
                merged,
            } => (
                DocKind::Pull,
                json!({"kind": "pull", "title": title, "link": link, "author": author,
                       "merged": merged, "excerpt": excerpt(&format!("{body}\n\n{diff}"))}),
            ),
        };
        if args.kind.is_some_and(|k| k != kind) || items.len() >= limit {
            continue;
        }
        let heading = item["title"]
            .as_str()
            .or(item["sha"].as_str())
            .unwrap_or_default();
        let place = item["link"].as_str().unwrap_or_default();
        let body = item["excerpt"]
            .as_str()
            .or(item["message"].as_str())
            .unwrap_or_default();
        text.push_str(&format!(
            "## {} [{}] {place}\n{body}\n\n",
            heading,
            item["kind"].as_str().unwrap_or_default()
        ));
        items.push(item);
    }
    if items.is_empty() {
        text = "no documents match".to_string();
    }
    Ok(result(cap(text), json!({"documents": items})))
}

/// A pack as the agent reads it.
fn pack_text(pack: &Pack) -> String {
    let mut text = format!(
        "{} items, {} of {} characters{}\n",
        pack.items.len(),
        pack.used_chars,
        pack.budget_chars,
        if pack.omitted > 0 {
            format!(", {} more left out by the budget", pack.omitted)
        } else {
            String::new()
        }
    );
    for (i, item) in pack.items.iter().enumerate() {
        let reasons: Vec<String> = item
            .reasons
            .iter()
            .map(|r| serde_json::to_string(r).unwrap_or_default())
            .collect();
        text.push_str(&format!(
            "## [{i}] {}:{}:{}-{}{}\nwhy: {}\n```\n{}\n```\n",
            item.repository,
            item.path,
            item.start_line,
            item.end_line,
            item.commit
                .as_deref()
                .map(|c| format!(" @ {}", &c[..c.len().min(12)]))
                .unwrap_or_default(),
            reasons.join("; "),
            item.excerpt
        ));
    }
    for gap in &pack.gaps {
        text.push_str(&format!(
            "gap: {}\n",
            serde_json::to_string(gap).unwrap_or_default()
        ));
    }
    text
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SymbolArgs {
    symbol: String,
    repository: Option<String>,
    limit: Option<usize>,
}

/// The identifier a symbol argument names, or invalid params.
fn symbol_name(symbol: &str) -> Result<&str, McpError> {
    context::symbol_name(symbol)
        .ok_or_else(|| McpError::invalid_params(format!("{symbol:?} is not an identifier"), None))
}

fn find_symbol(
    state: &McpState,
    allowed: &AllowedCodeRepository,
    args: SymbolArgs,
    kind: SymbolUse,
) -> Result<CallToolResult, McpError> {
    let default = if kind == SymbolUse::Definition {
        10
    } else {
        50
    };
    let limit = check_limit(args.limit, default, MAX_SYMBOL_RESULTS)?;
    let name = symbol_name(&args.symbol)?.to_string();
    let Some(service) = &state.code_search else {
        return Ok(tool_error(
            "code search is not available: no repositories are configured",
        ));
    };
    let repos = match scope(allowed, args.repository.as_deref()) {
        Ok(repos) => repos,
        Err(e) => return Ok(e),
    };
    let mut items = Vec::new();
    let mut text = String::new();
    'repos: for repo in repos {
        let files = match service.symbol_files(&repo.source_id, &name, kind, 200, MAX_SYMBOL_FILES)
        {
            Ok(files) => files,
            Err(CodeSearchError::NotReady) => {
                return Ok(tool_error(
                    "the code index is not ready yet: indexing has not finished its first run",
                ));
            }
            Err(CodeSearchError::Other(e)) => {
                tracing::warn!("mcp symbol search failed: {e:#}");
                return Ok(tool_error("symbol search failed"));
            }
        };
        if files.is_empty() {
            continue;
        }
        let Ok(snapshot) = state.files.snapshot(&repo.git_url, None) else {
            continue;
        };
        for (path, language) in files {
            let Ok(bytes) = snapshot.read(&path) else {
                continue;
            };
            let content = String::from_utf8_lossy(&bytes).into_owned();
            let definitions: Vec<_> = find_definitions(&language, &content)
                .into_iter()
                .filter(|tag| tag.name == name)
                .collect();
            let lines: Vec<&str> = content.lines().collect();
            match kind {
                SymbolUse::Definition => {
                    for tag in definitions {
                        if items.len() == limit {
                            break 'repos;
                        }
                        let (first, last) = (
                            tag.line_range.start + 1,
                            tag.line_range.end.max(tag.line_range.start + 1),
                        );
                        let shown_last = last.min(first + 59).min(lines.len());
                        let body = lines[first - 1..shown_last].join("\n");
                        text.push_str(&format!(
                            "## {} {} in {}:{}:{}-{}\n```\n{}\n```\n",
                            tag.kind,
                            name,
                            repository_name(repo),
                            path,
                            first,
                            last,
                            body
                        ));
                        let mut item = citation(repo, snapshot.commit.as_deref());
                        item["path"] = json!(path);
                        item["kind"] = json!(tag.kind);
                        item["start_line"] = json!(first);
                        item["end_line"] = json!(last);
                        item["text"] = json!(body);
                        items.push(item);
                    }
                }
                SymbolUse::Occurrence => {
                    let definition_lines: Vec<usize> = definitions
                        .iter()
                        .map(|tag| name_line(&content, tag))
                        .collect();
                    for (line, shown) in occurrences(&content, &name) {
                        let shown: String = shown.chars().take(MAX_LINE_CHARS).collect();
                        if definition_lines.contains(&line) {
                            continue;
                        }
                        if items.len() == limit {
                            break 'repos;
                        }
                        text.push_str(&format!(
                            "{}:{}:{}: {}\n",
                            repository_name(repo),
                            path,
                            line,
                            shown
                        ));
                        let mut item = citation(repo, snapshot.commit.as_deref());
                        item["path"] = json!(path);
                        item["line"] = json!(line);
                        item["text"] = json!(shown);
                        items.push(item);
                    }
                }
            }
        }
    }
    let key = if kind == SymbolUse::Definition {
        "definitions"
    } else {
        "references"
    };
    if items.is_empty() {
        let what = if kind == SymbolUse::Definition {
            "no definition of"
        } else {
            "no reference to"
        };
        text = format!("{what} {name:?} in the indexed files of the repositories you may read");
    }
    Ok(result(
        text,
        json!({ key: items, "symbol": name, "found": !items.is_empty() }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols_are_identifiers_and_qualified_names_use_their_last_part() {
        assert_eq!(symbol_name("Client.get").unwrap(), "get");
        assert_eq!(symbol_name("crate::mod::Type").unwrap(), "Type");
        assert_eq!(symbol_name("parse_config").unwrap(), "parse_config");
        for bad in ["", "a b", "x;rm -rf", "../etc", "a(", &"x".repeat(300)] {
            assert!(symbol_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn limits_over_the_maximum_are_refused() {
        assert_eq!(check_limit(None, 10, 50).unwrap(), 10);
        assert!(check_limit(Some(0), 10, 50).is_err());
        assert!(check_limit(Some(51), 10, 50).is_err());
        assert!(check_limit(Some(usize::MAX), 10, 50).is_err());
    }

    #[test]
    fn every_tool_has_an_object_schema_and_is_read_only() {
        let tools = definitions();
        assert_eq!(tools.len(), 9);
        for tool in tools {
            assert_eq!(tool.input_schema["type"], "object", "{}", tool.name);
            assert_eq!(
                tool.annotations.as_ref().and_then(|a| a.read_only_hint),
                Some(true)
            );
        }
    }
}
