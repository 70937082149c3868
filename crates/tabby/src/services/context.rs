//! Evidence packs for coding agents (`POST /v1beta/context`, the MCP tool `get_context`): for a
//! task, the few pieces of code that bear on it, each with where it comes from (repository,
//! path, lines, commit) and why it was taken, within a character budget, and what was looked for
//! but not found.
//!
//! Entry points are the hybrid search's hits for the task and the definitions of the symbols it
//! names; from each entry point's own definitions the pack follows typed edges one step: to
//! their references (the enclosing function of each call site, callers before tests) and to the
//! test files paired with the entry's file by name. Pieces of the same file that overlap or
//! touch are merged, their reasons kept. Items go in by priority (requested files, search hits
//! in search order, named symbols' definitions, then what expansion found) while they fit the budget.

use std::{collections::HashSet, sync::Arc};

use serde::Serialize;
use tabby_common::{
    api::code::{CodeRepository, CodeSearchError},
    config::CodeSearchParams,
    git_url::{GitUrl, redact_credentials},
    index::{
        code::{CodeOrigin, is_test_path, search_words, tokenize_code, tokenize_words},
        stem::stem,
    },
};
use tabby_index::{
    code::intelligence::{Tag, find_definitions},
    repo_files::{RepoFiles, Snapshot},
};

use super::code::{
    CodeSearchService,
    relations::{ImplSite, RelationGraph},
    symbols::SymbolUse,
};

/// Default and largest budget of a pack, in characters of excerpt.
pub const DEFAULT_BUDGET_CHARS: usize = 12_000;
pub const MAX_BUDGET_CHARS: usize = 100_000;
pub const DEFAULT_MAX_ITEMS: usize = 20;
pub const MAX_ITEMS: usize = 100;
/// Expansion steps at most, and by default: on click and four generated sets a second step
/// added no recall within the default budget (README, "Evidence packs"), so it is asked for.
pub const MAX_DEPTH: u8 = 2;
pub const DEFAULT_DEPTH: u8 = 1;
/// Search hits taken as entry points.
const SEARCH_ENTRIES: usize = 10;
/// Symbols an entry point's definitions contribute to expansion, and reference sites per symbol.
const SYMBOLS_PER_ENTRY: usize = 3;
const REFERENCES_PER_SYMBOL: usize = 3;
/// Lines of one item at most (a long function is shown from its start).
const MAX_ITEM_LINES: usize = 80;
/// Lines shown around a reference outside any definition.
const REFERENCE_CONTEXT: usize = 3;
/// Identifiers taken from the task text as symbols to define.
const MAX_TASK_SYMBOLS: usize = 8;
/// Distinct files one pack reads (and parses) at most: the bound on its cost, whatever the
/// symbols and the repository size.
const MAX_FILES_PER_PACK: usize = 200;
/// Chunks looked at per symbol to find the files that define or use it.
const SYMBOL_CHUNKS: usize = 50;
/// First-step items expanded a second time, and what each symbol gives in that step.
const SECOND_STEP_ENTRIES: usize = 6;
const SECOND_STEP_PER_SYMBOL: usize = 2;
/// Imported names an entry point's imports contribute, tests that import its file, and the
/// dependents of a changed file.
const IMPORTS_PER_ENTRY: usize = 3;
const TESTS_PER_ENTRY: usize = 3;
const DEPENDENTS_PER_ENTRY: usize = 3;
/// Lines of a build file shown.
const BUILD_FILE_LINES: usize = 40;
/// Files that say how the code in their directory (and below) is built or configured.
const BUILD_FILES: &[&str] = &[
    "Cargo.toml",
    "package.json",
    "tsconfig.json",
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "go.mod",
    "pom.xml",
    "build.gradle",
    "build.gradle.kts",
    "CMakeLists.txt",
    "meson.build",
    "Makefile",
    "BUILD",
    "BUILD.bazel",
    "Gemfile",
    "composer.json",
];

/// Why an item is in the pack. Expansion reasons say which entry point (or, two steps out,
/// which expanded item) they came `from` and at what `depth` (1 or 2).
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(tag = "edge", rename_all = "snake_case")]
pub enum Reason {
    /// A hit of the hybrid search for the task.
    Search {
        rrf: f32,
        bm25: f32,
        embedding: f32,
        /// The task's search words the item contains.
        matched_words: Vec<String>,
    },
    /// The definition of a symbol the task (or the caller) names.
    Definition { symbol: String },
    /// A place that uses a symbol defined in `from`.
    Reference {
        symbol: String,
        from: String,
        depth: u8,
    },
    /// A test of an entry point: a test file using its symbol, importing its file, or paired
    /// with its file by name.
    Test {
        of: String,
        by: &'static str,
        depth: u8,
    },
    /// A type that implements (or extends) an interface, trait or base class defined in `from`.
    Implementation {
        interface: String,
        #[serde(rename = "type")]
        type_name: String,
        how: String,
        from: String,
        depth: u8,
    },
    /// The interface, trait or base class that a type defined in `from` implements.
    Interface {
        interface: String,
        #[serde(rename = "type")]
        type_name: String,
        how: String,
        from: String,
        depth: u8,
    },
    /// The definition of a name that `from`'s file imports and uses.
    Import {
        symbol: String,
        from: String,
        depth: u8,
    },
    /// A file that imports the changed (or requested) file `of`, where it uses it.
    Dependent { of: String, depth: u8 },
    /// The build or configuration file nearest the changed (or requested) file `of`.
    BuildFile { of: String, depth: u8 },
    /// A file the caller asked for.
    Requested,
    /// A file the caller says changed.
    Changed,
}

impl Reason {
    /// The reason in words, as the Answer Engine's attachments show it.
    pub fn describe(&self) -> String {
        let steps = |depth: &u8| {
            if *depth > 1 {
                format!(" ({depth} steps)")
            } else {
                String::new()
            }
        };
        match self {
            Reason::Search { matched_words, .. } if matched_words.is_empty() => {
                "search hit".to_string()
            }
            Reason::Search { matched_words, .. } => {
                format!("search hit: matches {}", matched_words.join(", "))
            }
            Reason::Definition { symbol } => format!("definition of {symbol}"),
            Reason::Reference {
                symbol,
                from,
                depth,
            } => format!("uses {symbol} (defined in {from}){}", steps(depth)),
            Reason::Test { of, by, depth } => format!("test of {of} (by {by}){}", steps(depth)),
            Reason::Implementation {
                interface,
                type_name,
                how,
                from,
                depth,
            } => format!(
                "{type_name} implements {interface} ({how}; {interface} defined in {from}){}",
                steps(depth)
            ),
            Reason::Interface {
                interface,
                type_name,
                how,
                from,
                depth,
            } => format!(
                "{interface}, which {type_name} implements ({how}; {type_name} defined in {from}){}",
                steps(depth)
            ),
            Reason::Import {
                symbol,
                from,
                depth,
            } => format!("{symbol}, imported by {from}{}", steps(depth)),
            Reason::Dependent { of, depth } => format!("imports {of}{}", steps(depth)),
            Reason::BuildFile { of, depth } => format!("build file of {of}{}", steps(depth)),
            Reason::Requested => "requested".to_string(),
            Reason::Changed => "changed".to_string(),
        }
    }
}

/// Characters and items of the pack the Answer Engine attaches to a question: its prompt must
/// still fit a small embedded chat model.
pub const ANSWER_BUDGET_CHARS: usize = 6000;
pub const ANSWER_MAX_ITEMS: usize = 10;

/// Evidence packs for the Answer Engine (`CodeContext`).
pub struct AnswerContext(pub Arc<ContextService>);

