//! Search latency over a synthetic code corpus at 10k and 100k chunks (2 cores): the BM25 leg,
//! both legs (the embedding leg is a popcount scan of packed sign bits), and a whole hybrid
//! search (both legs + the ranker + reading the hits), for the multi-line queries and for the
//! same words as one-line (nl) queries, which the ranker also scores with its content features. The corpus has long functions
//! (chunks where no definition starts) and test files, so the tuned BM25 leg's row factors
//! are applied.
//!
//! Run: `cargo bench -p tabby --bench code_search` (figures on stdout). Set
//! `CODE_SEARCH_BENCH_SIZES=10000` to run one size only.

use std::{sync::Arc, time::Instant};

use tabby::services::code::{CodeSearchEmbedding, CodeSearchService};
use tabby_common::{
    api::code::{CodeSearch, CodeSearchQuery},
    config::CodeSearchParams,
    languages::LanguageTable,
};
use tabby_index::{CodeIndexer, EmbeddingSetup, HashEmbedding, NoProgress, RepositoryToIndex};

const WORDS: &[&str] = &[
    "user", "config", "parse", "load", "save", "request", "response", "cache", "index", "search",
    "token", "buffer", "stream", "handler", "client", "server", "query", "result", "error",
    "value", "item", "list", "map", "node", "tree", "graph", "path", "file", "read", "write",
    "open", "close", "build", "render", "update", "delete", "create", "merge", "split", "format",
];

/// A tiny deterministic generator (xorshift), so every run indexes the same corpus.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn word(&mut self) -> &'static str {
        WORDS[(self.next() % WORDS.len() as u64) as usize]
    }
    fn ident(&mut self) -> String {
        format!("{}_{}_{}", self.word(), self.word(), self.next() % 97)
    }
}

/// A short function, or with `long` one whose body runs on for a dozen more lines, so that
/// some chunks hold only the middle or end of a body (no definition starts in them).
fn function(rng: &mut Rng, long: bool) -> String {
    let name = rng.ident();
    let (a, b, c) = (rng.ident(), rng.ident(), rng.ident());
    let more: String = if long {
        (0..12)
            .map(|_| format!("    {c} = {}({c}, {})\n", rng.ident(), rng.ident()))
            .collect()
    } else {
        String::new()
    };
    format!(
        "def {name}({a}, {b}):\n    {c} = {}({a})\n    if {c} is None:\n        raise ValueError('{} {}')\n{more}    return {}({c}, {b})\n\n\n",
        rng.ident(),
        rng.word(),
        rng.word(),
        rng.ident()
    )
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let sizes: Vec<usize> = std::env::var("CODE_SEARCH_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000, 100_000]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        for size in sizes {
            run(size).await;
        }
    });
}

