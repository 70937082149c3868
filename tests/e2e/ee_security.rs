//! Attacks an attacker would try first, each written as the attacker's request against the
//! real binary: git option injection, local paths outside the allow-list, credentials in job
//! commands, logs and notifications, sign-in floods, SSRF through the crawler, and keep-alive
//! after a rejection. Every refusal is a clear error; nothing valid is lost.

use std::path::Path;

use serde_json::{Value, json};

use crate::{ee_support::*, support::*};

const CREATE: &str =
    "mutation($n: String!, $u: String!) { createGitRepository(name: $n, gitUrl: $u) }";

/// `[security]` allowing local repositories below `root` only.
fn security_config(root: &Path) -> String {
    format!(
        "[security]\nlocal_repository_roots = [{}]\n",
        json!(root.display().to_string())
    )
}

fn error_message(error: &Value) -> String {
    let mut text = error["message"].as_str().unwrap_or_default().to_string();
    if let Some(errors) = error["extensions"]["validation-errors"]["errors"].as_array() {
        for e in errors {
            text.push(' ');
            text.push_str(e["message"].as_str().unwrap_or_default());
        }
    }
    text
}

async fn git_repository_urls(server: &TabbyServer, token: &str) -> Vec<String> {
    let query = "{ gitRepositories { edges { node { gitUrl } } } }";
    let data = gql_ok(server, Some(token), query, json!({})).await;
    node_strings(&data["gitRepositories"], "gitUrl")
}

// ---- 1. git CLI and paths ----

#[tokio::test]
async fn ee_security_git_options_and_foreign_paths_are_refused_through_graphql() {
    let tmp = tempfile::tempdir().unwrap();
    let allowed = tmp.path().join("allowed");
    let repo = make_repo(
        &allowed,
        "inside",
        &[("src/a.py", "def a():\n    return 1\n")],
    );
    let outside = make_repo(
        tmp.path(),
        "outside",
        &[("src/b.py", "def b():\n    return 2\n")],
    );
    let marker = tmp.path().join("pwned");
    let server = TabbyServer::start_ee(&security_config(&allowed), &[]);
    let admin = register_owner(&server, "owner@example.com").await;
    let a = admin.access_token.as_str();

    for (url, says) in [
        (
            format!("--upload-pack=touch {}", marker.display()),
            "option",
        ),
        (
            format!("--upload-pack=touch${{IFS}}{}", marker.display()),
            "option",
        ),
        ("-c".to_string(), "option"),
        ("ssh://-oProxyCommand=touch/repo".to_string(), "'-'"),
        ("ext::sh".to_string(), "https://"),
        (
            format!("file://{}", outside.display()),
            "local_repository_roots",
        ),
        (outside.display().to_string(), "local_repository_roots"),
        (
            format!("file://{}/../outside", allowed.display()),
            "local_repository_roots",
        ),
        ("file:///etc".to_string(), "local_repository_roots"),
    ] {
        let err = gql_err(&server, Some(a), CREATE, json!({"n": "attack", "u": url})).await;
        assert_eq!(validation_paths(&err), ["gitUrl"], "{url}: {err}");
        let message = error_message(&err);
        assert!(message.contains(says), "{url}: {message}");
    }
    assert!(
        git_repository_urls(&server, a).await.is_empty(),
        "no row was created"
    );

    // A repository below the allowed root is accepted, and indexing it runs no attacker code.
    let id = gql_ok(
        &server,
        Some(a),
        CREATE,
        json!({"n": "inside", "u": format!("file://{}", repo.display())}),
    )
    .await["createGitRepository"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(git_repository_urls(&server, a).await.len(), 1);
    // Refs that look like options are refused on creation and on update.
    for (query, vars) in [
        (
            "mutation($n: String!, $u: String!) { createGitRepository(name: $n, gitUrl: $u, refs: [\"--output=/tmp/x\"]) }",
            json!({"n": "refs", "u": "https://git.example.invalid/r"}),
        ),
        (
            "mutation($id: ID!) { updateGitRepository(id: $id, refs: [\"main\", \"-c\"]) }",
            json!({"id": id}),
        ),
    ] {
        let err = gql_err(&server, Some(a), query, vars).await;
        assert_eq!(validation_paths(&err), ["refs"], "{err}");
    }
    assert!(!marker.exists());
}

#[tokio::test]
async fn ee_security_without_roots_graphql_takes_only_remote_urls() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = make_repo(tmp.path(), "local", &[("a.py", "def a():\n    pass\n")]);
    let server = TabbyServer::start_ee("", &[]);
    let admin = register_owner(&server, "owner@example.com").await;
    let err = gql_err(
        &server,
        Some(&admin.access_token),
        CREATE,
        json!({"n": "local", "u": format!("file://{}", repo.display())}),
    )
    .await;
    assert_eq!(validation_paths(&err), ["gitUrl"], "{err}");
    assert!(error_message(&err).contains("none are configured"), "{err}");
    gql_ok(
        &server,
        Some(&admin.access_token),
        CREATE,
        json!({"n": "remote", "u": "https://git.example.invalid/team/remote.git"}),
    )
    .await;
}

