//! `tabby eval`: index a corpus into a temporary index, run labelled queries through each search
//! leg (bm25, embedding, rrf), write results in the eval set's format and print Recall@1/5/10,
//! MRR@10 and nDCG@10 per kind and per leg, plus query latency.
//!
//! Scoring follows `shared/eval/score.py`: a result hits a relevant range when the path is the
//! same and the line ranges overlap; only the top 10 count; nDCG credits each relevant range once.

mod completion;
pub mod generate;
pub mod paired;

pub use completion::{CompletionEvalOptions, Variant, run as run_completion};

use std::{
    collections::BTreeMap,
    io::Write,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use serde::Deserialize;
use serde_json::json;
use tabby_common::{
    api::code::CodeSearchQuery,
    config::{CodeSearchParams, Config},
    languages::LanguageTable,
};
use tabby_index::{CodeIndexer, EmbeddingSetup, NoProgress, RepositoryToIndex};

use crate::services::code::{
    CodeSearchEmbedding, CodeSearchService, LegHits, QueryStrategy, finish, finish_with_cap,
};

const K: usize = 10;
/// Import candidates the `imports` legs take when the config's completion sends none.
const IMPORT_LEG_CANDIDATES: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Leg {
    Bm25,
    Embedding,
    Rrf,
    /// Import-aware candidates alone (completion queries; nl queries have no file).
    Imports,
    /// What completion retrieval returns: import candidates, then the fused hits.
    ImportsRrf,
    /// What search returns with the default configuration (the learned ranker's order).
    Service,
    /// The evidence pack for the query as the task (`/v1beta/context`, default budget), its
    /// items in pack order.
    Pack,
    /// The same pack with its entry points only (no expansion), and with two steps of it.
    PackEntries,
    PackTwoSteps,
}

impl Leg {
    pub fn parse_list(list: &str) -> anyhow::Result<Vec<Leg>> {
        list.split(',')
            .map(|s| match s.trim() {
                "bm25" => Ok(Leg::Bm25),
                "embedding" => Ok(Leg::Embedding),
                "rrf" => Ok(Leg::Rrf),
                "imports" => Ok(Leg::Imports),
                "imports+rrf" => Ok(Leg::ImportsRrf),
                "pack" => Ok(Leg::Pack),
                "pack0" => Ok(Leg::PackEntries),
                "pack2" => Ok(Leg::PackTwoSteps),
                "service" => Ok(Leg::Service),
                other => bail!(
                    "unknown leg {other:?}: expected bm25, embedding, rrf, service, imports, imports+rrf, pack, pack0 or pack2"
                ),
            })
            .collect()
    }

    fn name(&self) -> &'static str {
        match self {
            Leg::Bm25 => "bm25",
            Leg::Embedding => "embedding",
            Leg::Rrf => "rrf",
            Leg::Imports => "imports",
            Leg::ImportsRrf => "imports+rrf",
            Leg::Service => "service",
            Leg::Pack => "pack",
            Leg::PackEntries => "pack0",
            Leg::PackTwoSteps => "pack2",
        }
    }

    /// The expansion depth of a pack leg.
    fn pack_depth(&self) -> Option<u8> {
        match self {
            Leg::PackEntries => Some(0),
            Leg::PackTwoSteps => Some(2),
            Leg::Pack => Some(crate::services::context::DEFAULT_DEPTH),
            _ => None,
        }
    }
}

/// Whether a result's lines overlap a relevant range of the same file.
fn overlaps(relevant: &Range, result: &Range) -> bool {
    relevant.filepath == result.filepath
        && result.start_line <= relevant.end_line
        && relevant.start_line <= result.end_line
}

/// The share of a query's relevant ranges that any of `results` overlaps (no rank cut: what
/// a whole pack holds).
fn recall_all(query: &EvalQuery, results: &[Range]) -> f64 {
    let found = query
        .relevant
        .iter()
        .filter(|r| results.iter().any(|result| overlaps(r, result)))
        .count();
    found as f64 / query.relevant.len().max(1) as f64
}

