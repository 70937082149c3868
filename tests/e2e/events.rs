//! `/v1/events` and the completion log end up as JSON lines in `events/YYYY-MM-DD.json`,
//! written out when the server shuts down on SIGTERM.

use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn events_and_completions_are_logged_and_flushed_on_shutdown() {
    let fake = FakeServer::start(Protocol::LlamaCpp, Script::default().pieces(["42"])).await;
    let mut server = TabbyServer::start(&llama_completion_config(&fake.url()));
    let response = client()
        .post(server.url("/v1/completions"))
        .header("user-agent", "tabby-agent/1.5.0 test")
        .header("x-tabby-user", "alice")
        .json(&json!({"language": "python", "segments": {"prefix": "x = ", "git_url": "https://example.com/r.git", "clipboard": "c"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let completion: serde_json::Value = response.json().await.unwrap();
    let id = completion["id"].as_str().unwrap().to_string();

    for (kind, query) in [
        ("view", ""),
        ("select", "?select_kind=line"),
        ("dismiss", ""),
    ] {
        let response = client()
            .post(server.url(&format!("/v1/events{query}")))
            .json(&json!({"type": kind, "completion_id": id, "choice_index": 0, "view_id": "v1", "elapsed": 120, "select_kind": "line"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{kind}");
        assert_eq!(response.text().await.unwrap(), "", "{kind}: empty body");
    }

    let status = server.terminate();
    assert!(
        status.success(),
        "exit status {status:?}; stderr:\n{}",
        server.stderr()
    );
    let events = read_events(server.root());
    assert_eq!(events.len(), 4, "{events:#?}");

    let logged = &events[0];
    assert_eq!(logged["user"], "alice");
    assert!(logged["ts"].as_u64().unwrap() > 1_700_000_000_000);
    let c = &logged["event"]["completion"];
    assert_eq!(c["completion_id"], id.as_str());
    assert_eq!(c["language"], "python");
    assert_eq!(c["prompt"], "<PRE> x =  <SUF>\n <MID>");
    assert_eq!(c["choices"], json!([{"index": 0, "text": "42"}]));
    assert_eq!(c["user_agent"], "tabby-agent/1.5.0 test");
    assert_eq!(
        c["segments"],
        json!({"prefix": "x = ", "git_url": "https://example.com/r.git", "clipboard": "c"})
    );

    assert_eq!(
        events[1]["event"],
        json!({"view": {"completion_id": id, "choice_index": 0, "view_id": "v1"}})
    );
    assert_eq!(events[1]["user"], serde_json::Value::Null);
    assert_eq!(
        events[2]["event"],
        json!({"select": {"completion_id": id, "choice_index": 0, "kind": "line", "view_id": "v1", "elapsed": 120}})
    );
    assert_eq!(
        events[3]["event"],
        json!({"dismiss": {"completion_id": id, "choice_index": 0, "view_id": "v1", "elapsed": 120}})
    );
}
