//! The real editor client: an unmodified `tabby-agent` 1.5.0 from npm (pinned in
//! `tests/agent/package-lock.json`) gets a completion from the server and its view/select events
//! are accepted and logged. `tests/agent/drive-agent.mjs` drives the agent through both of its
//! front ends (the LSP server and the JSON-lines protocol of the Vim plugin) and prints one JSON
//! line with what the agent surfaced.
//!
//! Needs Node.js 20+ and npm; the agent is installed into `tests/agent/node_modules` (git-ignored)
//! with `npm ci` on first use.

use std::{
    io::Read,
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::support::*;

/// What the fake model streams; tabby cuts it at Python's "\n\n" stop word.
const PIECES: [&str; 3] = [" a + b", "\n\n", "def other():"];
const EXPECTED_COMPLETION: &str = " a + b";
/// The document of `drive-agent.mjs`, cut at its cursor (the end of `    return`).
const PREFIX: &str = "def add(a, b):\n    return";
const SUFFIX: &str = "\n\n\nprint(add(1, 2))\n";
const GIT_REMOTE: &str = "https://github.com/example/demo.git";

fn agent_dir() -> PathBuf {
    tests_dir("agent")
}

fn need_node_20() {
    const INSTALL: &str =
        "the tabby-agent e2e test needs Node.js 20 (node and npm on PATH); install Node.js 20";
    let out = Command::new("node")
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("{INSTALL}: cannot run `node --version`: {e}"));
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let major: u32 = version
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    assert!(
        out.status.success() && major >= 20,
        "{INSTALL}: found node {version:?}"
    );
    let npm = Command::new("npm").arg("--version").output();
    assert!(
        npm.as_ref().is_ok_and(|o| o.status.success()),
        "{INSTALL}: cannot run `npm --version`: {npm:?}"
    );
}

/// Runs `node drive-agent.mjs <url>` (it bounds itself at 55 s; this kills it at 90 s).
fn drive_agent(server_url: &str) -> (bool, Value, String) {
    let mut child = Command::new("node")
        .arg(agent_dir().join("drive-agent.mjs"))
        .arg(server_url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn node");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait node") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("drive-agent.mjs did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = out_reader.join().unwrap();
    let stderr = err_reader.join().unwrap();
    let report = stdout
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str::<Value>(line).ok())
        .unwrap_or(Value::Null);
    (
        status.success(),
        report,
        format!("stdout:\n{stdout}\nstderr:\n{stderr}"),
    )
}

#[tokio::test]
async fn unmodified_tabby_agent_1_5_0_gets_a_completion_and_its_events_are_logged() {
    need_node_20();
    npm_ci(&agent_dir(), "node_modules/tabby-agent/dist/cli.js");

    let fake = FakeServer::start(Protocol::LlamaCpp, Script::default().pieces(PIECES)).await;
    let mut server = TabbyServer::start(&llama_completion_config(&fake.url()));
    let url = server.url("");

    // Blocking: the fake server and tabby keep running on their own tasks/processes.
    let (ok, report, output) = tokio::task::spawn_blocking(move || drive_agent(&url))
        .await
        .unwrap();
    assert!(
        ok && report["ok"] == true,
        "drive-agent failed: {}\n{output}\ntabby stderr:\n{}",
        report["error"],
        server.stderr()
    );
    assert_eq!(report["agent_version"], "1.5.0", "{report:#}");

    // What the agent surfaced to the editor, through both front ends.
    let lsp = &report["lsp"];
    let jsonl = &report["jsonl"];
    assert_eq!(
        lsp["server_info"],
        json!({"name": "tabby-agent", "version": "1.5.0"})
    );
    assert_eq!(lsp["ready"], true, "agent warned: {}", lsp["messages"]);
    assert_eq!(lsp["completion"], EXPECTED_COMPLETION, "{report:#}");
    assert_eq!(
        lsp["new_text"],
        format!("return{EXPECTED_COMPLETION}"),
        "{report:#}"
    );
    assert_eq!(jsonl["status"], "ready", "{report:#}");
    assert_eq!(jsonl["completion"], EXPECTED_COMPLETION, "{report:#}");
    assert_eq!(
        jsonl["events"],
        json!({"view": true, "select": true}),
        "{report:#}"
    );
    // The agent keeps /v1/health only when it has `model` and `device`.
    assert!(jsonl["server_health"]["device"].is_string(), "{report:#}");

    // The fake model got prompts built from the document (one per front end).
    let expected_prompt = format!("<PRE> {PREFIX} <SUF>{SUFFIX} <MID>");
    let prompts: Vec<Value> = fake
        .requests_to("/completion")
        .into_iter()
        .map(|r| r.body["prompt"].clone())
        .collect();
    assert_eq!(prompts, vec![json!(expected_prompt); 2]);

    let status = server.terminate();
    assert!(
        status.success(),
        "exit status {status:?}; stderr:\n{}",
        server.stderr()
    );
    let events = read_events(server.root());

    let logged_completion = |id: &Value| -> Value {
        events
            .iter()
            .find(|e| e["event"]["completion"]["completion_id"] == *id)
            .unwrap_or_else(|| panic!("no completion {id} in the events log: {events:#?}"))["event"]
            ["completion"]
            .clone()
    };
    let lsp_id = &lsp["completion_id"];
    let jsonl_id = &jsonl["completion_id"];
    assert!(
        lsp_id.as_str().is_some_and(|id| id.starts_with("cmpl-")),
        "{report:#}"
    );
    assert!(
        jsonl_id.as_str().is_some_and(|id| id.starts_with("cmpl-")),
        "{report:#}"
    );
    for (id, segments) in [
        (lsp_id, json!({"prefix": PREFIX, "suffix": SUFFIX})),
        (
            jsonl_id,
            json!({"prefix": PREFIX, "suffix": SUFFIX, "filepath": "add.py", "git_url": GIT_REMOTE}),
        ),
    ] {
        let c = logged_completion(id);
        assert_eq!(c["language"], "python", "{c:#}");
        assert_eq!(c["prompt"], expected_prompt.as_str(), "{c:#}");
        assert_eq!(
            c["choices"],
            json!([{"index": 0, "text": EXPECTED_COMPLETION}]),
            "{c:#}"
        );
        assert_eq!(c["segments"], segments, "{c:#}");
        // 1.5.0 sets no User-Agent of its own: what the server logs is Node's fetch default.
        let user_agent = c["user_agent"].as_str().unwrap_or_default();
        assert!(!user_agent.is_empty(), "{c:#}");
    }

    let view_id = format!("view-{}", jsonl_id.as_str().unwrap());
    let kinds: Vec<&Value> = events.iter().map(|e| &e["event"]).collect();
    assert!(
        kinds.contains(
            &&json!({"view": {"completion_id": jsonl_id, "choice_index": 0, "view_id": view_id}})
        ),
        "{events:#?}"
    );
    assert!(
        kinds.contains(&&json!({"select": {
            "completion_id": jsonl_id, "choice_index": 0, "kind": "line",
            "view_id": view_id, "elapsed": 1234
        }})),
        "{events:#?}"
    );
    assert_eq!(
        events.len(),
        4,
        "two completions, a view and a select: {events:#?}"
    );
}