/// Sums over the packs of one leg and kind.
#[derive(Default)]
struct PackSize {
    n: usize,
    items: usize,
    chars: usize,
    recall: f64,
}

/// Lines the results of a leg show, summed over queries: the top 10's, and recall within the
/// first [`LINE_BUDGET`] lines (so that chunk sizes compare at equal reading).
#[derive(Default)]
struct ResultLines {
    n: usize,
    lines: usize,
    recall_in_budget: f64,
}

/// The lines a reader (or a prompt) takes in for `ResultLines::recall_in_budget`: about ten
/// results of 25 lines.
const LINE_BUDGET: usize = 250;

/// The results that fit in [`LINE_BUDGET`] lines, best first.
fn within_line_budget(results: &[Range]) -> &[Range] {
    let mut lines = 0;
    let fit = results
        .iter()
        .take(K)
        .take_while(|r| {
            lines += r.lines();
            lines <= LINE_BUDGET
        })
        .count();
    &results[..fit]
}

#[derive(Clone, Debug, Deserialize)]
struct Range {
    filepath: String,
    start_line: usize,
    end_line: usize,
}

impl Range {
    /// The lines the result spans.
    fn lines(&self) -> usize {
        self.end_line.saturating_sub(self.start_line) + 1
    }
}

#[derive(Clone, Debug, Deserialize)]
struct EvalQuery {
    id: String,
    kind: String,
    #[serde(default)]
    language: Option<String>,
    query: String,
    #[serde(default)]
    filepath: Option<String>,
    relevant: Vec<Range>,
    #[serde(default)]
    corpus: Option<String>,
}

pub struct EvalOptions {
    pub queries: PathBuf,
    pub corpus: PathBuf,
    pub legs: Vec<Leg>,
    pub out: Option<PathBuf>,
    pub embedding: Option<CodeSearchEmbedding>,
    pub strategy: QueryStrategy,
    /// Candidates each leg returns (`num_to_score`) when thresholds are off.
    pub num_to_score: usize,
    /// Apply the configured thresholds (completion params for completion queries, answer params
    /// for nl queries) instead of switching them off.
    pub thresholds: bool,
    /// Another ranker than the built-in one.
    pub ranker: Option<Arc<crate::services::code::ranker::Ranker>>,
    /// Another question expansion table than the built-in one (`Some(None)`: none).
    pub nl_expansion: Option<Option<Arc<crate::services::code::expansion::NlExpansion>>>,
    /// Where to write each query's candidates with their features and labels.
    pub features_out: Option<PathBuf>,
    /// Another chunk size for the languages that set none (`--chunk-size`).
    pub chunk_size: Option<usize>,
    pub config: Config,
}

fn read_queries(path: &Path) -> anyhow::Result<Vec<EvalQuery>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{}:{}: not a query", path.display(), i + 1))
        })
        .collect()
}

/// Sources to index: `corpus-full/` and `corpus-nodocs/` when present, else the directory itself.
fn corpus_sources(dir: &Path) -> anyhow::Result<BTreeMap<String, PathBuf>> {
    if !dir.is_dir() {
        bail!("corpus {} is not a directory", dir.display());
    }
    let mut sources = BTreeMap::new();
    for name in ["full", "nodocs"] {
        let sub = dir.join(format!("corpus-{name}"));
        if sub.is_dir() {
            sources.insert(name.to_string(), sub);
        }
    }
    if sources.is_empty() {
        sources.insert("corpus".to_string(), dir.to_path_buf());
    }
    Ok(sources)
}

#[derive(Default, Clone)]
struct Metrics {
    recall: [f64; 3],
    mrr: f64,
    ndcg: f64,
    n: usize,
}