#[async_trait::async_trait]
impl tabby_common::api::code::CodeContext for AnswerContext {
    async fn context(
        &self,
        repository: &CodeRepository,
        task: &str,
    ) -> Result<Vec<tabby_common::api::code::ContextHit>, CodeSearchError> {
        use tabby_common::api::code::{
            CodeSearchDocument, CodeSearchHit, CodeSearchScores, ContextHit,
        };
        let pack = self
            .0
            .build(
                vec![repository.clone()],
                ContextRequest {
                    task: task.chars().take(8192).collect(),
                    symbols: Vec::new(),
                    paths: Vec::new(),
                    changed_files: Vec::new(),
                    budget_chars: ANSWER_BUDGET_CHARS,
                    max_items: ANSWER_MAX_ITEMS,
                    max_depth: DEFAULT_DEPTH,
                    exclude_path: None,
                    include_generated: false,
                },
            )
            .await?;
        Ok(pack
            .items
            .into_iter()
            .map(|item| {
                let scores = item
                    .reasons
                    .iter()
                    .find_map(|r| match r {
                        Reason::Search {
                            rrf,
                            bm25,
                            embedding,
                            ..
                        } => Some(CodeSearchScores {
                            rrf: *rrf,
                            bm25: *bm25,
                            embedding: *embedding,
                        }),
                        _ => None,
                    })
                    .unwrap_or(CodeSearchScores {
                        rrf: 0.0,
                        bm25: 0.0,
                        embedding: 0.0,
                    });
                let reason = item
                    .reasons
                    .iter()
                    .map(Reason::describe)
                    .collect::<Vec<_>>()
                    .join("; ");
                ContextHit {
                    hit: CodeSearchHit {
                        scores,
                        doc: CodeSearchDocument {
                            origin: item.origin,
                            file_id: format!("{}:::{}", item.source_id, item.path),
                            chunk_id: format!("{}:{}", item.path, item.start_line),
                            body: item.excerpt,
                            filepath: item.path,
                            git_url: item.git_url,
                            commit: item.commit,
                            language: item.language,
                            start_line: Some(item.start_line),
                            defines: None,
                        },
                    },
                    reason,
                }
            })
            .collect())
    }
}

/// What a range of a file is, structurally.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Structure {
    /// Definitions (tags) that start in the range: (kind, name).
    pub symbols: Vec<(String, String)>,
    /// The innermost definition that starts before the range and holds its first line:
    /// (kind, name).
    pub enclosing: Option<(String, String)>,
    /// Byte offsets of the range in the file: start, end (exclusive).
    pub byte_range: (usize, usize),
}

/// The structure of lines `start..=end` (1-based) of `text`, whose definitions are `tags`.
pub fn structure(text: &str, tags: &[Tag], start: usize, end: usize) -> Structure {
    let symbols = tags
        .iter()
        .filter(|t| (start..=end).contains(&(t.line_range.start + 1)))
        .map(|t| (t.kind.clone(), t.name.clone()))
        .collect();
    let enclosing = tags
        .iter()
        .filter(|t| t.line_range.start + 1 < start && start <= t.line_range.end)
        .min_by_key(|t| t.line_range.end - t.line_range.start)
        .map(|t| (t.kind.clone(), t.name.clone()));
    let mut offset = 0;
    let mut range = (text.len(), text.len());
    for (n, line) in text.split_inclusive('\n').enumerate() {
        if n + 1 == start {
            range.0 = offset;
        }
        offset += line.len();
        if n + 1 == end {
            range.1 = offset;
            break;
        }
    }
    range.0 = range.0.min(range.1);
    Structure {
        symbols,
        enclosing,
        byte_range: range,
    }
}

/// One piece of evidence.
#[derive(Clone, Debug, Serialize)]
pub struct PackItem {
    pub repository: String,
    pub source_id: String,
    pub git_url: String,
    pub commit: Option<String>,
    /// The ref the file was read at (the default branch's name; none for a plain directory).
    #[serde(rename = "ref")]
    pub reference: Option<String>,
    pub path: String,
    pub language: String,
    /// 1-based, inclusive.
    pub start_line: usize,
    pub end_line: usize,
    /// Definitions that start in the excerpt, the innermost one around its first line, and
    /// its byte range.
    #[serde(flatten)]
    pub structure: Structure,
    /// Whether the file is a test file.
    pub in_test: bool,
    pub reasons: Vec<Reason>,
    pub excerpt: String,
    /// Source, generated or vendored, judged on the whole file (markers sit in its head).
    pub origin: CodeOrigin,
}

/// What was looked for and not found.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Gap {
    /// Words of the task that no item contains.
    UnmatchedWords { words: Vec<String> },
    /// A symbol named whose definition is in none of the readable repositories' indexed files.
    UndefinedSymbol { symbol: String },
    /// A requested path that is not in the repository.
    MissingPath { path: String },
}

#[derive(Debug, Serialize)]
pub struct Pack {
    pub items: Vec<PackItem>,
    pub gaps: Vec<Gap>,
    pub budget_chars: usize,
    pub used_chars: usize,
    /// Items found but left out by the budget or the item limit.
    pub omitted: usize,
}

pub struct ContextRequest {
    pub task: String,
    pub symbols: Vec<String>,
    /// Paths (repository-relative, checked by the caller) to include, in the first repository.
    pub paths: Vec<String>,
    /// Paths (checked like `paths`) the caller changed: included, with their dependents, tests
    /// and build files.
    pub changed_files: Vec<String>,
    pub budget_chars: usize,
    pub max_items: usize,
    /// Expansion steps (0: entry points only; at most [`MAX_DEPTH`]).
    pub max_depth: u8,
    /// A file left out of the pack (an evaluation's query file; the editor's own file).
    pub exclude_path: Option<String>,
    /// Search entry points may also be generated or vendored code.
    pub include_generated: bool,
}

pub struct ContextService {
    pub code_search: Arc<CodeSearchService>,
    pub files: Arc<RepoFiles>,
    pub search_params: CodeSearchParams,
}

/// A range of a file before its excerpt is read.
struct Candidate {
    repo: usize,
    path: String,
    language: String,
    start: usize,
    end: usize,
    /// The first line of the piece that gives the item its priority: a merged item longer than
    /// an excerpt may be is shown from there.
    anchor: usize,
    reasons: Vec<Reason>,
    priority: u8,
    score: f32,
    /// 0 for an entry point, else the expansion step that found it.
    depth: u8,
}

impl Candidate {
    /// An item expansion found at `depth`; second-step items come after every first-step one.
    fn expanded(
        repo: usize,
        path: &str,
        (start, end): (usize, usize),
        priority: u8,
        depth: u8,
        reason: Reason,
    ) -> Candidate {
        Candidate {
            repo,
            path: path.to_string(),
            language: String::new(),
            start,
            end,
            anchor: 0,
            reasons: vec![reason],
            priority: if depth > 1 { priority.max(5) } else { priority },
            score: 0.0,
            depth,
        }
    }

    /// Whether a second step from this item follows code relations (not tests or build files).
    fn leads_further(&self) -> bool {
        self.reasons.iter().any(|r| {
            matches!(
                r,
                Reason::Reference { .. }
                    | Reason::Implementation { .. }
                    | Reason::Interface { .. }
                    | Reason::Import { .. }
            )
        })
    }
}

/// Where expansion starts from.
struct Entry {
    repo: usize,
    path: String,
    language: String,
    start: usize,
    end: usize,
    depth: u8,
    /// A file the caller gave (requested or changed).
    given: bool,
}

impl Entry {
    fn of(c: &Candidate) -> Entry {
        Entry {
            repo: c.repo,
            path: c.path.clone(),
            language: c.language.clone(),
            start: c.start,
            end: c.end,
            depth: c.depth,
            given: c
                .reasons
                .iter()
                .any(|r| matches!(r, Reason::Requested | Reason::Changed)),
        }
    }
}

