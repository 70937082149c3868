//! Provided repositories end to end: fake GitHub Enterprise and self-hosted GitLab REST
//! servers (repositories, issues, pull/merge requests and their files, with `Link` and
//! `X-Next-Page` paging) on loopback, and the
//! repository itself served over smart HTTP with TLS (`git http-backend` behind
//! `tests/githttp/server.py`, which refuses requests without the token's `Authorization`
//! header). Create an integration, sync, activate, index; then a marker from the code (search),
//! from an issue and from a pull request (the Answer Engine) is found; a member outside the
//! repository's group sees none of it; a revoked token fails the run visibly and keeps what was
//! indexed; deactivating removes it all.

use std::{
    collections::HashMap,
    path::Path,
    process::{Child, Command},
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Json, Router,
    extract::{Path as UrlPath, Query, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::get,
};
use serde_json::{Value, json};

use crate::{
    ee_answer::{ask, create_and_run},
    ee_policy::search,
    ee_support::*,
    support::*,
};

const TOKEN: &str = "ghp_provided-token-1234";
const CODE_MARKER: &str = "zanzibar_quota_limiter";
const ISSUE_MARKER: &str = "quuxfrobnication";
const PULL_MARKER: &str = "blorptastic";

struct Vendor {
    api: String,
    git: String,
    token: String,
    /// `since` parameters the issues list's first page was asked with.
    since: Vec<Option<String>>,
}

type Shared = Arc<Mutex<Vendor>>;

fn refused(v: &Vendor, headers: &HeaderMap) -> Option<Response> {
    (headers.get("authorization").and_then(|h| h.to_str().ok())
        != Some(&format!("Bearer {}", v.token)))
    .then(|| {
        (
            StatusCode::UNAUTHORIZED,
            Json(json!({"message": "Bad credentials"})),
        )
            .into_response()
    })
}

async fn repos(State(v): State<Shared>, headers: HeaderMap) -> Response {
    let v = v.lock().unwrap();
    if let Some(r) = refused(&v, &headers) {
        return r;
    }
    Json(json!([
        {"id": 1, "full_name": "octo/app", "clone_url": format!("{}/octo/app.git", v.git)},
        // A listing that points a clone at another host never gets the token.
        {"id": 2, "full_name": "octo/elsewhere", "clone_url": "https://evil.example/octo/elsewhere.git"},
    ]))
    .into_response()
}

async fn issues(
    State(v): State<Shared>,
    headers: HeaderMap,
    UrlPath((owner, repo)): UrlPath<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let mut v = v.lock().unwrap();
    if let Some(r) = refused(&v, &headers) {
        return r;
    }
    assert_eq!((owner.as_str(), repo.as_str()), ("octo", "app"));
    let page: usize = q.get("page").and_then(|p| p.parse().ok()).unwrap_or(1);
    if page == 1 {
        v.since.push(q.get("since").cloned());
    }
    let all = [
        json!({"number": 1, "title": "Quota resets too early", "html_url": format!("{}/octo/app/issues/1", v.api),
               "user": {"login": "alice"}, "state": "open",
               "body": format!("The {ISSUE_MARKER} step resets the quota at midnight UTC.")}),
        // Pull requests are in the issues list too; they come from their own list.
        json!({"number": 2, "title": "Fix quota", "html_url": "x", "user": {"login": "bob"}, "state": "closed",
               "body": "dup", "pull_request": {"url": "x"}}),
        json!({"number": 3, "title": "Old bug", "html_url": format!("{}/octo/app/issues/3", v.api),
               "user": {"login": "carol"}, "state": "closed", "body": null}),
    ];
    let mut response =
        Json(all[(page - 1) * 2..(page * 2).min(all.len())].to_vec()).into_response();
    if page == 1 {
        let link = format!(
            "<{}/repos/octo/app/issues?state=all&per_page=100&page=2>; rel=\"next\"",
            v.api
        );
        response.headers_mut().insert("link", link.parse().unwrap());
    }
    response
}

async fn pulls(State(v): State<Shared>, headers: HeaderMap) -> Response {
    let v = v.lock().unwrap();
    if let Some(r) = refused(&v, &headers) {
        return r;
    }
    Json(json!([{"number": 2, "title": "Fix quota reset", "html_url": format!("{}/octo/app/pull/2", v.api),
                 "user": {"login": "bob"}, "merged_at": "2026-11-30T10:00:00Z",
                 "updated_at": "2026-11-30T10:00:00Z",
                 "body": format!("Moves the reset; see the {PULL_MARKER} notes.")}]))
    .into_response()
}

async fn pull_files(State(v): State<Shared>, headers: HeaderMap) -> Response {
    let v = v.lock().unwrap();
    if let Some(r) = refused(&v, &headers) {
        return r;
    }
    Json(
        json!([{"filename": "src/quota.py", "additions": 2, "deletions": 1,
                 "patch": "@@ -1 +1,2 @@\n-reset()\n+reset_later()"}]),
    )
    .into_response()
}

async fn start_vendor(git: &str) -> Shared {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let state = Arc::new(Mutex::new(Vendor {
        api,
        git: git.to_string(),
        token: TOKEN.into(),
        since: Vec::new(),
    }));
    let app = Router::new()
        .route("/user/repos", get(repos))
        .route("/repos/{owner}/{repo}/issues", get(issues))
        .route("/repos/{owner}/{repo}/pulls", get(pulls))
        .route("/repos/{owner}/{repo}/pulls/{n}/files", get(pull_files))
        .with_state(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    state
}

/// `git http-backend` over TLS on loopback; killed on drop.
struct GitServer {
    child: Child,
    url: String,
    log: std::path::PathBuf,
    cert: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for GitServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl GitServer {
    fn start(root: &Path, credentials: &str) -> GitServer {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let out = Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            ])
            .args([
                "-subj",
                "/CN=127.0.0.1",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
            ])
            .arg("-keyout")
            .arg(d.join("key.pem"))
            .arg("-out")
            .arg(d.join("cert.pem"))
            .output()
            .expect("this test needs openssl (scripts/test.sh installs it)");
        assert!(out.status.success(), "{out:?}");
        let port_file = d.join("port");
        let log = d.join("requests.log");
        let child = Command::new("python3")
            .arg(tests_dir("githttp").join("server.py"))
            .arg(root)
            .arg(d.join("cert.pem"))
            .arg(d.join("key.pem"))
            .arg(credentials)
            .arg(&port_file)
            .arg(&log)
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let port = loop {
            if let Ok(port) = std::fs::read_to_string(&port_file) {
                break port;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the git server did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        GitServer {
            child,
            url: format!("https://127.0.0.1:{}", port.trim()),
            log,
            cert: d.join("cert.pem"),
            _dir: dir,
        }
    }

    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

const PROVIDED: &str = "{ integratedRepositories { edges { node { id displayName active
    refs { name commit } jobInfo { lastJobRun { id exitCode finishedAt } } } } } }";