fn score(query: &EvalQuery, results: &[Range]) -> Metrics {
    let mut hit_at: BTreeMap<usize, usize> = BTreeMap::new();
    let mut credited = std::collections::HashSet::new();
    let mut first = None;
    let mut dcg = 0.0;
    for (i, result) in results.iter().take(K).enumerate() {
        let rank = i + 1;
        let hits: Vec<usize> = query
            .relevant
            .iter()
            .enumerate()
            .filter(|(_, r)| overlaps(r, result))
            .map(|(i, _)| i)
            .collect();
        if hits.is_empty() {
            continue;
        }
        first.get_or_insert(rank);
        for &h in &hits {
            hit_at.entry(h).or_insert(rank);
        }
        if let Some(&new) = hits.iter().find(|h| !credited.contains(*h)) {
            credited.insert(new);
            dcg += 1.0 / ((rank + 1) as f64).log2();
        }
    }
    let n_rel = query.relevant.len().max(1);
    let idcg: f64 = (1..=query.relevant.len().min(K))
        .map(|r| 1.0 / ((r + 1) as f64).log2())
        .sum();
    let recall = |k: usize| hit_at.values().filter(|&&r| r <= k).count() as f64 / n_rel as f64;
    Metrics {
        recall: [recall(1), recall(5), recall(10)],
        mrr: first.map_or(0.0, |r| 1.0 / r as f64),
        ndcg: if idcg > 0.0 { dcg / idcg } else { 0.0 },
        n: 1,
    }
}

/// Sums of per-query recalls: bm25 candidates, embedding candidates, either, rrf uncapped.
#[derive(Default)]
struct Ceiling {
    recall: [f64; 4],
    n: usize,
}

