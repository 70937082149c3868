//! GitHub and GitLab integrations against fake REST servers the test runs on loopback, with
//! the vendors' endpoints, auth headers and pagination (`Link: rel="next"`, `X-Next-Page`):
//! create, sync (new, renamed, removed repositories; GitLab subgroups), a revoked token, a
//! rate limit and a next-page link to another host give visible errors and lose no data; the
//! token is sealed and never returned; admins only.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Json, Router,
    extract::{Query, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::get,
};
use serde_json::{Value, json};

use crate::{ee_support::*, support::*};

pub const GOOD_TOKEN: &str = "ghp_good-token-not-in-the-db";
const NEW_TOKEN: &str = "ghp_rotated-token";

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Ok,
    RateLimited,
    ForeignLink,
}

pub struct Vendor {
    pub url: String,
    token: String,
    mode: Mode,
    /// (id, full name)
    github: Vec<(u64, String)>,
    gitlab: Vec<(u64, String)>,
}

pub type Shared = Arc<Mutex<Vendor>>;

async fn github_repos(
    State(v): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let v = v.lock().unwrap();
    if headers.get("authorization").and_then(|h| h.to_str().ok())
        != Some(&format!("Bearer {}", v.token))
    {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"message": "Bad credentials"})),
        )
            .into_response();
    }
    if v.mode == Mode::RateLimited {
        return (
            StatusCode::FORBIDDEN,
            [("x-ratelimit-remaining", "0"), ("retry-after", "60")],
            Json(json!({"message": "API rate limit exceeded"})),
        )
            .into_response();
    }
    let page: usize = q.get("page").and_then(|p| p.parse().ok()).unwrap_or(1);
    let chunk: Vec<Value> = v
        .github
        .iter()
        .skip((page - 1) * 2)
        .take(2)
        .map(|(id, name)| {
            json!({"id": id, "full_name": name, "clone_url": format!("{}/{name}.git", v.url)})
        })
        .collect();
    let mut response = Json(chunk).into_response();
    if page * 2 < v.github.len() {
        let host = if v.mode == Mode::ForeignLink {
            "http://169.254.169.254".to_string()
        } else {
            v.url.clone()
        };
        let link = format!(
            "<{host}/user/repos?per_page=100&page={}>; rel=\"next\"",
            page + 1
        );
        response.headers_mut().insert("link", link.parse().unwrap());
    }
    response
}

async fn gitlab_projects(
    State(v): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let v = v.lock().unwrap();
    if headers.get("private-token").and_then(|h| h.to_str().ok()) != Some(v.token.as_str()) {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"message": "401 Unauthorized"})),
        )
            .into_response();
    }
    assert_eq!(q.get("membership").map(String::as_str), Some("true"));
    let page: usize = q.get("page").and_then(|p| p.parse().ok()).unwrap_or(1);
    let chunk: Vec<Value> = v
        .gitlab
        .iter()
        .skip((page - 1) * 2)
        .take(2)
        .map(|(id, path)| {
            json!({"id": id, "path_with_namespace": path,
                   "http_url_to_repo": format!("{}/{path}.git", v.url)})
        })
        .collect();
    let next = if page * 2 < v.gitlab.len() {
        (page + 1).to_string()
    } else {
        String::new()
    };
    ([("x-next-page", next)], Json(chunk)).into_response()
}

