//! Prompt and decode speed of the embedded language model, side by side with llama.cpp's server
//! on the same GGUF file.
//!
//! `cargo bench -p tabby-local --bench llm` (release). The model is
//! `TabbyML/Qwen2.5-Coder-0.5B-Instruct` under `$TABBY_TEST_MODELS_DIR` (else
//! `~/.tabby/models`); `TABBY_BENCH_MODEL=<org>/<name>` picks another. The llama.cpp column
//! needs a Python with `xllamacpp==2026.10.11549` (see `llamacpp_reference.py`), taken from
//! `$LLAMACPP_PYTHON`, else `/tmp/llamacpp-venv/bin/python`; without one only our figures print.
//!
//! Method: one prompt of a few hundred tokens, greedy decoding of up to 128 tokens, five runs
//! after a warm-up; the table shows the best run and, in parentheses, the median (the machine
//! is shared: the best run is the closest to an idle one). Our prompt time is the time to the first token minus one decoding
//! step; decode speed counts streamed pieces (one per token for ASCII output) after the first.
//! llama.cpp reports its own timings for the same prompt and the same number of tokens.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use tabby_inference::{CompletionOptions, CompletionStream};
use tabby_local::llm::{LlmConfig, LocalCompletion, LocalLlm};

const RUNS: usize = 5;
const MAX_TOKENS: i32 = 128;

const CODE: &str = r#"import json
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass
class Item:
    name: str
    price: float
    quantity: int = 0
    tags: List[str] = field(default_factory=list)


class Inventory:
    def __init__(self, path: str):
        self.path = path
        self.items: Dict[str, Item] = {}

    def load(self) -> None:
        if not os.path.exists(self.path):
            return
        with open(self.path) as f:
            for raw in json.load(f):
                item = Item(**raw)
                self.items[item.name] = item

    def save(self) -> None:
        with open(self.path, "w") as f:
            json.dump([item.__dict__ for item in self.items.values()], f, indent=2)

    def add(self, name: str, price: float, quantity: int = 1) -> Item:
        item = self.items.get(name)
        if item is None:
            item = Item(name, price, quantity)
            self.items[name] = item
        else:
            item.quantity += quantity
            item.price = price
        return item

    def remove(self, name: str, quantity: int = 1) -> Optional[Item]:
        item = self.items.get(name)
        if item is None:
            return None
        item.quantity -= quantity
        if item.quantity <= 0:
            del self.items[name]
        return item

    def total_value(self) -> float:
        return sum(item.price * item.quantity for item in self.items.values())
"#;

fn model_dir() -> PathBuf {
    let id = std::env::var("TABBY_BENCH_MODEL")
        .unwrap_or_else(|_| "TabbyML/Qwen2.5-Coder-0.5B-Instruct".into());
    let root = std::env::var_os("TABBY_TEST_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".tabby/models")
        });
    root.join(id)
}

struct Run {
    prompt_tokens_per_s: f64,
    decode_tokens_per_s: f64,
    decoded: usize,
    text: String,
}

