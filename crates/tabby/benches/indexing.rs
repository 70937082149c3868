//! Indexing throughput: cold, unchanged (incremental) and after editing 1% of the files, on the
//! click corpus of shared/eval (materialize it first; path in `CLICK_CORPUS`, default
//! `/tmp/click-eval/corpus-full`) and on a ~50 MB synthetic corpus; with the model-free hash
//! embedding. Prints MB/s, chunks/s and the process's peak RSS.
//!
//! Run: `cargo bench -p tabby --bench indexing`. `INDEXING_BENCH_SYNTHETIC_MB=10` shrinks the
//! synthetic corpus.

use std::{path::Path, sync::Arc, time::Instant};

use tabby_common::languages::LanguageTable;
use tabby_index::{CodeIndexer, EmbeddingSetup, HashEmbedding, NoProgress, RepositoryToIndex};

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|kb| kb.parse::<f64>().ok())
            })
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn synthetic(dir: &Path, megabytes: usize) {
    let words = [
        "user", "config", "parse", "load", "request", "cache", "index", "token", "stream",
        "handler", "query", "result",
    ];
    let mut state = 0x2545F4914F6CDD1Du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut written = 0;
    let mut file = 0;
    while written < megabytes * 1_000_000 {
        let mut text = String::new();
        for _ in 0..40 {
            let a = words[(next() % 12) as usize];
            let b = words[(next() % 12) as usize];
            text.push_str(&format!(
                "def {a}_{b}_{}(value, options=None):\n    result = {b}_helper(value)\n    if options:\n        result = apply_{a}(result, options)\n    return result\n\n\n",
                next() % 1000
            ));
        }
        let sub = dir.join(format!("pkg{}", file % 50));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join(format!("mod_{file}.py")), &text).unwrap();
        written += text.len();
        file += 1;
    }
}

async fn index_once(index_dir: &Path, corpus: &Path, label: &str) -> usize {
    let embedding = HashEmbedding::new(384);
    let setup = EmbeddingSetup {
        model_id: embedding.model_id(),
        model: Arc::new(embedding),
        max_input_bytes: 5120,
    };
    let started = Instant::now();
    let mut indexer = CodeIndexer::open(index_dir, Some(setup), LanguageTable::builtin())
        .await
        .unwrap();
    let summary = indexer
        .index_repository(
            &RepositoryToIndex {
                source_id: "bench".into(),
                git_url: format!("file://{}", corpus.display()),
                refs: vec![],
            },
            &index_dir.join("../repos"),
            &NoProgress,
        )
        .await
        .unwrap();
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{label:<28} {:>6} files {:>7} chunks embedded  {:>7.2} MB  {:>6.1} s  {:>6.2} MB/s  {:>8.0} chunks/s  peak RSS {:.0} MB",
        summary.files_indexed,
        summary.chunks_embedded,
        summary.bytes as f64 / 1e6,
        secs,
        summary.bytes as f64 / 1e6 / secs,
        summary.chunks_embedded as f64 / secs,
        peak_rss_mb()
    );
    summary.files_indexed
}

fn touch_one_percent(corpus: &Path) {
    let mut files: Vec<_> = walk(corpus);
    files.sort();
    for path in files.iter().step_by(100) {
        let mut text = std::fs::read_to_string(path).unwrap_or_default();
        text.push_str("\n# edited\n");
        let _ = std::fs::write(path, text);
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let p = entry.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else if p.extension().is_some_and(|e| e == "py") {
                out.push(p);
            }
        }
    }
    out
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let click =
            std::env::var("CLICK_CORPUS").unwrap_or_else(|_| "/tmp/click-eval/corpus-full".into());
        let tmp = tempfile::tempdir().unwrap();
        if Path::new(&click).is_dir() {
            let copy = tmp.path().join("click");
            copy_dir(Path::new(&click), &copy);
            let index = tmp.path().join("click-index");
            println!("click corpus ({click}), hash embedding 384:");
            index_once(&index, &copy, "cold").await;
            index_once(&index, &copy, "incremental (unchanged)").await;
            touch_one_percent(&copy);
            index_once(&index, &copy, "incremental (1% edited)").await;
        } else {
            println!("click corpus not found at {click}: run shared/eval/materialize.py first");
        }
        let mb: usize = std::env::var("INDEXING_BENCH_SYNTHETIC_MB")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(50);
        let corpus = tmp.path().join("synthetic");
        synthetic(&corpus, mb);
        let index = tmp.path().join("synthetic-index");
        println!("synthetic corpus ({mb} MB of Python), hash embedding 384:");
        index_once(&index, &corpus, "cold").await;
        index_once(&index, &corpus, "incremental (unchanged)").await;
        touch_one_percent(&corpus);
        index_once(&index, &corpus, "incremental (1% edited)").await;
    });
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
