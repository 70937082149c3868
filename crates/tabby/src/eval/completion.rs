//! `tabby eval --mode completion`: the completion queries of a set run through the real
//! completion service and the configured completion model, once per configuration (retrieval
//! off, on, and variants), greedy so that every run gives the same text.
//!
//! The editor's view is rebuilt from the corpus: the prefix is the query text (the lines before
//! the call line and the call line up to the callee's name), the suffix the lines after the call
//! line (never the rest of the call line, which starts with the answer), the filepath and the
//! `file://` git_url the corpus was indexed under. Scores: whether the first identifier
//! generated is the callee (CrossCodeEval's identifier match), exact match and edit similarity
//! of the first line against the corpus line, the share of prompts holding a snippet that
//! overlaps the target, prompt size, and latency with and without the model.

use std::{
    collections::HashSet,
    io::Write,
    path::{Path, PathBuf},
    sync::Arc,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use async_trait::async_trait;
use futures::stream::BoxStream;
use serde::Deserialize;
use serde_json::json;
use tabby_common::{
    api::{
        code::{AllowedCodeRepository, CodeRepository, CodeSearch},
        event::ComposedLogger,
    },
    config::{CodeSearchParams, CompletionConfig, Config, SnippetFormat},
};
use tabby_inference::{CompletionOptions, CompletionStream, FirstNames, ModelError};

use super::{IndexedCorpus, Range, index_corpus, paired, percentile};
use crate::services::{
    code::{CodeSearchEmbedding, CodeSearchService, QueryStrategy},
    completion::{
        CompletionModel, CompletionRequest, CompletionService, DebugOptions, RequestContext,
        Segments, Snippet,
    },
};

/// Lines after the call line that the editor sends as the suffix (tabby-agent sends 20).
const SUFFIX_LINES: usize = 20;

/// One configuration of the completion service, from `--variants` (`+` combines parts).
#[derive(Clone, Debug, PartialEq)]
pub struct Variant {
    pub name: String,
    retrieval: bool,
    format: Option<SnippetFormat>,
    /// Thresholds off (every candidate may become a snippet).
    open: bool,
    /// Upstream's values: comment snippets within 768 bytes, upstream thresholds, no import
    /// candidates.
    upstream: bool,
    /// No import-aware candidates.
    no_imports: bool,
    /// `headsN`: `snippet_head_lines = N`.
    head_lines: Option<usize>,
    /// `suffixN`: `suffix_bytes = N`.
    suffix_bytes: Option<usize>,
    /// `snippetsN`: `snippet_bytes = N`.
    snippet_bytes: Option<usize>,
    /// `maxN`: `max_input_length = N`.
    max_input_length: Option<usize>,
    /// `clipN`: `prefix_clip_lines = N`.
    prefix_clip_lines: Option<usize>,
    /// `nosearch`: import candidates (and the editor's own snippets) only, no hybrid search hits.
    no_search: bool,
    /// `bestlast`: `snippets_best_last = true`.
    best_last: bool,
    /// `agree`: `search_hits_from_both_legs = true`.
    agree: bool,
    /// `usednames` / `anynames`: `snippets_of_used_names = true` / `false`.
    used_names: Option<bool>,
    /// `headerN`: `import_header_bytes = N`.
    import_header_bytes: Option<usize>,
    /// `outlineN`: `outline_bytes = N`.
    outline_bytes: Option<usize>,
    /// `importsN`: `import_snippets = N`.
    import_snippets: Option<usize>,
    /// `nosteady`: `steady_snippets = false` (the eval's queries of one file come one after
    /// the other, as a user's cursor would).
    no_steady: bool,
    /// `free`: `member_names_only = false`.
    free: bool,
    /// `cacheN`: `name_cache_weight = N / 100`.
    name_cache_percent: Option<usize>,
    /// `names`: `names_leg = true`.
    names_leg: bool,
    /// `members`: `members_leg = true`.
    members_leg: bool,
}

/// The number after `name` in a variant part such as `heads8`.
fn numbered(part: &str, name: &str) -> anyhow::Result<Option<usize>> {
    let Some(number) = part.strip_prefix(name) else {
        return Ok(None);
    };
    number.parse().map(Some).map_err(|_| {
        anyhow::anyhow!("variant part {part:?}: expected {name} and a number, e.g. {name}8")
    })
}

impl Variant {
    /// `off`, `on`, `comment`, `file_sep`, `auto`, `open`, `noimports`, `headsN`, `suffixN`,
    /// `snippetsN`, `maxN`, `clipN`, `headerN`, `outlineN`, `importsN`, `usednames`, `anynames`,
    /// `free`, `names`, `cacheN`, `upstream`, combined
    /// with `+`
    /// (e.g. `file_sep+open`); a comma separates variants.
    pub fn parse_list(list: &str) -> anyhow::Result<Vec<Variant>> {
        list.split(',').map(|v| Variant::parse(v.trim())).collect()
    }

    fn parse(spec: &str) -> anyhow::Result<Variant> {
        let mut v = Variant {
            name: spec.to_string(),
            retrieval: true,
            format: None,
            open: false,
            upstream: false,
            no_imports: false,
            head_lines: None,
            suffix_bytes: None,
            snippet_bytes: None,
            max_input_length: None,
            prefix_clip_lines: None,
            no_search: false,
            best_last: false,
            agree: false,
            used_names: None,
            no_steady: false,
            names_leg: false,
            members_leg: false,
            import_header_bytes: None,
            outline_bytes: None,
            import_snippets: None,
            free: false,
            name_cache_percent: None,
        };
        for part in spec.split('+') {
            match part {
                "off" => v.retrieval = false,
                "on" => {}
                "comment" => v.format = Some(SnippetFormat::Comment),
                "file_sep" => v.format = Some(SnippetFormat::FileSep),
                "auto" => v.format = Some(SnippetFormat::Auto),
                "open" => v.open = true,
                "upstream" => v.upstream = true,
                "noimports" => v.no_imports = true,
                "nosearch" => v.no_search = true,
                "bestlast" => v.best_last = true,
                "agree" => v.agree = true,
                "usednames" => v.used_names = Some(true),
                "anynames" => v.used_names = Some(false),
                "nosteady" => v.no_steady = true,
                "free" => v.free = true,
                "names" => v.names_leg = true,
                "members" => v.members_leg = true,
                other => {
                    if let Some(n) = numbered(other, "imports")? {
                        v.import_snippets = Some(n);
                    } else if let Some(n) = numbered(other, "cache")? {
                        if n > 100 {
                            bail!(
                                "variant part {other:?}: the name cache's weight is a percent, 0 to 100"
                            );
                        }
                        v.name_cache_percent = Some(n);
                    } else if let Some(n) = numbered(other, "outline")? {
                        v.outline_bytes = Some(n);
                    } else if let Some(n) = numbered(other, "header")? {
                        v.import_header_bytes = Some(n);
                    } else if let Some(n) = numbered(other, "heads")? {
                        v.head_lines = Some(n);
                    } else if let Some(n) = numbered(other, "suffix")? {
                        v.suffix_bytes = Some(n);
                    } else if let Some(n) = numbered(other, "snippets")? {
                        v.snippet_bytes = Some(n);
                    } else if let Some(n) = numbered(other, "max")? {
                        v.max_input_length = Some(n);
                    } else if let Some(n) = numbered(other, "clip")? {
                        v.prefix_clip_lines = Some(n);
                    } else {
                        bail!(
                            "unknown variant part {other:?}: expected off, on, comment, file_sep, auto, open, noimports, nosearch, bestlast, agree, usednames, anynames, nosteady, free, names, cacheN, headerN, outlineN, importsN, headsN, suffixN, snippetsN, maxN, clipN or upstream"
                        )
                    }
                }
            }
        }
        Ok(v)
    }

    fn config(&self, base: &CompletionConfig) -> CompletionConfig {
        let mut c = base.clone();
        if self.upstream {
            c.snippet_head_lines = 0;
            c.snippet_format = SnippetFormat::Comment;
            c.snippet_bytes = crate::services::completion::prompt::UPSTREAM_SNIPPET_BYTES;
            c.code_search_params = CodeSearchParams::upstream_completion();
            c.import_snippets = 0;
            c.import_header_bytes = 0;
            c.outline_bytes = 0;
            c.snippets_of_used_names = false;
            c.member_names_only = false;
            c.name_cache_weight = 0.0;
        }
        if self.free {
            c.member_names_only = false;
        }
        if self.names_leg {
            c.names_leg = true;
        }
        if self.members_leg {
            c.members_leg = true;
        }
        if let Some(n) = self.name_cache_percent {
            c.name_cache_weight = n as f32 / 100.0;
        }
        if self.no_imports {
            c.import_snippets = 0;
        }
        if let Some(n) = self.import_header_bytes {
            c.import_header_bytes = n;
        }
        if let Some(n) = self.outline_bytes {
            c.outline_bytes = n;
        }
        if let Some(n) = self.import_snippets {
            c.import_snippets = n;
        }
        if let Some(n) = self.head_lines {
            c.snippet_head_lines = n;
        }
        if let Some(n) = self.suffix_bytes {
            c.suffix_bytes = n;
        }
        if let Some(n) = self.snippet_bytes {
            c.snippet_bytes = n;
        }
        if self.no_steady {
            c.steady_snippets = false;
        }
        if let Some(n) = self.prefix_clip_lines {
            c.prefix_clip_lines = n;
        }
        if let Some(n) = self.max_input_length {
            c.max_input_length = n;
        }
        if self.no_search {
            c.code_search_params.num_to_return = 0;
        }
        if self.best_last {
            c.snippets_best_last = true;
        }
        if self.agree {
            c.search_hits_from_both_legs = true;
        }
        if let Some(used) = self.used_names {
            c.snippets_of_used_names = used;
        }
        if let Some(f) = self.format {
            c.snippet_format = f;
        }
        if self.open {
            let n = c.code_search_params.num_to_return;
            c.code_search_params =
                CodeSearchParams::without_thresholds(n, c.code_search_params.num_to_score);
        }
        c
    }
}

pub struct CompletionEvalOptions {
    pub queries: PathBuf,
    pub corpus: PathBuf,
    pub embedding: Option<CodeSearchEmbedding>,
    pub strategy: QueryStrategy,
    pub variants: Vec<Variant>,
    /// The first N completion queries only.
    pub limit: Option<usize>,
    /// The ids of the queries the model runs on and the figures count (`--only`); the others
    /// still go through the service (each file's carried-over snippets stay those of a full
    /// run) with a model that answers nothing.
    pub only: Option<HashSet<String>>,
    /// No query runs the model (`--prompts-only`).
    pub prompts_only: bool,
    pub out: Option<PathBuf>,
    pub config: Config,
    pub model: CompletionModel,
    /// Another ranker than the built-in one (`--ranker`).
    pub ranker: Option<Arc<crate::services::code::ranker::Ranker>>,
    /// Another chunk size for the languages that set none (`--chunk-size`).
    pub chunk_size: Option<usize>,
}

#[derive(Clone, Debug, Deserialize)]
struct CompletionQuery {
    id: String,
    #[serde(default)]
    language: Option<String>,
    query: String,
    filepath: Option<String>,
    relevant: Vec<Range>,
    symbol: String,
    call_line: usize,
    #[serde(default)]
    corpus: Option<String>,
}

/// A query with the editor's view rebuilt from the corpus.
struct Case {
    query: CompletionQuery,
    filepath: String,
    suffix: String,
    /// The rest of the call line: what the model should write first.
    expected_line: String,
}

fn read_cases(path: &Path, corpus: &IndexedCorpus) -> anyhow::Result<Vec<Case>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut cases = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let kind: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("{}:{}: not JSON", path.display(), i + 1))?;
        if kind.get("kind").and_then(|k| k.as_str()) != Some("completion") {
            continue;
        }
        let query: CompletionQuery = serde_json::from_value(kind).with_context(|| {
            format!(
                "{}:{}: not a completion query (needs query, filepath, relevant, symbol, call_line)",
                path.display(),
                i + 1
            )
        })?;
        let source = corpus.source_of(query.corpus.as_deref())?;
        let dir = &corpus.sources[&source];
        let filepath = query.filepath.clone().with_context(|| {
            format!(
                "{}:{}: completion query without filepath",
                path.display(),
                i + 1
            )
        })?;
        let file = std::fs::read_to_string(dir.join(&filepath))
            .with_context(|| format!("{}: cannot read {filepath} in the corpus", query.id))?;
        let lines: Vec<&str> = file.lines().collect();
        let Some(call) = query.call_line.checked_sub(1).and_then(|i| lines.get(i)) else {
            bail!(
                "{}: call_line {} is not in {filepath}",
                query.id,
                query.call_line
            );
        };
        let typed = query.query.rsplit('\n').next().unwrap_or("");
        let expected_line = call.get(typed.len()..).unwrap_or("").to_string();
        let suffix: String = lines
            .iter()
            .skip(query.call_line)
            .take(SUFFIX_LINES)
            .map(|l| format!("{l}\n"))
            .collect();
        cases.push(Case {
            query,
            filepath,
            suffix,
            expected_line,
        });
    }
    Ok(cases)
}