/// A definition's 1-based, inclusive lines.
fn tag_lines(tag: &Tag) -> (usize, usize) {
    (
        tag.line_range.start + 1,
        tag.line_range.end.max(tag.line_range.start + 1),
    )
}

/// Where `text` uses `symbol`: the innermost definition around its first use inside one (the
/// caller), else a few lines around its first use; never its own definition's name.
fn use_site(text: &str, tags: &[Tag], symbol: &str) -> Option<(usize, usize)> {
    let definition_lines: Vec<usize> = tags
        .iter()
        .filter(|t| t.name == symbol)
        .map(|t| name_line(text, t))
        .collect();
    let uses: Vec<usize> = occurrences(text, symbol)
        .into_iter()
        .map(|(line, _)| line)
        .filter(|line| !definition_lines.contains(line))
        .collect();
    let enclosing = |line: usize| {
        tags.iter()
            .filter(|t| {
                t.line_range.start < line && line <= t.line_range.end.max(t.line_range.start + 1)
            })
            .min_by_key(|t| t.line_range.end - t.line_range.start)
    };
    if let Some(t) = uses.iter().find_map(|&line| enclosing(line)) {
        return Some(tag_lines(t));
    }
    let line = *uses.first()?;
    Some((
        line.saturating_sub(REFERENCE_CONTEXT).max(1),
        line + REFERENCE_CONTEXT,
    ))
}

/// The build files nearest `path`: those in its directory or, failing that, the closest
/// directory above it that has any (`files` sorted, as a snapshot lists them).
fn build_files(path: &str, files: &[String]) -> Vec<String> {
    let mut dir = path.rsplit_once('/').map(|(d, _)| d);
    loop {
        let found: Vec<String> = BUILD_FILES
            .iter()
            .map(|name| match dir {
                Some(d) => format!("{d}/{name}"),
                None => name.to_string(),
            })
            .filter(|candidate| candidate != path && files.binary_search(candidate).is_ok())
            .take(2)
            .collect();
        if !found.is_empty() {
            return found;
        }
        match dir {
            None => return Vec::new(),
            Some(d) => dir = d.rsplit_once('/').map(|(parent, _)| parent),
        }
    }
}

/// A repository's short name: the last part of its git URL (its source id when it has none).
pub fn repository_name(repo: &CodeRepository) -> String {
    GitUrl::parse(&repo.git_url)
        .map(|u| u.name().to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| repo.source_id.clone())
}

/// The identifier a symbol argument names (its last part: `Client.get` → `get`,
/// `mod::Type` → `Type`), or `None` when that is not an identifier of at most 200 bytes.
pub fn symbol_name(symbol: &str) -> Option<&str> {
    let name = symbol
        .rsplit(['.', ':', '#'])
        .next()
        .unwrap_or(symbol)
        .trim();
    let ok = !name.is_empty()
        && name.len() <= 200
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '$');
    ok.then_some(name)
}

/// Identifiers in the task that look like code names (`parse_config`, `HttpClient`,
/// `get(`): snake_case, camelCase or called.
fn task_symbols(task: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for token in tokenize_code(task) {
        let called = task.contains(&format!("{token}("));
        let snake = token.contains('_') && token.chars().any(|c| c.is_alphabetic());
        let camel = token
            .chars()
            .zip(token.chars().skip(1))
            .any(|(a, b)| a.is_lowercase() && b.is_uppercase());
        if token.len() >= 3 && (called || snake || camel) && !out.contains(&token) {
            out.push(token);
        }
        if out.len() == MAX_TASK_SYMBOLS {
            break;
        }
    }
    out
}

/// 1-based lines of `text` where `name` occurs as a whole identifier.
pub fn occurrences(text: &str, name: &str) -> Vec<(usize, String)> {
    let ident = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let found = line.match_indices(name).any(|(at, _)| {
            let before = line[..at].chars().next_back();
            let after = line[at + name.len()..].chars().next();
            !before.is_some_and(ident) && !after.is_some_and(ident)
        });
        if found {
            out.push((n + 1, line.to_string()));
        }
    }
    out
}

/// The 1-based line a tag's name is on.
pub fn name_line(text: &str, tag: &Tag) -> usize {
    text[..tag.name_range.start.min(text.len())]
        .matches('\n')
        .count()
        + 1
}

/// Names of test files that pair with `path` by convention, as (directory-independent) file names.
fn paired_test_names(path: &str) -> Vec<String> {
    let name = path.rsplit('/').next().unwrap_or(path);
    let Some((stem, ext)) = name.rsplit_once('.') else {
        return vec![];
    };
    if stem.is_empty() || is_test_path(path) {
        return vec![];
    }
    vec![
        format!("test_{stem}.{ext}"),
        format!("{stem}_test.{ext}"),
        format!("{stem}.test.{ext}"),
        format!("{stem}.spec.{ext}"),
        format!("{stem}Test.{ext}"),
        format!("{stem}_tests.{ext}"),
    ]
}

/// A file's text by (repository index, path); `None` when it cannot be read as UTF-8.
type CachedText = ((usize, String), Option<Arc<String>>);

/// The snapshots and file texts one pack reads, each once.
struct FileCache {
    snapshots: Vec<Option<Arc<Snapshot>>>,
    /// Each repository's relationship graph, looked up once per pack (`None` inside: none).
    graphs: Vec<Option<Option<Arc<RelationGraph>>>>,
    texts: Vec<CachedText>,
    /// Definitions per (repository index, path), each file parsed once per pack.
    tags: std::collections::HashMap<(usize, String), Arc<Vec<Tag>>>,
}

impl FileCache {
    /// The first lines of a file, at most `max` (one when it cannot be read).
    fn head(
        &mut self,
        files: &RepoFiles,
        repos: &[CodeRepository],
        repo: usize,
        path: &str,
        max: usize,
    ) -> (usize, usize) {
        let lines = self
            .text(files, repos, repo, path)
            .map_or(1, |t| t.lines().count().max(1));
        (1, lines.min(max))
    }

    fn graph(
        &mut self,
        search: &CodeSearchService,
        repos: &[CodeRepository],
        repo: usize,
    ) -> Option<Arc<RelationGraph>> {
        if self.graphs[repo].is_none() {
            self.graphs[repo] = Some(search.relation_graph(&repos[repo].source_id).ok());
        }
        self.graphs[repo].clone().flatten()
    }

    fn tags(&mut self, repo: usize, path: &str, language: &str, text: &str) -> Arc<Vec<Tag>> {
        self.tags
            .entry((repo, path.to_string()))
            .or_insert_with(|| Arc::new(find_definitions(language, text)))
            .clone()
    }

    fn text(
        &mut self,
        files: &RepoFiles,
        repos: &[CodeRepository],
        repo: usize,
        path: &str,
    ) -> Option<Arc<String>> {
        let key = (repo, path.to_string());
        if let Some((_, text)) = self.texts.iter().find(|(k, _)| k == &key) {
            return text.clone();
        }
        if self.texts.len() >= MAX_FILES_PER_PACK {
            return None;
        }
        let snapshot = self.snapshot(files, repos, repo)?;
        let text = snapshot
            .read(path)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .map(Arc::new);
        self.texts.push((key, text.clone()));
        text
    }

    fn snapshot(
        &mut self,
        files: &RepoFiles,
        repos: &[CodeRepository],
        repo: usize,
    ) -> Option<Arc<Snapshot>> {
        if self.snapshots[repo].is_none() {
            self.snapshots[repo] = files.snapshot(&repos[repo].git_url, None).ok();
        }
        self.snapshots[repo].clone()
    }
}