fn add(total: &mut Metrics, m: &Metrics) {
    for i in 0..3 {
        total.recall[i] += m.recall[i];
    }
    total.mrr += m.mrr;
    total.ndcg += m.ndcg;
    total.n += m.n;
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

/// A corpus indexed into a temporary directory (removed when this is dropped).
struct IndexedCorpus {
    tmp: tempfile::TempDir,
    index_dir: PathBuf,
    /// Source name (`full`, `nodocs` or `corpus`) → directory.
    sources: BTreeMap<String, PathBuf>,
    /// The languages table the corpus was indexed with, for the search service too.
    languages: Arc<LanguageTable>,
}

impl IndexedCorpus {
    /// The source a query names (`full`, `nodocs`), else the first one (a plain directory).
    fn source_of(&self, wanted: Option<&str>) -> anyhow::Result<String> {
        match wanted {
            Some(name) if self.sources.contains_key(name) => Ok(name.to_string()),
            _ => self
                .sources
                .keys()
                .next()
                .cloned()
                .context("the corpus has no source"),
        }
    }

    /// The `file://` URL the source was indexed under (what an editor's git_url would match).
    fn git_url(&self, source: &str) -> anyhow::Result<String> {
        let dir = self
            .sources
            .get(source)
            .with_context(|| format!("no corpus source {source:?}"))?;
        Ok(format!("file://{}", dir.canonicalize()?.display()))
    }
}

async fn index_corpus(
    corpus: &Path,
    embedding: Option<&CodeSearchEmbedding>,
    config: &Config,
    chunk_size: Option<usize>,
) -> anyhow::Result<IndexedCorpus> {
    // The built-in table, with `--chunk-size` for every language that sets none of its own.
    let languages = match chunk_size {
        Some(size) => LanguageTable::builtin().with_default_chunk_size(size),
        None => LanguageTable::builtin(),
    };
    let sources = corpus_sources(corpus)?;
    let tmp = tempfile::tempdir().context("cannot create a temporary index directory")?;
    let index_dir = tmp.path().join("index");
    let started = Instant::now();
    let setup = embedding.map(|e| EmbeddingSetup {
        model: e.model.clone(),
        model_id: e.model_id.clone(),
        max_input_bytes: config.embedding.max_input_length,
    });
    let mut indexer = CodeIndexer::open(&index_dir, setup, languages.clone()).await?;
    let corpus = IndexedCorpus {
        index_dir: index_dir.clone(),
        sources,
        tmp,
        languages: Arc::new(languages),
    };
    for name in corpus.sources.keys() {
        let repo = RepositoryToIndex {
            source_id: format!("eval:{name}"),
            git_url: corpus.git_url(name)?,
            refs: vec![],
        };
        let summary = indexer
            .index_repository(&repo, &corpus.tmp.path().join("repositories"), &NoProgress)
            .await?;
        eprint!("{summary}");
    }
    drop(indexer);
    eprintln!("indexed in {:.1} s", started.elapsed().as_secs_f64());
    Ok(corpus)
}

pub async fn run(options: EvalOptions) -> anyhow::Result<()> {
    let queries = read_queries(&options.queries)?;
    let corpus = index_corpus(
        &options.corpus,
        options.embedding.as_ref(),
        &options.config,
        options.chunk_size,
    )
    .await?;
    let sources = &corpus.sources;

    let mut service = CodeSearchService::new(
        corpus.index_dir.clone(),
        options.embedding.clone(),
        corpus.languages.clone(),
    );
    service.query_strategy = options.strategy;
    // Files read as the repository has them, as a server reads them (the names and members
    // legs read the edited file and the files a chain leads to).
    service.files = Some(Arc::new(tabby_index::repo_files::RepoFiles::new(
        corpus.tmp.path().join("repositories"),
    )));
    if let Some(ranker) = &options.ranker {
        service.ranker = Some(ranker.clone());
    }
    if let Some(table) = &options.nl_expansion {
        service.nl_expansion = table.clone();
    }
    // The trainer needs the names and members legs' features whatever the ranker weighs.
    service.always_file_legs = options.features_out.is_some();
    let expansion_version = match &service.nl_expansion {
        Some(x) if options.strategy.expands_questions() => x.version().to_string(),
        _ => "none".to_string(),
    };
    let ranker_version = service
        .ranker
        .as_ref()
        .map_or("none (RRF)".to_string(), |r| r.version.clone());
    let service = Arc::new(service);
    let mut features_out = match &options.features_out {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot write {}", path.display()))?,
        )),
        None => None,
    };
    let context = Arc::new(crate::services::context::ContextService {
        code_search: service.clone(),
        files: Arc::new(tabby_index::repo_files::RepoFiles::new(
            corpus.tmp.path().join("repositories"),
        )),
        // The same search parameters as the plain legs, so the comparison is the pack's.
        search_params: if options.thresholds {
            options.config.answer.code_search_params.clone()
        } else {
            CodeSearchParams::without_thresholds(K, options.num_to_score)
        },
    });
    let mut pack_sizes: BTreeMap<(Leg, String), PackSize> = BTreeMap::new();
    let mut result_lines: BTreeMap<(Leg, String), ResultLines> = BTreeMap::new();

    let mut results: BTreeMap<Leg, Vec<(String, Vec<Range>)>> = BTreeMap::new();
    let mut totals: BTreeMap<(Leg, String), Metrics> = BTreeMap::new();
    let mut latencies = Vec::new();
    let mut ceilings: BTreeMap<String, Ceiling> = BTreeMap::new();
    for query in &queries {
        let source = match query.corpus.as_deref() {
            Some(c) if sources.contains_key(c) => c.to_string(),
            _ => sources.keys().next().cloned().unwrap_or_default(),
        };
        let is_completion = query.kind == "completion";
        let search_query = CodeSearchQuery {
            include_generated: false,
            filepath: if is_completion {
                query.filepath.clone()
            } else {
                None
            },
            language: query.language.clone(),
            content: query.query.clone(),
            source_id: format!("eval:{source}"),
        };
        let configured = if is_completion {
            &options.config.completion.code_search_params
        } else {
            &options.config.answer.code_search_params
        };
        let mut params = if options.thresholds {
            configured.clone()
        } else {
            CodeSearchParams::without_thresholds(K, options.num_to_score)
        };
        params.num_to_return = K;
        // The per-file cap is the configured one either way (the service's).
        params.max_hits_per_file = configured.max_hits_per_file;
        let t = Instant::now();
        let legs = service
            .search_legs(&search_query, params.num_to_score)
            .await?;
        let fused = service.fuse(&legs);
        let service_hits = finish(&legs.searcher, fused.clone(), &params, legs.has_embedding);
        latencies.push(t.elapsed());
        let rrf_hits = finish(
            &legs.searcher,
            service.fuse_rrf(&legs),
            &params,
            legs.has_embedding,
        );
        // What completion's search returns: without the names and members legs unless the
        // config runs them.
        let completion = &options.config.completion;
        let completion_hits = if is_completion && !(completion.names_leg && completion.members_leg)
        {
            finish(
                &legs.searcher,
                service.fuse_with(&legs, completion.names_leg, completion.members_leg),
                &params,
                legs.has_embedding,
            )
        } else {
            service_hits.clone()
        };
        if let Some(out) = features_out.as_mut() {
            write_features(out, query, &service, &legs)?;
        }

        // Ceilings: where the relevant chunks are among all candidates, and the fused top 10
        // without the per-file cap.
        let ranges_of = |hits: &LegHits| -> Vec<Range> {
            hits.iter()
                .filter_map(|(_, a)| CodeSearchService::document(&legs.searcher, *a))
                .map(|d| to_range(&d))
                .collect()
        };
        let bm25_all = ranges_of(&legs.bm25);
        let embedding_all = ranges_of(&legs.embedding);
        let either: Vec<Range> = bm25_all.iter().chain(&embedding_all).cloned().collect();
        let uncapped: Vec<Range> = finish_with_cap(
            &legs.searcher,
            fused,
            &params,
            legs.has_embedding,
            usize::MAX,
        )
        .iter()
        .map(|h| to_range(&h.doc))
        .collect();
        let ceiling = ceilings.entry(query.kind.clone()).or_default();
        ceiling.n += 1;
        for (sum, found) in ceiling.recall.iter_mut().zip([
            recall_all(query, &bm25_all),
            recall_all(query, &embedding_all),
            recall_all(query, &either),
            score(query, &uncapped).recall[2],
        ]) {
            *sum += found;
        }

        let wants_imports = options
            .legs
            .iter()
            .any(|l| matches!(l, Leg::Imports | Leg::ImportsRrf));
        let import_hits: Vec<Range> = if wants_imports && is_completion {
            // As many as the config sends, or, where it sends none (the default), as many as
            // these legs have always measured.
            let count = match options.config.completion.import_snippets {
                0 => IMPORT_LEG_CANDIDATES,
                n => n,
            };
            service
                .search_imports(&search_query, count)
                .await?
                .iter()
                .map(|h| to_range(&h.doc))
                .collect()
        } else {
            Vec::new()
        };
        let mut pack_hits: BTreeMap<Leg, Vec<Range>> = BTreeMap::new();
        for leg in options.legs.iter().filter(|l| l.pack_depth().is_some()) {
            let repo = tabby_common::api::code::CodeRepository {
                git_url: corpus.git_url(&source)?,
                source_id: format!("eval:{source}"),
            };
            let pack = context
                .build(
                    vec![repo],
                    crate::services::context::ContextRequest {
                        task: query.query.clone(),
                        symbols: Vec::new(),
                        paths: Vec::new(),
                        changed_files: Vec::new(),
                        budget_chars: crate::services::context::DEFAULT_BUDGET_CHARS,
                        max_items: crate::services::context::DEFAULT_MAX_ITEMS,
                        max_depth: leg.pack_depth().unwrap_or_default(),
                        exclude_path: search_query.filepath.clone(),
                        include_generated: false,
                    },
                )
                .await?;
            let ranges: Vec<Range> = pack
                .items
                .iter()
                .map(|i| Range {
                    filepath: i.path.clone(),
                    start_line: i.start_line,
                    end_line: i.end_line,
                })
                .collect();
            let whole = recall_all(query, &ranges);
            for kind in [query.kind.as_str(), "all"] {
                let size = pack_sizes.entry((*leg, kind.to_string())).or_default();
                size.n += 1;
                size.items += pack.items.len();
                size.chars += pack.used_chars;
                size.recall += whole;
            }
            pack_hits.insert(*leg, ranges);
        }
        for leg in &options.legs {
            let ranges: Vec<Range> = match leg {
                Leg::Pack | Leg::PackEntries | Leg::PackTwoSteps => {
                    pack_hits.get(leg).cloned().unwrap_or_default()
                }
                Leg::Rrf => rrf_hits.iter().map(|h| to_range(&h.doc)).collect(),
                Leg::Service => service_hits.iter().map(|h| to_range(&h.doc)).collect(),
                Leg::Imports => import_hits.clone(),
                Leg::ImportsRrf => {
                    let mut all = import_hits.clone();
                    for r in completion_hits.iter().map(|h| to_range(&h.doc)) {
                        if !all
                            .iter()
                            .any(|a| a.filepath == r.filepath && a.start_line == r.start_line)
                        {
                            all.push(r);
                        }
                    }
                    all.truncate(K);
                    all
                }
                Leg::Bm25 | Leg::Embedding => {
                    let hits = if *leg == Leg::Bm25 {
                        &legs.bm25
                    } else {
                        &legs.embedding
                    };
                    hits.iter()
                        .take(K)
                        .filter_map(|(_, a)| CodeSearchService::document(&legs.searcher, *a))
                        .map(|d| to_range(&d))
                        .collect()
                }
            };
            let m = score(query, &ranges);
            add(totals.entry((*leg, query.kind.clone())).or_default(), &m);
            add(totals.entry((*leg, "all".into())).or_default(), &m);
            let size = result_lines.entry((*leg, query.kind.clone())).or_default();
            size.n += 1;
            size.lines += ranges.iter().take(K).map(Range::lines).sum::<usize>();
            size.recall_in_budget += score(query, within_line_budget(&ranges)).recall[2];
            results
                .entry(*leg)
                .or_default()
                .push((query.id.clone(), ranges));
        }
    }

    if let Some(out) = &options.out {
        for (leg, rows) in &results {
            let path = if options.legs.len() == 1 {
                out.clone()
            } else {
                let stem = out
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .unwrap_or("results");
                out.with_file_name(format!("{stem}.{}.jsonl", leg.name()))
            };
            let mut file = std::io::BufWriter::new(
                std::fs::File::create(&path)
                    .with_context(|| format!("cannot write {}", path.display()))?,
            );
            for (id, ranges) in rows {
                let results: Vec<_> = ranges
                    .iter()
                    .map(|r| json!({"filepath": r.filepath, "start_line": r.start_line, "end_line": r.end_line}))
                    .collect();
                writeln!(file, "{}", json!({"id": id, "results": results}))?;
            }
            eprintln!("wrote {}", path.display());
        }
    }

    if let Some(mut out) = features_out {
        out.flush()?;
    }
    println!(
        "embedding: {}   query strategy: {:?}   ranker: {ranker_version}   nl expansion: {}   thresholds: {}",
        options
            .embedding
            .as_ref()
            .map_or("none", |e| e.model_id.as_str()),
        options.strategy,
        expansion_version,
        if options.thresholds {
            "configured"
        } else {
            "off"
        }
    );
    println!("| leg | kind | n | R@1 | R@5 | R@10 | MRR@10 | nDCG@10 |");
    println!("|---|---|---|---|---|---|---|---|");
    for ((leg, kind), m) in &totals {
        let n = m.n.max(1) as f64;
        println!(
            "| {} | {kind} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
            leg.name(),
            m.n,
            m.recall[0] / n,
            m.recall[1] / n,
            m.recall[2] / n,
            m.mrr / n,
            m.ndcg / n
        );
    }
    println!(
        "\nceilings (recall over each leg's {} candidates, and the fused top {K} without a per-file cap):",
        if options.thresholds {
            "configured number of".to_string()
        } else {
            options.num_to_score.to_string()
        }
    );
    println!(
        "| kind | n | bm25 candidates | embedding candidates | either leg | service top {K}, no per-file cap |"
    );
    println!("|---|---|---|---|---|---|");
    for (kind, c) in &ceilings {
        let n = c.n.max(1) as f64;
        println!(
            "| {kind} | {} | {:.3} | {:.3} | {:.3} | {:.3} |",
            c.n,
            c.recall[0] / n,
            c.recall[1] / n,
            c.recall[2] / n,
            c.recall[3] / n
        );
    }
    println!(
        "\nresult lines (the top {K}'s lines, and recall within the first {LINE_BUDGET} lines of results):"
    );
    println!("| leg | kind | n | lines in the top {K} | R within {LINE_BUDGET} lines |");
    println!("|---|---|---|---|---|");
    for ((leg, kind), size) in &result_lines {
        let n = size.n.max(1) as f64;
        println!(
            "| {} | {kind} | {} | {:.0} | {:.3} |",
            leg.name(),
            size.n,
            size.lines as f64 / n,
            size.recall_in_budget / n
        );
    }
    if !pack_sizes.is_empty() {
        println!(
            "\npacks (budget {} characters, {} items): size, and recall over all their items",
            crate::services::context::DEFAULT_BUDGET_CHARS,
            crate::services::context::DEFAULT_MAX_ITEMS
        );
        println!("| leg | kind | n | items | characters | recall, all items |");
        println!("|---|---|---|---|---|---|");
        for ((leg, kind), size) in &pack_sizes {
            let n = size.n.max(1) as f64;
            println!(
                "| {} | {kind} | {} | {:.1} | {:.0} | {:.3} |",
                leg.name(),
                size.n,
                size.items as f64 / n,
                size.chars as f64 / n,
                size.recall / n
            );
        }
    }
    latencies.sort();
    println!(
        "query latency (both legs + fusion, incl. query embedding): p50 {:.2} ms, p99 {:.2} ms over {} queries",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.len()
    );
    Ok(())
}