/// Sums over the queries of one variant.
#[derive(Default)]
struct Tally {
    n: usize,
    identifier: usize,
    /// Each query's identifier match, in the queries' order (the same for every variant).
    hits: Vec<bool>,
    exact: usize,
    edit_similarity: f64,
    with_snippet: usize,
    with_target_snippet: usize,
    /// Prompts that name the callee somewhere before the cursor (the prefix never does).
    naming_callee: usize,
    prompt_bytes: usize,
    /// Queries whose completion had to start with a module's names (`member_names_only`), and
    /// of those, the ones whose names held the callee.
    constrained: usize,
    callee_allowed: usize,
    latency: Vec<Duration>,
    overhead: Vec<Duration>,
    /// The same request again: what an editor asking in the same file pays.
    overhead_again: Vec<Duration>,
}

pub async fn run(options: CompletionEvalOptions) -> anyhow::Result<()> {
    let corpus = index_corpus(
        &options.corpus,
        options.embedding.as_ref(),
        &options.config,
        options.chunk_size,
    )
    .await?;
    let mut cases = read_cases(&options.queries, &corpus)?;
    if let Some(n) = options.limit {
        cases.truncate(n);
    }
    if cases.is_empty() {
        bail!("{} holds no completion query", options.queries.display());
    }
    if let Some(only) = &options.only
        && !cases.iter().any(|c| only.contains(&c.query.id))
    {
        bail!("no completion query of the set has an id that --only names");
    }
    // A fresh search service per variant: the caches a variant's first requests fill (the
    // index reader, each file's imports) would otherwise make the next variant's first
    // requests look cheaper than a server's.
    let new_search = || -> Arc<dyn CodeSearch> {
        let mut search = CodeSearchService::new(
            corpus.index_dir.clone(),
            options.embedding.clone(),
            corpus.languages.clone(),
        );
        search.query_strategy = options.strategy;
        search.files = Some(Arc::new(tabby_index::repo_files::RepoFiles::new(
            corpus.tmp.path().join("repositories"),
        )));
        if let Some(ranker) = &options.ranker {
            search.ranker = Some(ranker.clone());
        }
        Arc::new(search)
    };

    let mut out = match &options.out {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot write {}", path.display()))?,
        )),
        None => None,
    };
    let mut tallies = Vec::new();
    for variant in &options.variants {
        let config = variant.config(&options.config.completion);
        let search = new_search();
        let service = |engine: Arc<dyn CompletionStream>| {
            CompletionService::new(
                CompletionModel {
                    engine,
                    prompt_template: options.model.prompt_template.clone(),
                    additional_stop_words: options.model.additional_stop_words.clone(),
                },
                corpus.languages.clone(),
                config.clone(),
                Some(search.clone()),
                Arc::new(ComposedLogger(vec![])),
            )
            // Deterministic: a file's snippets carry over to its next query however long the
            // queries in between took.
            .with_retrieval_ttl(Duration::MAX)
        };
        // The model answers the measured queries; the others only pass through the service.
        let unmeasured = Arc::new(AtomicBool::new(false));
        let names_seen = Arc::new(std::sync::Mutex::new(None));
        let model: Arc<dyn CompletionStream> = if options.prompts_only {
            Arc::new(NoModel)
        } else {
            Arc::new(Skippable {
                model: options.model.engine.clone(),
                skip: unmeasured.clone(),
            })
        };
        let with_model = service(Arc::new(SeesNames {
            model,
            seen: names_seen.clone(),
        }));
        let without_model = service(Arc::new(NoModel));
        let mut tally = Tally::default();
        for (i, case) in cases.iter().enumerate() {
            let source = corpus.source_of(case.query.corpus.as_deref())?;
            let git_url = corpus.git_url(&source)?;
            let allowed = AllowedCodeRepository {
                list: vec![CodeRepository {
                    git_url: git_url.clone(),
                    source_id: format!("eval:{source}"),
                }],
            };
            let request = request(case, &git_url, variant.retrieval);
            let ctx = || RequestContext {
                allowed_repositories: Some(&allowed),
                ..Default::default()
            };
            let measured = (options.only.as_ref()).is_none_or(|o| o.contains(&case.query.id));
            if !measured {
                unmeasured.store(true, Ordering::SeqCst);
                with_model.generate(request, ctx()).await?;
                unmeasured.store(false, Ordering::SeqCst);
                continue;
            }
            let t = Instant::now();
            without_model.generate(request.clone(), ctx()).await?;
            tally.overhead.push(t.elapsed());
            let t = Instant::now();
            without_model.generate(request.clone(), ctx()).await?;
            tally.overhead_again.push(t.elapsed());
            *names_seen.lock().unwrap_or_else(|e| e.into_inner()) = None;
            let t = Instant::now();
            let response = with_model.generate(request, ctx()).await?;
            tally.latency.push(t.elapsed());
            let seen = names_seen.lock().unwrap_or_else(|e| e.into_inner()).take();
            // A prior alone (an open set) constrains nothing.
            let name_prior = seen
                .as_ref()
                .is_some_and(|n| n.prior_weight(n.start()).is_some());
            let first_names = seen.filter(|n| !n.is_open());
            let callee_allowed = first_names
                .as_ref()
                .map(|names| names.names().iter().any(|n| *n == case.query.symbol));
            tally.constrained += first_names.is_some() as usize;
            tally.callee_allowed += callee_allowed.unwrap_or(false) as usize;

            let text = response.choices.first().map_or("", |c| c.text.as_str());
            let debug = response.debug_data.unwrap_or_default();
            let prompt = debug.prompt.unwrap_or_default();
            let snippets = debug.snippets.unwrap_or_default();
            let first_line = text.lines().next().unwrap_or("").trim_end();
            let expected = case.expected_line.trim_end();
            let identifier_hit = first_identifier(text) == Some(case.query.symbol.as_str());
            let target_snippet = snippets
                .iter()
                .any(|s| snippet_overlaps(s, &case.query.relevant, &corpus, &source));
            tally.n += 1;
            tally.identifier += identifier_hit as usize;
            tally.hits.push(identifier_hit);
            tally.exact += (first_line == expected) as usize;
            tally.edit_similarity += edit_similarity(first_line, expected);
            tally.with_snippet += (!snippets.is_empty()) as usize;
            tally.with_target_snippet += target_snippet as usize;
            // Mentions in the suffix the editor sent do not count (the prompt holds at most
            // those), so this undercounts rather than over.
            let names_callee = word_count(&prompt, &case.query.symbol)
                > word_count(&case.suffix, &case.query.symbol);
            tally.naming_callee += names_callee as usize;
            tally.prompt_bytes += prompt.len();
            if let Some(out) = out.as_mut() {
                writeln!(
                    out,
                    "{}",
                    json!({
                        "id": case.query.id, "variant": variant.name, "text": text,
                        "expected_line": case.expected_line, "symbol": case.query.symbol,
                        "identifier_match": identifier_hit, "prompt_bytes": prompt.len(), "prompt": prompt,
                        "snippets": snippets.iter().map(|s| &s.filepath).collect::<Vec<_>>(),
                        "target_snippet": target_snippet, "names_callee": names_callee,
                        "first_names": first_names.as_ref().map(|n| n.names().len()),
                        "callee_allowed": callee_allowed, "name_prior": name_prior,
                    })
                )?;
            }
            if (i + 1) % 10 == 0 {
                eprintln!(
                    "{}: {}/{} queries, identifier match so far {:.3}",
                    variant.name,
                    i + 1,
                    cases.len(),
                    tally.identifier as f64 / tally.n as f64
                );
            }
        }
        tallies.push((variant.name.clone(), tally));
    }
    if let Some(mut out) = out {
        out.flush()?;
    }

    println!(
        "completion eval: {} queries, model template {:?}, embedding {}, max_input_length {}",
        cases.len(),
        options.model.prompt_template.as_ref().map(|t| t.as_str()),
        options
            .embedding
            .as_ref()
            .map_or("none", |e| e.model_id.as_str()),
        options.config.completion.max_input_length,
    );
    if options.prompts_only {
        println!(
            "prompts only (--prompts-only): no model ran; identifier match, exact line, edit similarity and latency are not measured"
        );
    }
    if let Some(only) = &options.only {
        println!(
            "the model ran on the {} queries --only names; the others passed through the service unmeasured",
            only.len()
        );
    }
    println!(
        "| variant | n | identifier match | exact line | edit sim | with snippet | target snippet | callee named | prompt bytes | latency p50 / p90 ms | server overhead p50 ms, first / again | member names (callee in them) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (name, t) in tallies.iter_mut() {
        let n = t.n.max(1) as f64;
        t.latency.sort();
        t.overhead.sort();
        t.overhead_again.sort();
        println!(
            "| {name} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.0} | {:.0} / {:.0} | {:.2} / {:.2} | {:.3} ({}/{}) |",
            t.n,
            t.identifier as f64 / n,
            t.exact as f64 / n,
            t.edit_similarity / n,
            t.with_snippet as f64 / n,
            t.with_target_snippet as f64 / n,
            t.naming_callee as f64 / n,
            t.prompt_bytes as f64 / n,
            percentile(&t.latency, 0.5),
            percentile(&t.latency, 0.9),
            percentile(&t.overhead, 0.5),
            percentile(&t.overhead_again, 0.5),
            t.constrained as f64 / n,
            t.callee_allowed,
            t.constrained,
        );
    }
    if let Some(((base, first), rest)) = tallies.split_first()
        && !rest.is_empty()
    {
        println!();
        let rows: Vec<_> = rest
            .iter()
            .map(|(name, t)| (name.clone(), paired::compare(&first.hits, &t.hits)))
            .collect();
        paired::print_table(base, &rows);
    }
    Ok(())
}