#[test]
fn ee_security_git_options_in_config_toml_stop_the_server() {
    for (config, key) in [
        (
            "[[repositories]]\ngit_url = \"--upload-pack=touch /tmp/pwned\"\n",
            "repositories[0].git_url",
        ),
        (
            "[[repositories]]\ngit_url = \"https://h/r\"\nrefs = [\"--output=/tmp/x\"]\n",
            "repositories[0].refs",
        ),
        (
            "[security]\nlocal_repository_roots = [\"relative\"]\n",
            "security.local_repository_roots[0]",
        ),
        (
            "[security]\nfetch_allowed_hosts = [\"10.0.0.0/40\"]\n",
            "security.fetch_allowed_hosts[0]",
        ),
    ] {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("config.toml"), config).unwrap();
        let (status, _, stderr) = run_tabby(root.path(), &["serve", "--port", "0"]);
        assert!(!status.success(), "{config}: {stderr}");
        assert!(stderr.contains("config.toml"), "{stderr}");
        assert!(stderr.contains(key), "{key}: {stderr}");
    }
}

// ---- 2. jobs as data: no caller URL is run, no credential is shown ----

/// Waits until `jobRuns` (as `token`) has a finished run of `job` whose command has `needle`.
async fn finished_run(server: &TabbyServer, token: &str, job: &str, needle: &str) -> Value {
    poll(
        &format!("a finished {job} run with {needle}"),
        std::time::Duration::from_secs(30),
        || async {
            let data = gql_ok(
                server,
                Some(token),
                "query($j: [String!]) { jobRuns(jobs: $j) { edges { node { id command exitCode } } } }",
                json!({"j": [job]}),
            )
            .await;
            data["jobRuns"]["edges"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["node"].clone())
                .rev()
                .find(|r| r["command"].as_str().unwrap().contains(needle) && !r["exitCode"].is_null())
        },
    )
    .await
}

