//! `tabby serve --role web|worker`: processes of two roles on one `TABBY_ROOT`. The web
//! replica serves but never indexes or runs jobs; the worker indexes and runs jobs but serves
//! only the probes; what the worker indexes, the web replica searches.

use std::time::Duration;

use serde_json::json;

use crate::{
    ee_policy::wait_until_searchable,
    ee_support::{
        PASSWORD, bearer, gql_ok, graphql, invite_and_register, poll, register_owner, rest,
    },
    rag::{make_shop_repo, wait_for_index},
    support::*,
};

#[tokio::test]
async fn a_web_replica_serves_what_a_worker_indexes() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = make_shop_repo(tmp.path());
    let config = format!(
        "[[repositories]]\ngit_url = \"file://{}\"\n",
        repo.display()
    );
    let web = TabbyServer::start_with_args(&config, &["--no-webserver", "--role", "web"]);
    // Alone, the web replica never indexes: search stays not ready.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (status, body) = post_json(
        &web.url("/v1beta/search"),
        &json!({"query": "compute_discounted_price"}),
    )
    .await;
    assert_eq!(status, 503, "{body}");
    let (_, ready) = get_json(&web.url("/readyz")).await;
    assert_eq!(ready["index"], "building", "{ready}");
    assert!(
        web.stderr().contains("role web: no jobs"),
        "{}",
        web.stderr()
    );

    let worker = web.replica("worker", &["--no-webserver", "--role", "worker"], &[]);
    // The worker answers the probes only: no model, no API.
    let (status, body) = get_json(&worker.url("/healthz")).await;
    assert_eq!((status, body), (200, json!({"status": "ok"})));
    let (status, _) = get_json(&worker.url("/v1/health")).await;
    assert_eq!(status, 404);
    let (status, _) = post_json(
        &worker.url("/v1/completions"),
        &json!({"language": "python", "segments": {"prefix": "def "}}),
    )
    .await;
    assert_eq!(status, 404);
    wait_for_index(&web, &json!({"query": "compute_discounted_price"})).await;
    let (_, ready) = get_json(&web.url("/readyz")).await;
    assert_eq!(ready["index"], "ready", "{ready}");
}

/// With the enterprise layer: the worker takes the job runs from the shared database (the web
/// replica claims none), and the web replica's users search what it indexed.
#[tokio::test]
async fn ee_a_worker_runs_the_jobs_a_web_replica_serves() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = make_shop_repo(tmp.path());
    let config = format!(
        "[[repositories]]\ngit_url = \"file://{}\"\n",
        repo.display()
    );
    let web = TabbyServer::start_with_env(&config, &["--role", "web"], &[]);
    let owner = register_owner(&web, "owner@example.com").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (status, _, _) = rest(
        &web,
        "POST",
        "/v1beta/search",
        Some(&bearer(&owner.auth_token)),
        Some(&json!({"query": "compute_discounted_price"})),
    )
    .await;
    assert_eq!(status, 503, "no worker, no index");

    let worker = web.replica("worker", &["--role", "worker"], &[]);
    let (status, ready) = get_json(&worker.url("/readyz")).await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["checks"], json!({"database": "ok"}));
    let (status, _) = get_json(&worker.url("/graphql")).await;
    assert_eq!(status, 404, "a worker serves no GraphQL");
    wait_until_searchable(
        &web,
        &owner.auth_token,
        json!({"query": "compute_discounted_price"}),
        "src/pricing.py",
    )
    .await;
    // The run was the worker's: the web replica's log never started one.
    assert!(worker.stderr().contains("job run"), "{}", worker.stderr());
    assert!(!web.stderr().contains("job run"), "{}", web.stderr());
}

/// Two web replicas on one root: a user created through one signs in through the other, and
/// an auth token reset through one is refused by the other within the documented staleness
/// (2 s; each process reads the database's change counter every second).
#[tokio::test]
async fn ee_what_one_replica_changes_in_authorization_holds_in_another() {
    let a = TabbyServer::start_with_env("", &["--role", "web"], &[]);
    let owner = register_owner(&a, "owner@example.com").await;
    let b = a.replica("b", &["--role", "web"], &[]);
    let health_on_b = |token: String| {
        let url = b.url("/v1/health");
        async move {
            client()
                .get(url)
                .header("authorization", bearer(&token))
                .send()
                .await
                .expect("request")
                .status()
                .as_u16()
        }
    };
    poll("replica b to serve", Duration::from_secs(60), || async {
        (health_on_b(owner.auth_token.clone()).await == 200).then_some(())
    })
    .await;

    // A user created through a signs in through b.
    let member = invite_and_register(&a, &owner, "member@example.com").await;
    let signed_in = graphql(
        &b.url("/graphql"),
        None,
        "mutation($e: String!, $p: String!) { tokenAuth(email: $e, password: $p) { accessToken } }",
        json!({"e": member.email, "p": PASSWORD}),
    )
    .await;
    assert!(
        signed_in["data"]["tokenAuth"]["accessToken"].is_string(),
        "{signed_in}"
    );

    // The owner's auth token reset through a: b refuses the old one soon after.
    let (status, _, _) = rest(
        &a,
        "POST",
        "/graphql",
        Some(&bearer(&owner.access_token)),
        Some(&json!({"query": "mutation { resetUserAuthToken }"})),
    )
    .await;
    assert_eq!(status, 200);
    let reset = std::time::Instant::now();
    poll(
        "b to refuse the old token",
        Duration::from_secs(10),
        || async { (health_on_b(owner.auth_token.clone()).await == 401).then_some(()) },
    )
    .await;
    let seen_after = reset.elapsed();
    assert!(
        seen_after <= Duration::from_secs(4),
        "refused after {seen_after:?}, documented within 2 s"
    );
}