fn request(case: &Case, git_url: &str, retrieval: bool) -> CompletionRequest {
    CompletionRequest {
        language: case.query.language.clone(),
        segments: Some(Segments {
            prefix: case.query.query.clone(),
            suffix: Some(case.suffix.clone()),
            filepath: Some(case.filepath.clone()),
            git_url: Some(git_url.to_string()),
            ..Default::default()
        }),
        debug_options: Some(DebugOptions {
            return_snippets: true,
            return_prompt: true,
            disable_retrieval_augmented_code_completion: !retrieval,
            ..Default::default()
        }),
        temperature: Some(0.0),
        seed: Some(0),
        ..Default::default()
    }
}

/// Whether `snippet` is a piece of a relevant range: same file, and its text found there at
/// lines that overlap the range.
/// Occurrences of `word` in `text` as a whole identifier.
fn word_count(text: &str, word: &str) -> usize {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word)
        .filter(|(at, _)| {
            let before = text[..*at].chars().next_back();
            let after = text[at + word.len()..].chars().next();
            !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
        })
        .count()
}

fn snippet_overlaps(
    snippet: &Snippet,
    relevant: &[Range],
    corpus: &IndexedCorpus,
    source: &str,
) -> bool {
    let in_file: Vec<&Range> = relevant
        .iter()
        .filter(|r| r.filepath == snippet.filepath)
        .collect();
    if in_file.is_empty() {
        return false;
    }
    let Some(dir) = corpus.sources.get(source) else {
        return false;
    };
    let Ok(file) = std::fs::read_to_string(dir.join(&snippet.filepath)) else {
        return false;
    };
    let body = snippet.body.trim();
    let mut from = 0;
    while let Some(at) = file[from..].find(body) {
        let start = file[..from + at].matches('\n').count() + 1;
        let end = start + body.matches('\n').count();
        if in_file
            .iter()
            .any(|r| start <= r.end_line && r.start_line <= end)
        {
            return true;
        }
        from += at + body.len().max(1);
        if from >= file.len() {
            break;
        }
    }
    false
}