async fn job_log(server: &TabbyServer, token: &str, run_id: &str) -> String {
    let response = client()
        .get(server.url(&format!("/background-jobs/{run_id}/logs")))
        .header("authorization", bearer(token))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

#[tokio::test]
async fn ee_security_repository_credentials_are_never_shown() {
    const SECRET: &str = "glpat-SECRET0123";
    // Port 1 on loopback refuses at once: the indexing jobs fail fast (and notify admins).
    let config = format!(
        "[[repositories]]\ngit_url = \"https://oauth2:{SECRET}@127.0.0.1:1/team/private.git\"\n"
    );
    let server = TabbyServer::start_ee(&config, &[]);
    let admin = register_owner(&server, "owner@example.com").await;
    let member = invite_and_register(&server, &admin, "member@example.com").await;
    let a = admin.access_token.as_str();
    gql_ok(
        &server,
        Some(a),
        CREATE,
        json!({"n": "other", "u": format!("https://ci:{SECRET}@127.0.0.1:1/team/other.git?private_token={SECRET}")}),
    )
    .await;

    // The attacker's query, with an editor's auth token and with a member's session.
    let query = "{ repositoryList { name gitUrl jobInfo { command lastJobRun { command } } } }";
    for token in [member.auth_token.as_str(), member.access_token.as_str()] {
        let body = graphql(&server.url("/graphql"), Some(token), query, json!({})).await;
        let text = body.to_string();
        assert!(!text.contains(SECRET), "{text}");
        assert!(body["data"].is_null(), "{text}");
        assert_eq!(code(&body["errors"][0]), Some("FORBIDDEN"), "{text}");
    }
    // Without `command` members still see the list (no credentials in it).
    let list = gql_ok(
        &server,
        Some(&member.auth_token),
        "{ repositoryList { name gitUrl jobInfo { lastJobRun { exitCode } } } }",
        json!({}),
    )
    .await;
    assert_eq!(
        list["repositoryList"].as_array().unwrap().len(),
        2,
        "{list}"
    );
    assert!(!list.to_string().contains(SECRET), "{list}");

    // Admins see commands, redacted; and every other place a URL shows up is clean too.
    let runs = [
        finished_run(&server, a, "scheduler_git", "team/private").await,
        finished_run(&server, a, "scheduler_git", "team/other").await,
    ];
    for run in &runs {
        assert_eq!(run["exitCode"], 1, "{run}");
        let log = job_log(&server, a, run["id"].as_str().unwrap()).await;
        assert!(log.contains("127.0.0.1:1/team/"), "{log}");
        assert!(!log.contains(SECRET), "{log}");
    }
    for query in [
        "{ repositoryList { gitUrl jobInfo { command lastJobRun { command } } } }",
        "{ gitRepositories { edges { node { gitUrl jobInfo { command lastJobRun { command } } } } } }",
        "{ jobRuns { edges { node { command } } } }",
        "{ notifications { content } }",
    ] {
        let data = gql_ok(&server, Some(a), query, json!({})).await;
        let text = data.to_string();
        assert!(!text.contains(SECRET), "{query}: {text}");
        assert!(text.contains("team/"), "{query}: {text}");
    }
    let notes = gql_ok(&server, Some(a), "{ notifications { content } }", json!({})).await;
    assert!(
        notes["notifications"].as_array().unwrap().len() >= 2,
        "{notes}"
    );
    assert!(
        !server.stderr().contains(SECRET),
        "server log:\n{}",
        server.stderr()
    );
}

#[tokio::test]
async fn ee_security_trigger_job_run_never_runs_a_callers_url() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = make_repo(tmp.path(), "legit", &[("a.py", "def a():\n    pass\n")]);
    let marker = tmp.path().join("pwned");
    let server = TabbyServer::start_ee(&security_config(tmp.path()), &[]);
    let admin = register_owner(&server, "owner@example.com").await;
    let a = admin.access_token.as_str();
    let id = gql_ok(
        &server,
        Some(a),
        CREATE,
        json!({"n": "legit", "u": format!("file://{}", repo.display())}),
    )
    .await["createGitRepository"]
        .as_str()
        .unwrap()
        .to_string();
    let source_id = format!("git:{id}");
    let first = finished_run(&server, a, "scheduler_git", &source_id).await;
    assert_eq!(first["exitCode"], 0, "{first}");

    let trigger = "mutation($c: String!) { triggerJobRun(command: $c) }";
    let attack = |source_id: &str| {
        json!({"SchedulerGitRepository": {
            "git_url": format!("--upload-pack=touch {}", marker.display()),
            "source_id": source_id,
            "git_refs": ["--output=/tmp/x"],
        }})
        .to_string()
    };
    // An unknown source is refused, naming the problem.
    for command in [
        attack("git:nope"),
        json!({"WebCrawler": {"source_id": "custom_web_document:nope", "url": "http://169.254.169.254/"}})
            .to_string(),
    ] {
        let err = gql_err(&server, Some(a), trigger, json!({"c": command})).await;
        assert_eq!(validation_paths(&err), ["command"], "{err}");
        assert!(err.to_string().contains("No "), "{err}");
    }
    // A known source runs the row's URL: the attacker's fields are never read.
    let run =
        gql_ok(&server, Some(a), trigger, json!({"c": attack(&source_id)})).await["triggerJobRun"]
            .as_str()
            .unwrap()
            .to_string();
    let done = poll(
        "the triggered run",
        std::time::Duration::from_secs(30),
        || async {
            let data = gql_ok(
                &server,
                Some(a),
                "query($i: [ID!]) { jobRuns(ids: $i) { edges { node { command exitCode } } } }",
                json!({"i": [run]}),
            )
            .await;
            let node = data["jobRuns"]["edges"][0]["node"].clone();
            (!node["exitCode"].is_null()).then_some(node)
        },
    )
    .await;
    assert_eq!(done["exitCode"], 0, "{done}");
    assert_eq!(done["command"], first["command"], "the row's command");
    let log = job_log(&server, a, &run).await;
    assert!(!log.contains("upload-pack"), "{log}");
    assert!(!marker.exists());
}

// ---- 3. sign-in, registration, refresh ----

const TOKEN_AUTH: &str =
    "mutation($e: String!, $p: String!) { tokenAuth(email: $e, password: $p) { accessToken } }";

