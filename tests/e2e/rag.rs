//! Retrieval-augmented completion end to end: a git repository in `[[repositories]]` is indexed
//! by `tabby serve` in the background, then a completion for that repository's `git_url` gets
//! the repository's code as commented snippets in the prompt the model receives.

use std::{path::Path, time::Duration};

use serde_json::{Value, json};

use crate::support::*;

/// The `shop` repository: pricing and a cart that uses it.
pub fn make_shop_repo(root: &Path) -> std::path::PathBuf {
    make_repo(
        root,
        "shop",
        &[
            (
                "src/pricing.py",
                "def compute_discounted_price(price, discount_rate):\n    \"\"\"Price after a percentage discount.\"\"\"\n    return round(price * (1 - discount_rate), 2)\n",
            ),
            (
                "src/cart.py",
                "from pricing import compute_discounted_price\n\n\ndef cart_total(items):\n    return sum(item.price for item in items)\n",
            ),
        ],
    )
}

/// Polls `/v1beta/search` until the index answers with hits.
pub async fn wait_for_index(server: &TabbyServer, query: &Value) -> Value {
    let mut last = (0, Value::Null);
    for _ in 0..300 {
        let (status, body) = post_json(&server.url("/v1beta/search"), query).await;
        if status == 200 && body["hits"].as_array().is_some_and(|h| !h.is_empty()) {
            return body;
        }
        last = (status, body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "the index never became searchable; last answer {} {}; stderr:\n{}",
        last.0,
        last.1,
        server.stderr()
    );
}

#[tokio::test]
async fn completion_prompt_contains_the_repository_snippet() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = make_shop_repo(tmp.path());
    let model = FakeServer::start(Protocol::LlamaCpp, Script::default().pieces(["0.9)"])).await;
    let embedder = FakeServer::start(Protocol::OpenAi, Script::default().embedding_dim(16)).await;
    let config = format!(
        r#"
[[repositories]]
git_url = "file://{repo}"

{embedding}{params}{completion}"#,
        repo = repo.display(),
        embedding = openai_embedding_config(&embedder.url(), "fake-embed"),
        params = open_search_params("completion"),
        completion = llama_completion_config(&model.url()),
    );
    let server = TabbyServer::start(&config);
    let search = wait_for_index(
        &server,
        // The fake embedding is not semantic: switch the embedding threshold off.
        &json!({"query": "compute_discounted_price discount", "git_url": "https://github.com/acme/shop.git",
                "params": {"min_embedding_score": -1.0}}),
    )
    .await;
    let top = &search["hits"][0];
    assert_eq!(top["filepath"], "src/pricing.py", "{search}");
    assert_eq!(top["start_line"], 1);
    assert_eq!(top["end_line"], 3);
    assert!(top["scores"]["rrf"].as_f64().unwrap() > 0.0);

    let (status, body) = post_json(
        &server.url("/v1/completions"),
        &json!({
            "language": "python",
            "segments": {
                "prefix": "from pricing import compute_discounted_price\n\ndef checkout(price):\n    return compute_discounted_price(price, ",
                "filepath": "src/checkout.py",
                "git_url": "git@github.com:acme/shop.git"
            },
            "debug_options": {"return_snippets": true}
        }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let snippets = body["debug_data"]["snippets"].as_array().unwrap();
    assert!(
        snippets.iter().any(|s| s["filepath"] == "src/pricing.py"),
        "{snippets:?}"
    );
    let prompt = model
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.path == "/completion")
        .unwrap()
        .body["prompt"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        prompt.contains(
            "# Path: src/pricing.py\n# def compute_discounted_price(price, discount_rate):\n"
        ),
        "{prompt}"
    );
    assert!(
        prompt.contains("#     return round(price * (1 - discount_rate), 2)"),
        "{prompt}"
    );

    // A repository that is not configured gets no server-side snippets.
    let (_, body) = post_json(
        &server.url("/v1/completions"),
        &json!({"language": "python", "segments": {"prefix": "compute_discounted_price(", "git_url": "https://github.com/acme/unrelated.git"}, "debug_options": {"return_snippets": true}}),
    )
    .await;
    assert_eq!(body["debug_data"]["snippets"], json!([]));

    // Search API errors are clear.
    let (status, body) = post_json(
        &server.url("/v1beta/search"),
        &json!({"query": "x", "source_id": "config:nope"}),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    let (status, _) = post_json(&server.url("/v1beta/search"), &json!({"git_url": "x"})).await;
    assert_eq!(status, 422);
}

/// `tabby serve` on the `shop` repository `repo` with fake completion and embedding models and
/// `extra` config, once search finds `probe`; the fakes live as long as the second value.
async fn serve_shop(repo: &Path, extra: &str, probe: &str) -> (TabbyServer, [FakeServer; 2]) {
    let model = FakeServer::start(Protocol::LlamaCpp, Script::default().pieces(["x)"])).await;
    let embedder = FakeServer::start(Protocol::OpenAi, Script::default().embedding_dim(16)).await;
    let config = format!(
        "[[repositories]]\ngit_url = \"file://{repo}\"\n\n{extra}\n{embedding}{completion}",
        repo = repo.display(),
        embedding = openai_embedding_config(&embedder.url(), "fake-embed"),
        completion = llama_completion_config(&model.url()),
    );
    let server = TabbyServer::start(&config);
    wait_for_index(
        &server,
        &json!({"query": probe, "git_url": "https://github.com/acme/shop.git",
                "params": {"min_embedding_score": -1.0}}),
    )
    .await;
    (server, [model, embedder])
}

/// With `[completion] snippets_of_used_names` (the default), a search hit enters the prompt only when it
/// comes from a file the edited file imports or defines a name the editor's text or the
/// file's imports use: the imported function's definition and the imported module's chunk
/// stay, a look-alike the file never touches goes; with it off all three are snippets.
#[tokio::test]
async fn search_hits_that_define_no_used_name_stay_out_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = make_repo(
        tmp.path(),
        "shop",
        &[
            (
                "src/pricing.py",
                "def compute_discounted_price(price, discount_rate):\n    return round(price * (1 - discount_rate), 2)\n",
            ),
            (
                "src/regional.py",
                "def regional_discounted_price_total(price, discount_rate, region):\n    return round(price * (1 - discount_rate), 2) + len(region)\n",
            ),
            (
                "src/tax.py",
                "def vat_discounted_price_total(price, discount_rate):\n    return round(price * (1 - discount_rate), 2) * 1.2\n",
            ),
            (
                "src/cart.py",
                "import tax\nfrom pricing import compute_discounted_price\n\n\ndef cart_total(items):\n    return sum(item.price for item in items)\n",
            ),
        ],
    );
    let request = json!({
        "language": "python",
        "segments": {
            "prefix": "def checkout(price, discount_rate):\n    # the discounted price\n    return ",
            "suffix": "\n",
            "filepath": "src/cart.py",
            "git_url": "git@github.com:acme/shop.git"
        },
        "debug_options": {"return_snippets": true}
    });
    let mut seen = Vec::new();
    for extra in ["[completion]\nsnippets_of_used_names = false\n", ""] {
        let (server, _models) = serve_shop(&repo, extra, "regional_discounted_price_total").await;
        let (status, answer) = post_json(&server.url("/v1/completions"), &request).await;
        assert_eq!(status, 200, "{answer}");
        let mut paths: Vec<String> = answer["debug_data"]["snippets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["filepath"].as_str().unwrap().to_string())
            .collect();
        paths.sort();
        paths.dedup();
        seen.push(paths);
        // A file the index does not hold yet (a new one): its imports are unknown, so every
        // hit stays.
        let mut new_file = request.clone();
        new_file["segments"]["filepath"] = json!("src/new_checkout.py");
        let (status, answer) = post_json(&server.url("/v1/completions"), &new_file).await;
        assert_eq!(status, 200, "{answer}");
        let paths: Vec<&str> = answer["debug_data"]["snippets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["filepath"].as_str().unwrap())
            .collect();
        assert!(
            ["src/pricing.py", "src/regional.py", "src/tax.py"]
                .iter()
                .all(|p| paths.contains(p)),
            "a new file: {paths:?}"
        );
    }
    // `compute_discounted_price` is used only by the file's import statement (read from the
    // index); nothing in the file names `regional_discounted_price_total`, and nothing names
    // `vat_discounted_price_total` either, but its module is imported (`tax.` may follow).
    assert_eq!(
        seen[0],
        ["src/pricing.py", "src/regional.py", "src/tax.py"],
        "without the gate: {seen:?}"
    );
    assert_eq!(
        seen[1],
        ["src/pricing.py", "src/tax.py"],
        "default: {seen:?}"
    );
}

/// The edited file's own import statements, read from its indexed version, reach the prompt
/// above the editor's window (which starts below them): the repository's module first, whole,
/// once; a request for a repository that is not configured gets none.
#[tokio::test]
async fn completion_prompt_shows_the_files_imports_above_the_editors_window() {
    let tmp = tempfile::tempdir().unwrap();
    let body: String = (0..60)
        .map(|i| format!("    total_{i} = total_{i} + {i}\n"))
        .collect();
    let cart = format!(
        "import os\nfrom pricing import compute_discounted_price\n\n\ndef cart_total(items):\n{body}    return total\n"
    );
    let repo = make_repo(
        tmp.path(),
        "shop",
        &[
            (
                "src/pricing.py",
                "def compute_discounted_price(price, discount_rate):\n    return round(price * (1 - discount_rate), 2)\n",
            ),
            ("src/cart.py", &cart),
        ],
    );
    let (server, _models) = serve_shop(&repo, "", "cart_total total").await;
    // tabby-agent's window: the 40 lines before the cursor, far below the imports.
    let lines: Vec<&str> = cart.lines().collect();
    let prefix = lines[20..60].join("\n") + "\n    return compute_";
    let complete = |git_url: &'static str| {
        let prefix = prefix.clone();
        let url = server.url("/v1/completions");
        async move {
            post_json(
                &url,
                &json!({
                    "language": "python",
                    "segments": {"prefix": prefix, "suffix": "\n", "filepath": "src/cart.py", "git_url": git_url},
                    "debug_options": {"return_prompt": true}
                }),
            )
            .await
        }
    };
    let (status, answer) = complete("git@github.com:acme/shop.git").await;
    assert_eq!(status, 200, "{answer}");
    let prompt = answer["debug_data"]["prompt"].as_str().unwrap();
    let header = "import os\nfrom pricing import compute_discounted_price\n\n";
    let at = prompt.find(header).unwrap_or_else(|| panic!("{prompt}"));
    assert!(
        prompt[at + header.len()..].starts_with("    total_"),
        "the header sits right above the prefix: {prompt}"
    );
    assert_eq!(prompt.matches("from pricing import").count(), 1, "{prompt}");
    assert!(prompt.len() <= 1536);

    let (status, answer) = complete("https://github.com/acme/unrelated.git").await;
    assert_eq!(status, 200, "{answer}");
    let prompt = answer["debug_data"]["prompt"].as_str().unwrap();
    assert!(!prompt.contains("from pricing import"), "{prompt}");
}

/// After `name.`, the outline of what the name leads to reaches the prompt: the module the
/// file imports (its functions' signature lines, read from the repository), or the type a
/// variable holds (its methods); a path or repository the request may not read gives none.
#[tokio::test]
async fn completion_prompt_outlines_what_the_name_before_the_cursor_leads_to() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = make_repo(
        tmp.path(),
        "shop",
        &[
            (
                "shop/util.py",
                "def format_money(amount, currency):\n    return f\"{amount} {currency}\"\n\n\ndef parse_money(text):\n    return float(text.split()[0])\n\n\ndef _internal():\n    pass\n",
            ),
            (
                "shop/cart.py",
                "class Cart:\n    def __init__(self):\n        self.items = []\n\n    def add_item(self, item, quantity=1):\n        self.items.append((item, quantity))\n\n    def total_price(self):\n        return sum(i.price * q for i, q in self.items)\n",
            ),
            (
                "shop/checkout.py",
                "from . import util\nfrom .cart import Cart\n\n\ndef checkout(cart: Cart):\n    return util.format_money(cart.total_price(), \"EUR\")\n",
            ),
        ],
    );
    let (server, _models) = serve_shop(
        &repo,
        "[completion]\noutline_bytes = 384\n",
        "format_money currency",
    )
    .await;
    let prompt_for = |prefix: &'static str, filepath: &'static str, git_url: &'static str| {
        let url = server.url("/v1/completions");
        async move {
            let (status, answer) = post_json(
                &url,
                &json!({
                    "language": "python",
                    "segments": {"prefix": prefix, "suffix": "\n", "filepath": filepath, "git_url": git_url},
                    "debug_options": {"return_prompt": true, "return_snippets": true}
                }),
            )
            .await;
            assert_eq!(status, 200, "{answer}");
            answer
        }
    };
    let module = prompt_for(
        "def checkout(cart: Cart):\n    return util.",
        "shop/checkout.py",
        "git@github.com:acme/shop.git",
    )
    .await;
    let prompt = module["debug_data"]["prompt"].as_str().unwrap();
    assert!(
        prompt.contains("# Path: shop/util.py\n# def format_money(amount, currency):\n# def parse_money(text):\n# def _internal():\n"),
        "{prompt}"
    );
    // The outline is one of the snippets the prompt holds: signature lines only.
    let snippets = module["debug_data"]["snippets"].as_array().unwrap();
    assert!(
        snippets.iter().any(|s| s["filepath"] == "shop/util.py"
            && s["body"] == "def format_money(amount, currency):\ndef parse_money(text):\ndef _internal():\n"),
        "{snippets:?}"
    );

    let typed = prompt_for(
        "def checkout(cart: Cart):\n    total = cart.",
        "shop/checkout.py",
        "git@github.com:acme/shop.git",
    )
    .await;
    let prompt = typed["debug_data"]["prompt"].as_str().unwrap();
    assert!(
        prompt.contains("# class Cart:\n#     def add_item(self, item, quantity=1):\n#     def total_price(self):\n"),
        "{prompt}"
    );

    // Hostile chains: a name of 200,000 bytes, 50,000 links; answered, without an outline.
    let long_name: &'static str =
        Box::leak(format!("    {}.", "n".repeat(200_000)).into_boxed_str());
    let deep: &'static str = Box::leak(format!("    {}", "util.".repeat(50_000)).into_boxed_str());
    for prefix in [long_name, deep] {
        let answer = prompt_for(prefix, "shop/checkout.py", "git@github.com:acme/shop.git").await;
        let snippets = answer["debug_data"]["snippets"].as_array().unwrap();
        assert!(
            !snippets
                .iter()
                .any(|s| s["body"].as_str().unwrap().contains("):\ndef ")),
            "{snippets:?}"
        );
    }

    // A file the index does not hold, or a repository the request may not read: no outline.
    for (filepath, git_url) in [
        ("../../../etc/passwd", "git@github.com:acme/shop.git"),
        ("shop/checkout.py", "https://github.com/acme/unrelated.git"),
    ] {
        let answer = prompt_for("    return util.", filepath, git_url).await;
        let snippets = answer["debug_data"]["snippets"].as_array().unwrap();
        assert!(
            !snippets
                .iter()
                .any(|s| s["body"].as_str().unwrap().contains("):\ndef ")),
            "{filepath} {git_url}: {snippets:?}"
        );
    }
}