async fn run(chunks: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    let mut rng = Rng(0x9E3779B97F4A7C15);
    // 8 short and 2 long functions per file make about 11.6 chunks; one file in ten is a test
    // file.
    let files = chunks * 10 / 116;
    let mut queries = Vec::new();
    for f in 0..files {
        let dir = if f % 10 == 9 {
            corpus.join("tests")
        } else {
            corpus.join(format!("pkg{}", f % 100))
        };
        std::fs::create_dir_all(&dir).unwrap();
        let text: String = (0..10).map(|i| function(&mut rng, i % 5 == 4)).collect();
        if f % (files / 200).max(1) == 0 {
            queries.push(text.lines().take(4).collect::<Vec<_>>().join("\n"));
        }
        let name = if f % 10 == 9 {
            format!("test_module_{f}.py")
        } else {
            format!("module_{f}.py")
        };
        std::fs::write(dir.join(name), text).unwrap();
    }
    let embedding = HashEmbedding::new(384);
    let model_id = embedding.model_id();
    let model: Arc<dyn tabby_inference::Embedding> = Arc::new(embedding);
    let index_dir = tmp.path().join("index");
    let started = Instant::now();
    let mut indexer = CodeIndexer::open(
        &index_dir,
        Some(EmbeddingSetup {
            model: model.clone(),
            model_id: model_id.clone(),
            max_input_bytes: 5120,
        }),
        LanguageTable::builtin(),
    )
    .await
    .unwrap();
    let summary = indexer
        .index_repository(
            &RepositoryToIndex {
                source_id: "bench".into(),
                git_url: format!("file://{}", corpus.display()),
                refs: vec![],
            },
            &tmp.path().join("repos"),
            &NoProgress,
        )
        .await
        .unwrap();
    drop(indexer);
    let segments = tantivy::Index::open_in_dir(&index_dir)
        .unwrap()
        .searchable_segment_ids()
        .unwrap()
        .len();
    println!(
        "\n{} chunks in {} files ({segments} segments) indexed in {:.1} s ({:.2} MB/s, hash embedding, 384 bits)",
        summary.chunks,
        summary.files_indexed,
        started.elapsed().as_secs_f64(),
        summary.bytes as f64 / 1e6 / started.elapsed().as_secs_f64()
    );

    let chunks = summary.chunks;
    let bm25_only =
        CodeSearchService::new(index_dir.clone(), None, Arc::new(LanguageTable::builtin()));
    let service = CodeSearchService::new(
        index_dir,
        Some(CodeSearchEmbedding { model, model_id }),
        Arc::new(LanguageTable::builtin()),
    );
    let query = |content: &str| CodeSearchQuery {
        include_generated: false,
        filepath: None,
        language: Some("python".into()),
        content: content.to_string(),
        source_id: "bench".into(),
    };
    // Warm up: open the reader, build the bit arrays.
    for q in queries.iter().take(5) {
        service.search_legs(&query(q), 40).await.unwrap();
    }
    let mut bm25_ms = Vec::new();
    for q in &queries {
        let t = Instant::now();
        bm25_only.search_legs(&query(q), 40).await.unwrap();
        bm25_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    bm25_ms.sort_by(f64::total_cmp);
    println!(
        "{chunks:>7} chunks  BM25 leg alone: p50 {:>7.2} ms p99 {:>7.2} ms",
        percentile(&bm25_ms, 0.5),
        percentile(&bm25_ms, 0.99)
    );
    {
        let mut legs_ms = Vec::new();
        let mut full_ms = Vec::new();
        for q in &queries {
            let t = Instant::now();
            service.search_legs(&query(q), 40).await.unwrap();
            legs_ms.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            service
                .search_in_language(query(q), CodeSearchParams::answer_default())
                .await
                .unwrap();
            full_ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        legs_ms.sort_by(f64::total_cmp);
        full_ms.sort_by(f64::total_cmp);
        println!(
            "{chunks:>7} chunks  both legs: p50 {:>7.2} ms p99 {:>7.2} ms | full search (fusion + hits): p50 {:>7.2} ms p99 {:>7.2} ms  ({} queries)",
            percentile(&legs_ms, 0.5),
            percentile(&legs_ms, 0.99),
            percentile(&full_ms, 0.5),
            percentile(&full_ms, 0.99),
            queries.len()
        );
    }
    // The same words on one line: a question, which the ranker scores with its content
    // features (postings lookups and the chunk-side column); multi-line code queries skip them.
    {
        let mut full_ms = Vec::new();
        for q in &queries {
            let one_line = q.replace('\n', " ");
            let t = Instant::now();
            service
                .search_in_language(query(&one_line), CodeSearchParams::answer_default())
                .await
                .unwrap();
            full_ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        full_ms.sort_by(f64::total_cmp);
        println!(
            "{chunks:>7} chunks  full search, one-line (nl) queries: p50 {:>7.2} ms p99 {:>7.2} ms",
            percentile(&full_ms, 0.5),
            percentile(&full_ms, 0.99),
        );
    }
}