/// 200 job triggers sent at once through two web replicas on one root: every trigger gets a
/// run (an identical pending run is shared, as upstream), and the worker runs each run once.
#[tokio::test]
async fn ee_job_triggers_through_two_replicas_at_once_each_run_once() {
    let a = TabbyServer::start_with_env("", &["--role", "web"], &[]);
    let owner = register_owner(&a, "owner@example.com").await;
    let b = a.replica("b", &["--role", "web"], &[]);
    poll("replica b to serve", Duration::from_secs(60), || async {
        let status = client()
            .get(b.url("/v1/health"))
            .header("authorization", bearer(&owner.auth_token))
            .send()
            .await
            .map(|r| r.status().as_u16());
        (status.ok() == Some(200)).then_some(())
    })
    .await;
    let worker = a.replica("worker", &["--role", "worker"], &[]);

    const TRIGGER: &str = "mutation($c: String!) { triggerJobRun(command: $c) }";
    let commands = ["\"IndexGarbageCollection\"", "\"Daily\""];
    let triggers = (0..200).map(|i| {
        let url = if i % 2 == 0 {
            a.url("/graphql")
        } else {
            b.url("/graphql")
        };
        let token = owner.access_token.clone();
        let command = commands[(i / 2) % 2];
        async move {
            let body = graphql(&url, Some(&token), TRIGGER, json!({"c": command})).await;
            assert!(body.get("errors").is_none(), "{body}");
            body["data"]["triggerJobRun"].as_str().unwrap().to_string()
        }
    });
    let ids: std::collections::BTreeSet<String> = futures::future::join_all(triggers)
        .await
        .into_iter()
        .collect();
    assert!(!ids.is_empty() && ids.len() <= 200, "{}", ids.len());

    // Every run ends once, successfully; the worker started each exactly once.
    let runs = poll("every run to end", Duration::from_secs(120), || async {
        let data = graphql(
            &a.url("/graphql"),
            Some(&owner.access_token),
            "query($ids: [ID!]) { jobRuns(ids: $ids, first: 1000) { edges { node { id job exitCode } } } }",
            json!({"ids": ids}),
        )
        .await;
        let runs: Vec<serde_json::Value> = data["data"]["jobRuns"]["edges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["node"].clone())
            .collect();
        (runs.len() == ids.len() && runs.iter().all(|r| !r["exitCode"].is_null())).then_some(runs)
    })
    .await;
    assert!(runs.iter().all(|r| r["exitCode"] == 0), "{runs:?}");
    let log = worker.stderr();
    for job in ["index_garbage_collection", "daily"] {
        let runs_of_job = runs.iter().filter(|r| r["job"] == job).count();
        assert!(runs_of_job > 0, "{job}");
        assert_eq!(
            log.matches(&format!("({job}) started")).count(),
            runs_of_job,
            "{job}: {log}"
        );
    }
    assert!(!a.stderr().contains("job run") && !b.stderr().contains("job run"));
}

/// Three roots, as three machines, that share only one PostgreSQL database and one snapshot
/// directory (`[index] snapshot_dir`): two web replicas and a worker. A repository added
/// through replica A is indexed by the worker, published as a snapshot, and searchable through
/// replica B, which never indexes; a new commit, re-indexed, reaches B as the next snapshot,
/// and B greps the repository's files.
/// Needs `TABBY_TEST_POSTGRES_URL` (separate roots cannot share a SQLite file).
#[tokio::test]
async fn ee_replicas_on_separate_machines_share_postgres_and_index_snapshots() {
    let Some(url) = test_database() else {
        eprintln!("{TEST_POSTGRES_URL_VAR} is not set: replicas on separate roots not tested");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let repo = make_shop_repo(tmp.path());
    let shared = tmp.path().join("snapshots");
    let config = format!(
        "[database]\nurl = {url:?}\n[index]\nsnapshot_dir = {:?}\n[security]\nlocal_repository_roots = [{:?}]\n",
        shared.display().to_string(),
        tmp.path().display().to_string()
    );
    let a = TabbyServer::start_on_database(&config, &["--role", "web"], &url);
    let owner = register_owner(&a, "owner@example.com").await;
    let worker = TabbyServer::start_on_database(&config, &["--role", "worker"], &url);
    let b = TabbyServer::start_on_database(&config, &["--role", "web"], &url);
    let git_url = format!("file://{}", repo.display());
    let id = gql_ok(
        &a,
        Some(&owner.access_token),
        "mutation($u: String!) { createGitRepository(name: \"shop\", gitUrl: $u) }",
        json!({"u": git_url}),
    )
    .await["createGitRepository"]
        .as_str()
        .unwrap()
        .to_string();
    wait_until_searchable(
        &b,
        &owner.auth_token,
        json!({"query": "compute_discounted_price"}),
        "src/pricing.py",
    )
    .await;
    let first = std::fs::read_to_string(shared.join("CURRENT")).unwrap();
    assert!(
        !b.root().join("index").join("meta.json").exists(),
        "replica b searches the snapshot, it has no index of its own"
    );
    assert!(
        worker.stderr().contains("published index snapshot"),
        "{}",
        worker.stderr()
    );

    // A new commit, re-indexed on demand through replica a, reaches b as the next snapshot.
    std::fs::write(
        repo.join("src/loyalty.py"),
        "def compute_loyalty_bonus(points):\n    return points // 10\n",
    )
    .unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "loyalty"]);
    let command = format!(
        r#"{{"SchedulerGitRepository":{{"git_url":{},"source_id":{},"git_refs":[]}}}}"#,
        json!(git_url),
        json!(format!("git:{id}"))
    );
    let triggered = graphql(
        &a.url("/graphql"),
        Some(&owner.access_token),
        "mutation($c: String!) { triggerJobRun(command: $c) }",
        json!({"c": command}),
    )
    .await;
    assert!(triggered.get("errors").is_none(), "{triggered}");
    wait_until_searchable(
        &b,
        &owner.auth_token,
        json!({"query": "compute_loyalty_bonus"}),
        "src/loyalty.py",
    )
    .await;
    let second = std::fs::read_to_string(shared.join("CURRENT")).unwrap();
    assert_ne!(first, second, "a new snapshot");
    // The files themselves are readable on b (a local repository is read in place; remote
    // ones from the mirrors the worker keeps in the shared directory).
    let grep = gql_ok(
        &b,
        Some(&owner.access_token),
        "query($id: ID!) { repositoryGrep(kind: GIT, id: $id, query: \"compute_loyalty_bonus\") { files { path } } }",
        json!({"id": id}),
    )
    .await;
    assert_eq!(
        grep["repositoryGrep"]["files"][0]["path"], "src/loyalty.py",
        "{grep}"
    );

    assert!(!a.stderr().contains("job run") && !b.stderr().contains("job run"));
}