impl ContextService {
    /// The pack for `request` over `repos`: searches, then builds it on a blocking thread.
    pub async fn build(
        self: &Arc<Self>,
        repos: Vec<CodeRepository>,
        request: ContextRequest,
    ) -> Result<Pack, CodeSearchError> {
        let sources: Vec<String> = repos.iter().map(|r| r.source_id.clone()).collect();
        let mut params = self.search_params.clone();
        params.num_to_return = SEARCH_ENTRIES;
        let hits = if request.task.trim().is_empty() {
            Vec::new()
        } else {
            self.code_search
                .search_repositories(
                    &request.task,
                    &sources,
                    None,
                    request.exclude_path.as_deref(),
                    &params,
                    request.include_generated,
                )
                .await?
        };
        let hits: Vec<_> = hits
            .into_iter()
            .filter_map(|hit| {
                let repo = repos
                    .iter()
                    .position(|r| hit.doc.file_id.starts_with(&format!("{}:::", r.source_id)))?;
                Some((repo, hit))
            })
            .collect();
        let service = self.clone();
        tokio::task::spawn_blocking(move || service.pack(&repos, &request, hits))
            .await
            .map_err(|e| CodeSearchError::Other(anyhow::anyhow!("context task failed: {e}")))?
    }

    /// Builds the pack for `request` over `repos` (the repositories the caller may read and
    /// asked for). Blocking: reads files; run it off the async threads.
    pub fn pack(
        &self,
        repos: &[CodeRepository],
        request: &ContextRequest,
        search_hits: Vec<(usize, tabby_common::api::code::CodeSearchHit)>,
    ) -> Result<Pack, CodeSearchError> {
        let mut cache = FileCache {
            snapshots: vec![None; repos.len()],
            graphs: vec![None; repos.len()],
            texts: Vec::new(),
            tags: Default::default(),
        };
        let mut candidates: Vec<Candidate> = Vec::new();
        let mut gaps = Vec::new();

        // Requested and changed paths, in the first repository.
        let given = request
            .paths
            .iter()
            .map(|p| (p, Reason::Requested))
            .chain(request.changed_files.iter().map(|p| (p, Reason::Changed)));
        for (path, reason) in given {
            match repos
                .first()
                .and_then(|_| cache.text(&self.files, repos, 0, path))
            {
                Some(text) => {
                    let lines = text.lines().count().max(1);
                    candidates.push(Candidate {
                        repo: 0,
                        path: path.clone(),
                        language: String::new(),
                        start: 1,
                        end: lines.min(MAX_ITEM_LINES),
                        anchor: 0,
                        reasons: vec![reason],
                        priority: 0,
                        score: 0.0,
                        depth: 0,
                    });
                }
                None => gaps.push(Gap::MissingPath { path: path.clone() }),
            }
        }

        // Named symbols: their definitions.
        let mut named: Vec<String> = request.symbols.clone();
        for s in task_symbols(&request.task) {
            if !named.contains(&s) {
                named.push(s);
            }
        }
        for symbol in &named {
            let found = self.definitions(repos, &mut cache, symbol, None)?;
            if found.is_empty() {
                gaps.push(Gap::UndefinedSymbol {
                    symbol: symbol.clone(),
                });
            }
            for (repo, path, language, tag) in found.into_iter().take(3) {
                candidates.push(Candidate {
                    repo,
                    path,
                    language,
                    start: tag.line_range.start + 1,
                    end: tag.line_range.end.max(tag.line_range.start + 1),
                    anchor: 0,
                    reasons: vec![Reason::Definition {
                        symbol: symbol.clone(),
                    }],
                    priority: 2,
                    score: 1.0,
                    depth: 0,
                });
            }
        }

        // Search hits.
        let task_words: HashSet<String> = search_words(&request.task).into_iter().collect();
        for (rank, (repo, hit)) in search_hits.into_iter().take(SEARCH_ENTRIES).enumerate() {
            let start = hit.doc.start_line.unwrap_or(1);
            let end = start + hit.doc.body.lines().count().max(1) - 1;
            let body_words: HashSet<String> = search_words(&hit.doc.body).into_iter().collect();
            let mut matched: Vec<String> = task_words
                .intersection(&body_words)
                .map(|w| as_written(&request.task, w))
                .collect();
            matched.sort();
            candidates.push(Candidate {
                repo,
                path: hit.doc.filepath,
                language: hit.doc.language,
                start,
                end,
                anchor: 0,
                reasons: vec![Reason::Search {
                    rrf: hit.scores.rrf,
                    bm25: hit.scores.bm25,
                    embedding: hit.scores.embedding,
                    matched_words: matched,
                }],
                priority: 1,
                // The search's own order (the learned ranker's), not one of its raw scores.
                score: 1.0 / (rank + 1) as f32,
                depth: 0,
            });
        }

        // Expansion: one step from every entry point, then a second step from the first
        // items the first step found (callers of callers, implementations' uses, ...).
        let mut followed: HashSet<(usize, String)> = HashSet::new();
        let mut first_step = Vec::new();
        let firsts: Vec<Entry> = match request.max_depth {
            0 => Vec::new(),
            _ => candidates.iter().map(Entry::of).collect(),
        };
        for entry in firsts {
            self.expand(repos, &mut cache, &entry, &mut followed, &mut first_step)?;
        }
        let mut second_step = Vec::new();
        let seconds: Vec<Entry> = first_step
            .iter()
            .filter(|c| request.max_depth >= 2 && c.leads_further())
            .take(SECOND_STEP_ENTRIES)
            .map(Entry::of)
            .collect();
        for entry in seconds {
            self.expand(repos, &mut cache, &entry, &mut followed, &mut second_step)?;
        }
        candidates.extend(first_step);
        candidates.extend(second_step);

        if let Some(excluded) = &request.exclude_path {
            candidates.retain(|c| &c.path != excluded);
        }
        for c in &mut candidates {
            c.anchor = c.start;
        }
        let merged = merge(candidates);
        self.fill(repos, &mut cache, merged, request, task_words, gaps)
    }

