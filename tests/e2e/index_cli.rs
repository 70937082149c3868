//! `tabby index` and `tabby search` from the command line, including a `kill -9` half-way
//! through indexing: the index still opens and serves search, and the next run completes it.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use crate::support::*;

fn config_for(dir: &std::path::Path, embed_url: &str) -> String {
    format!(
        "[[repositories]]\ngit_url = \"file://{}\"\n\n{}",
        dir.display(),
        openai_embedding_config(embed_url, "fake")
    )
}

fn segments_committed(index_dir: &std::path::Path) -> bool {
    std::fs::read_to_string(index_dir.join("meta.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .is_some_and(|m| m["segments"].as_array().is_some_and(|s| !s.is_empty()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_run_leaves_a_usable_index_and_the_next_run_completes_it() {
    let root = tempfile::tempdir().unwrap();
    let corpus = root.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    // 250 files of ten ~500-char functions: about 2500 chunks.
    let files = 250;
    for i in 0..files {
        let text: String = (0..10)
            .map(|j| {
                format!(
                    "def function_number_{i}_{j}(value, options):\n    \"\"\"Compute result number {j} of module {i} from value and options.\"\"\"\n    intermediate_{j} = transform_value(value, scale={j}, offset={i})\n    if options.get('strict_mode_{j}'):\n        validate_intermediate(intermediate_{j}, limit={i})\n    combined = combine_results(intermediate_{j}, options.get('extra_{j}', []))\n    log_progress('module_{i}', 'step_{j}', combined)\n    return finalize_result(combined, precision=options.get('precision', {j}))\n\n\n"
                )
            })
            .collect();
        std::fs::write(corpus.join(format!("m{i}.py")), text).unwrap();
    }
    // Slow embeddings (40 batches of 64 chunks, 250 ms each): the first timed commit (after
    // 5 s) lands well before the run would end.
    let embedder = FakeServer::start(
        Protocol::OpenAi,
        Script::default()
            .embedding_dim(16)
            .delay(Duration::from_millis(250)),
    )
    .await;
    std::fs::write(
        root.path().join("config.toml"),
        config_for(&corpus, &embedder.url()),
    )
    .unwrap();

    let mut child = Command::new(tabby_bin())
        .args(["index"])
        .env("TABBY_ROOT", root.path())
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(root.path().join("index.log")).unwrap())
        .spawn()
        .unwrap();
    let index_dir = root.path().join("index");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !segments_committed(&index_dir) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "tabby index finished before the kill"
        );
        assert!(
            Instant::now() < deadline,
            "no commit within 120 s; log:\n{}",
            std::fs::read_to_string(root.path().join("index.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    // The half-built index opens and answers.
    let (status, stdout, stderr) =
        run_tabby(root.path(), &["search", "--json", "function_number_7_1"]);
    assert!(status.success(), "{stderr}");
    let hits: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(hits.is_array(), "{stdout}");

    // The next run indexes only what is missing and completes the index.
    let (status, stdout, stderr) = run_tabby(root.path(), &["index"]);
    assert!(status.success(), "{stderr}");
    let indexed: usize = stdout
        .lines()
        .find_map(|l| {
            l.split(": ")
                .nth(1)?
                .split(" files indexed")
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no summary line in {stdout}"));
    assert!(
        indexed > 0 && indexed < files,
        "resumed run indexed {indexed} of {files}"
    );
    assert!(stdout.contains("unchanged since last run"), "{stdout}");

    let (status, stdout, _) = run_tabby(
        root.path(),
        &["search", "--json", "--limit", "3", "function_number_249_3"],
    );
    assert!(status.success());
    let hits: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    // The fake embedding is noise, so only the BM25 leg is meaningful here.
    let best_bm25 = hits
        .as_array()
        .unwrap()
        .iter()
        .max_by(|a, b| {
            a["scores"]["bm25"]
                .as_f64()
                .unwrap()
                .total_cmp(&b["scores"]["bm25"].as_f64().unwrap())
        })
        .unwrap();
    assert_eq!(best_bm25["doc"]["filepath"], "m249.py", "{stdout}");
}

#[test]
fn index_and_search_commands_report_clearly() {
    let root = tempfile::tempdir().unwrap();
    let (status, _, stderr) = run_tabby(root.path(), &["index"]);
    assert!(!status.success());
    assert!(stderr.contains("no [[repositories]]"), "{stderr}");

    let repo = crate::rag::make_shop_repo(root.path());
    std::fs::write(
        root.path().join("config.toml"),
        format!(
            "[[repositories]]\ngit_url = \"file://{}\"\n",
            repo.display()
        ),
    )
    .unwrap();
    let (status, _, stderr) = run_tabby(root.path(), &["search", "discount"]);
    assert!(!status.success(), "search before indexing");
    assert!(stderr.contains("tabby index"), "{stderr}");

    let (status, stdout, stderr) = run_tabby(root.path(), &["index", "--repo", "shop"]);
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains("2 files indexed"), "{stdout}");
    let (status, _, stderr) = run_tabby(root.path(), &["index", "--repo", "nope"]);
    assert!(!status.success());
    assert!(
        stderr.contains("no configured repository matches"),
        "{stderr}"
    );

    let (status, stdout, _) = run_tabby(
        root.path(),
        &["search", "--lang", "python", "compute_discounted_price"],
    );
    assert!(status.success());
    assert!(stdout.starts_with("src/pricing.py:1"), "{stdout}");
}