/// The first identifier (`[A-Za-z_][A-Za-z0-9_]*`) of `text`.
fn first_identifier(text: &str) -> Option<&str> {
    let start = text.find(|c: char| c.is_ascii_alphabetic() || c == '_')?;
    let rest = &text[start..];
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// 1 − Levenshtein distance / the longer length, over chars (1 for two empty strings).
fn edit_similarity(a: &str, b: &str) -> f64 {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let longest = a.len().max(b.len());
    if longest == 0 {
        return 1.0;
    }
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != cb));
            diagonal = above;
        }
    }
    1.0 - row[b.len()] as f64 / longest as f64
}

/// A model that answers nothing at once: times the server's own part of a completion.
struct NoModel;

/// The model, noting the names a completion had to start with (none: unconstrained).
struct SeesNames {
    model: Arc<dyn CompletionStream>,
    seen: Arc<std::sync::Mutex<Option<Arc<FirstNames>>>>,
}

#[async_trait]
impl CompletionStream for SeesNames {
    async fn generate(
        &self,
        prompt: &str,
        options: CompletionOptions,
    ) -> BoxStream<'static, Result<String, ModelError>> {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = options.first_names.clone();
        self.model.generate(prompt, options).await
    }
}

/// The configured model, or no answer while `skip` is set (a query `--only` leaves out).
struct Skippable {
    model: Arc<dyn CompletionStream>,
    skip: Arc<AtomicBool>,
}