async fn run_once(completion: &LocalCompletion, prompt: &str, prompt_tokens: usize) -> Run {
    let options = CompletionOptions {
        max_decoding_tokens: MAX_TOKENS,
        sampling_temperature: 0.0,
        seed: 0,
        presence_penalty: 0.0,
        first_names: None,
    };
    let start = Instant::now();
    let mut stream = completion.generate(prompt, options).await;
    let mut first = None;
    let mut last = start;
    let mut pieces = 0;
    let mut text = String::new();
    while let Some(piece) = stream.next().await {
        let piece = piece.expect("generation failed");
        last = Instant::now();
        first.get_or_insert(last);
        pieces += 1;
        text.push_str(&piece);
    }
    let first = first.expect("no output");
    let decode = (last - first).as_secs_f64();
    let step = decode / (pieces - 1).max(1) as f64;
    let prompt_time = ((first - start).as_secs_f64() - step).max(1e-9);
    Run {
        prompt_tokens_per_s: prompt_tokens as f64 / prompt_time,
        decode_tokens_per_s: (pieces - 1) as f64 / decode.max(1e-9),
        decoded: pieces,
        text,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn best(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

/// `VmHWM` (peak) or `VmRSS` (now) of this process, in MiB.
fn rss_mib(key: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn main() {
    let dir = model_dir();
    let gguf = dir.join("model.gguf");
    assert!(
        gguf.is_file(),
        "{} is missing: run `tabby download` first",
        gguf.display()
    );
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let started = Instant::now();
    // No prompt cache: every run reads its whole prompt, as llama.cpp's runs do; no drafts:
    // one pass per generated token, as llama.cpp's server decodes by default.
    let config = LlmConfig {
        prompt_cache_bytes: 0,
        draft_tokens: 0,
        ..LlmConfig::default()
    };
    let llm = Arc::new(LocalLlm::load(&dir, &config).unwrap_or_else(|e| panic!("{e}")));
    let load_time = started.elapsed();
    let completion = LocalCompletion::from_llm(llm.clone());
    let prompt = format!(
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n\
         Rewrite this module with docstrings and type-checked input validation:\n\n\
         ```python\n{CODE}```<|im_end|>\n<|im_start|>assistant\n"
    );
    let prompt_tokens = llm.tokenizer().encode(&prompt).expect("tokenize").len();

    let runs = runtime.block_on(async {
        run_once(&completion, &prompt, prompt_tokens).await; // warm-up
        let mut runs = Vec::new();
        for _ in 0..RUNS {
            runs.push(run_once(&completion, &prompt, prompt_tokens).await);
        }
        runs
    });
    let decoded = runs[0].decoded;
    let prompt_rates: Vec<f64> = runs.iter().map(|r| r.prompt_tokens_per_s).collect();
    let decode_rates: Vec<f64> = runs.iter().map(|r| r.decode_tokens_per_s).collect();
    let ours_prompt = (best(&prompt_rates), median(prompt_rates));
    let ours_decode = (best(&decode_rates), median(decode_rates));
    let ours_rss = (rss_mib("VmHWM:"), rss_mib("VmRSS:"));
    drop(completion);
    drop(llm);

    let reference = llama_cpp(&gguf, &prompt, decoded);
    println!("model: {}", gguf.display());
    println!(
        "threads: {}, prompt: {prompt_tokens} tokens, decoded: {decoded} tokens, load: {:.2?}",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        load_time
    );
    println!("{:<18}{:>20}{:>20}", "", "tabby-local", "llama.cpp");
    let pair = |v: Option<(f64, f64)>| {
        v.map_or("-".to_string(), |(best, median)| {
            format!("{best:.1} ({median:.1})")
        })
    };
    let theirs = |key: &str| {
        let r = reference.as_ref()?;
        Some((r[key].as_f64()?, r[format!("{key}_median")].as_f64()?))
    };
    println!(
        "{:<18}{:>20}{:>20}",
        "prompt tokens/s",
        pair(Some(ours_prompt)),
        pair(theirs("prompt_tokens_per_s"))
    );
    println!(
        "{:<18}{:>20}{:>20}",
        "decode tokens/s",
        pair(Some(ours_decode)),
        pair(theirs("decode_tokens_per_s"))
    );
    let mib = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    let their_rss = |key: &str| reference.as_ref().and_then(|r| r[key].as_f64());
    println!(
        "{:<18}{:>20}{:>20}",
        "peak RSS MiB",
        mib(ours_rss.0),
        mib(their_rss("peak_rss_mib"))
    );
    println!(
        "{:<18}{:>20}{:>20}",
        "RSS at end MiB",
        mib(ours_rss.1),
        mib(their_rss("rss_mib"))
    );
    if let Some((theirs, _)) = theirs("decode_tokens_per_s") {
        println!(
            "decode ratio, best runs (ours / llama.cpp): {:.2}",
            ours_decode.0 / theirs
        );
    }
    if let Some(text) = reference.as_ref().and_then(|r| r["text"].as_str()) {
        let same = text == runs[0].text;
        println!("greedy output identical to llama.cpp: {same}");
        if !same {
            println!("--- ours ---\n{}\n--- llama.cpp ---\n{text}", runs[0].text);
        }
    }
}

/// Runs `llamacpp_reference.py` on the same prompt; `None` (with a note) if it cannot.
fn llama_cpp(gguf: &std::path::Path, prompt: &str, n_predict: usize) -> Option<serde_json::Value> {
    let python = std::env::var_os("LLAMACPP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/llamacpp-venv/bin/python"));
    if !python.exists() {
        println!(
            "llama.cpp reference skipped: no {} (see benches/llamacpp_reference.py)",
            python.display()
        );
        return None;
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/llamacpp_reference.py");
    let prompt_file =
        std::env::temp_dir().join(format!("tabby-bench-prompt-{}.txt", std::process::id()));
    std::fs::write(&prompt_file, prompt).ok()?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let started = Instant::now();
    let output = Command::new(&python)
        .arg(&script)
        .arg(gguf)
        .arg(&prompt_file)
        .arg(n_predict.to_string())
        .arg(threads.to_string())
        .arg(RUNS.to_string())
        .output();
    let _ = std::fs::remove_file(&prompt_file);
    let output = match output {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            println!(
                "llama.cpp reference failed ({}):\n{}",
                o.status,
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .rev()
                    .take(10)
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            return None;
        }
        Err(e) => {
            println!("llama.cpp reference failed to start: {e}");
            return None;
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().rev().find(|l| l.starts_with('{'))?;
    let value = serde_json::from_str(line).ok();
    if value.is_none() {
        println!(
            "llama.cpp reference printed no figures ({:.1?})",
            started.elapsed()
        );
    }
    value
}