    /// One step of expansion from `entry` (an entry point at depth 0, or an item the first
    /// step found): the references, implementations and interfaces of the symbols it
    /// defines; from entry points also the definitions of the names their file imports and
    /// uses there, and their tests; from changed or requested files their dependents and
    /// build files.
    fn expand(
        &self,
        repos: &[CodeRepository],
        cache: &mut FileCache,
        entry: &Entry,
        followed: &mut HashSet<(usize, String)>,
        out: &mut Vec<Candidate>,
    ) -> Result<(), CodeSearchError> {
        let repo = entry.repo;
        let depth = entry.depth + 1;
        let Some(text) = cache.text(&self.files, repos, repo, &entry.path) else {
            return Ok(());
        };
        let language = if entry.language.is_empty() {
            self.code_search.language_of(&entry.path)
        } else {
            entry.language.clone()
        };
        let label = format!(
            "{}:{}:{}-{}",
            repository_name(&repos[repo]),
            entry.path,
            entry.start,
            entry.end
        );
        let graph = cache.graph(&self.code_search, repos, repo);
        let tags = cache.tags(repo, &entry.path, &language, &text);
        let defined: Vec<Tag> = tags
            .iter()
            .filter(|t| (entry.start..=entry.end).contains(&(t.line_range.start + 1)))
            .take(SYMBOLS_PER_ENTRY)
            .cloned()
            .collect();
        let per_symbol = if depth == 1 {
            REFERENCES_PER_SYMBOL
        } else {
            SECOND_STEP_PER_SYMBOL
        };
        for tag in &defined {
            if !followed.insert((repo, tag.name.clone())) {
                continue;
            }
            out.extend(self.references(repos, cache, repo, &tag.name, &label, depth, per_symbol)?);
            if let Some(graph) = &graph {
                // Implementations of an interface (trait, base class) defined here.
                for site in graph
                    .implementations_of(&tag.name)
                    .iter()
                    .filter(|s| s.path != entry.path || s.start_line != tag.line_range.start + 1)
                    .take(per_symbol)
                {
                    let Some((start, end)) = self.site_lines(repos, cache, repo, site) else {
                        continue;
                    };
                    out.push(Candidate::expanded(
                        repo,
                        &site.path,
                        (start, end),
                        3,
                        depth,
                        Reason::Implementation {
                            interface: tag.name.clone(),
                            type_name: site.type_name.clone(),
                            how: site.how.clone(),
                            from: label.clone(),
                            depth,
                        },
                    ));
                }
                // What a type defined here implements: the interfaces' definitions.
                let mut interfaces: Vec<&str> = graph
                    .supertypes_of(&tag.name)
                    .iter()
                    .map(|s| s.interface.as_str())
                    .collect();
                interfaces.dedup();
                for interface in interfaces.into_iter().take(per_symbol) {
                    let Some(site) = graph
                        .supertypes_of(&tag.name)
                        .iter()
                        .find(|s| s.interface == interface)
                    else {
                        continue;
                    };
                    let definitions = self.definitions(repos, cache, interface, Some(repo))?;
                    if let Some((_, path, language, def)) = definitions.into_iter().next() {
                        let mut c = Candidate::expanded(
                            repo,
                            &path,
                            tag_lines(&def),
                            3,
                            depth,
                            Reason::Interface {
                                interface: interface.to_string(),
                                type_name: tag.name.clone(),
                                how: site.how.clone(),
                                from: label.clone(),
                                depth,
                            },
                        );
                        c.language = language;
                        out.push(c);
                    }
                }
            }
        }
        if depth > 1 {
            return Ok(());
        }
        let given = entry.given;
        if let Some(graph) = &graph {
            // The definitions of the imported names this entry uses.
            let (imported_files, names) = graph.imports_of(&entry.path);
            let excerpt: String = text
                .lines()
                .skip(entry.start.saturating_sub(1))
                .take(entry.end + 1 - entry.start.min(entry.end))
                .collect::<Vec<_>>()
                .join("\n");
            let used: Vec<&String> = names
                .iter()
                .filter(|n| !occurrences(&excerpt, n).is_empty())
                .take(IMPORTS_PER_ENTRY)
                .collect();
            for name in used {
                if !followed.insert((repo, name.clone())) {
                    continue;
                }
                for file in &imported_files {
                    let Some(file_text) = cache.text(&self.files, repos, repo, file) else {
                        continue;
                    };
                    let file_language = self.code_search.language_of(file);
                    let file_tags = cache.tags(repo, file, &file_language, &file_text);
                    if let Some(def) = file_tags.iter().find(|t| &t.name == name) {
                        let mut c = Candidate::expanded(
                            repo,
                            file,
                            tag_lines(def),
                            3,
                            depth,
                            Reason::Import {
                                symbol: name.clone(),
                                from: label.clone(),
                                depth,
                            },
                        );
                        c.language = file_language;
                        out.push(c);
                        break;
                    }
                }
            }
            // Files that import a changed or requested file, where they use it.
            if given {
                let defined_names: Vec<String> = tags.iter().map(|t| t.name.clone()).collect();
                for dependent in graph
                    .imported_by(&entry.path)
                    .into_iter()
                    .filter(|p| !is_test_path(p))
                    .take(DEPENDENTS_PER_ENTRY)
                {
                    let Some(dep_text) = cache.text(&self.files, repos, repo, dependent) else {
                        continue;
                    };
                    let dep_language = self.code_search.language_of(dependent);
                    let dep_tags = cache.tags(repo, dependent, &dep_language, &dep_text);
                    let (_, imported) = graph.imports_of(dependent);
                    let lines = imported
                        .iter()
                        .filter(|n| defined_names.contains(n))
                        .find_map(|n| use_site(&dep_text, &dep_tags, n))
                        .unwrap_or((1, dep_text.lines().count().clamp(1, REFERENCE_CONTEXT * 3)));
                    let mut c = Candidate::expanded(
                        repo,
                        dependent,
                        lines,
                        3,
                        depth,
                        Reason::Dependent {
                            of: entry.path.clone(),
                            depth,
                        },
                    );
                    c.language = dep_language;
                    out.push(c);
                }
            }
        }
        // Build files of a changed or requested file.
        if given && let Some(snapshot) = cache.snapshot(&self.files, repos, repo) {
            for build in build_files(&entry.path, &snapshot.files) {
                let lines = cache.head(&self.files, repos, repo, &build, BUILD_FILE_LINES);
                out.push(Candidate::expanded(
                    repo,
                    &build,
                    lines,
                    4,
                    depth,
                    Reason::BuildFile {
                        of: entry.path.clone(),
                        depth,
                    },
                ));
            }
        }
        // Tests: those that import the entry's file, then those paired with it by name.
        let mut tests: Vec<(String, &'static str)> = graph
            .as_ref()
            .map(|g| {
                g.tests_importing(&entry.path)
                    .into_iter()
                    .take(TESTS_PER_ENTRY)
                    .map(|t| (t.to_string(), "import"))
                    .collect()
            })
            .unwrap_or_default();
        let names = paired_test_names(&entry.path);
        if !names.is_empty()
            && let Some(snapshot) = cache.snapshot(&self.files, repos, repo)
        {
            for file in snapshot.files.iter().filter(|f| {
                let name = f.rsplit('/').next().unwrap_or(f);
                names.iter().any(|n| n == name)
            }) {
                if !tests.iter().any(|(t, _)| t == file) {
                    tests.push((file.clone(), "file name"));
                }
            }
        }
        for (test, by) in tests {
            let lines = cache.head(&self.files, repos, repo, &test, MAX_ITEM_LINES);
            out.push(Candidate::expanded(
                repo,
                &test,
                lines,
                4,
                depth,
                Reason::Test {
                    of: label.clone(),
                    by,
                    depth,
                },
            ));
        }
        Ok(())
    }

    /// The lines of an implementation site; for a Go type matched by its methods, the type's
    /// definition (in the site's file, else in its package).
    fn site_lines(
        &self,
        repos: &[CodeRepository],
        cache: &mut FileCache,
        repo: usize,
        site: &ImplSite,
    ) -> Option<(usize, usize)> {
        if site.start_line > 0 {
            return Some((site.start_line, site.end_line.max(site.start_line)));
        }
        let text = cache.text(&self.files, repos, repo, &site.path)?;
        let language = self.code_search.language_of(&site.path);
        cache
            .tags(repo, &site.path, &language, &text)
            .iter()
            .find(|t| t.name == site.type_name)
            .map(tag_lines)
            .or(Some((
                1,
                text.lines().count().clamp(1, REFERENCE_CONTEXT * 3),
            )))
    }

    /// Definitions of `symbol` in the indexed files of `repos`: (repo, path, language, tag).
    /// `only`: in that repository alone (an index into `repos`, like every index the cache
    /// keys by).
    fn definitions(
        &self,
        repos: &[CodeRepository],
        cache: &mut FileCache,
        symbol: &str,
        only: Option<usize>,
    ) -> Result<Vec<(usize, String, String, Tag)>, CodeSearchError> {
        let mut out = Vec::new();
        for (i, repo) in repos.iter().enumerate() {
            if only.is_some_and(|only| only != i) {
                continue;
            }
            let files = self.code_search.symbol_files(
                &repo.source_id,
                symbol,
                SymbolUse::Definition,
                SYMBOL_CHUNKS,
                MAX_FILES_PER_PACK,
            )?;
            for (path, language) in files {
                let Some(text) = cache.text(&self.files, repos, i, &path) else {
                    continue;
                };
                for tag in cache.tags(i, &path, &language, &text).iter() {
                    if tag.name == symbol {
                        out.push((i, path.clone(), language.clone(), tag.clone()));
                    }
                }
            }
        }
        Ok(out)
    }

    /// Where `symbol` (defined in repository `repo`) is used: the enclosing definition of each
    /// use, or a few lines around it; callers first, then tests.
    #[allow(clippy::too_many_arguments)]
    fn references(
        &self,
        repos: &[CodeRepository],
        cache: &mut FileCache,
        repo: usize,
        symbol: &str,
        entry: &str,
        depth: u8,
        limit: usize,
    ) -> Result<Vec<Candidate>, CodeSearchError> {
        let mut files = self.code_search.symbol_files(
            &repos[repo].source_id,
            symbol,
            SymbolUse::Occurrence,
            SYMBOL_CHUNKS,
            MAX_FILES_PER_PACK,
        )?;
        // Callers before tests.
        files.sort_by_key(|(p, _)| is_test_path(p));
        let mut out = Vec::new();
        for (path, language) in files {
            if out.len() == limit {
                break;
            }
            let Some(text) = cache.text(&self.files, repos, repo, &path) else {
                continue;
            };
            let tags = cache.tags(repo, &path, &language, &text);
            let Some(lines) = use_site(&text, &tags, symbol) else {
                continue;
            };
            let test = is_test_path(&path);
            let reason = if test {
                Reason::Test {
                    of: format!("{symbol} ({entry})"),
                    by: "reference",
                    depth,
                }
            } else {
                Reason::Reference {
                    symbol: symbol.to_string(),
                    from: entry.to_string(),
                    depth,
                }
            };
            let mut c =
                Candidate::expanded(repo, &path, lines, if test { 4 } else { 3 }, depth, reason);
            c.language = language;
            out.push(c);
        }
        Ok(out)
    }

    /// Reads the excerpts and takes items by priority while they fit.
    fn fill(
        &self,
        repos: &[CodeRepository],
        cache: &mut FileCache,
        mut merged: Vec<Candidate>,
        request: &ContextRequest,
        task_words: HashSet<String>,
        mut gaps: Vec<Gap>,
    ) -> Result<Pack, CodeSearchError> {
        merged.sort_by(|a, b| {
            a.priority
                .cmp(&b.priority)
                .then(b.score.total_cmp(&a.score))
        });
        let mut items = Vec::new();
        let mut used = 0;
        let mut omitted = 0;
        for c in merged {
            let Some(text) = cache.text(&self.files, repos, c.repo, &c.path) else {
                omitted += 1;
                continue;
            };
            let lines: Vec<&str> = text.lines().collect();
            let (start, end) = excerpt_window(c.start, c.end, c.anchor, lines.len());
            let excerpt = lines.get(start - 1..end).unwrap_or_default().join("\n");
            let size = excerpt.chars().count();
            if items.len() == request.max_items || used + size > request.budget_chars {
                omitted += 1;
                continue;
            }
            used += size;
            let language = if c.language.is_empty() {
                self.code_search.language_of(&c.path)
            } else {
                c.language.clone()
            };
            let structure = structure(
                &text,
                &cache.tags(c.repo, &c.path, &language, &text),
                start,
                end,
            );
            let repo = &repos[c.repo];
            let snapshot = cache.snapshot(&self.files, repos, c.repo);
            let commit = snapshot.as_ref().and_then(|s| s.commit.clone());
            let reference = snapshot.as_ref().and_then(|s| s.reference.clone());
            let origin = CodeOrigin::of(&c.path, &text);
            items.push(PackItem {
                origin,
                repository: repository_name(repo),
                source_id: repo.source_id.clone(),
                git_url: redact_credentials(&repo.git_url),
                commit,
                reference,
                in_test: is_test_path(&c.path),
                path: c.path,
                language,
                start_line: start,
                end_line: end,
                structure,
                reasons: c.reasons,
                excerpt,
            });
        }
        let found: HashSet<String> = items
            .iter()
            .flat_map(|i| search_words(&i.excerpt))
            .collect();
        let mut unmatched: Vec<String> = task_words
            .into_iter()
            .filter(|w| w.len() > 2 && !STOP_WORDS.contains(&w.as_str()) && !found.contains(w))
            .map(|w| as_written(&request.task, &w))
            .collect();
        unmatched.sort();
        if !unmatched.is_empty() {
            gaps.push(Gap::UnmatchedWords { words: unmatched });
        }
        Ok(Pack {
            items,
            gaps,
            budget_chars: request.budget_chars,
            used_chars: used,
            omitted,
        })
    }
}

/// The task's own (lower-cased) word for a stemmed search word.
fn as_written(task: &str, stemmed: &str) -> String {
    tokenize_words(task)
        .into_iter()
        .find(|w| stem(w) == stemmed)
        .unwrap_or_else(|| stemmed.to_string())
}

/// Words of a task that are not about code (stemmed as `search_words` gives them).
const STOP_WORDS: &[&str] = &[
    "the", "and", "for", "how", "what", "where", "why", "which", "when", "who", "does", "doe",
    "this", "that", "with", "from", "into", "are", "was", "were", "has", "have", "can", "not",
    "use", "used", "using", "code", "function", "method", "file", "find", "show", "work", "should",
    "would", "could", "about", "there", "their", "them", "then", "than", "its", "get", "fix",
    "add", "make", "all", "any", "our", "you", "your", "way",
];

/// The lines (1-based, inclusive) an item of `start..=end` shows from a file of `n_lines`: all
/// of them, or at most MAX_ITEM_LINES from its anchor (the piece that gave it its priority),
/// moved up so that the window stays inside the item.
fn excerpt_window(start: usize, end: usize, anchor: usize, n_lines: usize) -> (usize, usize) {
    let last = n_lines.max(1);
    let start = start.clamp(1, last);
    let end = end.clamp(start, last);
    if end + 1 - start <= MAX_ITEM_LINES {
        return (start, end);
    }
    let from = anchor
        .clamp(start, end)
        .min(end + 1 - MAX_ITEM_LINES)
        .max(start);
    (from, from + MAX_ITEM_LINES - 1)
}

/// Merges candidates of the same file whose ranges overlap or touch; reasons are kept, the best
/// priority and score win.
fn merge(mut candidates: Vec<Candidate>) -> Vec<Candidate> {
    candidates.sort_by(|a, b| (a.repo, &a.path, a.start).cmp(&(b.repo, &b.path, b.start)));
    let mut out: Vec<Candidate> = Vec::new();
    for mut c in candidates {
        if let Some(last) = out.last_mut()
            && last.repo == c.repo
            && last.path == c.path
            && c.start <= last.end + 1
        {
            // Merging must not make an item longer than an excerpt shows (its other pieces
            // would fall out of view): a piece that would is its own item, from the line
            // after the last one.
            if c.end.max(last.end) + 1 - last.start > MAX_ITEM_LINES && c.end > last.end {
                c.start = last.end + 1;
                c.anchor = c.anchor.max(c.start);
                out.push(c);
                continue;
            }
            last.end = last.end.max(c.end);
            if (c.priority, -c.score) < (last.priority, -last.score) {
                last.anchor = c.anchor;
            }
            for reason in c.reasons {
                if !last.reasons.contains(&reason) {
                    last.reasons.push(reason);
                }
            }
            last.priority = last.priority.min(c.priority);
            last.depth = last.depth.min(c.depth);
            last.score = last.score.max(c.score);
            if last.language.is_empty() {
                last.language = c.language;
            }
            continue;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_items_are_shown_from_their_anchor() {
        // Short items whole; the file's end bounds them.
        assert_eq!(excerpt_window(10, 20, 15, 100), (10, 20));
        assert_eq!(excerpt_window(90, 120, 95, 100), (90, 100));
        // An item of 291 lines whose best piece starts at line 204 shows 204..=283.
        assert_eq!(excerpt_window(110, 400, 204, 500), (204, 283));
        // Near the item's end the window moves up to stay inside it.
        assert_eq!(excerpt_window(110, 260, 250, 400), (181, 260));
        // An anchor outside the item (never built so) falls back to its start.
        assert_eq!(excerpt_window(110, 260, 5, 400), (110, 189));
    }

    fn candidate(path: &str, start: usize, end: usize, priority: u8) -> Candidate {
        Candidate {
            repo: 0,
            path: path.into(),
            language: "python".into(),
            start,
            end,
            anchor: 0,
            reasons: vec![Reason::Definition {
                symbol: format!("{path}{start}"),
            }],
            priority,
            score: 0.0,
            depth: 0,
        }
    }

    #[test]
    fn merging_never_makes_an_item_longer_than_an_excerpt() {
        // Ten touching 20-line search hits of one file: items of at most 80 lines, no line in
        // two items, every hit's first line in view.
        let pieces: Vec<Candidate> = (0..10)
            .map(|i| {
                let mut c = candidate("big.py", 1 + 20 * i, 20 * (i + 1), 1);
                c.anchor = c.start;
                c
            })
            .collect();
        let merged = merge(pieces);
        assert!(merged.len() >= 3, "{}", merged.len());
        for pair in merged.windows(2) {
            assert_eq!(pair[1].start, pair[0].end + 1);
        }
        for m in &merged {
            assert!(
                m.end + 1 - m.start <= MAX_ITEM_LINES,
                "{}..{}",
                m.start,
                m.end
            );
        }
        assert_eq!((merged[0].start, merged.last().unwrap().end), (1, 200));
        // A piece inside a long definition still merges into it.
        let long = candidate("big.py", 1, 150, 2);
        let inside = candidate("big.py", 100, 120, 1);
        let merged = merge(vec![long, inside]);
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].priority, 1);
    }

    #[test]
    fn overlapping_and_touching_pieces_of_a_file_merge_with_their_reasons() {
        let merged = merge(vec![
            candidate("a.py", 10, 20, 3),
            candidate("a.py", 1, 5, 2),
            candidate("a.py", 6, 8, 1),
            candidate("b.py", 1, 5, 2),
            candidate("a.py", 30, 40, 2),
        ]);
        let ranges: Vec<(&str, usize, usize, u8, usize)> = merged
            .iter()
            .map(|c| (c.path.as_str(), c.start, c.end, c.priority, c.reasons.len()))
            .collect();
        assert_eq!(
            ranges,
            [
                ("a.py", 1, 8, 1, 2),
                ("a.py", 10, 20, 3, 1),
                ("a.py", 30, 40, 2, 1),
                ("b.py", 1, 5, 2, 1)
            ]
        );
    }

    #[test]
    fn code_names_in_a_task_are_symbols() {
        assert_eq!(
            task_symbols(
                "Why does compute_discounted_price round, and who calls cartTotal() or get(?"
            ),
            ["compute_discounted_price", "cartTotal", "get"]
        );
        assert!(task_symbols("how are prices rounded").is_empty());
    }

    #[test]
    fn structure_names_what_a_range_defines_and_lives_in() {
        let text = "class Cart:\n    def total(self):\n        x = 1\n        return x\n";
        let tags = find_definitions("python", text);
        let inner = structure(text, &tags, 3, 4);
        assert_eq!(inner.symbols, vec![]);
        assert_eq!(
            inner.enclosing,
            Some(("function".to_string(), "total".to_string()))
        );
        assert_eq!(
            &text[inner.byte_range.0..inner.byte_range.1],
            "        x = 1\n        return x\n"
        );
        let whole = structure(text, &tags, 1, 4);
        assert_eq!(whole.symbols.len(), 2);
        assert_eq!(whole.enclosing, None);
        assert_eq!(whole.byte_range, (0, text.len()));
    }

    #[test]
    fn whole_identifier_occurrences_only() {
        let text = "parse(x)\nreparse(x)\nparse_all()\nself.parse\n$parse\nparse";
        let lines: Vec<usize> = occurrences(text, "parse")
            .into_iter()
            .map(|o| o.0)
            .collect();
        assert_eq!(lines, vec![1, 4, 6]);
    }

    #[test]
    fn test_files_pair_by_name() {
        let names = paired_test_names("src/pricing.py");
        assert!(names.contains(&"test_pricing.py".to_string()));
        assert!(names.contains(&"pricing_test.py".to_string()));
        assert!(paired_test_names("tests/test_pricing.py").is_empty());
        assert!(paired_test_names("Makefile").is_empty());
    }
}

/// Packs over a real index of a small multi-language repository: the relationship records
/// the indexer stored give implementation, interface, import-test, dependent and build-file
/// edges, and a second step follows callers of callers.
#[cfg(test)]
mod relation_tests {
    use std::path::Path;

