//! The MCP server at `/mcp`, driven by the official MCP Python SDK (PyPI `mcp`, pinned in
//! tests/mcp/requirements.txt) over Streamable HTTP and through the stdio bridge
//! (`tabby mcp`): initialize, list the tools, call each one on an indexed repository with the
//! default embedded embedding, and the attacker's arguments; with the enterprise layer, a
//! token is required and a private repository stays invisible to a non-member through every
//! tool.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use serde_json::{Value, json};

use crate::{
    ee_policy::{SHOP, VAULT, wait_until_searchable},
    ee_support::*,
    rag::wait_for_index,
    support::*,
};

/// The SDK's interpreter (`tests/mcp/.venv`).
fn mcp_python() -> PathBuf {
    venv_python("mcp")
}

/// Runs `calls` through the SDK; `stdio`: through `tabby mcp --endpoint URL`. The client runs
/// on a blocking thread: fake model servers share this test's runtime and must keep answering.
async fn drive(server: &TabbyServer, token: &str, calls: &Value, stdio: bool) -> Value {
    let url = server.url("/mcp");
    let url = url.as_str();
    let tmp = tempfile::tempdir().unwrap();
    let calls_file = tmp.path().join("calls.json");
    std::fs::write(&calls_file, calls.to_string()).unwrap();
    let mut cmd = Command::new(mcp_python());
    cmd.arg(tests_dir("mcp").join("drive.py"));
    if stdio {
        cmd.args(["stdio", tabby_bin(), url, token]);
    } else {
        cmd.args(["http", url, token]);
    }
    cmd.arg(&calls_file);
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .expect("run the MCP client");
    assert!(
        out.status.success(),
        "MCP client failed ({}):\n{}\n{}\nserver stderr (last 4 KB):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        {
            let log = server.stderr();
            log[log.len().saturating_sub(4096)..].to_string()
        }
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn shop_files() -> Vec<(&'static str, &'static str)> {
    vec![
        ("src/pricing.py", SHOP),
        (
            "src/cart.py",
            "from pricing import compute_discounted_price\n\n\ndef cart_total(items):\n    return sum(compute_discounted_price(i.price, 0.1) for i in items)\n",
        ),
        (
            "tests/test_cart.py",
            "from cart import cart_total\n\n\ndef test_cart_total():\n    assert cart_total([]) == 0\n",
        ),
    ]
}

/// A plain directory next to a secret it must never give away.
fn make_plain_dir(root: &Path) -> PathBuf {
    let dir = root.join("notes");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("util.py"),
        "def shout(text):\n    return text.upper()\n",
    )
    .unwrap();
    std::fs::write(dir.join(".env"), "API_KEY=hidden-dotenv-value\n").unwrap();
    std::fs::write(root.join("secret.txt"), "outside-the-repository\n").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(root.join("secret.txt"), dir.join("link.py")).unwrap();
    dir
}

fn result(out: &Value, i: usize) -> &Value {
    &out["results"][i]
}

