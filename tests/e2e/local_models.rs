//! The out-of-the-box server: no `[model]` sections, the embedded defaults from the models
//! directory that `tabby download` fills (scripts/test.sh runs it before the tests).

use serde_json::json;

use crate::{ee_support::poll, support::*};

#[tokio::test]
async fn completes_and_chats_from_the_embedded_model_with_nothing_else_running() {
    let dir = embedded_models_dir();
    let server = TabbyServer::start_with_env(
        "",
        &["--no-webserver"],
        &[("TABBY_MODEL_CACHE_ROOT", dir.to_str().unwrap())],
    );
    let (status, health) = get_json(&server.url("/v1/health")).await;
    assert_eq!(status, 200);
    assert_eq!(health["model"], "TabbyML/Qwen2.5-Coder-0.5B-Instruct");
    assert_eq!(health["models"]["completion"]["local"]["device"], "cpu");

    let (status, body) = post_json(
        &server.url("/v1/completions"),
        &json!({
            "language": "python",
            "segments": {"prefix": "def fibonacci(n):\n    if n < 2:\n        return n\n    return ", "suffix": "\n"},
            "temperature": 0.0,
            "seed": 1
        }),
    )
    .await;
    assert_eq!(status, 200, "{body}; stderr:\n{}", server.stderr());
    let text = body["choices"][0]["text"].as_str().unwrap();
    assert!(text.contains("fibonacci"), "{text:?}");

    let response = client()
        .post(server.url("/v1/chat/completions"))
        .json(&json!({"model": "", "stream": true, "max_tokens": 16,
                      "messages": [{"role": "user", "content": "Say hello."}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    assert!(body.contains("chat.completion.chunk"), "{body}");
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
}

/// Forty lines of unrelated code: an editor sends this much before the cursor, enough that a
/// prompt clipped from its start would lose any snippet put above it.
fn filler() -> String {
    (0..40)
        .map(|i| format!("    step_{i} = normalize_entry(records[{i}], strict=True)\n"))
        .collect()
}

const PRICING: &str = "def compute_discounted_price(price, discount_rate):\n    \"\"\"The price after the discount, rounded to cents.\"\"\"\n    return round(price * (1 - discount_rate), 2)\n";

/// The answer to `request` once the repository is indexed (built in the background at start)
/// and search puts a snippet of `path` into the prompt.
async fn once_a_snippet_from(
    server: &TabbyServer,
    request: &serde_json::Value,
    path: &str,
) -> serde_json::Value {
    poll(
        "the repository to be indexed",
        std::time::Duration::from_secs(120),
        || async {
            let (status, body) = post_json(&server.url("/v1/completions"), request).await;
            assert_eq!(status, 200, "{body}; stderr:\n{}", server.stderr());
            body["debug_data"]["snippets"]
                .as_array()
                .is_some_and(|s| s.iter().any(|s| s["filepath"] == path))
                .then_some(body)
        },
    )
    .await
}

/// Repository context reaches the embedded model: with an editor-sized prefix and suffix, the
/// snippet from another file of the repository is whole in the prompt, and the model calls the
/// function the snippet defines; with retrieval off, neither happens.
#[tokio::test]
async fn repository_context_reaches_the_embedded_completion_model() {
    let dir = embedded_models_dir();
    let tmp = tempfile::tempdir().unwrap();
    let shop = make_repo(
        tmp.path(),
        "shop",
        &[
            ("src/pricing.py", PRICING),
            (
                "src/cart.py",
                "def add_item(basket, item):\n    basket.append(item)\n",
            ),
        ],
    );
    let server = TabbyServer::start_with_env(
        &format!(
            "[[repositories]]\ngit_url = \"file://{}\"\n",
            shop.display()
        ),
        &["--no-webserver"],
        &[("TABBY_MODEL_CACHE_ROOT", dir.to_str().unwrap())],
    );
    let prefix = format!(
        "def checkout_total(records, items, discount_rate):\n{}    total = 0\n    for price in items:\n        # the discounted price of each item\n        total += ",
        filler()
    );
    let suffix =
        "\n    return total\n\n\ndef main():\n    print(checkout_total([], [10.0], 0.1))\n"
            .repeat(3);
    let request = |retrieval: bool| {
        json!({
            "language": "python",
            "segments": {"prefix": prefix, "suffix": suffix, "filepath": "src/checkout.py",
                         "git_url": format!("file://{}", shop.display())},
            "temperature": 0.0,
            "debug_options": {"return_snippets": true, "return_prompt": true,
                              "disable_retrieval_augmented_code_completion": !retrieval}
        })
    };
    // The index is built in the background at start: wait until search feeds the prompt.
    let body = once_a_snippet_from(&server, &request(true), "src/pricing.py").await;
    let prompt = body["debug_data"]["prompt"].as_str().unwrap();
    assert!(prompt.len() <= 1536, "{}", prompt.len());
    assert!(prompt.contains(PRICING.trim_end()), "{prompt}");
    assert!(
        prompt.contains("        total += <|fim_suffix|>\n    return total\n"),
        "{prompt}"
    );
    assert!(prompt.ends_with("<|fim_middle|>"), "{prompt}");
    let text = body["choices"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("compute_discounted_price"),
        "{text:?}\n{prompt}"
    );

    let (status, body) = post_json(&server.url("/v1/completions"), &request(false)).await;
    assert_eq!(status, 200, "{body}");
    let prompt = body["debug_data"]["prompt"].as_str().unwrap();
    assert!(!prompt.contains("compute_discounted_price"), "{prompt}");
    assert_eq!(body["debug_data"]["snippets"], json!([]));
}

/// With `[completion] snippets_of_used_names` (the default), on the embedded model: the definition of the
/// function the file imports is whole in the prompt and the model calls it, while a look-alike
/// module that the file never names stays out.
#[tokio::test]
async fn only_snippets_of_used_names_reach_the_embedded_completion_model() {
    let dir = embedded_models_dir();
    let tmp = tempfile::tempdir().unwrap();
    let shop = make_repo(
        tmp.path(),
        "shop",
        &[
            ("src/pricing.py", PRICING),
            (
                "src/regional.py",
                "def regional_discounted_price_total(items, discount_rate, region):\n    return sum(round(price * (1 - discount_rate), 2) for price in items) + len(region)\n",
            ),
            // The edited file as last indexed (the gate reads its imports; a file the index
            // does not hold keeps every hit).
            (
                "src/checkout.py",
                "from pricing import compute_discounted_price\n\n\ndef checkout_total(records, items, discount_rate):\n    return 0\n",
            ),
        ],
    );
    let server = TabbyServer::start_with_env(
        &format!(
            "[[repositories]]\ngit_url = \"file://{}\"\n",
            shop.display()
        ),
        &["--no-webserver"],
        &[("TABBY_MODEL_CACHE_ROOT", dir.to_str().unwrap())],
    );
    let prefix = format!(
        "from pricing import compute_discounted_price\n\n\ndef checkout_total(records, items, discount_rate):\n{}    total = 0\n    for price in items:\n        # the discounted price of each item\n        total += ",
        filler()
    );
    let suffix = "\n    return total\n";
    let request = json!({
        "language": "python",
        "segments": {"prefix": prefix, "suffix": suffix, "filepath": "src/checkout.py",
                     "git_url": format!("file://{}", shop.display())},
        "temperature": 0.0,
        "debug_options": {"return_snippets": true, "return_prompt": true}
    });
    let body = once_a_snippet_from(&server, &request, "src/pricing.py").await;
    let snippets = body["debug_data"]["snippets"].as_array().unwrap();
    assert!(
        snippets.iter().all(|s| s["filepath"] != "src/regional.py"),
        "{snippets:?}"
    );
    let prompt = body["debug_data"]["prompt"].as_str().unwrap();
    assert!(prompt.contains(PRICING.trim_end()), "{prompt}");
    assert!(
        !prompt.contains("regional_discounted_price_total"),
        "{prompt}"
    );
    let text = body["choices"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("compute_discounted_price"),
        "{text:?}\n{prompt}"
    );
}

/// The file's own imports and the outline of what the name before the cursor leads to reach the
/// embedded model: the editor's window starts far below `from . import pricing`, the cursor
/// follows `pricing.`; the prompt holds the import lines above the prefix (one module's two
/// statements written as one) and the module's signature lines (not its bodies), and the model
/// names the module's function.
#[tokio::test]
async fn imports_and_outlines_reach_the_embedded_completion_model() {
    let dir = embedded_models_dir();
    let tmp = tempfile::tempdir().unwrap();
    let body = format!(
        "def checkout_total(records, items, discount_rate):\n{}    total = 0\n    for price in items:\n        total += pricing.",
        filler()
    );
    let checkout = format!(
        "from . import pricing\nfrom .money import round_cents\nfrom .money import to_cents\nimport math\n\n\n{body}compute_discounted_price(price, discount_rate)\n    return total\n"
    );
    let shop = make_repo(
        tmp.path(),
        "shop",
        &[
            (
                "src/pricing.py",
                &format!("{PRICING}\n\ndef format_price(value):\n    return f\"{{value:.2f}}\"\n"),
            ),
            ("src/checkout.py", &checkout),
            (
                "src/money.py",
                "def round_cents(value):\n    return round(value, 2)\n\n\ndef to_cents(value):\n    return int(value * 100)\n",
            ),
            (
                "src/lib.rs",
                "mod conn;\nmod error;\npub use crate::error::Error;\n",
            ),
            ("src/error.rs", RUST_ERROR),
            ("src/processors.py", PROCESSORS),
            (
                "src/admonition.py",
                &format!(
                    "from .processors import BlockProcessor\n\n\nclass AdmonitionProcessor(BlockProcessor):\n{}last_child(parent)\n        return sibling\n",
                    admonition_run()
                ),
            ),
            (
                "src/conn.rs",
                &format!("{RUST_CONN}new_closed());\n    }}\n    Ok(())\n}}\n"),
            ),
            // A Go type whose methods sit in two files of its package.
            (
                "go/cart/cart.go",
                "package cart\n\ntype Cart struct {\n\tprices []float64\n}\n\nfunc (c *Cart) Add(price float64) {\n\tc.prices = append(c.prices, price)\n}\n",
            ),
            (
                "go/cart/cart_total.go",
                "package cart\n\nfunc (c *Cart) GrandTotal() float64 {\n\ttotal := 0.0\n\tfor _, p := range c.prices {\n\t\ttotal += p\n\t}\n\treturn total\n}\n",
            ),
            (
                "go/cart/checkout.go",
                &format!("{GO_CHECKOUT}GrandTotal()\n}}\n"),
            ),
        ],
    );
    let server = TabbyServer::start_with_env(
        &format!(
            "[[repositories]]\ngit_url = \"file://{}\"\n",
            shop.display()
        ),
        &["--no-webserver"],
        &[("TABBY_MODEL_CACHE_ROOT", dir.to_str().unwrap())],
    );
    let request = json!({
        "language": "python",
        "segments": {"prefix": body, "suffix": "\n    return total\n", "filepath": "src/checkout.py",
                     "git_url": format!("file://{}", shop.display())},
        "temperature": 0.0,
        "debug_options": {"return_snippets": true, "return_prompt": true}
    });
    let outline = "def compute_discounted_price(price, discount_rate):\ndef format_price(value):\n";
    let answer = poll(
        "the repository to be indexed",
        std::time::Duration::from_secs(120),
        || async {
            let (status, answer) = post_json(&server.url("/v1/completions"), &request).await;
            assert_eq!(status, 200, "{answer}; stderr:\n{}", server.stderr());
            let snippets = answer["debug_data"]["snippets"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            snippets
                .iter()
                .any(|s| s["body"] == outline)
                .then_some(answer)
        },
    )
    .await;
    let prompt = answer["debug_data"]["prompt"].as_str().unwrap();
    assert!(prompt.len() <= 1536, "{}", prompt.len());
    assert!(
        // (one module's statements written as one)
        prompt.contains(&format!("<|file_sep|>src/pricing.py\n{outline}<|file_sep|>src/checkout.py\n<|fim_prefix|>from . import pricing\nfrom .money import round_cents, to_cents\nimport math\n\n")),
        "{prompt}"
    );
    assert!(prompt.ends_with("<|fim_middle|>"), "{prompt}");
    let text = answer["choices"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("compute_discounted_price"),
        "{text:?}\n{prompt}"
    );

    // After a Rust `Type::` path the outline lists the associated functions the path can
    // call before the methods, which fill its budget in file order.
    let answer = complete_in(
        &server,
        &shop,
        "rust",
        "src/conn.rs",
        RUST_CONN,
        "\n    }\n    Ok(())\n}\n",
    )
    .await;
    // Methods first, file order, would leave out the constructor (the last line that fits is
    // `is_body_write_aborted`).
    let outline = "pub struct Error {\nimpl Error {\n    pub fn is_closed(&self) -> bool {\n    pub fn is_canceled(&self) -> bool {\n    pub fn is_timeout(&self) -> bool {\n    pub fn is_incomplete_message(&self) -> bool {\n    pub(crate) fn new_closed() -> Error {\n";
    assert_outlined_and_completed(
        &answer,
        &format!("<|file_sep|>src/error.rs\n{outline}<|file_sep|>src/conn.rs\n"),
        "new_closed",
    );

    // After a bare `self.`, far below the class header: the outline is the class's base, from
    // another file, then the class itself.
    let answer = complete_in(
        &server,
        &shop,
        "python",
        "src/admonition.py",
        &admonition_run(),
        "\n        return sibling\n",
    )
    .await;
    assert_outlined_and_completed(
        &answer,
        "<|file_sep|>src/processors.py\nclass BlockProcessor:\n    def detab(self, text):\n    def last_child(self, parent):\n<|file_sep|>src/admonition.py\nclass AdmonitionProcessor(BlockProcessor):\n    def run(self, parent, blocks):\n",
        "last_child",
    );

    // After `c.` with `c *Cart` in Go: the type's file, then the package's other file that
    // declares methods of it.
    let answer = complete_in(
        &server,
        &shop,
        "go",
        "go/cart/checkout.go",
        GO_CHECKOUT,
        "\n}\n",
    )
    .await;
    assert_outlined_and_completed(
        &answer,
        "<|file_sep|>go/cart/cart.go\ntype Cart struct {\nfunc (c *Cart) Add(price float64) {\n<|file_sep|>go/cart/cart_total.go\nfunc (c *Cart) GrandTotal() float64 {\n",
        "GrandTotal",
    );
}

/// The completion's prompt holds `outline` (the files and signatures before the edited file)
/// and the model's completion starts with `name`.
fn assert_outlined_and_completed(answer: &serde_json::Value, outline: &str, name: &str) {
    let prompt = answer["debug_data"]["prompt"].as_str().unwrap();
    assert!(prompt.contains(outline), "{prompt}");
    let text = answer["choices"][0]["text"].as_str().unwrap();
    assert!(text.starts_with(name), "{text:?}\n{prompt}");
}

/// A Go function up to the cursor after `c.`, where `c` is a `*Cart`.
const GO_CHECKOUT: &str = "package cart\n\nfunc Checkout(c *Cart) float64 {\n\treturn c.";

/// A greedy completion in `filepath` of the repository `repo`, with its prompt and snippets.
async fn complete_in(
    server: &TabbyServer,
    repo: &std::path::Path,
    language: &str,
    filepath: &str,
    prefix: &str,
    suffix: &str,
) -> serde_json::Value {
    let request = json!({
        "language": language,
        "segments": {"prefix": prefix, "suffix": suffix, "filepath": filepath,
                     "git_url": format!("file://{}", repo.display())},
        "temperature": 0.0,
        "debug_options": {"return_snippets": true, "return_prompt": true}
    });
    let (status, answer) = post_json(&server.url("/v1/completions"), &request).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// A block processor's base class, in a file of its own.
const PROCESSORS: &str = "class BlockProcessor:\n    def detab(self, text):\n        return text.lstrip()\n\n    def last_child(self, parent):\n        \"\"\"The last child of parent, or None.\"\"\"\n        return parent[-1] if parent else None\n";

/// A subclass's method, 40 lines long, up to the cursor after `self.`: an editor's window
/// that starts below the class header.
fn admonition_run() -> String {
    let steps: String = (0..40)
        .map(|i| format!("        step_{i} = normalize_entry(blocks[{i}], strict=True)\n"))
        .collect();
    format!("    def run(self, parent, blocks):\n{steps}        sibling = self.")
}

/// An error type whose methods alone overflow the outline's 256 bytes, with its constructor last.
const RUST_ERROR: &str = "pub struct Error {\n    kind: u8,\n}\n\nimpl Error {\n    pub fn is_closed(&self) -> bool {\n        self.kind == 1\n    }\n\n    pub fn is_canceled(&self) -> bool {\n        self.kind == 2\n    }\n\n    pub fn is_timeout(&self) -> bool {\n        self.kind == 3\n    }\n\n    pub fn is_incomplete_message(&self) -> bool {\n        self.kind == 4\n    }\n\n    pub fn is_body_write_aborted(&self) -> bool {\n        self.kind == 5\n    }\n\n    pub(crate) fn new_closed() -> Error {\n        Error { kind: 1 }\n    }\n}\n";

/// A connection closing with that error, up to the cursor after `crate::Error::`.
const RUST_CONN: &str = "use crate::Error;\n\npub fn close(open: bool) -> Result<(), Error> {\n    if !open {\n        return Err(crate::Error::";

/// `/v1/chat/completions` on the embedded chat model with the sampling parameters clients send:
/// a presence penalty (which once made every stream fail on its first tokens) streams to the
/// end, and an out-of-range value is a 400 naming the parameter, with no backtrace or path.
#[tokio::test]
async fn chat_sampling_parameters_on_the_embedded_model() {
    let dir = embedded_models_dir();
    let server = TabbyServer::start_with_env(
        "",
        &["--no-webserver"],
        &[("TABBY_MODEL_CACHE_ROOT", dir.to_str().unwrap())],
    );
    let chat = |extra: serde_json::Value| {
        let mut body = json!({"model": "", "stream": true, "max_tokens": 12,
                              "messages": [{"role": "user", "content": "List three colours."}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        client()
            .post(server.url("/v1/chat/completions"))
            .json(&body)
            .send()
    };
    let response = chat(json!({"presence_penalty": 1.0, "frequency_penalty": 0.5,
                               "temperature": 0.7, "top_p": 0.9, "seed": 3}))
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    assert!(body.contains("chat.completion.chunk"), "{body}");
    assert!(!body.contains("\"error\""), "{body}");
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");

    let response = chat(json!({"presence_penalty": 5.0})).await.unwrap();
    assert_eq!(response.status(), 400);
    let body = response.text().await.unwrap();
    assert!(body.contains("presence_penalty"), "{body}");
    for leak in ["backtrace", ".rs:", "/root/", "/tmp/"] {
        assert!(!body.contains(leak), "{leak} in {body}");
    }
}

/// The server's CPU time so far (user + system), in clock ticks (1/100 s on Linux).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// CPU ticks the server spends over `window` once it should be idle.
async fn ticks_over(server: &TabbyServer, window: std::time::Duration) -> u64 {
    let before = cpu_ticks(server.pid());
    tokio::time::sleep(window).await;
    cpu_ticks(server.pid()) - before
}

/// Seconds until the server's CPU use over a one-second window falls to `idle` ticks (+ 10),
/// or `None` if it does not within `deadline` seconds. The step running when the client left
/// (a prompt chunk or a token) finishes first, and how long that takes depends on the CPU and
/// on what else runs; a generation that went on would keep a core busy (100 ticks a second)
/// far longer than the deadline.
async fn seconds_until_idle(server: &TabbyServer, idle: u64, deadline: u64) -> Option<u64> {
    for second in 1..=deadline {
        if ticks_over(server, std::time::Duration::from_secs(1)).await <= idle + 10 {
            return Some(second);
        }
    }
    None
}

/// A client that gives up on a long completion or chat stream: the server stops generating
/// for it (its CPU goes idle at once) instead of running to the token limit.
#[tokio::test]
async fn generation_stops_when_its_client_disconnects() {
    let dir = embedded_models_dir();
    let server = TabbyServer::start_with_env(
        "[completion]\nmax_decoding_tokens = 4000\n",
        &["--no-webserver"],
        &[("TABBY_MODEL_CACHE_ROOT", dir.to_str().unwrap())],
    );
    // Warm up (the first request maps the weights), then see what idle costs.
    let (status, _) = post_json(
        &server.url("/v1/chat/completions"),
        &json!({"model": "", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}),
    )
    .await;
    assert_eq!(status, 200);
    let idle = ticks_over(&server, std::time::Duration::from_secs(1)).await;

    let give_up = reqwest::Client::builder()
        .timeout(std::time::Duration::from_millis(1500))
        .build()
        .unwrap();
    let completion = give_up
        .post(server.url("/v1/completions"))
        .json(&json!({
            "language": "python",
            "segments": {"prefix": "# Every number from 1 to 5000, one per line:\nnumbers = [\n    1,\n    2,\n", "suffix": ""},
            "temperature": 0.0,
        }))
        .send()
        .await;
    assert!(completion.is_err(), "the completion finished within 1.5 s");
    let after_completion = seconds_until_idle(&server, idle, 8).await;

    let chat = give_up
        .post(server.url("/v1/chat/completions"))
        .json(&json!({"model": "", "stream": true, "max_tokens": 4000,
                      "messages": [{"role": "user", "content": "Count from 1 to 5000, one number per line."}]}))
        .send()
        .await
        .unwrap();
    let mut chat = chat.bytes_stream();
    use futures::StreamExt;
    assert!(chat.next().await.is_some());
    drop(chat);
    let after_chat = seconds_until_idle(&server, idle, 8).await;
    // 4000 tokens keep a core busy for tens of seconds; stopped, the server is idle within
    // a second or two (under 1 s on an idle machine).
    for (what, seconds) in [("completion", after_completion), ("chat", after_chat)] {
        assert!(
            seconds.is_some(),
            "{what}: the server was still busy 8 s after the client left (idle: {idle} ticks/s)"
        );
    }
    // And it still serves.
    let (status, _) = post_json(
        &server.url("/v1/chat/completions"),
        &json!({"model": "", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}),
    )
    .await;
    assert_eq!(status, 200);
}

/// Mid-line on the embedded model: the same prompt sent raw (no cut) runs on for lines, while
/// the editor's request stops at the end of the line, which is all tabby-agent would keep, and
/// what it returns is the start of the raw output.
#[tokio::test]
async fn a_mid_line_completion_stops_at_the_end_of_the_line() {
    let dir = embedded_models_dir();
    let server = TabbyServer::start_with_env(
        "",
        &["--no-webserver"],
        &[("TABBY_MODEL_CACHE_ROOT", dir.to_str().unwrap())],
    );
    let (status, scoped) = post_json(
        &server.url("/v1/completions"),
        &json!({
            "language": "python",
            "segments": {"prefix": "numbers = [1, 2, 3]\nfor n in ", "suffix": "numbers:\n    print(n)\n"},
            "temperature": 0.0,
            "debug_options": {"return_prompt": true}
        }),
    )
    .await;
    assert_eq!(status, 200, "{scoped}");
    let prompt = scoped["debug_data"]["prompt"].as_str().unwrap();
    let (status, raw) = post_json(
        &server.url("/v1/completions"),
        &json!({"language": "python", "temperature": 0.0,
                "debug_options": {"raw_prompt": prompt}}),
    )
    .await;
    assert_eq!(status, 200, "{raw}");
    let scoped = scoped["choices"][0]["text"].as_str().unwrap();
    let raw = raw["choices"][0]["text"].as_str().unwrap();
    assert!(
        raw.contains('\n'),
        "the model stops by itself here: {raw:?}"
    );
    assert!(!scoped.contains('\n'), "{scoped:?}");
    assert_eq!(scoped, raw.split('\n').next().unwrap(), "{raw:?}");
}

/// `[model.completion.local] prompt_template` replaces the model directory's template (here the
/// suffix-first order), and the prompt is built with it.
#[tokio::test]
async fn a_configured_prompt_template_replaces_the_model_directory_one() {
    let dir = embedded_models_dir();
    let config = "[model.completion.local]\nmodel_id = \"TabbyML/Qwen2.5-Coder-0.5B-Instruct\"\n\
                  parallelism = 1\n\
                  prompt_template = \"<|fim_prefix|><|fim_suffix|>{suffix}<|fim_middle|>{prefix}\"\n";
    let server = TabbyServer::start_with_env(
        config,
        &["--no-webserver"],
        &[("TABBY_MODEL_CACHE_ROOT", dir.to_str().unwrap())],
    );
    let (status, body) = post_json(
        &server.url("/v1/completions"),
        &json!({
            "language": "python",
            "segments": {"prefix": "def add(a, b):\n    return ", "suffix": "\n\nprint(add(1, 2))\n"},
            "temperature": 0.0,
            "debug_options": {"return_prompt": true}
        }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["debug_data"]["prompt"],
        "<|fim_prefix|><|fim_suffix|>\n\nprint(add(1, 2))\n<|fim_middle|>def add(a, b):\n    return "
    );
    let text = body["choices"][0]["text"].as_str().unwrap();
    assert!(!text.is_empty(), "{body}");
}

/// A question on the embedded defaults (the static embedding, the built-in ranker and question
/// expansion table): `/v1beta/search` finds a definition that shares no word with it, and the
/// definition's BM25 score comes from the code words the question's words point to
/// ("whether" → `bool`).
#[tokio::test]
async fn a_question_reaches_code_through_its_learned_code_words_on_the_embedded_defaults() {
    let dir = embedded_models_dir();
    let tmp = tempfile::tempdir().unwrap();
    let line = "class Line:\n    def vacant(self) -> bool:\n        return self.count == 0\n";
    let repo = make_repo(
        tmp.path(),
        "queue",
        &[
            ("src/line.py", line),
            (
                "src/report.py",
                "def render_report(rows):\n    return '\\n'.join(str(r) for r in rows)\n",
            ),
        ],
    );
    let question = "Tell whether nothing is waiting";
    let words = tabby_common::index::code::search_words(line);
    for w in tabby_common::index::code::search_words(question) {
        assert!(!words.contains(&w), "{w} is in the definition");
    }
    let server = TabbyServer::start_with_env(
        &format!(
            "[[repositories]]\ngit_url = \"file://{}\"\n",
            repo.display()
        ),
        &["--no-webserver"],
        &[("TABBY_MODEL_CACHE_ROOT", dir.to_str().unwrap())],
    );
    let request = json!({
        "query": question,
        "params": {"min_embedding_score": -1.0, "min_bm25_score": -1.0, "min_rrf_score": -1.0}
    });
    let body = search_when_indexed(&server, &request, 1).await;
    let hit = body["hits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["filepath"] == "src/line.py")
        .unwrap_or_else(|| panic!("{body}"));
    assert!(hit["scores"]["bm25"].as_f64().unwrap() > 0.0, "{body}");
    assert_eq!(body["hits"][0]["filepath"], "src/line.py", "{body}");
}

/// A server on the embedded defaults over one repository of `files` (path, text), its web UI off.
fn search_server(
    models: &std::path::Path,
    root: &std::path::Path,
    name: &str,
    files: &[(String, String)],
) -> TabbyServer {
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let repo = make_repo(root, name, &refs);
    TabbyServer::start_with_env(
        &format!(
            "[[repositories]]\ngit_url = \"file://{}\"\n",
            repo.display()
        ),
        &["--no-webserver"],
        &[("TABBY_MODEL_CACHE_ROOT", models.to_str().unwrap())],
    )
}

/// A `/v1beta/search` request for code in `filepath` (Python), every candidate let through:
/// each leg's 40, up to 100 returned.
fn search_in_file(query: &str, filepath: &str) -> serde_json::Value {
    json!({
        "query": query,
        "filepath": filepath,
        "language": "python",
        "params": {"min_embedding_score": -1.0, "min_bm25_score": -1.0,
                   "min_rrf_score": -1.0, "num_to_return": 100, "num_to_score": 40}
    })
}

/// `request`'s answer once the repository is indexed: at least `enough` hits (41 when both
/// legs must be full). Until the first index run ends the route answers 503, which is waited
/// out; any other status fails.
async fn search_when_indexed(
    server: &TabbyServer,
    request: &serde_json::Value,
    enough: usize,
) -> serde_json::Value {
    poll(
        "the repository to be indexed",
        std::time::Duration::from_secs(120),
        || async {
            let (status, body) = post_json(&server.url("/v1beta/search"), request).await;
            if status == 503 {
                return None; // not indexed yet
            }
            assert_eq!(status, 200, "{body}; stderr:\n{}", server.stderr());
            body["hits"]
                .as_array()
                .is_some_and(|h| h.len() >= enough)
                .then_some(body)
        },
    )
    .await
}

/// `/v1beta/search` on the embedded defaults finds a Rust function written inside a macro
/// call's body (`ffi_fn! { … }`, which tree-sitter leaves unparsed) as the definition it is:
/// first for a question about it, above twenty functions whose bodies use the same words.
#[tokio::test]
async fn a_function_inside_a_rust_macro_call_is_found_as_a_definition_on_the_embedded_defaults() {
    let dir = embedded_models_dir();
    let tmp = tempfile::tempdir().unwrap();
    let ffi = "use std::ptr;\n\nffi_fn! {\n    pub fn hyper_body_new() -> *mut hyper_body {\n        \
               Box::into_raw(Box::new(hyper_body(IncomingBody::empty())))\n    } ?= ptr::null_mut()\n}\n";
    let mut files: Vec<(String, String)> = vec![("src/ffi/body.rs".into(), ffi.into())];
    for i in 0..20 {
        files.push((
            format!("src/drain_{i}.rs"),
            format!(
                "pub fn drain_{i}(body: &mut Body) -> usize {{\n    body.clear();\n    \
                 Body::new_empty({i})\n}}\n"
            ),
        ));
    }
    let server = search_server(&dir, tmp.path(), "hyper", &files);
    let request = json!({
        "query": "Create a new empty body",
        "params": {"min_embedding_score": -1.0, "min_bm25_score": -1.0, "min_rrf_score": -1.0}
    });
    let body = search_when_indexed(&server, &request, 1).await;
    assert_eq!(body["hits"][0]["filepath"], "src/ffi/body.rs", "{body}");
}

/// `request`'s answer holds both legs' candidates (more than 40 hits) and none from `path`.
async fn full_answer_without(server: &TabbyServer, request: &serde_json::Value, path: &str) {
    let (status, body) = post_json(&server.url("/v1beta/search"), request).await;
    assert_eq!(status, 200, "{body}");
    let hits = body["hits"].as_array().unwrap();
    assert!(hits.len() > 40, "{body}");
    assert!(hits.iter().all(|h| h["filepath"] != path), "{body}");
}

/// `/v1beta/search` with a file on the embedded defaults: after `ledger.`, where the lines say
/// `ledger = Ledger(items)`, a code query finds the methods of `Ledger` in another file (the
/// members leg), where neither the words near the cursor nor the embedding reach them: sixty
/// near copies of those lines (`Ledger` named in each, defined in none) fill both legs. The
/// hits have no BM25 or embedding score; the same lines ending in no access do not find them.
#[tokio::test]
async fn search_after_an_access_finds_the_members_of_its_type_on_the_embedded_defaults() {
    let dir = embedded_models_dir();
    let tmp = tempfile::tempdir().unwrap();
    let ledger = "class Ledger:\n    def post_entry(self, account, amount):\n        \
                  return (account, amount)\n\n    def close_books(self, period):\n        \
                  return period\n";
    let window = "def monthly(items):\n    subtotal = sum(items)\n    count = len(items)\n    \
                  ledger = Ledger(items)\n    ";
    let mut files: Vec<(String, String)> = vec![
        ("src/ledger.py".into(), ledger.into()),
        (
            "src/report.py".into(),
            format!("{window}ledger.close_books(1)\n"),
        ),
    ];
    for i in 0..60 {
        files.push((
            format!("src/stats_{i}.py"),
            format!(
                "def monthly_{i}(items):\n    subtotal = sum(items)\n    count = len(items)\n    \
                 ledger = Ledger(items)\n    return subtotal / count\n"
            ),
        ));
    }
    let server = search_server(&dir, tmp.path(), "books", &files);
    let request = |tail: &str| search_in_file(&format!("{window}{tail}"), "src/report.py");
    let body = search_when_indexed(&server, &request("ledger."), 41).await;
    let hits = body["hits"].as_array().unwrap();
    let members: Vec<&serde_json::Value> = hits
        .iter()
        .filter(|h| h["filepath"] == "src/ledger.py")
        .collect();
    assert!(!members.is_empty(), "{body}");
    for hit in members {
        assert_eq!(hit["scores"]["bm25"].as_f64(), Some(0.0), "{hit}");
        assert_eq!(hit["scores"]["embedding"].as_f64(), Some(0.0), "{hit}");
    }
    assert!(hits.iter().all(|h| h["filepath"] != "src/report.py"));

    full_answer_without(&server, &request("return "), "src/ledger.py").await;
}

/// `/v1beta/search` with a file on the embedded defaults: a code query finds the definition of
/// a name the file uses far above the editor's lines (the names leg), where neither the words
/// near the cursor nor the embedding reach it: sixty near copies of those lines fill both
/// legs. The hit has no BM25 or embedding score; with a file the index does not hold, the
/// same lines do not find it.
#[tokio::test]
async fn search_in_a_file_finds_what_the_file_used_above_the_window_on_the_embedded_defaults() {
    let dir = embedded_models_dir();
    let tmp = tempfile::tempdir().unwrap();
    let mut checkout = String::from(
        "from src.pricing import apply_discount_rate\n\n\
         def discounted(price):\n    return apply_discount_rate(price, 0.1)\n\n",
    );
    for i in 0..15 {
        checkout.push_str(&format!("def filler_{i}(x):\n    return x + {i}\n\n"));
    }
    let window = "def total(items):\n    subtotal = sum(items)\n    count = len(items)\n    ";
    checkout.push_str(window);
    checkout.push_str("return subtotal / count\n");
    let mut files: Vec<(String, String)> = vec![
        (
            "src/pricing.py".into(),
            "def apply_discount_rate(price, rate):\n    return price * (1 - rate)\n".into(),
        ),
        ("src/checkout.py".into(), checkout),
    ];
    for i in 0..60 {
        files.push((
            format!("src/stats_{i}.py"),
            format!(
                "def total_{i}(items):\n    subtotal = sum(items)\n    count = len(items)\n    \
                 return subtotal / count\n"
            ),
        ));
    }
    let server = search_server(&dir, tmp.path(), "shop", &files);
    let request = |filepath: &str| search_in_file(&format!("x\n{window}"), filepath);
    let body = search_when_indexed(&server, &request("src/checkout.py"), 41).await;
    let hits = body["hits"].as_array().unwrap();
    let hit = hits
        .iter()
        .find(|h| h["filepath"] == "src/pricing.py")
        .unwrap_or_else(|| panic!("{body}"));
    assert_eq!(hit["scores"]["bm25"].as_f64(), Some(0.0), "{hit}");
    assert_eq!(hit["scores"]["embedding"].as_f64(), Some(0.0), "{hit}");
    assert!(hits.iter().all(|h| h["filepath"] != "src/checkout.py"));

    full_answer_without(&server, &request("src/new.py"), "src/pricing.py").await;
}
