//! Typing-speed completions on the embedded model: a cursor walks through real source lines,
//! one `/v1/completions` request per typed word with the prefix and suffix tabby-agent sends
//! (20 lines before and after the cursor), retrieval on (this workspace is indexed as the
//! repository), one editor, greedy. Each configuration runs the same replay on its own `tabby
//! serve` process:
//!
//! - the embedded runtime without its prompt cache (`prompt_cache_mib = 0`),
//! - the embedded runtime with it (the default),
//! - and, when `TYPING_LLAMA_SERVER` names a llama.cpp server (e.g. one started by
//!   `scripts/bench/llama_server.py` on the same GGUF), tabby in front of it through the
//!   `llama.cpp/completion` backend, whose prompt cache (`cache_prompt`) is on by default.
//!
//! Printed: total latency p50/p90/p99 (the route does not stream, so time to first token is
//! not observable), how many completions' first line is the rest of the cursor's line as the
//! file has it (a rough accuracy check: settings that make typing faster should not lower
//! it), and for the embedded runtime the prompt tokens computed vs reused, the cache's bytes,
//! the time per request in prompt and decoding passes and the drafted tokens accepted and
//! rejected, from `/metrics`.
//!
//! Run: `cargo bench -p tabby --bench typing` (the models from `tabby download` in
//! `~/.tabby/models`, or `TABBY_MODEL_CACHE_ROOT`). `TYPING_LINES` (default 10) sets how many
//! lines are typed; `TYPING_VARIANTS="suffix_bytes = 64|prefix_clip_lines = 4"` adds a run
//! per `[completion]` setting, `TYPING_MODEL_VARIANTS="draft_tokens = 0|draft_tokens = 8"` one
//! per `[model.completion.local]` setting; `TYPING_REPLAY=type` replays lines typed anew (nothing of the
//! line after the cursor) instead of the cursor walking through existing ones.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

const CONTEXT_LINES: usize = 20;
const MODEL_ID: &str = "TabbyML/Qwen2.5-Coder-0.5B-Instruct";
const FIM: &str = "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn models_dir() -> PathBuf {
    std::env::var_os("TABBY_MODEL_CACHE_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".tabby/models"))
}

/// One request of the replay: the editor's prefix and suffix at a cursor.
struct Keystroke {
    prefix: String,
    suffix: String,
    /// The rest of the cursor's line in the file: what a perfect completion's first line is.
    truth: String,
}

/// How the editor's view changes between requests.
#[derive(Clone, Copy, PartialEq)]
enum Replay {
    /// The cursor walks word by word through existing lines: the suffix starts with the rest
    /// of the line, which shrinks as the cursor moves (the measurement).
    Walk,
    /// The user types each line anew: the line's words arrive one by one and nothing of the
    /// line follows the cursor, so the suffix (the lines below) stays the same while the line
    /// is typed.
    Type,
}