fn rpc_error(out: &Value, i: usize) -> i64 {
    result(out, i)["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("call {i} is not a JSON-RPC error: {}", result(out, i)))
}

#[tokio::test]
async fn mcp_tools_over_streamable_http_and_the_stdio_bridge() {
    let tmp = tempfile::tempdir().unwrap();
    // A vendored copy that search leaves out unless asked (`include_generated`).
    let mut files = shop_files();
    files.push((
        "vendor/discounts/core.py",
        "def vendored_discount(price, rate):\n    \"\"\"Price after a percentage discount (a vendored copy).\"\"\"\n    return price * (1 - rate)\n",
    ));
    let shop = make_repo(tmp.path(), "shop", &files);
    let notes = make_plain_dir(tmp.path());
    let models = embedded_models_dir();
    let config = format!(
        "[[repositories]]\ngit_url = \"file://{}\"\n\n[[repositories]]\ngit_url = \"file://{}\"\n",
        shop.display(),
        notes.display()
    );
    let server = TabbyServer::start_with_env(
        &config,
        &["--no-webserver"],
        &[("TABBY_MODEL_CACHE_ROOT", models.to_str().unwrap())],
    );
    wait_for_index(&server, &json!({"query": "compute_discounted_price"})).await;
    wait_for_index(&server, &json!({"query": "shout text upper"})).await;
    let commit = git(&shop, &["rev-parse", "HEAD"]);
    let calls = json!([
        {"name": "list_repositories"},
        {"name": "search_code", "arguments": {"query": "price after a percentage discount", "repository": "shop"}},
        {"name": "read_file", "arguments": {"repository": "shop", "path": "src/cart.py", "start_line": 4}},
        {"name": "list_files", "arguments": {"repository": "shop", "glob": "**/test_*.py"}},
        {"name": "grep", "arguments": {"pattern": "cart_total(", "literal": true}},
        {"name": "find_definition", "arguments": {"symbol": "compute_discounted_price"}},
        {"name": "find_references", "arguments": {"symbol": "compute_discounted_price"}},
        {"name": "find_definition", "arguments": {"symbol": "no_such_function_anywhere"}},
        // 8.. the attacker's arguments
        {"name": "read_file", "arguments": {"repository": "shop", "path": "../secret.txt"}},
        {"name": "read_file", "arguments": {"repository": "shop", "path": "/etc/passwd"}},
        {"name": "read_file", "arguments": {"repository": "notes", "path": ".env"}},
        {"name": "read_file", "arguments": {"repository": "notes", "path": "link.py"}},
        {"name": "read_file", "arguments": {"repository": "elsewhere", "path": "a.py"}},
        {"name": "grep", "arguments": {"pattern": "x", "limit": 1_000_000}},
        {"name": "grep", "arguments": {"pattern": "(unclosed"}},
        {"name": "search_code", "arguments": {"query": 5}},
        {"name": "list_files", "arguments": {"repository": "shop", "glob": "[z-a]"}},
        {"name": "read_file", "arguments": {"repository": "shop", "path": "src/cart.py", "ref": "--upload-pack=touch /tmp/pwned"}},
        {"name": "no_such_tool"},
        {"name": "read_file", "arguments": {"repository": "shop", "path": "src/cart.py", "extra": true}},
        {"name": "grep", "arguments": {"pattern": "API_KEY|outside-the-repository"}},
        // 21
        {"name": "search_code", "arguments": {"query": "price after a percentage discount", "repository": "shop", "include_generated": true}},
    ]);
    let url = server.url("/mcp");
    let http = drive(&server, "", &calls, false).await;
    let stdio = drive(&server, "", &calls, true).await;
    for out in [&http, &stdio] {
        assert_eq!(out["server"], "tabby");
        let tools: Vec<&str> = out["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            tools,
            [
                "list_repositories",
                "search_code",
                "search_docs",
                "grep",
                "read_file",
                "list_files",
                "find_definition",
                "get_context",
                "find_references"
            ]
        );
        assert!(
            out["tools"]
                .as_array()
                .unwrap()
                .iter()
                .all(|t| t["read_only"] == true)
        );

        let repos = &result(out, 0)["structured"]["repositories"];
        let names: Vec<&str> = repos
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["shop", "notes"], "{}", result(out, 0));

        let hits = &result(out, 1)["structured"]["hits"];
        assert_eq!(hits[0]["path"], "src/pricing.py", "{}", result(out, 1));
        assert_eq!(hits[0]["commit"], commit.as_str());
        assert_eq!(hits[0]["ref"], "main");
        assert_eq!(hits[0]["in_test"], false);
        assert_eq!(
            hits[0]["symbols"][0],
            json!(["function", "compute_discounted_price"]),
            "{}",
            result(out, 1)
        );
        assert_eq!(hits[0]["byte_range"][0], 0);
        assert_eq!(hits[0]["start_line"], 1);
        assert!(
            hits[0]["text"]
                .as_str()
                .unwrap()
                .contains("def compute_discounted_price")
        );

        assert!(
            hits.as_array()
                .unwrap()
                .iter()
                .all(|h| h["origin"] == "source"),
            "{}",
            result(out, 1)
        );
        let index = &result(out, 1)["structured"]["index"];
        assert_eq!(index["chunker"], "syntax-nodes/v3", "{index}");
        assert!(index["schema"].as_u64().unwrap() >= 9, "{index}");
        assert!(index["embedding_dim"].as_u64().unwrap() > 0, "{index}");
        let all = &result(out, 21)["structured"]["hits"];
        assert!(
            all.as_array()
                .unwrap()
                .iter()
                .any(|h| h["path"] == "vendor/discounts/core.py" && h["origin"] == "vendored"),
            "{}",
            result(out, 21)
        );

        let read = &result(out, 2)["structured"];
        assert_eq!(read["start_line"], 4, "{read}");
        assert_eq!(read["end_line"], 5);
        assert_eq!(read["total_lines"], 5);
        assert_eq!(read["commit"], commit.as_str());
        assert!(
            result(out, 2)["text"]
                .as_str()
                .unwrap()
                .contains("     4\tdef cart_total(items):")
        );

        assert_eq!(
            result(out, 3)["structured"]["files"],
            json!(["tests/test_cart.py"])
        );

        let greps: Vec<(String, u64)> = result(out, 4)["structured"]["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["path"].as_str().unwrap().to_string(),
                    m["line"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            greps,
            [
                ("src/cart.py".to_string(), 4),
                ("tests/test_cart.py".to_string(), 4),
                ("tests/test_cart.py".to_string(), 5)
            ],
            "{}",
            result(out, 4)
        );

        let defs = &result(out, 5)["structured"]["definitions"];
        assert_eq!(defs.as_array().unwrap().len(), 1, "{defs}");
        assert_eq!(defs[0]["path"], "src/pricing.py");
        assert_eq!(defs[0]["kind"], "function");
        assert_eq!(
            (defs[0]["start_line"].clone(), defs[0]["end_line"].clone()),
            (json!(1), json!(3))
        );

        let refs: Vec<(String, u64)> = result(out, 6)["structured"]["references"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["path"].as_str().unwrap().to_string(),
                    m["line"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            refs,
            [
                ("src/cart.py".to_string(), 1),
                ("src/cart.py".to_string(), 5)
            ],
            "the definition itself is not a reference: {}",
            result(out, 6)
        );
        assert_eq!(result(out, 7)["structured"]["found"], false);
        assert!(
            result(out, 7)["text"]
                .as_str()
                .unwrap()
                .contains("no definition")
        );

        // Malformed arguments are JSON-RPC errors (invalid params), never a crash.
        for i in [8, 9, 13, 14, 15, 16, 18, 19] {
            assert_eq!(rpc_error(out, i), -32602, "call {i}: {}", result(out, i));
        }
        // Well-formed requests for what the caller cannot read are tool errors that give
        // nothing away.
        for i in [10, 11, 12, 17] {
            assert_eq!(
                result(out, i)["is_error"],
                true,
                "call {i}: {}",
                result(out, i)
            );
        }
        let everything = out.to_string();
        for secret in ["hidden-dotenv-value", "outside-the-repository\\n"] {
            assert!(!everything.contains(secret), "{secret} leaked");
        }
        assert_eq!(result(out, 20)["structured"]["matches"], json!([]));
    }
    assert!(!Path::new("/tmp/pwned").exists());
    assert_eq!(
        http["results"], stdio["results"],
        "both transports answer alike"
    );

    // A browser page on another origin is refused; so is a DNS-rebinding Host in open mode.
    let client = client();
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    for (header, value) in [("origin", "https://evil.example"), ("host", "evil.example")] {
        let response = client
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .header(header, value)
            .json(&list)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 403, "{header}: {value}");
    }
}

#[tokio::test]
async fn ee_mcp_needs_a_token_and_keeps_private_repositories_private() {
    let tmp = tempfile::tempdir().unwrap();
    let shop = make_repo(tmp.path(), "shop", &shop_files());
    let vault = make_repo(tmp.path(), "vault", &[("src/reactor.py", VAULT)]);
    let embedder = FakeServer::start(Protocol::OpenAi, Script::default().embedding_dim(16)).await;
    let config = format!(
        "[[repositories]]\ngit_url = \"file://{}\"\n\n[[repositories]]\ngit_url = \"file://{}\"\n\n{}",
        shop.display(),
        vault.display(),
        openai_embedding_config(&embedder.url(), "fake-embed"),
    );
    let server = TabbyServer::start_ee(&config, &[]);
    let admin = register_owner(&server, "admin@example.com").await;
    let member = invite_and_register(&server, &admin, "member@example.com").await;
    let outsider = invite_and_register(&server, &admin, "outsider@example.com").await;
    let a = admin.access_token.as_str();
    wait_until_searchable(
        &server,
        a,
        json!({"query": "reactor_core_temperature SCRAM_THRESHOLD_KELVIN"}),
        "src/reactor.py",
    )
    .await;
    let vault_id = gql_ok(
        &server,
        Some(a),
        "{ repositoryList { name sourceId } }",
        json!({}),
    )
    .await["repositoryList"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "vault")
        .unwrap()["sourceId"]
        .as_str()
        .unwrap()
        .to_string();
    restrict_to_new_group(&server, a, "vault-team", &member, &vault_id).await;

    let url = server.url("/mcp");
    // No token, or a wrong one: 401 before any MCP processing.
    let client = client();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    for auth in [None, Some("Bearer auth_not_a_real_token")] {
        let mut request = client
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .json(&init);
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        assert_eq!(
            request.send().await.unwrap().status().as_u16(),
            401,
            "{auth:?}"
        );
    }

    let probes = json!([
        {"name": "list_repositories"},
        {"name": "search_code", "arguments": {"query": "reactor core temperature SCRAM_THRESHOLD_KELVIN"}},
        {"name": "grep", "arguments": {"pattern": "SCRAM_THRESHOLD_KELVIN"}},
        {"name": "find_definition", "arguments": {"symbol": "reactor_core_temperature"}},
        {"name": "find_references", "arguments": {"symbol": "SCRAM_THRESHOLD_KELVIN"}},
        {"name": "read_file", "arguments": {"repository": "vault", "path": "src/reactor.py"}},
        {"name": "read_file", "arguments": {"repository": vault_id, "path": "src/reactor.py"}},
        {"name": "list_files", "arguments": {"repository": format!("file://{}", vault.display())}},
        {"name": "search_code", "arguments": {"query": "reactor", "repository": "vault"}},
        {"name": "get_context", "arguments": {"task": "what does reactor_core_temperature return at SCRAM_THRESHOLD_KELVIN"}},
    ]);
    let outside = drive(&server, &outsider.auth_token, &probes, false).await;
    let names: Vec<&str> = result(&outside, 0)["structured"]["repositories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["shop"]);
    for i in 5..9 {
        assert_eq!(
            result(&outside, i)["is_error"],
            true,
            "call {i}: {}",
            result(&outside, i)
        );
    }
    let everything = outside.to_string();
    for leak in ["SCRAM_THRESHOLD_KELVIN = 1234", "reactor.py", "vault-team"] {
        assert!(
            !everything.contains(leak),
            "{leak} reached a non-member: {everything}"
        );
    }
    assert_eq!(result(&outside, 2)["structured"]["matches"], json!([]));
    assert_eq!(result(&outside, 3)["structured"]["found"], false);
    assert!(
        result(&outside, 9)["structured"]["gaps"]
            .as_array()
            .unwrap()
            .contains(&json!({"kind": "undefined_symbol", "symbol": "reactor_core_temperature"})),
        "to a non-member the private definition does not exist: {}",
        result(&outside, 9)
    );

    // The member reads the vault through the same tools, over the stdio bridge too.
    for stdio in [false, true] {
        let inside = drive(&server, &member.auth_token, &probes, stdio).await;
        assert_eq!(
            result(&inside, 0)["structured"]["repositories"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        assert_eq!(
            result(&inside, 2)["structured"]["matches"][0]["path"],
            "src/reactor.py"
        );
        assert_eq!(
            result(&inside, 3)["structured"]["definitions"][0]["path"],
            "src/reactor.py"
        );
        for i in 5..8 {
            assert_eq!(
                result(&inside, i)["is_error"],
                false,
                "call {i}: {}",
                result(&inside, i)
            );
        }
        assert!(
            result(&inside, 5)["text"]
                .as_str()
                .unwrap()
                .contains("SCRAM_THRESHOLD_KELVIN = 1234")
        );
        assert_eq!(
            result(&inside, 9)["structured"]["items"][0]["path"],
            "src/reactor.py",
            "{}",
            result(&inside, 9)
        );
    }
    // The bridge turns a refused token into a JSON-RPC error, not a hang or a crash.
    let out = Command::new(mcp_python())
        .arg(tests_dir("mcp").join("drive.py"))
        .args(["stdio", tabby_bin(), &url, "auth_not_a_real_token"])
        .arg({
            let f = tmp.path().join("none.json");
            std::fs::write(&f, "[]").unwrap();
            f
        })
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("401"), "{stderr}");
}

/// The evidence pack for a task on a multi-file repository, through `POST /v1beta/context` and
/// the MCP tool `get_context`: the definition the task is about (search), its caller (reference
/// edge, merged with the caller's own search hit), its test (by use and by file name), a gap for
/// a symbol defined nowhere, and the budget held.
#[tokio::test]
async fn evidence_pack_names_the_definition_its_callers_and_its_test() {
    let tmp = tempfile::tempdir().unwrap();
    let mut files = shop_files();
    files.push((
        "tests/test_pricing.py",
        "from pricing import compute_discounted_price\n\n\ndef test_discount_rounds():\n    assert compute_discounted_price(10, 0.333) == 6.67\n",
    ));
    files.push((
        "src/checkout.py",
        "from cart import cart_total\n\n\ndef checkout(items, wallet):\n    wallet.charge(cart_total(items))\n",
    ));
    let shop = make_repo(tmp.path(), "shop", &files);
    let models = embedded_models_dir();
    let config = format!(
        "[[repositories]]\ngit_url = \"file://{}\"\n",
        shop.display()
    );
    let server = TabbyServer::start_with_env(
        &config,
        &["--no-webserver"],
        &[("TABBY_MODEL_CACHE_ROOT", models.to_str().unwrap())],
    );
    wait_for_index(&server, &json!({"query": "compute_discounted_price"})).await;
    let task =
        "How is the discounted price computed and rounded? Does apply_coupon_code change it?";
    let (status, pack) = post_json(
        &server.url("/v1beta/context"),
        &json!({"task": task, "budget_chars": 4000}),
    )
    .await;
    assert_eq!(status, 200, "{pack}");
    let items = pack["items"].as_array().unwrap();
    let find = |path: &str| {
        items
            .iter()
            .find(|i| i["path"] == path)
            .unwrap_or_else(|| panic!("{path} missing from the pack: {pack}"))
    };
    let edges = |item: &Value| -> Vec<String> {
        item["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["edge"].as_str().unwrap().to_string())
            .collect()
    };
    let definition = find("src/pricing.py");
    assert_eq!(
        items[0]["path"], "src/pricing.py",
        "the definition leads: {pack}"
    );
    assert!(edges(definition).contains(&"search".to_string()));
    assert_eq!(
        definition["symbols"][0],
        json!(["function", "compute_discounted_price"])
    );
    assert_eq!(
        definition["commit"],
        git(&shop, &["rev-parse", "HEAD"]).as_str()
    );
    assert_eq!(definition["ref"], "main");
    assert_eq!(definition["in_test"], false);
    assert_eq!(find("tests/test_pricing.py")["in_test"], true);
    let search = &definition["reasons"][0];
    for word in ["discounted", "price", "rounded"] {
        assert!(
            search["matched_words"]
                .as_array()
                .unwrap()
                .iter()
                .any(|w| w == word),
            "{word}: {search}"
        );
    }
    let caller = find("src/cart.py");
    let reference = caller["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["edge"] == "reference")
        .unwrap_or_else(|| panic!("no reference edge to the caller: {caller}"));
    assert_eq!(reference["symbol"], "compute_discounted_price");
    assert_eq!(reference["from"], "shop:src/pricing.py:1-3");
    assert!(
        caller["excerpt"]
            .as_str()
            .unwrap()
            .contains("def cart_total")
    );
    let test = find("tests/test_pricing.py");
    assert!(edges(test).contains(&"test".to_string()), "{test}");
    // One item per file here: overlapping pieces were merged, their reasons kept.
    let mut paths: Vec<&str> = items.iter().map(|i| i["path"].as_str().unwrap()).collect();
    let count = paths.len();
    paths.dedup();
    assert_eq!(paths.len(), count, "{pack}");
    assert!(pack["used_chars"].as_u64().unwrap() <= 4000);
    assert!(
        pack["gaps"]
            .as_array()
            .unwrap()
            .contains(&json!({"kind": "undefined_symbol", "symbol": "apply_coupon_code"})),
        "{pack}"
    );

    // A small budget keeps the best items and says how many it left out.
    let (_, small) = post_json(
        &server.url("/v1beta/context"),
        &json!({"task": task, "budget_chars": 500}),
    )
    .await;
    assert!(small["used_chars"].as_u64().unwrap() <= 500, "{small}");
    assert!(small["omitted"].as_u64().unwrap() > 0, "{small}");
    assert_eq!(small["items"][0]["path"], "src/pricing.py", "{small}");

    // The same pack through MCP, and the attacker's arguments.
    let out = drive(
        &server,
        "",
        &json!([
            {"name": "get_context", "arguments": {"task": task, "budget_chars": 4000}},
            {"name": "get_context", "arguments": {"task": task, "budget_chars": 100_000_000}},
            {"name": "get_context", "arguments": {"task": "x", "repository": "shop", "paths": ["../../etc/passwd"]}},
            {"name": "get_context", "arguments": {"task": "x", "symbols": ["a; rm -rf /"]}},
            {"name": "get_context", "arguments": {"task": "x", "repository": "shop", "paths": ["src/checkout.py"], "symbols": ["cart_total"]}},
            {"name": "get_context", "arguments": {"task": "", "repository": "shop", "changed_files": ["src/pricing.py"]}},
            {"name": "get_context", "arguments": {"task": "", "repository": "shop", "changed_files": ["../secret.txt"]}},
            {"name": "get_context", "arguments": {"task": "", "changed_files": ["src/pricing.py"]}},
            {"name": "get_context", "arguments": {"task": "x", "depth": 9}},
        ]),
        false,
    )
    .await;
    let via_mcp = &result(&out, 0)["structured"];
    assert_eq!(via_mcp["items"], pack["items"]);
    assert!(
        result(&out, 0)["text"]
            .as_str()
            .unwrap()
            .contains("\"edge\":\"reference\"")
    );
    for i in 1..4 {
        assert_eq!(rpc_error(&out, i), -32602, "call {i}: {}", result(&out, i));
    }
    let requested = &result(&out, 4)["structured"]["items"];
    assert_eq!(requested[0]["path"], "src/checkout.py", "{requested}");
    assert!(
        requested
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["path"] == "src/cart.py" && i["symbols"][0][1] == "cart_total"),
        "{requested}"
    );
    assert!(
        requested
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["origin"] == "source"),
        "each item names its origin: {requested}"
    );

    // A changed file: first, with the files that import it and its test, each saying so.
    let changed = &result(&out, 5)["structured"];
    assert_eq!(changed["items"][0]["path"], "src/pricing.py", "{changed}");
    assert_eq!(changed["items"][0]["reasons"][0]["edge"], "changed");
    let edge_of = |path: &str, edge: &str| {
        changed["items"].as_array().unwrap().iter().any(|i| {
            i["path"] == path
                && i["reasons"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r["edge"] == edge)
        })
    };
    assert!(edge_of("src/cart.py", "dependent"), "{changed}");
    assert!(edge_of("tests/test_pricing.py", "test"), "{changed}");
    for i in 6..9 {
        assert_eq!(rpc_error(&out, i), -32602, "call {i}: {}", result(&out, i));
    }

    // REST validation.
    for body in [
        json!({"task": ""}),
        json!({"task": "x", "changed_files": ["src/cart.py"]}),
        json!({"task": "x", "depth": 3}),
        json!({"task": "x", "source_id": "config:0", "changed_files": ["/etc/passwd"]}),
        json!({"task": "x", "max_items": 0}),
        json!({"task": "x", "paths": ["src/cart.py"]}),
        json!({"task": "x", "unknown": 1}),
    ] {
        let (status, answer) = post_json(&server.url("/v1beta/context"), &body).await;
        assert_eq!(status, 422, "{body}: {answer}");
    }
    let (status, _) = post_json(
        &server.url("/v1beta/context"),
        &json!({"task": "x", "source_id": "config:nope"}),
    )
    .await;
    assert_eq!(status, 404);
}

/// `search_docs` over ingested documents: a source granted to a group is searchable by its
/// members and invisible to everyone else; bad arguments are JSON-RPC errors.
#[tokio::test]
async fn ee_mcp_search_docs_keeps_restricted_sources_private() {
    let server = TabbyServer::start_ee("", &[]);
    let admin = register_owner(&server, "admin@example.com").await;
    let member = invite_and_register(&server, &admin, "member@example.com").await;
    let outsider = invite_and_register(&server, &admin, "outsider@example.com").await;
    let a = admin.access_token.as_str();
    let registration =
        gql_ok(&server, Some(a), "{ registrationToken }", json!({})).await["registrationToken"]
            .as_str()
            .unwrap()
            .to_string();
    for (source, id, title, body) in [
        (
            "handbook",
            "onboarding",
            "Onboarding guide",
            "Every newcomer learns the pelican protocol on the first day.",
        ),
        (
            "vault",
            "incident-7",
            "Incident seven",
            "The pelican protocol failed when the reactor overheated.",
        ),
    ] {
        let (status, answer, _) = rest(
            &server,
            "POST",
            "/v1beta/ingestion",
            Some(&bearer(&registration)),
            Some(&json!({"source": source, "id": id, "title": title, "body": body})),
        )
        .await;
        assert_eq!(status, 202, "{answer}");
    }
    restrict_to_new_group(&server, a, "vault-team", &member, "ingested:vault").await;
    let probes = json!([
        {"name": "search_docs", "arguments": {"query": "pelican protocol"}},
        {"name": "search_docs", "arguments": {"query": "pelican protocol", "kind": "commit"}},
        {"name": "search_docs", "arguments": {"query": "pelican", "limit": 1000}},
        {"name": "search_docs", "arguments": {"query": 5}},
        {"name": "search_docs", "arguments": {"query": "   "}},
    ]);
    // Indexed by the ingestion schedule (every 10 s).
    let titles = |out: &Value| -> Vec<String> {
        let mut t: Vec<String> = result(out, 0)["structured"]["documents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["title"].as_str().unwrap().to_string())
            .collect();
        t.sort();
        t
    };
    let inside = poll(
        "both documents to be searchable",
        Duration::from_secs(40),
        || async {
            let out = drive(&server, &member.auth_token, &probes, false).await;
            (titles(&out).len() == 2).then_some(out)
        },
    )
    .await;
    assert_eq!(titles(&inside), ["Incident seven", "Onboarding guide"]);
    let doc = &result(&inside, 0)["structured"]["documents"][0];
    assert_eq!(doc["kind"], "ingested");
    assert!(
        doc["excerpt"].as_str().unwrap().contains("pelican"),
        "{doc}"
    );
    assert_eq!(result(&inside, 1)["structured"]["documents"], json!([]));
    for i in [2, 3, 4] {
        assert_eq!(rpc_error(&inside, i), -32602, "call {i}: {inside}");
    }
    let outside = drive(&server, &outsider.auth_token, &probes, false).await;
    assert_eq!(titles(&outside), ["Onboarding guide"]);
    assert!(
        !outside.to_string().contains("reactor"),
        "a restricted document reached a non-member: {outside}"
    );
    // The admin reads everything.
    let all = drive(&server, &admin.auth_token, &probes, false).await;
    assert_eq!(titles(&all).len(), 2);
}