/// One JSON line: the query's id, set, kind, language and number of relevant ranges, and each
/// candidate of either leg with the ranker's features, whether it overlaps a relevant range and
/// which ones (by their index in the query's list: Recall@10 is the share of them the top 10
/// overlaps, so a trainer can measure what the scorer measures), the training data of
/// scripts/eval/train_ranker.py.
fn write_features(
    out: &mut impl Write,
    query: &EvalQuery,
    service: &CodeSearchService,
    legs: &crate::services::code::SearchLegs,
) -> anyhow::Result<()> {
    use crate::services::code::ranker;
    let mut candidates = ranker::candidates(
        &legs.searcher,
        &legs.bm25,
        &legs.embedding,
        (&legs.names, &legs.members),
        Some(service.content_of(legs)),
    );
    candidates.sort_by_key(|c| c.address);
    let mut keys = crate::services::code::tie::TieKeys::new(&legs.searcher);
    let mut rows: Vec<_> = candidates
        .iter()
        .filter_map(|c| {
            let doc = CodeSearchService::document(&legs.searcher, c.address)?;
            let range = to_range(&doc);
            let hits: Vec<usize> = (query.relevant.iter().enumerate())
                .filter(|(_, r)| overlaps(r, &range))
                .map(|(i, _)| i)
                .collect();
            let key = (
                range.filepath.clone(),
                range.start_line,
                range.end_line,
                doc.file_id.clone(),
                keys.key(c.address),
            );
            let row = json!({
                "file": doc.file_id,
                "filepath": range.filepath,
                "start_line": range.start_line,
                "end_line": range.end_line,
                "relevant": !hits.is_empty(),
                "hits": hits,
                "x": c.features.as_slice(),
            });
            Some((key, row))
        })
        .collect();
    // In file and line order (then the chunk's stable key: the pieces of one long line), not
    // the index's document order, which differs from one indexing run to the next: two runs
    // write the same file.
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let rows: Vec<_> = rows.into_iter().map(|(_, row)| row).collect();
    writeln!(
        out,
        "{}",
        json!({
            "id": query.id,
            "kind": query.kind,
            "ranker_kind": format!("{:?}", legs.kind).to_lowercase(),
            "language": query.language,
            "relevant_count": query.relevant.len(),
            "features": ranker::FEATURES.as_slice(),
            "candidates": rows,
        })
    )?;
    Ok(())
}

