//! The web UI's transport: an Answer Engine thread run through `/subscriptions` by the
//! `graphql-ws` npm client (graphql-transport-ws protocol, token in `connectionParams`), pinned
//! in `tests/graphql-ws/package-lock.json` and driven by `tests/graphql-ws/run-thread.mjs`.
//!
//! Needs Node.js 20+ and npm; the client is installed into `tests/graphql-ws/node_modules`
//! (git-ignored) with `npm ci` on first use.

use std::{process::Command, time::Duration};

use serde_json::{Value, json};

use crate::{ee_policy::SHOP, ee_support::*, support::*};

const ANSWER: [&str; 3] = ["Discounts are ", "applied in ", "compute_discounted_price."];

#[tokio::test]
async fn ee_graphql_ws_npm_client_runs_a_thread() {
    npm_ci(
        &tests_dir("graphql-ws"),
        "node_modules/graphql-ws/package.json",
    );
    let work = tempfile::tempdir().unwrap();
    let repo = make_repo(work.path(), "shop", &[("src/pricing.py", SHOP)]);

    let chat = FakeServer::start(
        Protocol::OpenAi,
        Script::default()
            .when("Reply with SNIPPET", ["SNIPPET"])
            .pieces(ANSWER),
    )
    .await;
    let config = format!(
        "{}[[repositories]]\ngit_url = \"file://{}\"\n",
        openai_chat_config(&chat.url(), "fake"),
        repo.display()
    );
    let server = TabbyServer::start_ee(&config, &[]);
    let owner = register_owner(&server, "owner@example.com").await;

    // Wait until the repository is searchable.
    let git_url = format!("file://{}", repo.display());
    poll(
        "the repository to be indexed",
        Duration::from_secs(60),
        || {
            let server = &server;
            let token = owner.auth_token.clone();
            async move {
                let (status, body, _) = rest(
                    server,
                    "POST",
                    "/v1beta/search",
                    Some(&bearer(&token)),
                    Some(&json!({"query": "discounted price"})),
                )
                .await;
                (status == 200 && body["hits"].as_array().is_some_and(|h| !h.is_empty()))
                    .then_some(())
            }
        },
    )
    .await;

    let question = "How is the discounted price computed?";
    let out = tokio::task::spawn_blocking({
        let url = server.url("");
        let token = owner.auth_token.clone();
        let git_url = git_url.clone();
        move || {
            Command::new("node")
                .arg(tests_dir("graphql-ws").join("run-thread.mjs"))
                .args([url.as_str(), token.as_str(), question, git_url.as_str()])
                .output()
                .expect("run node")
        }
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "graphql-ws client failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.stderr()
    );
    let result: Value = serde_json::from_slice(&out.stdout).expect("client prints JSON");
    let items = result["items"].as_array().unwrap();
    let kinds: Vec<&str> = items
        .iter()
        .map(|i| i["__typename"].as_str().unwrap())
        .collect();
    let deltas = kinds
        .iter()
        .filter(|k| **k == "ThreadAssistantMessageContentDelta")
        .count();
    let mut expected = vec![
        "ThreadCreated",
        "ThreadUserMessageCreated",
        "ThreadAssistantMessageCreated",
        "ThreadAssistantMessageReadingCode",
        "ThreadAssistantMessageAttachmentsCode",
    ];
    expected.extend(std::iter::repeat_n(
        "ThreadAssistantMessageContentDelta",
        deltas,
    ));
    expected.push("ThreadAssistantMessageCompleted");
    assert_eq!(kinds, expected, "{result}");
    assert_eq!(items[3]["snippet"], true);
    assert_eq!(items[3]["fileList"], false);
    let hits = items[4]["hits"].as_array().unwrap();
    assert!(
        hits.iter()
            .any(|h| h["code"]["filepath"] == "src/pricing.py"
                && h["code"]["content"]
                    .as_str()
                    .unwrap()
                    .contains("def compute_discounted_price")),
        "{result}"
    );
    let answer: String = items.iter().filter_map(|i| i["delta"].as_str()).collect();
    assert_eq!(answer, ANSWER.concat());

    // The answer the model was asked for carried the retrieved code as a citation.
    let asked = chat
        .requests_to("/v1/chat/completions")
        .into_iter()
        .map(|r| r.body.to_string())
        .find(|b| b.contains("[[citation:1]]"))
        .expect("an answer request with citations");
    assert!(asked.contains("compute_discounted_price"), "{asked}");
}