async fn provided(server: &TabbyServer, token: &str, name: &str) -> Value {
    let data = gql_ok(server, Some(token), PROVIDED, json!({})).await;
    data["integratedRepositories"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"].clone())
        .find(|n| n["displayName"] == name)
        .unwrap_or_else(|| panic!("no {name} in {data}"))
}

/// Waits for a finished run of `name`'s index job newer than `after`; its node.
async fn index_finished(server: &TabbyServer, token: &str, name: &str, after: &Value) -> Value {
    poll(
        &format!("{name} to be indexed"),
        Duration::from_secs(90),
        || async {
            let node = provided(server, token, name).await;
            let run = &node["jobInfo"]["lastJobRun"];
            (!run["finishedAt"].is_null() && run["id"] != *after).then_some(node)
        },
    )
    .await
}

async fn job_log(server: &TabbyServer, token: &str, run_id: &str) -> String {
    let response = client()
        .get(server.url(&format!("/background-jobs/{run_id}/logs")))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    response.text().await.unwrap()
}

fn doc_hits(run: &crate::ee_answer::Run) -> Vec<Value> {
    run.one("ThreadAssistantMessageAttachmentsDoc")["docHits"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test]
async fn ee_provided_repository_is_indexed_with_its_issues_and_pull_requests() {
    let tmp = tempfile::tempdir().unwrap();
    // The repository as the vendor hosts it: a bare repository under the git server's root.
    let work = make_repo(
        tmp.path(),
        "work",
        &[(
            "src/quota.py",
            &format!("def {CODE_MARKER}(requests, limit):\n    return requests[:limit]\n"),
        )],
    );
    let root = tmp.path().join("served");
    std::fs::create_dir_all(root.join("octo")).unwrap();
    git(
        tmp.path(),
        &[
            "clone",
            "--bare",
            "--quiet",
            work.to_str().unwrap(),
            root.join("octo/app.git").to_str().unwrap(),
        ],
    );
    let git_server = GitServer::start(&root, &format!("x-access-token:{TOKEN}"));
    let vendor = start_vendor(&git_server.url).await;
    let api = vendor.lock().unwrap().api.clone();

    let chat = fake_model_servers::FakeServer::start(
        fake_model_servers::Protocol::OpenAi,
        fake_model_servers::Script::default().pieces(["Noted."]),
    )
    .await;
    let embedder = fake_model_servers::FakeServer::start(
        fake_model_servers::Protocol::OpenAi,
        fake_model_servers::Script::default().embedding_dim(16),
    )
    .await;
    let models = tempfile::tempdir().unwrap();
    let config = format!(
        "{}{}{}",
        openai_chat_config(&chat.url(), "fake-chat"),
        openai_embedding_config(&embedder.url(), "fake-embed"),
        open_search_params("answer")
    );
    let server = TabbyServer::start_ee(
        &config,
        &[
            ("TABBY_MODEL_CACHE_ROOT", models.path().to_str().unwrap()),
            // The test server's self-signed certificate (git reads this variable).
            ("GIT_SSL_CAINFO", git_server.cert.to_str().unwrap()),
        ],
    );
    let owner = register_owner(&server, "owner@example.com").await;
    let member = invite_and_register(&server, &owner, "member@example.com").await;
    let outsider = invite_and_register(&server, &owner, "outsider@example.com").await;
    let token = owner.access_token.as_str();

    gql_ok(
        &server,
        Some(token),
        "mutation($i: CreateIntegrationInput!) { createIntegration(input: $i) }",
        json!({"i": {"displayName": "Octo", "accessToken": TOKEN, "kind": "GITHUB_SELF_HOSTED", "apiBase": api}}),
    )
    .await;
    poll("the sync", Duration::from_secs(30), || async {
        let data = gql_ok(&server, Some(token), PROVIDED, json!({})).await;
        (data["integratedRepositories"]["edges"]
            .as_array()
            .unwrap()
            .len()
            == 2)
            .then_some(())
    })
    .await;
    let app = provided(&server, token, "octo/app").await;
    assert_eq!(app["active"], false);
    let id = app["id"].as_str().unwrap().to_string();

    // Only admins activate; bad refs are refused.
    let activate = "mutation($id: ID!, $a: Boolean!, $r: [String!]) { updateIntegratedRepositoryActive(id: $id, active: $a, refs: $r) }";
    let err = gql_err(
        &server,
        Some(&member.access_token),
        activate,
        json!({"id": id, "a": true}),
    )
    .await;
    assert_eq!(code(&err), Some("FORBIDDEN"));
    let err = gql_err(
        &server,
        Some(token),
        activate,
        json!({"id": id, "a": true, "r": ["--upload-pack=x"]}),
    )
    .await;
    assert_eq!(validation_paths(&err), ["refs"]);
    let err = gql_err(
        &server,
        Some(token),
        "mutation($id: ID!, $r: [String!]!) { updateIntegratedRepositoryRefs(id: $id, refs: $r) }",
        json!({"id": id, "r": ["main", "bad ref"]}),
    )
    .await;
    assert_eq!(validation_paths(&err), ["refs"]);

    let before = app["jobInfo"]["lastJobRun"]["id"].clone();
    gql_ok(&server, Some(token), activate, json!({"id": id, "a": true})).await;
    let node = index_finished(&server, token, "octo/app", &before).await;
    let run = &node["jobInfo"]["lastJobRun"];
    let log = job_log(&server, token, run["id"].as_str().unwrap()).await;
    assert_eq!(run["exitCode"], 0, "{log}");
    assert!(
        log.contains("indexed 2 issues and 1 pull requests"),
        "{log}"
    );
    assert!(!log.contains(TOKEN), "{log}");
    assert_eq!(
        node["refs"][0]["commit"].as_str().unwrap().len(),
        40,
        "{node}"
    );

    // Every git request carried the token as a header; the token is in no URL.
    let requests = git_server.requests();
    assert!(!requests.is_empty());
    for r in &requests {
        assert_eq!(r["authorized"], true, "{r}");
        assert!(!r.to_string().contains(TOKEN), "{r}");
    }
    assert_not_stored_in_clear(&server, TOKEN);
    let mirrors = server.root().join("repositories");
    for entry in walk(&mirrors) {
        if let Ok(text) = std::fs::read_to_string(&entry) {
            assert!(!text.contains(TOKEN), "{}", entry.display());
        }
    }

    // The repository is context: in repositoryList (kind GITHUB_SELF_HOSTED) and in search.
    let list = gql_ok(
        &server,
        Some(token),
        "{ repositoryList { name sourceId kind sourceKind } }",
        json!({}),
    )
    .await;
    let listed = list["repositoryList"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "octo/app")
        .unwrap_or_else(|| panic!("{list}"))
        .clone();
    assert_eq!(listed["kind"], "GITHUB_SELF_HOSTED");
    assert_eq!(listed["sourceKind"], "github");
    let source_id = listed["sourceId"].as_str().unwrap().to_string();
    assert!(source_id.starts_with("provided_repository:"), "{source_id}");
    let (status, body) = search(
        &server,
        &owner.auth_token,
        json!({"query": CODE_MARKER, "source_id": source_id}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.to_string().contains("src/quota.py"), "{body}");
    // The code browser reads it too.
    let (status, body, _) = rest(
        &server,
        "GET",
        &format!("/repositories/githubselfhosted/{id}/rev/main/src/quota.py"),
        Some(&bearer(token)),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");

    // Issues and pull requests reach the Answer Engine.
    let options = json!({"docQuery": {"content": format!("{ISSUE_MARKER} {PULL_MARKER}"), "searchPublic": false, "sourceIds": [source_id]}});
    let answer = create_and_run(
        &server,
        token,
        ask("Why does the quota reset?", options.clone()),
    )
    .await
    .expect("the run starts");
    let hits = doc_hits(&answer);
    let kinds: Vec<&str> = hits
        .iter()
        .map(|h| h["doc"]["__typename"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"MessageAttachmentIssueDoc"), "{hits:#?}");
    assert!(kinds.contains(&"MessageAttachmentPullDoc"), "{hits:#?}");
    let prompt = chat
        .requests_to("/v1/chat/completions")
        .last()
        .unwrap()
        .body
        .to_string();
    assert!(
        prompt.contains(ISSUE_MARKER) && prompt.contains(PULL_MARKER),
        "{prompt}"
    );
    assert!(
        prompt.contains("src/quota.py (+2 -1)"),
        "the patch summary: {prompt}"
    );

    // Restricted to a group: a member reads it, an outsider gets none of it.
    restrict_to_new_group(&server, token, "app-team", &member, &source_id).await;
    let (_, body) = search(&server, &outsider.auth_token, json!({"query": CODE_MARKER})).await;
    assert!(!body.to_string().contains("src/quota.py"), "{body}");
    let list = gql_ok(
        &server,
        Some(&outsider.access_token),
        "{ repositoryList { name } }",
        json!({}),
    )
    .await;
    assert!(!list.to_string().contains("octo/app"), "{list}");
    let outsider_answer =
        create_and_run(&server, &outsider.auth_token, ask("Why?", options.clone()))
            .await
            .expect("the run starts");
    assert!(doc_hits(&outsider_answer).is_empty());
    assert_eq!(
        outsider_answer.one("ThreadAssistantMessageReadingDoc")["sourceIds"],
        json!([])
    );
    let (status, _, _) = rest(
        &server,
        "GET",
        &format!("/repositories/githubselfhosted/{id}/rev/main/src/quota.py"),
        Some(&bearer(&outsider.access_token)),
        None,
    )
    .await;
    assert_eq!(status, 404);
    let (_, body) = search(
        &server,
        &member.auth_token,
        json!({"query": CODE_MARKER, "source_id": source_id}),
    )
    .await;
    assert!(body.to_string().contains("src/quota.py"), "{body}");

    // The next run asks only for what changed since the last one.
    let before = node["jobInfo"]["lastJobRun"]["id"].clone();
    gql_ok(
        &server,
        Some(token),
        "mutation($c: String!) { triggerJobRun(command: $c) }",
        json!({"c": format!("{{\"SchedulerGithubGitlabRepository\":\"{id}\"}}")}),
    )
    .await;
    let node = index_finished(&server, token, "octo/app", &before).await;
    assert_eq!(node["jobInfo"]["lastJobRun"]["exitCode"], 0);
    {
        let v = vendor.lock().unwrap();
        assert_eq!(
            v.since.first(),
            Some(&None),
            "the first run reads everything"
        );
        assert!(v.since.last().unwrap().is_some(), "{:?}", v.since);
    }

    // A revoked token: the run fails visibly, nothing indexed is lost.
    vendor.lock().unwrap().token = "revoked".into();
    let before = node["jobInfo"]["lastJobRun"]["id"].clone();
    gql_ok(
        &server,
        Some(token),
        "mutation($c: String!) { triggerJobRun(command: $c) }",
        json!({"c": format!("{{\"SchedulerGithubGitlabRepository\":\"{id}\"}}")}),
    )
    .await;
    let node = index_finished(&server, token, "octo/app", &before).await;
    assert_eq!(node["jobInfo"]["lastJobRun"]["exitCode"], 1);
    let integrations = gql_ok(
        &server,
        Some(token),
        "{ integrations { edges { node { status message } } } }",
        json!({}),
    )
    .await;
    let integration = &integrations["integrations"]["edges"][0]["node"];
    assert_eq!(integration["status"], "FAILED", "{integration}");
    assert!(
        integration["message"].as_str().unwrap().contains("401"),
        "{integration}"
    );
    let again = create_and_run(&server, token, ask("Why?", options.clone()))
        .await
        .unwrap();
    assert_eq!(doc_hits(&again).len(), hits.len(), "kept");

    // A clone URL on another host never gets the token.
    let elsewhere = provided(&server, token, "octo/elsewhere").await;
    vendor.lock().unwrap().token = TOKEN.into();
    gql_ok(
        &server,
        Some(token),
        activate,
        json!({"id": elsewhere["id"], "a": true}),
    )
    .await;
    let node = index_finished(
        &server,
        token,
        "octo/elsewhere",
        &elsewhere["jobInfo"]["lastJobRun"]["id"],
    )
    .await;
    assert_eq!(node["jobInfo"]["lastJobRun"]["exitCode"], 1);
    let log = job_log(
        &server,
        token,
        node["jobInfo"]["lastJobRun"]["id"].as_str().unwrap(),
    )
    .await;
    assert!(log.contains("the token is not sent there"), "{log}");

    // Deactivated: its code and documents leave the index.
    gql_ok(
        &server,
        Some(token),
        activate,
        json!({"id": id, "a": false}),
    )
    .await;
    poll(
        "the code to leave the index",
        Duration::from_secs(60),
        || async {
            let (_, body) = search(&server, &owner.auth_token, json!({"query": CODE_MARKER})).await;
            (!body.to_string().contains("src/quota.py")).then_some(())
        },
    )
    .await;
    let list = gql_ok(
        &server,
        Some(token),
        "{ repositoryList { name } }",
        json!({}),
    )
    .await;
    assert!(!list.to_string().contains("octo/app"), "{list}");
}

const GITLAB_TOKEN: &str = "glpat-provided-token-5678";

async fn gitlab_api(
    State(git): State<String>,
    headers: HeaderMap,
    UrlPath(rest): UrlPath<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if headers.get("private-token").and_then(|h| h.to_str().ok()) != Some(GITLAB_TOKEN) {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"message": "401 Unauthorized"})),
        )
            .into_response();
    }
    let page: usize = q.get("page").and_then(|p| p.parse().ok()).unwrap_or(1);
    let body = match rest.as_str() {
        "projects" => json!([{"id": 42, "path_with_namespace": "group/sub/app",
                               "http_url_to_repo": format!("{git}/group/sub/app.git")}]),
        // Two pages through X-Next-Page.
        "projects/42/issues" if page == 1 => json!([{"iid": 7, "title": "Quota resets too early",
            "web_url": "https://gl.example/group/sub/app/-/issues/7", "author": {"username": "alice"},
            "state": "opened", "description": format!("The {ISSUE_MARKER} step resets it.")}]),
        "projects/42/issues" => {
            json!([{"iid": 8, "title": "Old", "web_url": "https://gl.example/i/8",
            "author": {"username": "carol"}, "state": "closed", "description": null}])
        }
        "projects/42/merge_requests" => json!([{"iid": 3, "title": "Fix quota reset",
            "web_url": "https://gl.example/group/sub/app/-/merge_requests/3", "author": {"username": "bob"},
            "state": "merged", "description": format!("See the {PULL_MARKER} notes.")}]),
        "projects/42/merge_requests/3/diffs" => json!([{"new_path": "src/quota.py",
            "diff": "@@ -1 +1 @@\n-reset()\n+reset_later()"}]),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    let next = if rest == "projects/42/issues" && page == 1 {
        "2"
    } else {
        ""
    };
    ([("x-next-page", next)], Json(body)).into_response()
}

/// The same flow for a self-hosted GitLab project in a subgroup: the clone authenticates as
/// `oauth2`, issues page through `X-Next-Page`, merge requests bring their diffs.
#[tokio::test]
async fn ee_provided_gitlab_project_with_issues_and_merge_requests() {
    let tmp = tempfile::tempdir().unwrap();
    let work = make_repo(
        tmp.path(),
        "work",
        &[(
            "src/quota.py",
            &format!("def {CODE_MARKER}(r, n):\n    return r[:n]\n"),
        )],
    );
    let root = tmp.path().join("served");
    std::fs::create_dir_all(root.join("group/sub")).unwrap();
    git(
        tmp.path(),
        &[
            "clone",
            "--bare",
            "--quiet",
            work.to_str().unwrap(),
            root.join("group/sub/app.git").to_str().unwrap(),
        ],
    );
    let git_server = GitServer::start(&root, &format!("oauth2:{GITLAB_TOKEN}"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let app = Router::new()
        .route("/api/v4/{*rest}", get(gitlab_api))
        .with_state(git_server.url.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let chat = fake_model_servers::FakeServer::start(
        fake_model_servers::Protocol::OpenAi,
        fake_model_servers::Script::default().pieces(["Noted."]),
    )
    .await;
    let embedder = fake_model_servers::FakeServer::start(
        fake_model_servers::Protocol::OpenAi,
        fake_model_servers::Script::default().embedding_dim(16),
    )
    .await;
    let models = tempfile::tempdir().unwrap();
    let config = format!(
        "{}{}{}",
        openai_chat_config(&chat.url(), "fake-chat"),
        openai_embedding_config(&embedder.url(), "fake-embed"),
        open_search_params("answer")
    );
    let server = TabbyServer::start_ee(
        &config,
        &[
            ("TABBY_MODEL_CACHE_ROOT", models.path().to_str().unwrap()),
            ("GIT_SSL_CAINFO", git_server.cert.to_str().unwrap()),
        ],
    );
    let owner = register_owner(&server, "owner@example.com").await;
    let token = owner.access_token.as_str();
    gql_ok(
        &server,
        Some(token),
        "mutation($i: CreateIntegrationInput!) { createIntegration(input: $i) }",
        json!({"i": {"displayName": "GL", "accessToken": GITLAB_TOKEN, "kind": "GITLAB_SELF_HOSTED", "apiBase": api}}),
    )
    .await;
    poll("the sync", Duration::from_secs(30), || async {
        let data = gql_ok(&server, Some(token), PROVIDED, json!({})).await;
        (data["integratedRepositories"]["edges"]
            .as_array()
            .unwrap()
            .len()
            == 1)
            .then_some(())
    })
    .await;
    let project = provided(&server, token, "group/sub/app").await;
    gql_ok(
        &server,
        Some(token),
        "mutation($id: ID!) { updateIntegratedRepositoryActive(id: $id, active: true) }",
        json!({"id": project["id"]}),
    )
    .await;
    let node = index_finished(
        &server,
        token,
        "group/sub/app",
        &project["jobInfo"]["lastJobRun"]["id"],
    )
    .await;
    let run = &node["jobInfo"]["lastJobRun"];
    let log = job_log(&server, token, run["id"].as_str().unwrap()).await;
    assert_eq!(run["exitCode"], 0, "{log}");
    assert!(
        log.contains("indexed 2 issues and 1 pull requests"),
        "{log}"
    );
    assert!(
        git_server
            .requests()
            .iter()
            .all(|r| r["authorized"] == true)
    );

    let list = gql_ok(
        &server,
        Some(token),
        "{ repositoryList { name sourceId kind sourceKind } }",
        json!({}),
    )
    .await;
    let listed = list["repositoryList"][0].clone();
    assert_eq!(listed["kind"], "GITLAB_SELF_HOSTED", "{list}");
    assert_eq!(listed["sourceKind"], "gitlab");
    let source_id = listed["sourceId"].as_str().unwrap().to_string();
    let (_, body) = search(
        &server,
        &owner.auth_token,
        json!({"query": CODE_MARKER, "source_id": source_id}),
    )
    .await;
    assert!(body.to_string().contains("src/quota.py"), "{body}");
    let options = json!({"docQuery": {"content": format!("{ISSUE_MARKER} {PULL_MARKER}"), "searchPublic": false, "sourceIds": [source_id]}});
    let answer = create_and_run(&server, token, ask("Why does the quota reset?", options))
        .await
        .expect("the run starts");
    let kinds: Vec<String> = doc_hits(&answer)
        .iter()
        .map(|h| h["doc"]["__typename"].as_str().unwrap().to_string())
        .collect();
    assert!(
        kinds.iter().any(|k| k == "MessageAttachmentIssueDoc"),
        "{kinds:?}"
    );
    assert!(
        kinds.iter().any(|k| k == "MessageAttachmentPullDoc"),
        "{kinds:?}"
    );
    let prompt = chat
        .requests_to("/v1/chat/completions")
        .last()
        .unwrap()
        .body
        .to_string();
    assert!(
        prompt.contains("merged") && prompt.contains("+reset_later()"),
        "{prompt}"
    );
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}