/// Fake GitHub and GitLab REST servers on one loopback port; the token is [`GOOD_TOKEN`].
pub async fn start_vendor() -> Shared {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let state = Arc::new(Mutex::new(Vendor {
        url,
        token: GOOD_TOKEN.into(),
        mode: Mode::Ok,
        github: vec![
            (1, "octo/a".into()),
            (2, "octo/b".into()),
            (3, "octo/c".into()),
        ],
        gitlab: vec![
            (10, "group/top".into()),
            (11, "group/sub/deep".into()),
            (12, "group/sub/deeper/x".into()),
        ],
    }));
    let app = Router::new()
        .route("/user/repos", get(github_repos))
        .route("/api/v4/projects", get(gitlab_projects))
        .with_state(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    state
}

const INTEGRATIONS: &str =
    "{ integrations { edges { node { id kind displayName apiBase status message } } } }";

async fn integration(server: &TabbyServer, token: &str, id: &str) -> Value {
    let data = gql_ok(server, Some(token), INTEGRATIONS, json!({})).await;
    data["integrations"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"].clone())
        .find(|n| n["id"] == id)
        .unwrap_or_else(|| panic!("{id} not in {data}"))
}

/// Waits until more than `runs_before` sync runs have finished; the integration then.
async fn synced(server: &TabbyServer, token: &str, id: &str, runs_before: usize) -> Value {
    poll("the sync to finish", Duration::from_secs(30), || async {
        if finished_syncs(server, token).await > runs_before {
            Some(integration(server, token, id).await)
        } else {
            None
        }
    })
    .await
}

async fn finished_syncs(server: &TabbyServer, token: &str) -> usize {
    let runs = gql_ok(
        server,
        Some(token),
        "{ jobRuns(jobs: [\"third_party_repository_sync\"]) { edges { node { finishedAt } } } }",
        json!({}),
    )
    .await;
    runs["jobRuns"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| !e["node"]["finishedAt"].is_null())
        .count()
}

async fn repositories(server: &TabbyServer, token: &str, id: &str) -> Vec<String> {
    let data = gql_ok(
        server,
        Some(token),
        "query($i: [ID!]) { integratedRepositories(ids: $i) { edges { node { displayName gitUrl active } } } }",
        json!({"i": [id]}),
    )
    .await;
    data["integratedRepositories"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(e["node"]["active"], false);
            e["node"]["displayName"].as_str().unwrap().to_string()
        })
        .collect()
}

const CREATE: &str = "mutation($i: CreateIntegrationInput!) { createIntegration(input: $i) }";
const TRIGGER: &str = "mutation($c: String!) { triggerJobRun(command: $c) }";

#[tokio::test]
async fn github_and_gitlab_integrations_sync_with_errors_shown() {
    let vendor = start_vendor().await;
    let base = vendor.lock().unwrap().url.clone();
    let server = TabbyServer::start_ee("", &[]);
    let owner = register_owner(&server, "owner@example.com").await;
    let member = invite_and_register(&server, &owner, "member@example.com").await;
    let token = owner.access_token.as_str();

    // Validation.
    for (input, path) in [
        (
            json!({"displayName": "GH", "accessToken": GOOD_TOKEN, "kind": "GITHUB", "apiBase": base}),
            "apiBase",
        ),
        (
            json!({"displayName": "GH", "accessToken": GOOD_TOKEN, "kind": "GITHUB_SELF_HOSTED"}),
            "apiBase",
        ),
        (
            json!({"displayName": "GH", "accessToken": GOOD_TOKEN, "kind": "GITLAB_SELF_HOSTED", "apiBase": "http://gitlab.internal"}),
            "apiBase",
        ),
        (
            json!({"displayName": "", "accessToken": GOOD_TOKEN, "kind": "GITHUB"}),
            "displayName",
        ),
        (
            json!({"displayName": "GH", "accessToken": "", "kind": "GITHUB"}),
            "accessToken",
        ),
    ] {
        let err = gql_err(&server, Some(token), CREATE, json!({"i": input})).await;
        assert_eq!(validation_paths(&err), [path], "{input}");
    }
    let err = gql_err(
        &server,
        Some(&member.access_token),
        CREATE,
        json!({"i": {"displayName": "GH", "accessToken": GOOD_TOKEN, "kind": "GITHUB_SELF_HOSTED", "apiBase": base}}),
    )
    .await;
    assert_eq!(code(&err), Some("FORBIDDEN"));

    // GitHub (Enterprise-shaped): two pages through Link.
    let before = finished_syncs(&server, token).await;
    let gh = gql_ok(
        &server,
        Some(token),
        CREATE,
        json!({"i": {"displayName": "Octo", "accessToken": GOOD_TOKEN, "kind": "GITHUB_SELF_HOSTED", "apiBase": base}}),
    )
    .await["createIntegration"]
        .as_str()
        .unwrap()
        .to_string();
    let node = synced(&server, token, &gh, before).await;
    assert_eq!(node["status"], "READY", "{node}");
    assert_eq!(node["apiBase"], base);
    assert_eq!(
        repositories(&server, token, &gh).await,
        ["octo/a", "octo/b", "octo/c"]
    );
    // The token is not returned, nor stored in the clear.
    let all = gql_ok(&server, Some(token), INTEGRATIONS, json!({})).await;
    assert!(!all.to_string().contains(GOOD_TOKEN));
    assert_not_stored_in_clear(&server, GOOD_TOKEN);

    // Renamed and removed upstream: the next sync follows.
    {
        let mut v = vendor.lock().unwrap();
        v.github = vec![
            (1, "octo/a-renamed".into()),
            (3, "octo/c".into()),
            (4, "octo/d".into()),
        ];
    }
    let command = format!("{{\"SyncThirdPartyRepositories\":\"{gh}\"}}");
    let before = finished_syncs(&server, token).await;
    gql_ok(&server, Some(token), TRIGGER, json!({"c": command})).await;
    synced(&server, token, &gh, before).await;
    assert_eq!(
        repositories(&server, token, &gh).await,
        ["octo/a-renamed", "octo/c", "octo/d"]
    );

    // A revoked token, a rate limit, a next page on another host: each shown, nothing lost.
    for (change, expected) in [
        (Mode::Ok, "refused the token (401)"),
        (Mode::RateLimited, "rate-limiting this token"),
        (Mode::ForeignLink, "another host"),
    ] {
        {
            let mut v = vendor.lock().unwrap();
            v.mode = change;
            if change == Mode::Ok {
                v.token = "revoked".into();
            } else {
                v.token = GOOD_TOKEN.into();
            }
        }
        let before = finished_syncs(&server, token).await;
        gql_ok(&server, Some(token), TRIGGER, json!({"c": command})).await;
        let node = synced(&server, token, &gh, before).await;
        assert_eq!(node["status"], "FAILED", "{node}");
        assert!(
            node["message"].as_str().unwrap().contains(expected),
            "{node}"
        );
        assert_eq!(
            repositories(&server, token, &gh).await,
            ["octo/a-renamed", "octo/c", "octo/d"],
            "the last list is kept"
        );
    }
    let notes = gql_ok(
        &server,
        Some(token),
        "{ notifications { content } }",
        json!({}),
    )
    .await;
    assert!(
        notes.to_string().contains("third_party_repository_sync"),
        "{notes}"
    );
    // A new token: synced again, error gone.
    {
        let mut v = vendor.lock().unwrap();
        v.mode = Mode::Ok;
        v.token = NEW_TOKEN.into();
    }
    let before = finished_syncs(&server, token).await;
    gql_ok(
        &server,
        Some(token),
        "mutation($i: UpdateIntegrationInput!) { updateIntegration(input: $i) }",
        json!({"i": {"id": gh, "displayName": "Octo", "accessToken": NEW_TOKEN, "kind": "GITHUB_SELF_HOSTED", "apiBase": base}}),
    )
    .await;
    let node = synced(&server, token, &gh, before).await;
    assert_eq!(
        (node["status"].as_str(), node["message"].as_str()),
        (Some("READY"), None),
        "{node}"
    );

    // GitLab: X-Next-Page paging, projects of subgroups included.
    let before = finished_syncs(&server, token).await;
    let gl = gql_ok(
        &server,
        Some(token),
        CREATE,
        json!({"i": {"displayName": "Group", "accessToken": NEW_TOKEN, "kind": "GITLAB_SELF_HOSTED", "apiBase": base}}),
    )
    .await["createIntegration"]
        .as_str()
        .unwrap()
        .to_string();
    let node = synced(&server, token, &gl, before).await;
    assert_eq!(node["status"], "READY", "{node}");
    assert_eq!(
        repositories(&server, token, &gl).await,
        ["group/top", "group/sub/deep", "group/sub/deeper/x"]
    );

    // Deleting needs the right kind; the repositories go with the integration.
    let err = gql_err(
        &server,
        Some(token),
        "mutation($id: ID!) { deleteIntegration(id: $id, kind: GITHUB) }",
        json!({"id": gh}),
    )
    .await;
    assert_eq!(code(&err), Some("NOT_FOUND"));
    gql_ok(
        &server,
        Some(token),
        "mutation($id: ID!) { deleteIntegration(id: $id, kind: GITHUB_SELF_HOSTED) }",
        json!({"id": gh}),
    )
    .await;
    assert!(repositories(&server, token, &gh).await.is_empty());
    let body = graphql(
        &server.url("/graphql"),
        Some(&member.access_token),
        INTEGRATIONS,
        json!({}),
    )
    .await;
    assert_eq!(code(&body["errors"][0]), Some("FORBIDDEN"), "{body}");
}
