//! Embedding throughput of the embedded sentence encoder on 512-character chunks of real code
//! (this workspace's own Rust sources), as `tabby index` feeds it.
//!
//! `cargo bench -p tabby-local --bench embedding [-- minilm|static]` (needs `tabby download`;
//! models from `$TABBY_TEST_MODELS_DIR`, else `~/.tabby/models`). Prints chunks/s and MB/s at
//! several batch sizes, for the BERT encoder (all-MiniLM-L6-v2) and the static table distilled
//! from it.

use std::{
    path::{Path, PathBuf},
    time::Instant,
};

use tabby_inference::Embedding;
use tabby_local::{
    embedding::{EmbeddingOptions, LocalEmbedding, StaticEmbedding},
    registry::{DEFAULT_EMBEDDING_MODEL, STATIC_EMBEDDING_MODEL, resolve_model_dir},
};

const CHUNK_CHARS: usize = 512;

fn main() {
    let models = std::env::var_os("TABBY_TEST_MODELS_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".tabby/models")
        });
    let model_dir = |id: &str| match resolve_model_dir(&models, id) {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a == "minilm" || a == "static")
        .collect();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    if only.is_empty() || only.iter().any(|a| a == "minilm") {
        encoder_bench(&runtime, &model_dir(DEFAULT_EMBEDDING_MODEL));
    }
    if only.is_empty() || only.iter().any(|a| a == "static") {
        static_bench(&runtime, &model_dir(STATIC_EMBEDDING_MODEL));
    }
}

fn encoder_bench(runtime: &tokio::runtime::Runtime, dir: &Path) {
    let chunks = code_chunks(128);
    println!(
        "embedding bench: {DEFAULT_EMBEDDING_MODEL}, {} chunks of {CHUNK_CHARS} chars \
         ({:.0} tokens each on average after truncation), {} threads",
        chunks.len(),
        mean_tokens(dir, &chunks, 256),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );

    for (batch, count) in [(1, 32), (8, 64), (32, 128)] {
        let model = LocalEmbedding::load(
            dir,
            EmbeddingOptions {
                parallelism: 1,
                max_batch_size: batch,
            },
        )
        .unwrap();
        measure(runtime, &model, batch, &chunks[..count]);
    }
}

/// The static table at the indexer's batch size (64) and one text at a time (a search query).
/// Words are tokenised once per table (its word cache), so the figures include the cache
/// filling up from empty.
fn static_bench(runtime: &tokio::runtime::Runtime, dir: &Path) {
    let chunks = code_chunks(4096);
    let model = StaticEmbedding::load(dir).unwrap();
    println!(
        "embedding bench: {STATIC_EMBEDDING_MODEL} ({}, {} dimensions), {} chunks of \
         {CHUNK_CHARS} chars ({:.0} tokens each on average), {} threads",
        model.model_id(),
        model.dimension(),
        chunks.len(),
        mean_tokens(
            dir,
            &chunks,
            tabby_local::embedding::static_table::MAX_TOKENS
        ),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    drop(model);
    // A fresh table each time: its word cache starts empty, as in a new indexing run.
    for (batch, count) in [(1, 1024), (64, 4096)] {
        let model = StaticEmbedding::load(dir).unwrap();
        measure(runtime, &model, batch, &chunks[..count]);
    }
}

fn measure(
    runtime: &tokio::runtime::Runtime,
    model: &dyn Embedding,
    batch: usize,
    inputs: &[String],
) {
    let count = inputs.len();
    runtime.block_on(async {
        // Warm up (allocations, page faults) outside the measurement.
        model.embed(&inputs[..batch]).await.unwrap();
        let start = Instant::now();
        let cpu_start = cpu_seconds();
        for call in inputs.chunks(batch) {
            model.embed(call).await.unwrap();
        }
        let secs = start.elapsed().as_secs_f64();
        let cpu = cpu_seconds().zip(cpu_start).map(|(end, start)| end - start);
        let bytes: usize = inputs.iter().map(String::len).sum();
        println!(
            "batch {batch:>2}: {:>8.1} chunks/s  {:>7.3} MB/s  ({count} chunks in {secs:.2}s){}",
            count as f64 / secs,
            bytes as f64 / secs / 1e6,
            cpu.map_or(String::new(), |cpu| format!(
                ", {:.1} chunks per CPU-second ({:.0}% CPU)",
                count as f64 / cpu,
                100.0 * cpu / secs
            )),
        );
    });
}

/// User + system CPU time of this process so far (Linux), to tell the model's cost from the
/// share of a busy machine it got.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

fn mean_tokens(dir: &Path, chunks: &[String], max_tokens: usize) -> f64 {
    let mut tokenizer = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    tokenizer.with_padding(None);
    tokenizer
        .with_truncation(Some(tokenizers::TruncationParams {
            max_length: max_tokens,
            ..Default::default()
        }))
        .unwrap();
    let total: usize = chunks
        .iter()
        .map(|c| tokenizer.encode_fast(c.as_str(), true).unwrap().len())
        .sum();
    total as f64 / chunks.len() as f64
}

/// 512-char chunks of this workspace's Rust sources, in a fixed order.
fn code_chunks(count: usize) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for crate_dir in [
        "crates/tabby-common/src",
        "crates/tabby-inference/src",
        "crates/tabby/src",
    ] {
        collect_rs(&root.join(crate_dir), &mut files);
    }
    files.sort();
    let mut chunks = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(CHUNK_CHARS) {
            if piece.len() == CHUNK_CHARS {
                chunks.push(piece.iter().collect());
            }
            if chunks.len() == count {
                return chunks;
            }
        }
    }
    assert!(
        !chunks.is_empty(),
        "no source files found under {}",
        root.display()
    );
    let base = chunks.clone();
    chunks.extend(base.iter().cycle().take(count - chunks.len()).cloned());
    chunks
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}