/// The cursor after each word of `lines` source lines of `text` (from its middle, lines with
/// at least three words), with `CONTEXT_LINES` lines of context each way.
fn replay(text: &str, lines: usize, mode: Replay) -> Vec<Keystroke> {
    let all: Vec<&str> = text.split_inclusive('\n').collect();
    let mut out = Vec::new();
    let start = all.len() / 3;
    for (n, line) in all.iter().enumerate().skip(start) {
        if out.len() >= lines * 6 || line.split_whitespace().count() < 3 {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let cursors: Vec<usize> = line
            .char_indices()
            .filter(|&(i, c)| i > indent && (c == ' ' || c == '(') && !line[..i].ends_with(' '))
            .map(|(i, _)| i)
            .take(6)
            .collect();
        for cursor in cursors {
            let before = all[n.saturating_sub(CONTEXT_LINES)..n].concat();
            let after = all[n + 1..(n + 1 + CONTEXT_LINES).min(all.len())].concat();
            let rest = match mode {
                Replay::Walk => &line[cursor..],
                Replay::Type => "\n",
            };
            out.push(Keystroke {
                prefix: format!("{before}{}", &line[..cursor]),
                suffix: format!("{rest}{after}"),
                truth: line[cursor..].trim_end().to_string(),
            });
        }
        if out.len() >= lines * 6 {
            break;
        }
    }
    out
}

struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(root: &Path, config: &str) -> Server {
    std::fs::write(root.join("config.toml"), config).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tabby"))
        .args([
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--no-webserver",
        ])
        .env("TABBY_ROOT", root)
        .env("TABBY_MODEL_CACHE_ROOT", models_dir())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("Listening at ") {
                let _ = tx.send(url.trim().to_string());
            }
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("tabby started");
    Server { child, url }
}

fn body(keystroke: &Keystroke, git_url: &str, filepath: &str) -> Value {
    json!({
        "language": "python",
        "segments": {"prefix": keystroke.prefix, "suffix": keystroke.suffix,
                     "filepath": filepath, "git_url": git_url},
        "temperature": 0.0,
        "debug_options": {"return_snippets": true},
    })
}

/// The embedded model's counters from `/metrics`.
#[derive(Clone, Copy, Default)]
struct ModelMetrics {
    computed: f64,
    reused: f64,
    cache_bytes: f64,
    generated: f64,
    prompt_seconds: f64,
    decode_seconds: f64,
    accepted: f64,
    rejected: f64,
}

async fn prompt_metrics(http: &reqwest::Client, server: &Server) -> ModelMetrics {
    let text = http
        .get(format!("{}/metrics", server.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = |needle: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with("tabby_") && l.contains(needle))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    ModelMetrics {
        computed: value("kind=\"computed\""),
        reused: value("kind=\"reused\""),
        cache_bytes: value("tabby_prompt_cache_bytes"),
        generated: value("tabby_generated_tokens_total"),
        prompt_seconds: value("phase=\"prompt\""),
        decode_seconds: value("phase=\"decode\""),
        accepted: value("outcome=\"accepted\""),
        rejected: value("outcome=\"rejected\""),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3
}

async fn run(
    label: &str,
    root: &Path,
    config: &str,
    keystrokes: &[Keystroke],
    git_url: &str,
    filepath: &str,
) -> f64 {
    let server = start(root, config);
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let url = format!("{}/v1/completions", server.url);
    // Wait until retrieval feeds the prompt (the index is built in the background at start).
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let response: Value = http
            .post(&url)
            .json(&body(&keystrokes[0], git_url, filepath))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let snippets = response["debug_data"]["snippets"]
            .as_array()
            .map_or(0, Vec::len);
        if snippets > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "retrieval never returned a snippet: {response}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let before = prompt_metrics(&http, &server).await;
    let mut latencies = Vec::new();
    // Completions whose first line is the rest of the cursor's line as the file has it.
    let mut matches = 0;
    for keystroke in keystrokes {
        let t = Instant::now();
        let response = http
            .post(&url)
            .json(&body(keystroke, git_url, filepath))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{}", response.status());
        let response: Value = response.json().await.unwrap();
        latencies.push(t.elapsed());
        let text = response["choices"][0]["text"].as_str().unwrap_or_default();
        if text.lines().next().unwrap_or_default().trim_end() == keystroke.truth {
            matches += 1;
        }
    }
    let after = prompt_metrics(&http, &server).await;
    latencies.sort();
    let p50 = percentile(&latencies, 0.5);
    print!(
        "{label:<40} n={:<4} p50={p50:>7.0} ms  p90={:>7.0} ms  p99={:>7.0} ms  line matches={matches}",
        latencies.len(),
        percentile(&latencies, 0.9),
        percentile(&latencies, 0.99),
    );
    if after.computed + after.reused > before.computed + before.reused {
        let n = latencies.len() as f64;
        print!(
            "  prompt tokens computed={} reused={}  cache={:.1} MiB\n{:<40} per request: prompt {:.0} ms, {:.1} tokens generated in {:.0} ms, drafts accepted {:.1} / rejected {:.1}",
            after.computed - before.computed,
            after.reused - before.reused,
            after.cache_bytes / (1 << 20) as f64,
            "",
            (after.prompt_seconds - before.prompt_seconds) * 1e3 / n,
            (after.generated - before.generated) / n,
            (after.decode_seconds - before.decode_seconds) * 1e3 / n,
            (after.accepted - before.accepted) / n,
            (after.rejected - before.rejected) / n,
        );
    }
    println!();
    p50
}

fn main() {
    let workspace = workspace();
    let filepath = "scripts/eval/heldout_set.py";
    let text = std::fs::read_to_string(workspace.join(filepath)).unwrap();
    let lines = std::env::var("TYPING_LINES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let mode = match std::env::var("TYPING_REPLAY").as_deref() {
        Ok("type") => Replay::Type,
        Ok("walk") | Err(_) => Replay::Walk,
        Ok(other) => panic!("TYPING_REPLAY={other:?}: expected walk or type"),
    };
    let keystrokes = replay(&text, lines, mode);
    let git_url = format!("file://{}", workspace.display());
    let root = tempfile::tempdir().unwrap();
    let repository = format!("[[repositories]]\ngit_url = \"{git_url}\"\n");
    let local_with = |cache_mib: usize, extra: &str| {
        format!(
            "{repository}[model.completion.local]\nmodel_id = \"{MODEL_ID}\"\nparallelism = 1\nprompt_cache_mib = {cache_mib}\n{extra}"
        )
    };
    let local = |cache_mib: usize| local_with(cache_mib, "");
    println!(
        "typing replay ({}): {} requests over {lines} lines of {filepath}, {} cores",
        if mode == Replay::Walk { "walk" } else { "type" },
        keystrokes.len(),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        run("embedded, no prompt cache", root.path(), &local(0), &keystrokes, &git_url, filepath).await;
        let ours = run("embedded, prompt cache (default)", root.path(), &local(256), &keystrokes, &git_url, filepath).await;
        // Other `[completion]` settings, e.g. what the suffix costs (it follows the cursor, so
        // every keystroke reads it again) or block clipping of the prefix.
        if let Ok(variants) = std::env::var("TYPING_VARIANTS") {
            for setting in variants.split('|').map(str::trim).filter(|v| !v.is_empty()) {
                let config = format!("{}[completion]\n{setting}\n", local(256));
                run(&format!("embedded, cache, {setting}"), root.path(), &config, &keystrokes, &git_url, filepath).await;
            }
        }
        // Settings of the embedded model, e.g. `draft_tokens = 0`.
        if let Ok(variants) = std::env::var("TYPING_MODEL_VARIANTS") {
            for setting in variants.split('|').map(str::trim).filter(|v| !v.is_empty()) {
                let config = local_with(256, &format!("{setting}\n"));
                run(&format!("embedded, cache, {setting}"), root.path(), &config, &keystrokes, &git_url, filepath).await;
            }
        }
        if let Ok(llama) = std::env::var("TYPING_LLAMA_SERVER") {
            let config = format!(
                "{repository}[model.completion.http]\nkind = \"llama.cpp/completion\"\napi_endpoint = \"{llama}\"\nprompt_template = \"{FIM}\"\n[model.completion.http.rate_limit]\nrequest_per_minute = 100000\n"
            );
            let theirs = run("llama.cpp server (cache_prompt)", root.path(), &config, &keystrokes, &git_url, filepath).await;
            println!("embedded p50 / llama.cpp p50 = {:.2}", ours / theirs);
        }
    });
}