#[async_trait]
impl CompletionStream for Skippable {
    async fn generate(
        &self,
        prompt: &str,
        options: CompletionOptions,
    ) -> BoxStream<'static, Result<String, ModelError>> {
        if self.skip.load(Ordering::SeqCst) {
            Box::pin(futures::stream::empty())
        } else {
            self.model.generate(prompt, options).await
        }
    }
}

#[async_trait]
impl CompletionStream for NoModel {
    async fn generate(
        &self,
        _prompt: &str,
        _options: CompletionOptions,
    ) -> BoxStream<'static, Result<String, ModelError>> {
        Box::pin(futures::stream::empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_and_similarity() {
        assert_eq!(
            first_identifier("get_best_encoding(x)"),
            Some("get_best_encoding")
        );
        assert_eq!(first_identifier("  (foo.bar"), Some("foo"));
        assert_eq!(first_identifier("123 + 4"), None);
        assert_eq!(edit_similarity("abc", "abc"), 1.0);
        assert_eq!(edit_similarity("", ""), 1.0);
        assert!((edit_similarity("kitten", "sitting") - (1.0 - 3.0 / 7.0)).abs() < 1e-9);
    }

    #[test]
    fn variants_parse_and_name_the_bad_part() {
        let v = Variant::parse_list("off,on,file_sep+open,upstream").unwrap();
        assert_eq!(v.len(), 4);
        assert!(!v[0].retrieval && v[1].retrieval);
        assert_eq!(v[2].format, Some(SnippetFormat::FileSep));
        assert!(v[2].open);
        let c = v[3].config(&CompletionConfig::default());
        assert_eq!(c.snippet_format, SnippetFormat::Comment);
        let err = Variant::parse_list("on,fast").unwrap_err().to_string();
        assert!(err.contains("\"fast\""), "{err}");
        let sized = Variant::parse_list("on+heads6+suffix128+snippets700+clip4").unwrap();
        let c = sized[0].config(&CompletionConfig::default());
        assert_eq!(
            (
                c.snippet_head_lines,
                c.suffix_bytes,
                c.snippet_bytes,
                c.prefix_clip_lines
            ),
            (6, 128, 700, 4)
        );
        let err = Variant::parse_list("on+headsx").unwrap_err().to_string();
        assert!(err.contains("\"headsx\""), "{err}");
        let context = Variant::parse_list("on+header0+outline384+imports4").unwrap();
        let c = context[0].config(&CompletionConfig::default());
        assert_eq!(
            (c.import_header_bytes, c.outline_bytes, c.import_snippets),
            (0, 384, 4)
        );
        let c = Variant::parse_list("upstream").unwrap()[0].config(&c);
        assert_eq!((c.import_header_bytes, c.outline_bytes), (0, 0));
        let gated = Variant::parse_list("on+usednames,anynames").unwrap();
        let on = gated[0].config(&CompletionConfig::default());
        assert!(on.snippets_of_used_names);
        assert!(!gated[1].config(&on).snippets_of_used_names);
        let names = Variant::parse_list("on,on+names").unwrap();
        assert!(!names[0].config(&on).names_leg);
        assert!(names[1].config(&on).names_leg);
        let members = Variant::parse_list("on,on+members").unwrap();
        assert!(!members[0].config(&on).members_leg);
        assert!(members[1].config(&on).members_leg && !members[1].config(&on).names_leg);
        let cached = Variant::parse_list("on+cache80,on+cache0").unwrap();
        assert_eq!(cached[0].config(&on).name_cache_weight, 0.8);
        assert_eq!(cached[1].config(&on).name_cache_weight, 0.0);
        let err = Variant::parse_list("on+cache150").unwrap_err().to_string();
        assert!(err.contains("percent"), "{err}");
    }

    #[test]
    fn callee_mentions_are_whole_identifiers() {
        assert_eq!(word_count("echo(x); secho(y); echo_all(); echo", "echo"), 2);
        assert_eq!(word_count("", "echo"), 0);
    }
}