    use tabby_common::config::CodeSearchParams;

    use super::*;
    use crate::services::code::tests::{index_sources, write};

    fn shop(dir: &Path) {
        write(
            dir,
            "Cargo.toml",
            "[package]\nname = \"store\"\nversion = \"0.1.0\"\n",
        );
        write(dir, "pyproject.toml", "[project]\nname = \"shop\"\n");
        write(
            dir,
            "src/lib.rs",
            "pub mod cache;\npub mod disk;\npub mod server;\npub mod storage;\n",
        );
        write(
            dir,
            "src/storage.rs",
            "/// Where blobs live.\npub trait Storage {\n    fn put_blob(&mut self, key: &str, value: Vec<u8>);\n    fn fetch_blob(&self, key: &str) -> Option<Vec<u8>>;\n}\n",
        );
        write(
            dir,
            "src/disk.rs",
            "use crate::storage::Storage;\n\npub struct DiskStore {\n    root: String,\n}\n\nimpl Storage for DiskStore {\n    fn put_blob(&mut self, key: &str, value: Vec<u8>) {\n        let _ = (key, value, &self.root);\n    }\n\n    fn fetch_blob(&self, key: &str) -> Option<Vec<u8>> {\n        std::fs::read(format!(\"{}/{key}\", self.root)).ok()\n    }\n}\n",
        );
        write(
            dir,
            "src/cache.rs",
            "use crate::disk::DiskStore;\nuse crate::storage::Storage;\n\npub fn warm_cache(store: &DiskStore) -> usize {\n    store.fetch_blob(\"index\").map_or(0, |b| b.len())\n}\n",
        );
        write(
            dir,
            "src/server.rs",
            "use crate::cache::warm_cache;\nuse crate::disk::DiskStore;\n\npub fn start_server(store: &DiskStore) {\n    let warmed = warm_cache(store);\n    println!(\"{warmed}\");\n}\n",
        );
        write(
            dir,
            "shop/pricing.py",
            "def discount(price, rate):\n    return round(price * (1 - rate), 2)\n",
        );
        write(
            dir,
            "tests/test_totals.py",
            "from shop.pricing import discount\n\n\ndef test_totals_round():\n    assert discount(10, 0.333) == 6.67\n",
        );
    }