/// Generated and vendored files are indexed but left out of search, completion snippets and
/// MCP-style callers unless the caller asks for them; each hit names its origin.
#[tokio::test]
async fn generated_and_vendored_code_is_left_out_unless_asked_for() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = make_repo(
        tmp.path(),
        "gen",
        &[
            (
                "src/ledger.py",
                "def reconcile_ledger_entries(entries):\n    return sorted(entries)\n",
            ),
            (
                "src/ledger_pb2.py",
                "def reconcile_ledger_entries_message(entries):\n    return entries\n",
            ),
            (
                "src/client.py",
                "# Code generated by ledgergen. DO NOT EDIT.\ndef reconcile_ledger_entries_client(entries):\n    return entries\n",
            ),
            (
                "vendor/ledgerlib/core.py",
                "def reconcile_ledger_entries_vendored(entries):\n    return entries\n",
            ),
        ],
    );
    let model = FakeServer::start(Protocol::LlamaCpp, Script::default().pieces(["x"])).await;
    let embedder = FakeServer::start(Protocol::OpenAi, Script::default().embedding_dim(16)).await;
    let config = format!(
        "[[repositories]]\ngit_url = \"file://{}\"\n\n{}{}{}",
        repo.display(),
        openai_embedding_config(&embedder.url(), "fake-embed"),
        open_search_params("completion"),
        llama_completion_config(&model.url()),
    );
    let server = TabbyServer::start(&config);
    let open = json!({"min_embedding_score": -1.0, "min_bm25_score": -1.0, "min_rrf_score": -1.0,
                      "num_to_return": 10, "num_to_score": 40});
    let query = json!({"query": "reconcile ledger entries", "git_url": "https://github.com/acme/gen.git",
                       "params": open});
    let default = wait_for_index(&server, &query).await;
    let paths = |body: &Value| -> Vec<String> {
        let mut paths: Vec<String> = body["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["filepath"].as_str().unwrap().to_string())
            .collect();
        paths.sort();
        paths
    };
    assert_eq!(paths(&default), ["src/ledger.py"], "{default}");
    assert_eq!(default["hits"][0]["origin"], "source");

    let mut asked = query.clone();
    asked["include_generated"] = json!(true);
    let (status, all) = post_json(&server.url("/v1beta/search"), &asked).await;
    assert_eq!(status, 200, "{all}");
    assert_eq!(
        paths(&all),
        [
            "src/client.py",
            "src/ledger.py",
            "src/ledger_pb2.py",
            "vendor/ledgerlib/core.py"
        ],
        "{all}"
    );
    for hit in all["hits"].as_array().unwrap() {
        let expected = match hit["filepath"].as_str().unwrap() {
            "src/ledger.py" => "source",
            "vendor/ledgerlib/core.py" => "vendored",
            _ => "generated",
        };
        assert_eq!(hit["origin"], expected, "{hit}");
    }

    // Completion snippets come from the team's own code only.
    let (status, body) = post_json(
        &server.url("/v1/completions"),
        &json!({
            "language": "python",
            "segments": {
                "prefix": "def close_books(entries):\n    return reconcile_ledger_entries(",
                "filepath": "src/books.py",
                "git_url": "https://github.com/acme/gen.git"
            },
            "debug_options": {"return_snippets": true}
        }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let snippets: Vec<&str> = body["debug_data"]["snippets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["filepath"].as_str().unwrap())
        .collect();
    assert_eq!(snippets, ["src/ledger.py"], "{body}");
}

/// Requests within the body limit have a bounded cost: a 900 KB search query of distinct words
/// (which once kept a core busy for minutes, cost growing with the square of its words) and a
/// completion whose prefix is one 269 KB minified line both answer in seconds even on a debug
/// build; search reads the query's last 4 KB and at most 64 distinct terms.
#[tokio::test]
async fn requests_as_big_as_the_body_limit_answer_quickly() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = make_shop_repo(tmp.path());
    let model = FakeServer::start(Protocol::LlamaCpp, Script::default().pieces(["x"])).await;
    let embedder = FakeServer::start(Protocol::OpenAi, Script::default().embedding_dim(16)).await;
    let config = format!(
        "[[repositories]]\ngit_url = \"file://{}\"\n\n{}{}",
        repo.display(),
        openai_embedding_config(&embedder.url(), "fake-embed"),
        llama_completion_config(&model.url()),
    );
    let server = TabbyServer::start(&config);
    wait_for_index(
        &server,
        &json!({"query": "compute_discounted_price", "git_url": "https://github.com/acme/shop.git",
                "params": {"min_embedding_score": -1.0, "min_bm25_score": -1.0, "min_rrf_score": -1.0,
                           "num_to_return": 10, "num_to_score": 40}}),
    )
    .await;

    let words: String = (0..112_000).map(|i| format!("w{i:06} ")).collect();
    assert!(words.len() > 800_000 && words.len() < 1024 * 1024);
    let started = std::time::Instant::now();
    let (status, body) = post_json(
        &server.url("/v1beta/search"),
        &json!({"query": words, "git_url": "https://github.com/acme/shop.git"}),
    )
    .await;
    let search_time = started.elapsed();
    assert_eq!(status, 200, "{body}");
    assert!(search_time < Duration::from_secs(10), "{search_time:?}");

    let minified = "var a=b(c,d);".repeat(269_000 / 13);
    let started = std::time::Instant::now();
    let (status, body) = post_json(
        &server.url("/v1/completions"),
        &json!({"language": "javascript", "segments": {"prefix": minified, "suffix": "",
                "git_url": "https://github.com/acme/shop.git", "filepath": "dist/app.min.js"}}),
    )
    .await;
    let completion_time = started.elapsed();
    assert_eq!(status, 200, "{body}");
    assert!(
        completion_time < Duration::from_secs(10),
        "{completion_time:?}"
    );
}