fn to_range(doc: &tabby_common::api::code::CodeSearchDocument) -> Range {
    let start = doc.start_line.unwrap_or(1);
    Range {
        filepath: doc.filepath.clone(),
        start_line: start,
        end_line: start + doc.body.lines().count().max(1) - 1,
    }
}

/// SplitMix64: a small seeded generator, the same on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(relevant: &[(&str, usize, usize)]) -> EvalQuery {
        EvalQuery {
            id: "q".into(),
            kind: "nl".into(),
            language: None,
            query: String::new(),
            filepath: None,
            relevant: relevant
                .iter()
                .map(|(f, s, e)| Range {
                    filepath: f.to_string(),
                    start_line: *s,
                    end_line: *e,
                })
                .collect(),
            corpus: None,
        }
    }

    fn r(f: &str, s: usize, e: usize) -> Range {
        Range {
            filepath: f.into(),
            start_line: s,
            end_line: e,
        }
    }

    #[test]
    fn scoring_matches_the_reference_definitions() {
        let query = q(&[("a.py", 10, 20), ("b.py", 1, 5)]);
        let m = score(
            &query,
            &[
                r("c.py", 1, 100),
                r("a.py", 15, 30),
                r("a.py", 18, 19),
                r("b.py", 5, 9),
            ],
        );
        assert_eq!(m.recall, [0.0, 1.0, 1.0]);
        assert!((m.mrr - 0.5).abs() < 1e-9);
        // Gains at ranks 2 and 4 (rank 3 hits an already credited range).
        let dcg = 1.0 / 3f64.log2() + 1.0 / 5f64.log2();
        let idcg = 1.0 + 1.0 / 3f64.log2();
        assert!((m.ndcg - dcg / idcg).abs() < 1e-9);
        let none = score(&query, &[r("a.py", 21, 30)]);
        assert_eq!(none.mrr, 0.0);
    }

    #[test]
    fn the_line_budget_keeps_the_results_that_fit_in_order() {
        // 100 + 100 + 50 lines fit 250 exactly; the next result does not, nor any after it.
        let results = [
            r("a.py", 1, 100),
            r("b.py", 1, 100),
            r("c.py", 11, 60),
            r("d.py", 1, 1),
            r("e.py", 1, 1),
        ];
        let fit = within_line_budget(&results);
        assert_eq!(fit.len(), 3);
        assert_eq!(fit[2].filepath, "c.py");
        // A hit past the budget does not count, one inside it does.
        let query = q(&[("d.py", 1, 1)]);
        assert_eq!(score(&query, &results).recall[2], 1.0);
        assert_eq!(score(&query, fit).recall[2], 0.0);
        assert_eq!(within_line_budget(&[r("x.py", 1, 300)]).len(), 0);
    }
}