    async fn open_service(root: &Path, repo: &Path) -> Arc<ContextService> {
        let (search, _) = index_sources(root, &[("config:shop", repo)], true).await;
        Arc::new(ContextService {
            code_search: Arc::new(search),
            files: Arc::new(RepoFiles::new(root.join("repos"))),
            search_params: CodeSearchParams::answer_default(),
        })
    }

    fn repos(repo: &Path) -> Vec<CodeRepository> {
        vec![CodeRepository {
            git_url: format!("file://{}", repo.display()),
            source_id: "config:shop".into(),
        }]
    }

    fn request(symbols: &[&str], changed: &[&str]) -> ContextRequest {
        ContextRequest {
            task: String::new(),
            symbols: symbols.iter().map(|s| s.to_string()).collect(),
            paths: Vec::new(),
            changed_files: changed.iter().map(|s| s.to_string()).collect(),
            budget_chars: DEFAULT_BUDGET_CHARS,
            max_items: MAX_ITEMS,
            max_depth: MAX_DEPTH,
            exclude_path: None,
            include_generated: false,
        }
    }

    fn reasons<'p>(pack: &'p Pack, path: &str) -> Vec<&'p Reason> {
        pack.items
            .iter()
            .filter(|i| i.path == path)
            .flat_map(|i| &i.reasons)
            .collect()
    }

    /// Expansion in the second of two repositories reads that repository's files (the pack's
    /// caches are keyed by the repository's index among all of them).
    #[tokio::test]
    async fn edges_in_a_later_repository_read_its_own_files() {
        let tmp = tempfile::tempdir().unwrap();
        let other = tmp.path().join("other");
        write(
            &other,
            "src/storage.rs",
            "pub struct Unrelated;\n\nfn filler() {}\n",
        );
        let repo = tmp.path().join("shop");
        shop(&repo);
        let (search, _) = index_sources(
            tmp.path(),
            &[("config:other", &other), ("config:shop", &repo)],
            true,
        )
        .await;
        let service = Arc::new(ContextService {
            code_search: Arc::new(search),
            files: Arc::new(RepoFiles::new(tmp.path().join("repos"))),
            search_params: CodeSearchParams::answer_default(),
        });
        let mut both = vec![CodeRepository {
            git_url: format!("file://{}", other.display()),
            source_id: "config:other".into(),
        }];
        both.extend(repos(&repo));
        // Read the other repository's src/storage.rs first, so a cache keyed wrongly answers it.
        let mut request = request(&["Unrelated", "DiskStore"], &[]);
        request.max_depth = 1;
        let pack = service.build(both, request).await.unwrap();
        let storage = pack
            .items
            .iter()
            .find(|i| {
                i.source_id == "config:shop"
                    && i.path == "src/storage.rs"
                    && i.reasons
                        .iter()
                        .any(|r| matches!(r, Reason::Interface { .. }))
            })
            .unwrap_or_else(|| panic!("{:#?}", pack.items));
        assert!(
            storage.excerpt.contains("pub trait Storage"),
            "{}",
            storage.excerpt
        );
    }

    #[tokio::test]
    async fn typed_edges_two_steps_and_build_files() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("shop");
        shop(&repo);
        let service = open_service(tmp.path(), &repo).await;

        // The trait's implementation (depth 1), and from it the callers of its methods
        // (depth 2).
        let pack = service
            .build(repos(&repo), request(&["Storage"], &[]))
            .await
            .unwrap();
        let disk = reasons(&pack, "src/disk.rs");
        assert!(
            disk.iter().any(
                |r| matches!(r, Reason::Implementation { interface, type_name, how, depth: 1, .. }
                if interface == "Storage" && type_name == "DiskStore" && how == "impl")
            ),
            "{:#?}",
            pack.items
        );
        assert!(
            reasons(&pack, "src/cache.rs").iter().any(|r| matches!(r,
                Reason::Reference { symbol, from, depth: 2 }
                    if symbol == "fetch_blob" && from.starts_with("shop:src/disk.rs:7-"))),
            "{:#?}",
            pack.items
        );
        assert!(
            reasons(&pack, "src/server.rs")
                .iter()
                .any(|r| matches!(r, Reason::Reference { depth: 2, .. })),
            "{:#?}",
            pack.items
        );
        // Second-step items come after every first-step item.
        let position = |path: &str| pack.items.iter().position(|i| i.path == path).unwrap();
        assert!(position("src/server.rs") > position("src/disk.rs"));
        assert!(pack.used_chars <= DEFAULT_BUDGET_CHARS);

        // Fewer steps: one step has no second-step item, none keeps the entry point alone.
        let mut one = request(&["Storage"], &[]);
        one.max_depth = 1;
        let pack = service.build(repos(&repo), one).await.unwrap();
        assert!(
            pack.items
                .iter()
                .flat_map(|i| &i.reasons)
                .all(|r| !r.describe().ends_with("(2 steps)")),
            "{:#?}",
            pack.items
        );
        assert!(!reasons(&pack, "src/disk.rs").is_empty());
        let mut none = request(&["Storage"], &[]);
        none.max_depth = 0;
        let pack = service.build(repos(&repo), none).await.unwrap();
        let paths: Vec<&str> = pack.items.iter().map(|i| i.path.as_str()).collect();
        assert_eq!(paths, ["src/storage.rs"]);

        // From the type: the trait it implements.
        let pack = service
            .build(repos(&repo), request(&["DiskStore"], &[]))
            .await
            .unwrap();
        let storage = reasons(&pack, "src/storage.rs");
        assert!(
            storage.iter().any(
                |r| matches!(r, Reason::Interface { interface, type_name, .. }
                if interface == "Storage" && type_name == "DiskStore")
            ),
            "{:#?}",
            pack.items
        );
        let item = pack
            .items
            .iter()
            .find(|i| i.path == "src/storage.rs")
            .unwrap();
        assert!(
            item.excerpt.contains("pub trait Storage"),
            "{}",
            item.excerpt
        );
        assert_eq!(
            item.structure.symbols,
            vec![("interface".to_string(), "Storage".to_string())]
        );
        assert_eq!(item.reference, None, "a plain directory has no ref");
        assert!(!item.in_test);

        // A changed file: its dependents where they use it, its build file.
        let pack = service
            .build(repos(&repo), request(&[], &["src/storage.rs"]))
            .await
            .unwrap();
        assert_eq!(pack.items[0].path, "src/storage.rs");
        assert_eq!(pack.items[0].reasons[0], Reason::Changed);
        assert!(
            reasons(&pack, "src/disk.rs").iter().any(|r| matches!(r,
                Reason::Dependent { of, depth: 1 } if of == "src/storage.rs")),
            "{:#?}",
            pack.items
        );
        let build: Vec<&PackItem> = pack
            .items
            .iter()
            .filter(|i| {
                i.reasons
                    .iter()
                    .any(|r| matches!(r, Reason::BuildFile { .. }))
            })
            .collect();
        assert_eq!(build.len(), 2, "{:#?}", pack.items);
        assert!(build.iter().any(|i| i.path == "Cargo.toml"));
        assert!(build.iter().all(|i| i.path != "src/storage.rs"));

        // A Python source: the test that imports it (its name pairs with nothing).
        let pack = service
            .build(repos(&repo), request(&[], &["shop/pricing.py"]))
            .await
            .unwrap();
        assert!(
            reasons(&pack, "tests/test_totals.py")
                .iter()
                .any(|r| matches!(
                    r,
                    Reason::Test {
                        by: "import",
                        depth: 1,
                        ..
                    }
                )),
            "{:#?}",
            pack.items
        );

        // The records are garbage-collected with their file: without disk.rs, no
        // implementation of Storage is left.
        std::fs::remove_file(repo.join("src/disk.rs")).unwrap();
        let service = open_service(tmp.path(), &repo).await;
        let graph = service.code_search.relation_graph("config:shop").unwrap();
        assert!(graph.implementations_of("Storage").is_empty());
        assert!(!graph.is_empty());
        let pack = service
            .build(repos(&repo), request(&["Storage"], &[]))
            .await
            .unwrap();
        assert!(
            pack.items
                .iter()
                .flat_map(|i| &i.reasons)
                .all(|r| !matches!(r, Reason::Implementation { .. })),
            "{:#?}",
            pack.items
        );
    }
}
