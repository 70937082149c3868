//! Usage statistics from real editor traffic: completions and their view/select/dismiss events
//! arrive over `/v1`, land in `user_completions` / `user_events`, and come back through
//! `dailyStats`, `dailyStatsInPastYear` and `userEvents` — per user, with non-admins limited to
//! their own numbers.

use std::time::Duration;

use serde_json::{Value, json};

use crate::{ee_support::*, support::*};

async fn complete(server: &TabbyServer, token: &str, language: &str) -> String {
    let (status, body, _) = rest(
        server,
        "POST",
        "/v1/completions",
        Some(&bearer(token)),
        Some(&json!({"language": language, "segments": {"prefix": "def f(", "suffix": ""}})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["id"].as_str().unwrap().to_string()
}

async fn event(server: &TabbyServer, token: &str, kind: &str, completion_id: &str) {
    let (status, body, _) = rest(
        server,
        "POST",
        "/v1/events",
        Some(&bearer(token)),
        Some(&json!({"type": kind, "completion_id": completion_id, "choice_index": 0})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

const STATS: &str = "query($s: DateTime!, $e: DateTime!, $u: [ID!], $l: [Language!]) {
    dailyStats(start: $s, end: $e, users: $u, languages: $l) { language completions views selects }
}";

fn totals(stats: &Value) -> (i64, i64, i64) {
    stats["dailyStats"]
        .as_array()
        .unwrap()
        .iter()
        .fold((0, 0, 0), |(c, v, s), row| {
            (
                c + row["completions"].as_i64().unwrap(),
                v + row["views"].as_i64().unwrap(),
                s + row["selects"].as_i64().unwrap(),
            )
        })
}

#[tokio::test]
async fn ee_completions_and_events_become_daily_stats() {
    let model = FakeServer::start(Protocol::LlamaCpp, Script::default().pieces(["x):"])).await;
    let server = TabbyServer::start_ee(&llama_completion_config(&model.url()), &[]);
    let admin = register_owner(&server, "admin@example.com").await;
    let dev = invite_and_register(&server, &admin, "dev@example.com").await;

    // The developer: two python completions (one viewed and selected), one rust (dismissed).
    let first = complete(&server, &dev.auth_token, "python").await;
    event(&server, &dev.auth_token, "view", &first).await;
    event(&server, &dev.auth_token, "select", &first).await;
    complete(&server, &dev.auth_token, "python").await;
    let third = complete(&server, &dev.auth_token, "rust").await;
    event(&server, &dev.auth_token, "dismiss", &third).await;
    // The admin: one go completion.
    complete(&server, &admin.auth_token, "go").await;

    let range = json!({
        "s": (chrono::Utc::now() - chrono::Duration::days(1)).to_rfc3339(),
        "e": (chrono::Utc::now() + chrono::Duration::days(1)).to_rfc3339(),
    });
    let with = |extra: Value| {
        let mut vars = range.clone();
        for (k, v) in extra.as_object().unwrap() {
            vars[k] = v.clone();
        }
        vars
    };
    // Rows are written by a background task: poll until all four completions are counted.
    let all = poll(
        "four completions in dailyStats",
        Duration::from_secs(20),
        || {
            let vars = range.clone();
            let server = &server;
            let token = admin.access_token.clone();
            async move {
                let stats = gql_ok(server, Some(&token), STATS, vars).await;
                (totals(&stats) == (4, 1, 1)).then_some(stats)
            }
        },
    )
    .await;
    let languages: Vec<&str> = all["dailyStats"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["language"].as_str().unwrap())
        .collect();
    for language in ["PYTHON", "RUST", "GO"] {
        assert!(languages.contains(&language), "{all}");
    }

    // Filters: one user, one language.
    let dev_only = gql_ok(
        &server,
        Some(&admin.access_token),
        STATS,
        with(json!({"u": [dev.id]})),
    )
    .await;
    assert_eq!(totals(&dev_only), (3, 1, 1), "{dev_only}");
    let python = gql_ok(
        &server,
        Some(&admin.access_token),
        STATS,
        with(json!({"l": ["PYTHON"]})),
    )
    .await;
    assert_eq!(totals(&python), (2, 1, 1), "{python}");

    // A non-admin sees their own numbers only; asking for someone else's is FORBIDDEN.
    let own = gql_ok(&server, Some(&dev.access_token), STATS, range.clone()).await;
    assert_eq!(totals(&own), (3, 1, 1), "{own}");
    let error = gql_err(
        &server,
        Some(&dev.access_token),
        STATS,
        with(json!({"u": [admin.id]})),
    )
    .await;
    assert_eq!(code(&error), Some("FORBIDDEN"), "{error}");
    let year = gql_ok(
        &server,
        Some(&dev.access_token),
        "{ dailyStatsInPastYear { completions } }",
        json!({}),
    )
    .await;
    let year_total: i64 = year["dailyStatsInPastYear"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["completions"].as_i64().unwrap())
        .sum();
    assert_eq!(year_total, 3, "{year}");

    // userEvents (admin): the developer's completion, view, select and dismiss events.
    let events = gql_ok(
        &server,
        Some(&admin.access_token),
        "query($s: DateTime!, $e: DateTime!, $u: [ID!]) {
            userEvents(start: $s, end: $e, users: $u) { edges { node { userId kind payload } } }
        }",
        with(json!({"u": [dev.id]})),
    )
    .await;
    let mut kinds: Vec<String> = events["userEvents"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(e["node"]["userId"], dev.id.as_str());
            e["node"]["kind"].as_str().unwrap().to_string()
        })
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "COMPLETION",
            "COMPLETION",
            "COMPLETION",
            "DISMISS",
            "SELECT",
            "VIEW"
        ],
        "{events}"
    );
}
