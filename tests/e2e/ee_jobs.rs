//! Background jobs end to end: the real binary, its SQLite database and index, real git
//! repositories and web sites served on loopback by the test. Triggers and de-duplication,
//! the worker's order and survival of a failed job, run logs and who may read them, admin
//! notifications, a `kill -9` in the middle of a run, and what the jobs index (code, commits,
//! crawled pages, ingested documents) as the Answer Engine's doc search finds it.

use std::{
    collections::HashMap,
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    extract::State,
    http::{StatusCode, Uri, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::{
    ee_policy::wait_until_searchable,
    ee_subscriptions::{connect, init, receive_json, send},
    ee_support::*,
    support::*,
};

// ---- the server ----

/// The question of every Answer Engine run here, and the fake chat model's answer to it.
const QUESTION: &str = "What do the indexed documents say?";
const ANSWER: [&str; 2] = ["According to ", "the documents."];

/// A server with a fake chat model (so the Answer Engine runs), a fake embedder, no
/// repositories in the config and no local models; its owner is signed in.
struct Env {
    server: TabbyServer,
    owner: Account,
    models: tempfile::TempDir,
    _chat: FakeServer,
    _embedder: FakeServer,
}

impl Env {
    async fn start() -> Env {
        Self::start_with(&[]).await
    }

    /// A server started with `args` (`--role web`).
    async fn start_with(args: &[&str]) -> Env {
        let chat =
            FakeServer::start(Protocol::OpenAi, Script::default().when(QUESTION, ANSWER)).await;
        let embedder =
            FakeServer::start(Protocol::OpenAi, Script::default().embedding_dim(16)).await;
        let models = tempfile::tempdir().unwrap();
        // Repositories made by the tests live in temporary directories, and their web sites
        // on loopback: allow both.
        let config = openai_chat_config(&chat.url(), "fake-chat")
            + &openai_embedding_config(&embedder.url(), "fake-embed")
            + &format!(
                "\n[security]\nlocal_repository_roots = [{}]\nfetch_allowed_hosts = [\"127.0.0.1\"]\n",
                json!(std::env::temp_dir().display().to_string())
            );
        let server = TabbyServer::start_with_env(
            &config,
            args,
            &[("TABBY_MODEL_CACHE_ROOT", models.path().to_str().unwrap())],
        );
        let owner = register_owner(&server, "owner@example.com").await;
        Env {
            server,
            owner,
            models,
            _chat: chat,
            _embedder: embedder,
        }
    }

    fn token(&self) -> &str {
        &self.owner.access_token
    }

    /// A GraphQL request as the owner that must succeed.
    async fn gql(&self, query: &str, variables: Value) -> Value {
        gql_ok(&self.server, Some(self.token()), query, variables).await
    }

    /// Another process on the same `TABBY_ROOT` with `args` (`--role worker`).
    fn replica(&self, name: &str, args: &[&str]) -> Replica {
        let models = self.models.path().to_str().unwrap();
        self.server
            .replica(name, args, &[("TABBY_MODEL_CACHE_ROOT", models)])
    }

    /// `kill -9`, then a new server on the same `TABBY_ROOT`.
    fn kill_and_restart(&mut self) {
        self.server.kill();
        let models = self.models.path().to_str().unwrap().to_string();
        self.server
            .restart(&[("TABBY_MODEL_CACHE_ROOT", models.as_str())]);
    }
}

// ---- job runs ----

const RUN_FIELDS: &str = "id job command createdAt startedAt finishedAt exitCode stdout \
    progress { repository filesDone filesTotal indexedMb mbPerSecond elapsedSeconds }";

/// Every run of `jobs` (all jobs when empty), oldest first.
async fn job_runs(env: &Env, jobs: &[&str]) -> Vec<Value> {
    let data = env
        .gql(
            &format!(
                "query($jobs: [String!]) {{ jobRuns(jobs: $jobs) {{ edges {{ node {{ {RUN_FIELDS} }} }} }} }}"
            ),
            json!({"jobs": if jobs.is_empty() { Value::Null } else { json!(jobs) }}),
        )
        .await;
    data["jobRuns"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"].clone())
        .collect()
}

async fn job_run(env: &Env, id: &str) -> Value {
    let data = env
        .gql(
            &format!("query($ids: [ID!]) {{ jobRuns(ids: $ids) {{ edges {{ node {{ {RUN_FIELDS} }} }} }} }}"),
            json!({"ids": [id]}),
        )
        .await;
    let edges = data["jobRuns"]["edges"].as_array().unwrap();
    assert_eq!(edges.len(), 1, "run {id}: {data}");
    edges[0]["node"].clone()
}

/// Waits until run `id` has an exit code; returns it.
async fn wait_finished(env: &Env, id: &str, limit: Duration) -> Value {
    poll(&format!("job run {id} to finish"), limit, || async {
        let run = job_run(env, id).await;
        (!run["exitCode"].is_null()).then_some(run)
    })
    .await
}

/// Waits until a run of `job` whose command contains `needle` has finished; returns the
/// latest such run.
async fn wait_run_of(env: &Env, job: &str, needle: &str, limit: Duration) -> Value {
    poll(
        &format!("a finished {job} run with {needle}"),
        limit,
        || async {
            job_runs(env, &[job])
                .await
                .into_iter()
                .rev()
                .find(|r| r["command"].as_str().unwrap().contains(needle))
                .filter(|r| !r["exitCode"].is_null())
        },
    )
    .await
}

async fn trigger(env: &Env, command: &str) -> String {
    env.gql(
        "mutation($c: String!) { triggerJobRun(command: $c) }",
        json!({"c": command}),
    )
    .await["triggerJobRun"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn stats(env: &Env, jobs: &[&str]) -> Value {
    env.gql(
        "query($jobs: [String!]) { jobRunStats(jobs: $jobs) { success failed pending } }",
        json!({"jobs": jobs}),
    )
    .await["jobRunStats"]
        .clone()
}

/// `GET /background-jobs/{id}/logs` with `authorization` as the whole header:
/// (status, content type, body).
async fn logs(
    server: &TabbyServer,
    id: &str,
    authorization: Option<&str>,
) -> (u16, String, String) {
    let mut request = client().get(server.url(&format!("/background-jobs/{id}/logs")));
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (status, content_type, response.text().await.unwrap())
}

/// A run's log as the owner; every line is `<RFC 3339 time> [LEVEL]: message`.
async fn run_log(env: &Env, id: &str) -> String {
    let (status, content_type, text) = logs(&env.server, id, Some(&bearer(env.token()))).await;
    assert_eq!(status, 200, "{text}");
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    for line in text.lines() {
        let (time, rest) = line.split_once(' ').unwrap_or_else(|| panic!("{line:?}"));
        assert!(
            chrono::DateTime::parse_from_rfc3339(time).is_ok(),
            "{line:?}"
        );
        assert!(
            rest.starts_with("[INFO]: ") || rest.starts_with("[WARN]: "),
            "{line:?}"
        );
    }
    text
}

/// A repository's indexing command, as the server writes it (fields in upstream's order).
fn git_command(git_url: &str, source_id: &str) -> String {
    format!(
        r#"{{"SchedulerGitRepository":{{"git_url":{},"source_id":{},"git_refs":[]}}}}"#,
        json!(git_url),
        json!(source_id)
    )
}

// ---- repositories ----

/// Adds the repository through GraphQL; returns (id, sourceId).
async fn create_repository(env: &Env, name: &str, repo: &Path) -> (String, String) {
    let id = env
        .gql(
            "mutation($n: String!, $u: String!) { createGitRepository(name: $n, gitUrl: $u) }",
            json!({"n": name, "u": format!("file://{}", repo.display())}),
        )
        .await["createGitRepository"]
        .as_str()
        .unwrap()
        .to_string();
    (id.clone(), format!("git:{id}"))
}

// ---- web sites on loopback ----

/// A site on an ephemeral loopback port: `pages` (path → HTML), every request recorded, and
/// a gate: while it is closed, requests wait (the job that sent them stays running).
struct Site {
    base: String,
    requests: Arc<Mutex<Vec<String>>>,
    gate: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct SiteState {
    pages: Arc<HashMap<String, String>>,
    requests: Arc<Mutex<Vec<String>>>,
    gate: watch::Receiver<bool>,
}

async fn serve_page(State(state): State<SiteState>, uri: Uri) -> Response {
    state.requests.lock().unwrap().push(uri.path().to_string());
    let mut gate = state.gate.clone();
    let _ = gate.wait_for(|open| *open).await;
    match state.pages.get(uri.path()) {
        Some(html) => (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            html.clone(),
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "not found").into_response(),
    }
}

impl Site {
    async fn start(pages: &[(&str, String)], open: bool) -> Site {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (gate, gate_rx) = watch::channel(open);
        let requests = Arc::new(Mutex::new(Vec::new()));
        let state = SiteState {
            pages: Arc::new(
                pages
                    .iter()
                    .map(|(p, h)| (p.to_string(), h.clone()))
                    .collect(),
            ),
            requests: requests.clone(),
            gate: gate_rx,
        };
        let app = Router::new().fallback(serve_page).with_state(state);
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Site {
            base,
            requests,
            gate,
            task,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }

    fn open(&self) {
        self.gate.send_replace(true);
    }

    /// Waits until the site has received a request.
    async fn wait_requested(&self) {
        poll("a request to the site", Duration::from_secs(20), || async {
            (!self.requests().is_empty()).then_some(())
        })
        .await;
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Adds a web document (its crawl is enqueued at once); returns its source id.
async fn create_web_document(env: &Env, name: &str, url: &str) -> String {
    let id = env
        .gql(
            "mutation($i: CreateCustomDocumentInput!) { createCustomDocument(input: $i) }",
            json!({"i": {"name": name, "url": url}}),
        )
        .await["createCustomDocument"]
        .as_str()
        .unwrap()
        .to_string();
    let docs = env
        .gql(
            "query($ids: [ID!]) { customWebDocuments(ids: $ids) { edges { node { sourceId } } } }",
            json!({"ids": [id]}),
        )
        .await;
    docs["customWebDocuments"]["edges"][0]["node"]["sourceId"]
        .as_str()
        .unwrap()
        .to_string()
}

fn web_command(source_id: &str, url: &str) -> String {
    format!(
        r#"{{"WebCrawler":{{"source_id":{},"url":{},"url_prefix":null}}}}"#,
        json!(source_id),
        json!(url)
    )
}

// ---- the Answer Engine's doc search ----

const DOC_RUN: &str =
    "subscription($input: CreateThreadAndRunInput!) { createThreadAndRun(input: $input) {
    __typename
    ... on ThreadAssistantMessageReadingDoc { sourceIds }
    ... on ThreadAssistantMessageAttachmentsDoc { hits { score doc {
        __typename
        ... on MessageAttachmentCommitDoc { sha message authorEmail }
        ... on MessageAttachmentWebDoc { title webLink: link content }
        ... on MessageAttachmentIngestedDoc { id title ingestedLink: link body }
    } } }
    ... on ThreadAssistantMessageContentDelta { delta }
} }";

/// Asks the Answer Engine with a doc query on `source_ids`; returns the docs of the
/// `AttachmentsDoc` item (best first), after checking the run went through to the answer.
async fn doc_hits(env: &Env, source_ids: &[&str], content: &str) -> Vec<Value> {
    let mut socket = connect(&env.server, "graphql-transport-ws").await;
    send(&mut socket, init(Some(env.token()))).await;
    assert_eq!(receive_json(&mut socket).await["type"], "connection_ack");
    let input = json!({
        "thread": {"userMessage": {"content": QUESTION}},
        "options": {
            "generateRelevantQuestions": false,
            "docQuery": {"content": content, "searchPublic": false, "sourceIds": source_ids},
        }
    });
    send(
        &mut socket,
        json!({"id": "1", "type": "subscribe", "payload": {"query": DOC_RUN, "variables": {"input": input}}}),
    )
    .await;
    let mut items = Vec::new();
    loop {
        let message = receive_json(&mut socket).await;
        match message["type"].as_str() {
            Some("next") => {
                assert!(message["payload"]["errors"].is_null(), "{message}");
                items.push(message["payload"]["data"]["createThreadAndRun"].clone());
            }
            Some("complete") => break,
            _ => panic!("unexpected message: {message}"),
        }
    }
    socket.close(None).await.ok();
    let of = |typename: &str| -> Vec<&Value> {
        items
            .iter()
            .filter(|i| i["__typename"] == typename)
            .collect()
    };
    let reading = of("ThreadAssistantMessageReadingDoc");
    assert_eq!(reading.len(), 1, "{items:#?}");
    assert_eq!(reading[0]["sourceIds"], json!(source_ids), "{items:#?}");
    let answer: String = of("ThreadAssistantMessageContentDelta")
        .iter()
        .map(|i| i["delta"].as_str().unwrap())
        .collect();
    assert_eq!(answer, ANSWER.concat(), "{items:#?}");
    let attachments = of("ThreadAssistantMessageAttachmentsDoc");
    assert_eq!(attachments.len(), 1, "{items:#?}");
    attachments[0]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            assert!(h["score"].as_f64().is_some_and(|s| s > 0.0), "{h}");
            h["doc"].clone()
        })
        .collect()
}

// ---- 1. a repository: trigger → run → exit 0 → searchable, with a readable log ----

const SPROCKETS: &str = "def quantize_sprocket_tension(sprocket, tension_levels):\n    \"\"\"Snap a sprocket's tension to the nearest level.\"\"\"\n    return min(tension_levels, key=lambda level: abs(level - sprocket.tension))\n";

#[tokio::test]
async fn ee_jobs_repository_run_exits_0_is_searchable_and_has_an_admin_only_log() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = make_repo(tmp.path(), "sprockets", &[("src/sprockets.py", SPROCKETS)]);
    let env = Env::start().await;
    let member = invite_and_register(&env.server, &env.owner, "member@example.com").await;
    let (repo_id, source_id) = create_repository(&env, "sprockets", &repo).await;

    let git_url = format!("file://{}", repo.display());
    let command = git_command(&git_url, &source_id);
    let run = wait_run_of(
        &env,
        "scheduler_git",
        &format!("\"source_id\":\"{source_id}\""),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(run["exitCode"], 0, "{run}");
    assert_eq!(run["job"], "scheduler_git");
    assert_eq!(run["command"], command.as_str(), "upstream's command JSON");
    assert_eq!(run["stdout"], "");
    assert!(
        !run["startedAt"].is_null() && !run["finishedAt"].is_null(),
        "{run}"
    );
    let run_id = run["id"].as_str().unwrap().to_string();

    // The repository shows its indexing job and the run's outcome.
    let repos = env
        .gql(
            "{ gitRepositories { edges { node { id jobInfo { command lastJobRun { id exitCode } } } } } }",
            json!({}),
        )
        .await;
    let node = &repos["gitRepositories"]["edges"][0]["node"];
    assert_eq!(node["id"], repo_id.as_str());
    assert_eq!(node["jobInfo"]["command"], command.as_str());
    assert_eq!(
        node["jobInfo"]["lastJobRun"],
        json!({"id": run_id, "exitCode": 0})
    );
    let counts = stats(&env, &["scheduler_git"]).await;
    assert_eq!(counts["failed"], 0, "{counts}");
    assert!(counts["success"].as_i64().unwrap() >= 1, "{counts}");

    // Its code is found by search.
    wait_until_searchable(
        &env.server,
        &member.auth_token,
        json!({"query": "quantize_sprocket_tension tension_levels", "source_id": source_id}),
        "src/sprockets.py",
    )
    .await;

    // The log, for admins with a session token (header or query).
    let text = run_log(&env, &run_id).await;
    assert!(
        text.contains(&format!("[INFO]: running {command}")),
        "{text}"
    );
    assert!(text.contains("indexed 1 new commits"), "{text}");
    assert!(
        text.lines().last().unwrap().ends_with("[INFO]: finished"),
        "{text}"
    );
    let by_query = client()
        .get(env.server.url(&format!(
            "/background-jobs/{run_id}/logs?access_token={}",
            env.token()
        )))
        .send()
        .await
        .unwrap();
    // A valid session in the URL is not a credential: 401.
    assert_eq!(by_query.status().as_u16(), 401);
    let body: Value = by_query.json().await.unwrap();
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("query string")),
        "{body}"
    );

    // Not for members, editors' tokens, bad tokens or nobody.
    let (status, _, body) = logs(&env.server, &run_id, Some(&bearer(&member.access_token))).await;
    assert_eq!(status, 403, "{body}");
    assert!(serde_json::from_str::<Value>(&body).unwrap()["error"].is_string());
    for authorization in [
        None,
        Some(bearer(&env.owner.auth_token)),
        Some(bearer("not-a-token")),
        Some(format!("Token {}", env.token())),
    ] {
        let (status, _, body) = logs(&env.server, &run_id, authorization.as_deref()).await;
        assert_eq!(status, 401, "{authorization:?}: {body}");
        assert!(serde_json::from_str::<Value>(&body).unwrap()["error"].is_string());
        assert!(!body.contains("running"), "{body}");
    }
    let (status, _, _) = logs(&env.server, "not-an-id", Some(&bearer(env.token()))).await;
    assert_eq!(status, 404);

    // Runs are listed for admins only.
    for query in [
        "{ jobRuns { edges { node { id } } } }",
        "{ registrationToken }",
    ] {
        let err = gql_err(&env.server, Some(&member.access_token), query, json!({})).await;
        assert_eq!(code(&err), Some("FORBIDDEN"), "{query}: {err}");
    }
    let err = gql_err(
        &env.server,
        Some(&member.access_token),
        "mutation { triggerJobRun(command: \"\\\"Daily\\\"\") }",
        json!({}),
    )
    .await;
    assert_eq!(code(&err), Some("FORBIDDEN"), "{err}");
}

// ---- 2. a duplicate trigger returns the pending run; bad commands are refused ----

#[tokio::test]
async fn ee_jobs_duplicate_trigger_returns_the_pending_run() {
    let env = Env::start().await;
    let site = Site::start(
        &[("/docs/", "<title>Docs</title><p>Held docs page</p>".into())],
        false,
    )
    .await;
    // Keep the worker busy: a crawl whose requests wait until the test opens the gate.
    let source_id = create_web_document(&env, "Held docs", &site.url("/docs/")).await;
    site.wait_requested().await;
    let crawl = job_runs(&env, &["web_crawler"]).await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // Triggering the crawl by its document's source id (whatever URL the caller adds) is the
    // same pending run once this one is done... and while it runs, a new one.
    let again = trigger(
        &env,
        &web_command(&source_id, "http://169.254.169.254/latest"),
    )
    .await;
    assert_ne!(again, crawl);
    assert_eq!(
        trigger(&env, &web_command(&source_id, "http://elsewhere.invalid/")).await,
        again,
        "the same document's pending crawl"
    );
    let running = job_run(&env, &crawl).await;
    assert!(
        !running["startedAt"].is_null() && running["exitCode"].is_null(),
        "{running}"
    );

    let first = trigger(&env, "\"Daily\"").await;
    let second = trigger(&env, "\"Daily\"").await;
    // The command is compared as the server writes it, whatever the spacing.
    let third = trigger(&env, "  \"Daily\"\n").await;
    assert_eq!(second, first);
    assert_eq!(third, first);
    let daily = job_runs(&env, &["daily"]).await;
    assert_eq!(daily.len(), 1, "{daily:#?}");
    assert_eq!(daily[0]["id"], first.as_str());
    assert!(daily[0]["startedAt"].is_null(), "still pending: {daily:#?}");
    assert_eq!(daily[0]["command"], "\"Daily\"");
    assert_eq!(
        stats(&env, &["daily"]).await,
        json!({"success": 0, "failed": 0, "pending": 1})
    );
    // Another command is another run.
    let gc = trigger(&env, "\"IndexGarbageCollection\"").await;
    assert_ne!(gc, first);

    // Commands the server does not run are refused, and so are sources that do not exist
    // (a caller's URL is never run).
    for bad in [
        "\"SyncPagesIndex\"",
        "Daily",
        "{\"SchedulerGitRepository\": {}}",
        "",
        &web_command("custom_web_document:held", &site.url("/docs/")),
        &git_command("--upload-pack=touch /tmp/pwned", "git:nope"),
    ] {
        let err = gql_err(
            &env.server,
            Some(env.token()),
            "mutation($c: String!) { triggerJobRun(command: $c) }",
            json!({"c": bad}),
        )
        .await;
        assert_eq!(validation_paths(&err), ["command"], "{bad:?}: {err}");
    }

    // Open the gate: the crawl finishes, then the runs behind it, in order.
    site.open();
    let crawl_run = wait_finished(&env, &crawl, Duration::from_secs(30)).await;
    assert_eq!(crawl_run["exitCode"], 0, "{crawl_run}");
    let again_run = wait_finished(&env, &again, Duration::from_secs(30)).await;
    assert_eq!(again_run["exitCode"], 0, "{again_run}");
    // The crawl fetched the document's own URL only.
    assert!(
        run_log(&env, &again).await.contains(&site.url("/docs/")),
        "the row's URL was crawled"
    );
    let daily_run = wait_finished(&env, &first, Duration::from_secs(30)).await;
    assert_eq!(daily_run["exitCode"], 0, "{daily_run}");
    let gc_run = wait_finished(&env, &gc, Duration::from_secs(30)).await;
    assert_eq!(gc_run["exitCode"], 0, "{gc_run}");
    let start =
        |r: &Value| chrono::DateTime::parse_from_rfc3339(r["startedAt"].as_str().unwrap()).unwrap();
    let end = |r: &Value| {
        chrono::DateTime::parse_from_rfc3339(r["finishedAt"].as_str().unwrap()).unwrap()
    };
    assert!(
        start(&daily_run) >= end(&again_run),
        "{again_run} {daily_run}"
    );
    assert!(start(&gc_run) >= end(&daily_run), "{daily_run} {gc_run}");
    assert!(
        run_log(&env, &first)
            .await
            .contains("enqueued 1 web crawls")
    );

    // Once it ran, the same command makes a new run.
    let again = trigger(&env, "\"Daily\"").await;
    assert_ne!(again, first);
    assert_eq!(
        wait_finished(&env, &again, Duration::from_secs(30)).await["exitCode"],
        0
    );
    let ids: Vec<Value> = job_runs(&env, &["daily"])
        .await
        .iter()
        .map(|r| r["id"].clone())
        .collect();
    assert_eq!(ids[..2], [json!(first), json!(again)], "{ids:?}");
}

// ---- 3. a failing job is recorded, notifies the admins, and the worker goes on ----

#[tokio::test]
async fn ee_jobs_a_failing_job_notifies_admins_and_the_next_job_runs() {
    let env = Env::start().await;
    let member = invite_and_register(&env.server, &env.owner, "member@example.com").await;
    let missing = env.models.path().join("no-such-repository");
    let (_, source_id) = create_repository(&env, "missing", &missing).await;
    let run = wait_run_of(
        &env,
        "scheduler_git",
        &format!("\"source_id\":\"{source_id}\""),
        Duration::from_secs(30),
    )
    .await;
    let failing = run["id"].as_str().unwrap().to_string();
    assert_eq!(run["exitCode"], 1, "{run}");
    assert!(!run["finishedAt"].is_null());
    let text = run_log(&env, &failing).await;
    assert!(
        text.lines().last().unwrap().contains("[WARN]: failed: "),
        "{text}"
    );

    // The admins are told, with the run and where its log is.
    const NOTIFICATIONS: &str = "{ notifications { id content read createdAt } }";
    let notes = env.gql(NOTIFICATIONS, json!({})).await["notifications"].clone();
    let notes = notes.as_array().unwrap();
    assert_eq!(notes.len(), 1, "{notes:#?}");
    let content = notes[0]["content"].as_str().unwrap();
    assert!(content.contains("scheduler_git"), "{content}");
    assert!(
        content.contains(&format!("/background-jobs/{failing}/logs")),
        "{content}"
    );
    assert_eq!(notes[0]["read"], false);
    let note_id = notes[0]["id"].as_str().unwrap().to_string();
    // Members are not.
    let theirs = gql_ok(
        &env.server,
        Some(&member.access_token),
        NOTIFICATIONS,
        json!({}),
    )
    .await;
    assert_eq!(theirs["notifications"], json!([]));
    let err = gql_err(
        &env.server,
        Some(&member.access_token),
        "mutation($id: ID) { markNotificationsRead(notificationId: $id) }",
        json!({"id": note_id}),
    )
    .await;
    assert_eq!(code(&err), Some("NOT_FOUND"), "{err}");

    env.gql(
        "mutation($id: ID) { markNotificationsRead(notificationId: $id) }",
        json!({"id": note_id}),
    )
    .await;
    let notes = env.gql(NOTIFICATIONS, json!({})).await;
    assert_eq!(notes["notifications"][0]["read"], true, "{notes}");

    // The worker goes on.
    let next = trigger(&env, "\"Daily\"").await;
    assert_eq!(
        wait_finished(&env, &next, Duration::from_secs(30)).await["exitCode"],
        0
    );
    assert_eq!(
        stats(&env, &["scheduler_git"]).await,
        json!({"success": 0, "failed": 1, "pending": 0})
    );
    assert_eq!(stats(&env, &["daily"]).await["success"], 1);
    // A success notifies no one.
    let notes = env.gql(NOTIFICATIONS, json!({})).await;
    assert_eq!(
        notes["notifications"].as_array().unwrap().len(),
        1,
        "{notes}"
    );
}

// ---- a running indexing run shows how far it is ----

#[tokio::test]
async fn ee_jobs_a_running_index_run_shows_its_progress() {
    let tmp = tempfile::tempdir().unwrap();
    // 100 files of one chunk each: the first embedding batch (64 chunks) is asked for while
    // files remain.
    let files: Vec<(String, String)> = (0..100)
        .map(|i| {
            (
                format!("src/gear_{i}.py"),
                format!("def gear_{i}(teeth):\n    return teeth * {i}\n"),
            )
        })
        .collect();
    let borrowed: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let repo = make_repo(tmp.path(), "gears", &borrowed);
    let env = Env::start().await;
    // The embedder answers slowly: the run stays in flight long enough to be watched.
    env._embedder
        .update_script(|s| s.delay = Some(Duration::from_secs(2)));
    let (_, source_id) = create_repository(&env, "gears", &repo).await;
    let needle = format!("\"source_id\":\"{source_id}\"");

    let running = poll(
        "the indexing run to report progress",
        Duration::from_secs(60),
        || async {
            job_runs(&env, &["scheduler_git"])
                .await
                .into_iter()
                .find(|r| r["command"].as_str().unwrap().contains(&needle))
                .filter(|r| {
                    r["exitCode"].is_null() && r["progress"]["filesDone"].as_i64() > Some(0)
                })
        },
    )
    .await;
    let progress = &running["progress"];
    assert_eq!(progress["filesTotal"], 100, "{running}");
    assert!(progress["filesDone"].as_i64().unwrap() <= 100, "{running}");
    assert!(
        progress["repository"].as_str().unwrap().ends_with("/gears"),
        "{running}"
    );
    assert!(progress["indexedMb"].as_f64().unwrap() > 0.0, "{running}");
    assert!(
        progress["mbPerSecond"].as_f64().unwrap() >= 0.0,
        "{running}"
    );
    // The repository's jobInfo shows the same run with its progress.
    let repos = env
        .gql(
            "{ gitRepositories { edges { node { sourceId jobInfo { lastJobRun { id progress { filesDone filesTotal } } } } } } }",
            json!({}),
        )
        .await;
    let last = &repos["gitRepositories"]["edges"][0]["node"]["jobInfo"]["lastJobRun"];
    assert_eq!(last["id"], running["id"], "{repos}");
    assert_eq!(last["progress"]["filesTotal"], 100, "{repos}");

    env._embedder.update_script(|s| s.delay = None);
    let done = wait_finished(
        &env,
        running["id"].as_str().unwrap(),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(done["exitCode"], 0, "{done}");
    assert!(
        done["progress"].is_null(),
        "no progress once the run has ended: {done}"
    );
}

// ---- 4. kill -9 during a run: the run is failed (-1) and run again after the restart ----

/// A site that holds its page until opened, added as a custom web document (its crawl is
/// enqueued at once): the site and the document's id.
async fn slow_docs(env: &Env) -> (Site, String) {
    let site = Site::start(
        &[(
            "/docs/",
            "<title>Slow docs</title><p>Pages served slowly</p>".into(),
        )],
        false,
    )
    .await;
    let created = env
        .gql(
            "mutation($i: CreateCustomDocumentInput!) { createCustomDocument(input: $i) }",
            json!({"i": {"name": "Slow docs", "url": site.url("/docs/")}}),
        )
        .await["createCustomDocument"]
        .as_str()
        .unwrap()
        .to_string();
    (site, created)
}

#[tokio::test]
async fn ee_jobs_a_run_interrupted_by_kill_9_is_failed_and_run_again() {
    let mut env = Env::start().await;
    let (site, created) = slow_docs(&env).await;
    const DOCS: &str = "{ customWebDocuments { edges { node { id sourceId jobInfo { command lastJobRun { id startedAt finishedAt exitCode } } } } } }";
    let node = |data: &Value| data["customWebDocuments"]["edges"][0]["node"].clone();

    // The crawl is running (its first request is held by the site).
    site.wait_requested().await;
    let doc = node(&env.gql(DOCS, json!({})).await);
    assert_eq!(doc["id"], created.as_str());
    let interrupted = doc["jobInfo"]["lastJobRun"].clone();
    assert!(
        !interrupted["startedAt"].is_null() && interrupted["exitCode"].is_null(),
        "{doc}"
    );
    let old_id = interrupted["id"].as_str().unwrap().to_string();
    let command = doc["jobInfo"]["command"].as_str().unwrap().to_string();

    env.kill_and_restart();
    site.open();

    // The interrupted run is marked failed (-1), and its command runs again, to the end (once
    // the new process holds the worker lease: the killed one's runs out 15 s after its last
    // renewal).
    let old = wait_finished(&env, &old_id, Duration::from_secs(40)).await;
    assert_eq!(old["exitCode"], -1, "{old}");
    assert!(!old["finishedAt"].is_null(), "{old}");
    let rerun = poll(
        "the crawl to run again",
        Duration::from_secs(30),
        || async {
            let doc = node(&env.gql(DOCS, json!({})).await);
            let last = doc["jobInfo"]["lastJobRun"].clone();
            (last["id"] != old_id.as_str() && !last["exitCode"].is_null()).then_some(last)
        },
    )
    .await;
    assert_eq!(rerun["exitCode"], 0, "{rerun}");
    let runs = job_runs(&env, &["web_crawler"]).await;
    assert!(runs.len() >= 2, "{runs:#?}");
    assert_eq!(runs[0]["id"], old_id.as_str());
    assert_eq!(
        runs[1]["id"], rerun["id"],
        "the first run after the restart"
    );
    assert_eq!(runs[1]["command"], command.as_str());
    // The old run's log is still there; the new one says what it indexed.
    assert!(run_log(&env, &old_id).await.contains("[INFO]: running"));
    let text = run_log(&env, rerun["id"].as_str().unwrap()).await;
    assert!(text.contains("indexed 1 pages of"), "{text}");
    assert!(
        env.server.stderr().contains("interrupted by a restart"),
        "{}",
        env.server.stderr()
    );
}

// ---- 4b. workers sharing a root: one works, a standby takes over from a killed one ----

#[tokio::test]
async fn ee_jobs_a_standby_worker_takes_over_the_run_of_a_killed_worker() {
    let env = Env::start_with(&["--role", "web"]).await;
    let first = env.replica("w1", &["--role", "worker"]);
    poll(
        "w1 to become the worker",
        Duration::from_secs(30),
        || async {
            first
                .stderr()
                .contains("this process is the job worker")
                .then_some(())
        },
    )
    .await;
    let standby = env.replica("w2", &["--role", "worker"]);
    poll("w2 to start", Duration::from_secs(30), || async {
        get_json(&standby.url("/readyz"))
            .await
            .0
            .eq(&200)
            .then_some(())
    })
    .await;

    let (site, _) = slow_docs(&env).await;
    const DOCS: &str = "{ customWebDocuments { edges { node { jobInfo { lastJobRun { id startedAt exitCode } } } } } }";
    let last_run = || async {
        env.gql(DOCS, json!({})).await["customWebDocuments"]["edges"][0]["node"]["jobInfo"]
            ["lastJobRun"]
            .clone()
    };
    site.wait_requested().await;
    let running = last_run().await;
    assert!(
        !running["startedAt"].is_null() && running["exitCode"].is_null(),
        "{running}"
    );
    let old_id = running["id"].as_str().unwrap().to_string();
    // The crawl is w1's: the standby started no run and enqueued nothing of the schedules.
    assert!(
        first.stderr().contains("(web_crawler) started"),
        "{}",
        first.stderr()
    );
    assert!(
        !standby.stderr().contains("job run"),
        "{}",
        standby.stderr()
    );
    assert!(!standby.stderr().contains("this process is the job worker"));

    // kill -9 of the worker mid-run (dropping a replica kills it).
    drop(first);
    site.open();
    let old = wait_finished(&env, &old_id, Duration::from_secs(40)).await;
    assert_eq!(old["exitCode"], -1, "{old}");
    let rerun = poll(
        "the crawl to run again",
        Duration::from_secs(30),
        || async {
            let last = last_run().await;
            (last["id"] != old_id.as_str() && !last["exitCode"].is_null()).then_some(last)
        },
    )
    .await;
    assert_eq!(rerun["exitCode"], 0, "{rerun}");
    let log = standby.stderr();
    assert!(log.contains("this process is the job worker"), "{log}");
    assert!(
        log.contains("interrupted by a restart or the loss of its worker"),
        "{log}"
    );
    assert!(log.contains("(web_crawler) finished"), "{log}");
    // The web replica never ran a job.
    assert!(
        !env.server.stderr().contains("job run"),
        "{}",
        env.server.stderr()
    );
}

// ---- 5. commits are indexed and found by the Answer Engine ----

#[tokio::test]
async fn ee_jobs_commits_are_found_by_the_answer_engine() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = make_repo(tmp.path(), "flux", &[("src/flux.py", SPROCKETS)]);
    std::fs::write(
        repo.join("src/flux.py"),
        format!("{SPROCKETS}\nTOLERANCE = 0.25\n"),
    )
    .unwrap();
    git(&repo, &["add", "-A"]);
    let message = "Recalibrate the flux capacitor tolerance for quasar mode";
    git(&repo, &["commit", "-q", "-m", message]);
    let head = git(&repo, &["rev-parse", "HEAD"]);

    let env = Env::start().await;
    let (_, source_id) = create_repository(&env, "flux", &repo).await;
    let run = wait_run_of(
        &env,
        "scheduler_git",
        &format!("\"source_id\":\"{source_id}\""),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(run["exitCode"], 0, "{run}");
    let run_id = run["id"].as_str().unwrap().to_string();
    assert!(
        run_log(&env, &run_id)
            .await
            .contains("indexed 2 new commits")
    );

    let hits = doc_hits(&env, &[&source_id], "quasar capacitor").await;
    assert_eq!(
        hits,
        [json!({
            "__typename": "MessageAttachmentCommitDoc",
            "sha": head,
            "message": message,
            "authorEmail": "ann@example.invalid"
        })]
    );
    // Other sources' commits are not searched.
    assert!(
        doc_hits(&env, &["git:other"], "quasar capacitor")
            .await
            .is_empty()
    );

    // Indexing again adds no commit twice.
    let again = trigger(&env, run["command"].as_str().unwrap()).await;
    assert_ne!(again, run_id);
    let rerun = wait_finished(&env, &again, Duration::from_secs(30)).await;
    assert_eq!(rerun["exitCode"], 0);
    assert!(
        run_log(&env, &again)
            .await
            .contains("indexed 0 new commits")
    );
    assert_eq!(
        doc_hits(&env, &[&source_id], "quasar capacitor")
            .await
            .len(),
        1
    );
}

// ---- 6. ingestion: accepted, indexed by the schedule, found, deleted, expired ----

async fn ingest(env: &Env, authorization: Option<&str>, body: &Value) -> (u16, Value) {
    let (status, body, _) = rest(
        &env.server,
        "POST",
        "/v1beta/ingestion",
        authorization,
        Some(body),
    )
    .await;
    (status, body)
}

async fn ingestion_status(env: &Env, source: &str) -> Value {
    env.gql(
        "query($s: [String!]) { ingestionStatus(sources: $s) { source pending indexed failed total } }",
        json!({"s": [source]}),
    )
    .await["ingestionStatus"]
        .clone()
}

/// Waits for the next garbage collection (enqueued by a deletion) to finish.
async fn wait_garbage_collected(env: &Env, after: usize) {
    poll(
        "the garbage collection",
        Duration::from_secs(20),
        || async {
            let runs = job_runs(env, &["index_garbage_collection"]).await;
            (runs.len() > after && runs.iter().all(|r| r["exitCode"] == 0)).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn ee_jobs_ingested_documents_are_indexed_found_deleted_and_expire() {
    let env = Env::start().await;
    let member = invite_and_register(&env.server, &env.owner, "member@example.com").await;
    let token = env.gql("{ registrationToken }", json!({})).await["registrationToken"]
        .as_str()
        .unwrap()
        .to_string();
    let document = json!({
        "source": "handbook",
        "id": "onboarding/1",
        "title": "Onboarding guide",
        "body": "Every newcomer learns the pelican protocol on the first day.",
        "link": "http://127.0.0.1:9/handbook/onboarding",
    });

    // Only the registration token may push documents.
    for authorization in [
        None,
        Some(bearer("wrong-token")),
        Some(bearer(&member.auth_token)),
        Some(bearer(&env.owner.auth_token)),
        Some(bearer(env.token())),
        Some(format!("Basic {token}")),
    ] {
        let (status, body) = ingest(&env, authorization.as_deref(), &document).await;
        assert_eq!(status, 401, "{authorization:?}: {body}");
        assert!(body["error"].is_string(), "{body}");
    }
    // Bad bodies are refused with a JSON error.
    let auth = bearer(&token);
    let mut bad = Vec::new();
    for (change, key, value) in [
        ("missing title", "title", Value::Null),
        ("unknown field", "extra", json!(1)),
        ("source with a slash", "source", json!("a/b")),
        ("empty id", "id", json!("")),
        ("bad ttl", "ttl", json!("soon")),
        ("title not a string", "title", json!(5)),
    ] {
        let mut body = document.clone();
        if value.is_null() {
            body.as_object_mut().unwrap().remove(key);
        } else {
            body[key] = value;
        }
        bad.push((change, body));
    }
    for (change, body) in &bad {
        let (status, answer) = ingest(&env, Some(&auth), body).await;
        assert!(
            status == 400 || status == 422,
            "{change}: {status} {answer}"
        );
        assert!(
            answer["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{change}: {answer}"
        );
    }
    let response = client()
        .post(env.server.url("/v1beta/ingestion"))
        .header("authorization", &auth)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let answer: Value = response.json().await.unwrap();
    assert!(answer["error"].is_string(), "{answer}");
    assert_eq!(ingestion_status(&env, "handbook").await, json!([]));

    // Accepted, then indexed by the 10-second schedule.
    let (status, answer) = ingest(&env, Some(&auth), &document).await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["id"], "onboarding/1");
    assert_eq!(answer["source"], "handbook");
    assert!(answer["message"].as_str().is_some_and(|m| !m.is_empty()));
    let status_now = ingestion_status(&env, "handbook").await;
    assert_eq!(status_now[0]["total"], 1, "{status_now}");
    assert_eq!(status_now[0]["failed"], 0, "{status_now}");
    poll(
        "the document to be indexed",
        Duration::from_secs(25),
        || async { (ingestion_status(&env, "handbook").await[0]["indexed"] == 1).then_some(()) },
    )
    .await;
    assert_eq!(job_runs(&env, &["ingestion_index_sync"]).await.len(), 1);

    let source_id = "ingested:handbook";
    let hits = doc_hits(&env, &[source_id], "pelican protocol").await;
    assert_eq!(
        hits,
        [json!({
            "__typename": "MessageAttachmentIngestedDoc",
            "id": "onboarding/1",
            "title": "Onboarding guide",
            "ingestedLink": "http://127.0.0.1:9/handbook/onboarding",
            "body": "Every newcomer learns the pelican protocol on the first day.",
        })]
    );

    // Deleted by its id (URL-encoded in the path): gone from search after the collection.
    let gcs = job_runs(&env, &["index_garbage_collection"]).await.len();
    let path = "/v1beta/ingestion/handbook/onboarding%2F1";
    let (status, body, _) = rest(
        &env.server,
        "DELETE",
        path,
        Some(&bearer(&member.auth_token)),
        None,
    )
    .await;
    assert_eq!(status, 401, "{body}");
    let (status, body, _) = rest(&env.server, "DELETE", path, Some(&auth), None).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["deleted"], 1, "{body}");
    let (status, body, _) = rest(&env.server, "DELETE", path, Some(&auth), None).await;
    assert_eq!(status, 404, "{body}");
    assert!(body["error"].is_string());
    wait_garbage_collected(&env, gcs).await;
    assert!(
        doc_hits(&env, &[source_id], "pelican protocol")
            .await
            .is_empty()
    );
    assert_eq!(ingestion_status(&env, "handbook").await, json!([]));

    // A short TTL: indexed (run at once here), then removed once it has passed.
    let mut short = document.clone();
    short["id"] = json!("flash");
    short["body"] = json!("The walrus memo is only valid briefly.");
    short["ttl"] = json!("8s");
    let (status, answer) = ingest(&env, Some(&auth), &short).await;
    assert_eq!(status, 202, "{answer}");
    let sync = trigger(&env, "\"SyncIngestionIndex\"").await;
    assert_eq!(
        wait_finished(&env, &sync, Duration::from_secs(8)).await["exitCode"],
        0
    );
    // (The schedule may have taken it first; either way it is indexed before it expires.)
    assert_eq!(
        ingestion_status(&env, "handbook").await,
        json!([{"source": "handbook", "pending": 0, "indexed": 1, "failed": 0, "total": 1}])
    );
    assert_eq!(doc_hits(&env, &[source_id], "walrus memo").await.len(), 1);
    poll(
        "the document to expire",
        Duration::from_secs(25),
        || async {
            ingestion_status(&env, "handbook")
                .await
                .as_array()
                .unwrap()
                .is_empty()
                .then_some(())
        },
    )
    .await;
    // The same run removed it from the index: wait for it to end, then search.
    poll(
        "the expiring sync to end",
        Duration::from_secs(10),
        || async {
            job_runs(&env, &["ingestion_index_sync"])
                .await
                .iter()
                .all(|r| !r["exitCode"].is_null())
                .then_some(())
        },
    )
    .await;
    assert!(doc_hits(&env, &[source_id], "walrus memo").await.is_empty());
    let expired_run = job_runs(&env, &["ingestion_index_sync"])
        .await
        .last()
        .unwrap()
        .clone();
    assert_eq!(expired_run["exitCode"], 0);
    let text = run_log(&env, expired_run["id"].as_str().unwrap()).await;
    assert!(text.contains("removed 1 expired documents"), "{text}");
}

// ---- 7. a web crawl of a loopback site ----

#[tokio::test]
async fn ee_jobs_a_crawled_site_is_found_by_the_answer_engine() {
    let elsewhere = Site::start(&[("/docs/", "<p>nebula elsewhere</p>".into())], true).await;
    let site_pages = |other: &str| {
        vec![
            (
                "/docs/index.html",
                format!(
                    r#"<html><head><title>Nebula toolkit</title></head><body>
                    <h1>Welcome to the nebula toolkit</h1>
                    <a href="guide.html">Guide</a> <a href="guide.html#thrusters">Thrusters</a>
                    <a href="/outside/secret.html">Secret</a> <a href="{other}">Elsewhere</a>
                    </body></html>"#
                ),
            ),
            (
                "/docs/guide.html",
                "<title>Nebula guide</title><p>Calibrate the nebula thrusters before launch.</p>"
                    .to_string(),
            ),
            (
                "/outside/secret.html",
                "<title>Secret</title><p>zanzibar nebula classified</p>".to_string(),
            ),
        ]
    };
    let site = Site::start(&site_pages(&elsewhere.url("/docs/")), true).await;
    let env = Env::start().await;
    let url = site.url("/docs/index.html");
    const CREATE: &str =
        "mutation($i: CreateCustomDocumentInput!) { createCustomDocument(input: $i) }";
    let id = env
        .gql(CREATE, json!({"i": {"name": "Nebula docs", "url": url}}))
        .await["createCustomDocument"]
        .as_str()
        .unwrap()
        .to_string();
    // (A taken URL is reported on `name` too: the storage layer does not say which.)
    for (name, doc_url, path) in [
        ("Nebula docs", "http://127.0.0.1:9/other/", "name"),
        ("Other name", url.as_str(), "name"),
        ("Bad", "ftp://127.0.0.1/docs/", "url"),
        ("", "http://127.0.0.1:9/x/", "name"),
    ] {
        let err = gql_err(
            &env.server,
            Some(env.token()),
            CREATE,
            json!({"i": {"name": name, "url": doc_url}}),
        )
        .await;
        assert_eq!(validation_paths(&err), [path], "{name} {doc_url}: {err}");
    }

    const DOCS: &str = "{ customWebDocuments { edges { node { id name url sourceId jobInfo { lastJobRun { id exitCode } } } } } }";
    let doc = poll("the crawl to finish", Duration::from_secs(30), || async {
        let data = env.gql(DOCS, json!({})).await;
        let node = data["customWebDocuments"]["edges"][0]["node"].clone();
        (!node["jobInfo"]["lastJobRun"]["exitCode"].is_null()).then_some(node)
    })
    .await;
    assert_eq!(doc["id"], id.as_str());
    assert_eq!(doc["name"], "Nebula docs");
    assert_eq!(doc["url"], url.as_str());
    assert_eq!(doc["jobInfo"]["lastJobRun"]["exitCode"], 0, "{doc}");
    let source_id = doc["sourceId"].as_str().unwrap().to_string();
    assert_eq!(source_id, format!("custom_web_document:{id}"));
    let run_id = doc["jobInfo"]["lastJobRun"]["id"].as_str().unwrap();
    assert!(run_log(&env, run_id).await.contains("indexed 2 pages of"));

    // The pages under the prefix are found, by title and text, with their links.
    let hits = doc_hits(&env, &[&source_id], "nebula thrusters").await;
    let mut links: Vec<&str> = hits
        .iter()
        .map(|h| h["webLink"].as_str().unwrap())
        .collect();
    links.sort();
    assert_eq!(
        links,
        [site.url("/docs/guide.html"), site.url("/docs/index.html")],
        "{hits:#?}"
    );
    assert!(
        hits.iter()
            .all(|h| h["__typename"] == "MessageAttachmentWebDoc")
    );
    let guide = hits
        .iter()
        .find(|h| h["webLink"] == site.url("/docs/guide.html").as_str())
        .unwrap();
    assert_eq!(guide["title"], "Nebula guide");
    assert!(
        guide["content"]
            .as_str()
            .unwrap()
            .contains("Calibrate the nebula thrusters")
    );
    // The page outside the prefix was neither fetched nor indexed; nor was the other site.
    assert!(
        doc_hits(&env, &[&source_id], "zanzibar classified")
            .await
            .is_empty()
    );
    let requests = site.requests();
    assert!(
        requests.iter().all(|p| p.starts_with("/docs/")),
        "{requests:?}"
    );
    assert_eq!(
        requests.iter().filter(|p| *p == "/docs/guide.html").count(),
        1,
        "{requests:?}"
    );
    assert!(
        elsewhere.requests().is_empty(),
        "{:?}",
        elsewhere.requests()
    );

    // Deleting the document removes its pages from search.
    let gcs = job_runs(&env, &["index_garbage_collection"]).await.len();
    env.gql(
        "mutation($id: ID!) { deleteCustomDocument(id: $id) }",
        json!({"id": id}),
    )
    .await;
    assert_eq!(
        env.gql(DOCS, json!({})).await["customWebDocuments"]["edges"],
        json!([])
    );
    wait_garbage_collected(&env, gcs).await;
    assert!(
        doc_hits(&env, &[&source_id], "nebula thrusters")
            .await
            .is_empty()
    );
}