#[tokio::test]
async fn ee_security_a_1000_operation_token_auth_batch_is_refused_quickly() {
    let server = TabbyServer::start_ee("", &[]);
    register_owner(&server, "owner@example.com").await;
    let batch = |n: usize| -> Value {
        (0..n)
            .map(|i| {
                json!({"query": TOKEN_AUTH, "variables": {"e": "owner@example.com", "p": format!("Guess{i}!x")}})
            })
            .collect()
    };
    let started = std::time::Instant::now();
    let response = client()
        .post(server.url("/graphql"))
        .json(&batch(1000))
        .send()
        .await
        .unwrap();
    let elapsed = started.elapsed();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    let error = &body["errors"][0];
    assert_eq!(error["extensions"]["code"], "BATCH_TOO_LARGE", "{body}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("at most 10") && message.contains("1000"),
        "{message}"
    );
    assert!(
        elapsed < std::time::Duration::from_secs(2),
        "took {elapsed:?}"
    );

    // Nothing of it ran: the owner's sign-in limiter is untouched.
    let ok = graphql(
        &server.url("/graphql"),
        None,
        TOKEN_AUTH,
        json!({"e": "owner@example.com", "p": PASSWORD}),
    )
    .await;
    assert!(ok["data"]["tokenAuth"]["accessToken"].is_string(), "{ok}");
    // A batch within the cap still works, one answer per operation.
    let response = client()
        .post(server.url("/graphql"))
        .json(&json!([{"query": "{ serverInfo { isAdminInitialized } }"}, {"query": "{ serverInfo { isAdminInitialized } }"}]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answers: Value = response.json().await.unwrap();
    assert_eq!(answers.as_array().map(Vec::len), Some(2), "{answers}");
}

#[tokio::test]
async fn ee_security_concurrent_wrong_passwords_cannot_outrun_the_limiter() {
    let server = TabbyServer::start_ee("", &[]);
    register_owner(&server, "owner@example.com").await;
    let url = server.url("/graphql");
    let attempts = futures::future::join_all((0..60).map(|i| {
        let url = url.clone();
        async move {
            graphql(
                &url,
                None,
                TOKEN_AUTH,
                json!({"e": "owner@example.com", "p": format!("Wrong{i}!x")}),
            )
            .await
        }
    }))
    .await;
    let checked = attempts
        .iter()
        .filter(|b| b["errors"][0]["message"] == "Invalid email address or password")
        .count();
    let limited = attempts
        .iter()
        .filter(|b| code(&b["errors"][0]) == Some("TOO_MANY_REQUESTS"))
        .count();
    assert_eq!(checked + limited, 60, "{attempts:?}");
    // The per-address budget is 10: concurrency does not buy more guesses.
    assert!(checked <= 10, "{checked} passwords were checked");
    let right = graphql(
        &url,
        None,
        TOKEN_AUTH,
        json!({"e": "owner@example.com", "p": PASSWORD}),
    )
    .await;
    assert_eq!(
        code(&right["errors"][0]),
        Some("TOO_MANY_REQUESTS"),
        "{right}"
    );
}

#[tokio::test]
async fn ee_security_register_and_refresh_floods_are_bounded() {
    let server = TabbyServer::start_ee("", &[]);
    let owner = register_owner(&server, "owner@example.com").await;
    let url = server.url("/graphql");
    let before = server.peak_rss_kib();
    let started = std::time::Instant::now();
    let register = "mutation($e: String!, $c: String) { register(email: $e, password1: \"Passw0rd!x\", password2: \"Passw0rd!x\", name: \"x\", invitationCode: $c) { accessToken } }";
    let answers = futures::future::join_all((0..300).map(|i| {
        let url = url.clone();
        async move {
            let code = (i % 2 == 0).then(|| format!("bogus-{i}"));
            graphql(
                &url,
                None,
                register,
                json!({"e": format!("flood{i}@example.com"), "c": code}),
            )
            .await
        }
    }))
    .await;
    // And sign-ins that each cost an argon2 verification (19 MiB apiece): unbounded, 300 of
    // them at once would take 5.7 GB.
    let sign_ins = futures::future::join_all((0..300).map(|i| {
        let url = url.clone();
        async move {
            graphql(
                &url,
                None,
                TOKEN_AUTH,
                json!({"e": format!("nobody{i}@example.com"), "p": "Wrong0!xx"}),
            )
            .await
        }
    }))
    .await;
    assert!(sign_ins.iter().all(|b| b["data"].is_null()));
    let elapsed = started.elapsed();
    let peak = server.peak_rss_kib();
    eprintln!(
        "300 concurrent registrations and 300 sign-ins: {elapsed:?}, peak RSS {before} KiB before, {peak} KiB after"
    );
    let limited = answers
        .iter()
        .filter(|b| code(&b["errors"][0]) == Some("TOO_MANY_REQUESTS"))
        .count();
    assert!(
        answers.iter().all(|b| b["data"].is_null()),
        "no account was made"
    );
    assert!(limited >= 250, "only {limited} of 300 were rate limited");
    // One hash per core at a time. Measured: +160 to +260 MiB whether 10 or 300 sign-ins
    // arrive at once (the allocator keeps freed hash memory); unbounded, 300 concurrent
    // verifications would each hold 19 MiB.
    assert!(
        peak < before + 512 * 1024,
        "peak RSS grew from {before} to {peak} KiB"
    );
    assert!(elapsed < std::time::Duration::from_secs(60), "{elapsed:?}");

    // Refreshing is limited per address too (a real token from that address included, with an
    // error that says why).
    let refresh = "mutation($t: String!) { refreshToken(refreshToken: $t) { accessToken } }";
    let mut refused = None;
    for i in 0..70 {
        let body = graphql(&url, None, refresh, json!({"t": format!("junk-{i}")})).await;
        if code(&body["errors"][0]) == Some("TOO_MANY_REQUESTS") {
            refused = Some(i);
            break;
        }
    }
    let refused = refused.expect("70 refreshes were never rate limited");
    assert!((50..=65).contains(&refused), "limited after {refused}");
    // The bucket refills a token a second, so a stall of over a second between the refusal
    // and the next request lets that one through: drain it again right before each try, and
    // require the real token to be refused in one of three tries.
    let mut last = serde_json::Value::Null;
    for _ in 0..3 {
        for i in 0..10 {
            let body = graphql(&url, None, refresh, json!({"t": format!("drain-{i}")})).await;
            if code(&body["errors"][0]) == Some("TOO_MANY_REQUESTS") {
                break;
            }
        }
        last = graphql(&url, None, refresh, json!({"t": owner.refresh_token})).await;
        if code(&last["errors"][0]) == Some("TOO_MANY_REQUESTS") {
            return;
        }
        assert!(
            last["data"]["refreshToken"].is_object() || last["errors"].is_array(),
            "{last}"
        );
    }
    panic!("a real refresh token was never rate limited: {last}");
}

#[tokio::test]
async fn ee_security_an_expired_invitation_cannot_register() {
    let server = TabbyServer::start_ee("[security]\ninvitation_expiry_days = 3\n", &[]);
    let owner = register_owner(&server, "owner@example.com").await;
    let fresh = create_invitation(&server, &owner, "fresh@example.com").await;
    let stale = create_invitation(&server, &owner, "stale@example.com").await;
    server.sql(&format!(
        "UPDATE invitations SET created_at = DATETIME('now', '-4 days') WHERE code = '{stale}';"
    ));
    let register = "mutation($e: String!, $c: String) { register(email: $e, password1: \"Passw0rd!x\", password2: \"Passw0rd!x\", name: \"x\", invitationCode: $c) { accessToken } }";
    let err = gql_err(
        &server,
        None,
        register,
        json!({"e": "stale@example.com", "c": stale}),
    )
    .await;
    assert_eq!(validation_paths(&err), ["invitationCode"], "{err}");
    assert!(error_message(&err).contains("expired"), "{err}");
    let ok = gql_ok(
        &server,
        None,
        register,
        json!({"e": "fresh@example.com", "c": fresh}),
    )
    .await;
    assert!(ok["register"]["accessToken"].is_string());
}

const REFRESH: &str =
    "mutation($t: String!) { refreshToken(refreshToken: $t) { accessToken refreshToken } }";

async fn refresh(server: &TabbyServer, token: &str) -> Value {
    graphql(&server.url("/graphql"), None, REFRESH, json!({"t": token})).await
}

#[tokio::test]
async fn ee_security_a_replayed_refresh_token_revokes_its_family_and_sign_out_revokes() {
    let server = TabbyServer::start_ee("", &[]);
    let owner = register_owner(&server, "owner@example.com").await;
    let signed_in = graphql(
        &server.url("/graphql"),
        None,
        "mutation($e: String!, $p: String!) { tokenAuth(email: $e, password: $p) { refreshToken } }",
        json!({"e": "owner@example.com", "p": PASSWORD}),
    )
    .await["data"]["tokenAuth"]["refreshToken"]
        .as_str()
        .unwrap()
        .to_string();

    // The owner refreshes; an attacker who copied the old token replays it later.
    let stolen = owner.refresh_token.clone();
    let current = refresh(&server, &stolen).await["data"]["refreshToken"]["refreshToken"]
        .as_str()
        .unwrap()
        .to_string();
    server.sql(
        "UPDATE refresh_tokens SET used_at = DATETIME('now', '-1 minute') WHERE used_at IS NOT NULL;",
    );
    let replay = refresh(&server, &stolen).await;
    assert_eq!(code(&replay["errors"][0]), Some("UNAUTHORIZED"), "{replay}");
    assert!(
        replay["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("already used"),
        "{replay}"
    );
    // The whole family is gone: the owner's current token too; the other sign-in is not.
    let after = refresh(&server, &current).await;
    assert_eq!(code(&after["errors"][0]), Some("UNAUTHORIZED"), "{after}");
    let other = refresh(&server, &signed_in).await;
    let other = other["data"]["refreshToken"]["refreshToken"]
        .as_str()
        .unwrap_or_else(|| panic!("{other}"))
        .to_string();

    // Tokens are stored as digests only.
    let dump = server.sql("SELECT token FROM refresh_tokens;");
    assert!(!dump.contains(&other), "{dump}");

    // Signing out revokes on the server.
    let out = gql_ok(
        &server,
        None,
        "mutation($t: String!) { signOut(refreshToken: $t) }",
        json!({"t": other}),
    )
    .await;
    assert_eq!(out["signOut"], true);
    let gone = refresh(&server, &other).await;
    assert_eq!(code(&gone["errors"][0]), Some("UNAUTHORIZED"), "{gone}");
}

// ---- 4. SSRF: the crawler reaches no internal address unless allow-listed ----

#[tokio::test]
async fn ee_security_the_crawler_refuses_internal_addresses() {
    // A loopback "internal service" that counts the connections it gets.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let internal = listener.local_addr().unwrap();
    let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = connections.clone();
    let accept = tokio::spawn(async move {
        while let Ok((_socket, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let server = TabbyServer::start_ee("", &[]);
    let admin = register_owner(&server, "owner@example.com").await;
    let a = admin.access_token.as_str();
    for (name, url, says) in [
        ("Internal", format!("http://{internal}/admin/"), "127.0.0.1"),
        (
            "Metadata",
            "http://169.254.169.254/latest/meta-data/".to_string(),
            "169.254.169.254",
        ),
        ("Private", "http://10.0.0.8/wiki/".to_string(), "10.0.0.8"),
        (
            "Mapped",
            format!("http://[::ffff:127.0.0.1]:{}/x/", internal.port()),
            "127.0.0.1",
        ),
        (
            "Localhost",
            format!("http://localhost:{}/docs/", internal.port()),
            "localhost",
        ),
    ] {
        let err = gql_err(
            &server,
            Some(a),
            "mutation($i: CreateCustomDocumentInput!) { createCustomDocument(input: $i) }",
            json!({"i": {"name": name, "url": url}}),
        )
        .await;
        assert_eq!(validation_paths(&err), ["url"], "{name}: {err}");
        let message = error_message(&err);
        assert!(
            message.contains(says) && message.contains("fetch_allowed_hosts"),
            "{name}: {message}"
        );
    }
    let docs = gql_ok(
        &server,
        Some(a),
        "{ customWebDocuments { edges { node { id } } } }",
        json!({}),
    )
    .await;
    assert_eq!(
        docs["customWebDocuments"]["edges"],
        json!([]),
        "no row was made"
    );
    assert_eq!(
        gql_ok(
            &server,
            Some(a),
            "{ jobRuns(jobs: [\"web_crawler\"]) { edges { node { id } } } }",
            json!({})
        )
        .await["jobRuns"]["edges"],
        json!([]),
        "no crawl was enqueued"
    );
    assert_eq!(
        connections.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the internal service was reached"
    );
    accept.abort();
}

// ---- 5. keep-alive after a rejection ----

#[tokio::test]
async fn ee_security_a_pooled_client_survives_401_and_429_with_a_late_body() {
    let server = TabbyServer::start_ee("", &[]);
    let owner = register_owner(&server, "owner@example.com").await;
    // One pooled client for every request, as an editor has.
    let pooled = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(1)
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .unwrap();
    let late_body = || {
        let chunks = futures::stream::unfold(0, |n| async move {
            if n == 2 {
                return None;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            let chunk = if n == 0 {
                "{\"language\":\"python\","
            } else {
                "\"segments\":{\"prefix\":\"def \"}}"
            };
            Some((Ok::<_, std::io::Error>(chunk), n + 1))
        });
        reqwest::Body::wrap_stream(chunks)
    };
    for _ in 0..3 {
        let refused = pooled
            .post(server.url("/v1/completions"))
            .header("authorization", "Bearer not-a-token")
            .header("content-type", "application/json")
            .body(late_body())
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 401);
        assert_eq!(
            refused
                .headers()
                .get("connection")
                .and_then(|v| v.to_str().ok()),
            Some("close")
        );
        let _ = refused.text().await;
        // The next request on the pool succeeds.
        let health = pooled
            .get(server.url("/v1/health"))
            .header("authorization", bearer(&owner.auth_token))
            .send()
            .await
            .expect("the request after a 401");
        assert_eq!(health.status(), 200);
    }
    // 429: exhaust the per-user budget with late bodies, then health (exempt) still answers.
    let mut saw_429 = false;
    for _ in 0..300 {
        let response = pooled
            .post(server.url("/v1/completions"))
            .header("authorization", bearer(&owner.auth_token))
            .header("content-type", "application/json")
            .body(if saw_429 {
                late_body()
            } else {
                reqwest::Body::from("{}")
            })
            .send()
            .await
            .expect("a request after a 429");
        if response.status() == 429 {
            assert_eq!(
                response
                    .headers()
                    .get("connection")
                    .and_then(|v| v.to_str().ok()),
                Some("close")
            );
            if saw_429 {
                break;
            }
            saw_429 = true;
        }
        let _ = response.text().await;
    }
    assert!(saw_429, "the per-user limit was never reached");
    let health = pooled
        .get(server.url("/v1/health"))
        .header("authorization", bearer(&owner.auth_token))
        .send()
        .await
        .expect("the request after a 429");
    assert_eq!(health.status(), 200);
}

// ---- 6. reads follow the reader ----

/// `customWebDocuments`' source ids as `token` sees them.
async fn web_document_sources(server: &TabbyServer, token: &str) -> Vec<String> {
    let query = "{ customWebDocuments { edges { node { sourceId } } } }";
    let data = gql_ok(server, Some(token), query, json!({})).await;
    node_strings(&data["customWebDocuments"], "sourceId")
}

async fn user_emails(server: &TabbyServer, token: &str) -> Vec<String> {
    let query = "{ users { edges { node { email } } } }";
    let data = gql_ok(server, Some(token), query, json!({})).await;
    let mut emails = node_strings(&data["users"], "email");
    emails.sort();
    emails
}

async fn repository_names(server: &TabbyServer, token: &str) -> Vec<String> {
    let data = gql_ok(
        server,
        Some(token),
        "{ repositoryList { name } }",
        json!({}),
    )
    .await;
    data["repositoryList"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn ee_security_private_sources_and_other_users_stay_hidden_from_non_members() {
    let server = TabbyServer::start_ee("[security]\nfetch_allowed_hosts = [\"127.0.0.1\"]\n", &[]);
    let admin = register_owner(&server, "owner@example.com").await;
    let a = admin.access_token.as_str();
    let member = invite_and_register(&server, &admin, "member@example.com").await;
    let outsider = invite_and_register(&server, &admin, "outsider@example.com").await;
    let group = create_group(&server, a, "vault-team").await;
    add_member(&server, a, &group, &member.id, false).await;

    // A repository created for a group is private from its first moment: the grant is made
    // with the row, so no reader ever sees it public.
    const CREATE_FOR: &str = "mutation($n: String!, $u: String!, $g: [ID!]) {
        createGitRepository(name: $n, gitUrl: $u, userGroupIds: $g) }";
    let gone = create_group(&server, a, "gone").await;
    gql_ok(
        &server,
        Some(a),
        "mutation($id: ID!) { deleteUserGroup(id: $id) }",
        json!({"id": gone}),
    )
    .await;
    let err = gql_err(
        &server,
        Some(a),
        CREATE_FOR,
        json!({"n": "vault", "u": "https://example.com/acme/vault.git", "g": [group, gone]}),
    )
    .await;
    assert_eq!(validation_paths(&err), ["userGroupIds"], "{err}");
    assert!(
        git_repository_urls(&server, a).await.is_empty(),
        "a failed creation left a repository behind"
    );
    gql_ok(
        &server,
        Some(a),
        CREATE_FOR,
        json!({"n": "vault", "u": "https://example.com/acme/vault.git", "g": [group]}),
    )
    .await;
    assert_eq!(
        repository_names(&server, &outsider.auth_token).await,
        Vec::<String>::new()
    );
    assert_eq!(
        repository_names(&server, &member.auth_token).await,
        ["vault"]
    );
    assert_eq!(repository_names(&server, a).await, ["vault"]);

    // Custom web documents follow the same policy.
    let doc = gql_ok(
        &server,
        Some(a),
        "mutation($i: CreateCustomDocumentInput!) { createCustomDocument(input: $i) }",
        json!({"i": {"name": "Runbook", "url": "http://127.0.0.1:9/runbook/"}}),
    )
    .await["createCustomDocument"]
        .as_str()
        .unwrap()
        .to_string();
    let sources = web_document_sources(&server, a).await;
    assert_eq!(sources.len(), 1);
    let doc_source = sources[0].clone();
    assert_eq!(
        web_document_sources(&server, &outsider.access_token).await,
        [doc_source.as_str()]
    );
    gql_ok(
        &server,
        Some(a),
        "mutation($s: String!, $g: ID!) { grantSourceIdReadAccess(sourceId: $s, userGroupId: $g) }",
        json!({"s": doc_source, "g": group}),
    )
    .await;
    assert!(
        web_document_sources(&server, &outsider.access_token)
            .await
            .is_empty()
    );
    let by_id = gql_ok(
        &server,
        Some(&outsider.access_token),
        "query($ids: [ID!]) { customWebDocuments(ids: $ids) { edges { node { id } } } }",
        json!({"ids": [doc]}),
    )
    .await;
    assert_eq!(by_id["customWebDocuments"]["edges"], json!([]), "{by_id}");
    assert_eq!(
        web_document_sources(&server, &member.access_token).await,
        [doc_source.as_str()]
    );

    // Other users' e-mails: a plain member sees only themselves and the groups they are in;
    // a group admin, who picks new members by e-mail, sees every user.
    assert_eq!(
        user_emails(&server, &outsider.access_token).await,
        ["outsider@example.com"]
    );
    let groups = |token: String| {
        let server = &server;
        async move {
            gql_ok(
                server,
                Some(&token),
                "{ userGroups { name members { user { email } } } }",
                json!({}),
            )
            .await["userGroups"]
                .clone()
        }
    };
    assert_eq!(groups(outsider.access_token.clone()).await, json!([]));
    assert_eq!(
        groups(member.access_token.clone()).await,
        json!([{"name": "vault-team", "members": [{"user": {"email": "member@example.com"}}]}])
    );
    assert_eq!(
        user_emails(&server, &member.access_token).await,
        ["member@example.com"]
    );
    add_member(&server, a, &group, &member.id, true).await;
    assert_eq!(
        user_emails(&server, &member.access_token).await,
        [
            "member@example.com",
            "outsider@example.com",
            "owner@example.com"
        ]
    );
    let by_id = gql_ok(
        &server,
        Some(&outsider.access_token),
        "query($ids: [ID!]) { users(ids: $ids) { edges { node { email } } } }",
        json!({"ids": [admin.id]}),
    )
    .await;
    assert_eq!(by_id["users"]["edges"], json!([]), "{by_id}");
}

/// Guessing the invitation code of one e-mail: after 5 tries that e-mail is limited (from any
/// address), while the address may still register others.
#[tokio::test]
async fn ee_security_guessing_an_invitation_code_is_limited_per_e_mail() {
    let server = TabbyServer::start_ee("", &[]);
    let owner = register_owner(&server, "owner@example.com").await;
    let register = "mutation($e: String!, $c: String) { register(email: $e, password1: \"Passw0rd!x\", password2: \"Passw0rd!x\", name: \"x\", invitationCode: $c) { accessToken } }";
    let url = server.url("/graphql");
    let mut codes = Vec::new();
    for i in 0..6 {
        let body = graphql(
            &url,
            None,
            register,
            json!({"e": "Target@Example.com", "c": format!("guess-{i}")}),
        )
        .await;
        assert!(body["data"].is_null(), "{body}");
        codes.push(code(&body["errors"][0]).map(str::to_string));
    }
    assert!(
        codes[..5]
            .iter()
            .all(|c| c.as_deref() != Some("TOO_MANY_REQUESTS")),
        "{codes:?}"
    );
    let limited = graphql(
        &url,
        None,
        register,
        json!({"e": "target@example.com", "c": "guess-x"}),
    )
    .await;
    assert_eq!(
        code(&limited["errors"][0]),
        Some("TOO_MANY_REQUESTS"),
        "{limited}"
    );
    assert!(
        error_message(&limited["errors"][0]).contains("e-mail"),
        "{limited}"
    );
    // Another invitee from the same address is not affected.
    let invited = invite_and_register(&server, &owner, "other@example.com").await;
    assert_eq!(invited.email, "other@example.com");
}