/// Failed sign-ins for one account count through every replica on the database: spread over
/// two web replicas, they are limited after as many attempts in total as one replica allows
/// (10), not twice as many; then both refuse even the right password.
#[tokio::test]
async fn ee_failed_sign_ins_for_one_account_are_limited_across_replicas() {
    let a = TabbyServer::start_with_env("", &["--role", "web"], &[]);
    register_owner(&a, "owner@example.com").await;
    let b = a.replica("b", &["--role", "web"], &[]);
    const TOKEN_AUTH: &str =
        "mutation($e: String!, $p: String!) { tokenAuth(email: $e, password: $p) { accessToken } }";
    let urls = [a.url("/graphql"), b.url("/graphql")];
    poll("replica b to serve", Duration::from_secs(60), || async {
        client()
            .get(b.url("/healthz"))
            .send()
            .await
            .ok()
            .map(|_| ())
    })
    .await;
    let mut limited_after = None;
    for i in 0..25 {
        let body = graphql(
            &urls[i % 2],
            None,
            TOKEN_AUTH,
            json!({"e": "owner@example.com", "p": "Wr0ng!pass"}),
        )
        .await;
        let error = &body["errors"][0];
        if error["extensions"]["code"] == "TOO_MANY_REQUESTS" {
            limited_after = Some(i);
            break;
        }
        assert_eq!(
            error["message"], "Invalid email address or password",
            "{body}"
        );
    }
    assert_eq!(
        limited_after,
        Some(10),
        "limited after 10 failures in total"
    );
    for url in &urls {
        let body = graphql(
            url,
            None,
            TOKEN_AUTH,
            json!({"e": "owner@example.com", "p": PASSWORD}),
        )
        .await;
        assert_eq!(
            body["errors"][0]["extensions"]["code"], "TOO_MANY_REQUESTS",
            "{body}"
        );
    }
}
