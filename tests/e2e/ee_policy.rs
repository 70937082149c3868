//! Source access policies through the real retrieval paths: a repository with read-access
//! rows is searched, listed and used as completion context only for members of a granted
//! group (and admins); one without rows is public. Repositories added through GraphQL are
//! indexed in the background and become searchable.

use std::{process::Command, time::Duration};

use serde_json::{Value, json};

use crate::{ee_support::*, support::*};

pub(crate) const SHOP: &str = "def compute_discounted_price(price, discount_rate):\n    \"\"\"Price after a percentage discount.\"\"\"\n    return round(price * (1 - discount_rate), 2)\n";
/// The private code; `SCRAM_THRESHOLD_KELVIN` appears nowhere else.
pub(crate) const VAULT: &str = "def reactor_core_temperature(rods):\n    \"\"\"Core temperature from the control rods.\"\"\"\n    SCRAM_THRESHOLD_KELVIN = 1234\n    return min(sum(rod.heat for rod in rods), SCRAM_THRESHOLD_KELVIN)\n";
const LEDGER: &str = "def reconcile_ledger_balance(entries):\n    \"\"\"Sum of the ledger entries.\"\"\"\n    return sum(entry.amount for entry in entries)\n";

/// `/v1beta/search` as `token`: (status, body).
pub(crate) async fn search(server: &TabbyServer, token: &str, request: Value) -> (u16, Value) {
    let mut request = request;
    request["params"] =
        json!({"min_embedding_score": -1.0, "min_bm25_score": -1.0, "min_rrf_score": -1.0});
    let (status, body, _) = rest(
        server,
        "POST",
        "/v1beta/search",
        Some(&bearer(token)),
        Some(&request),
    )
    .await;
    (status, body)
}

/// The file paths of a search answer's hits.
fn hit_paths(body: &Value) -> Vec<String> {
    body["hits"]
        .as_array()
        .unwrap_or_else(|| panic!("no hits array: {body}"))
        .iter()
        .map(|h| h["filepath"].as_str().unwrap().to_string())
        .collect()
}

/// Waits until a search as `token` finds `path`.
pub(crate) async fn wait_until_searchable(
    server: &TabbyServer,
    token: &str,
    request: Value,
    path: &str,
) {
    poll(
        &format!("{path} to be indexed"),
        Duration::from_secs(60),
        || async {
            let (status, body) = search(server, token, request.clone()).await;
            (status == 200 && hit_paths(&body).iter().any(|p| p == path)).then_some(())
        },
    )
    .await;
}

/// `repositoryList` as `token`: name → sourceId.
async fn repository_list(server: &TabbyServer, token: &str) -> Vec<(String, String)> {
    let data = gql_ok(
        server,
        Some(token),
        "{ repositoryList { name sourceId gitUrl kind } }",
        json!({}),
    )
    .await;
    data["repositoryList"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["sourceId"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn names(list: &[(String, String)]) -> Vec<&str> {
    let mut names: Vec<&str> = list.iter().map(|(n, _)| n.as_str()).collect();
    names.sort();
    names
}

/// A completion for the vault repository as `token`: (debug snippets' paths, the prompt the
/// model received).
async fn vault_completion(
    server: &TabbyServer,
    model: &FakeServer,
    token: &str,
    git_url: &str,
) -> (Vec<String>, String) {
    model.clear_requests();
    let (status, body, _) = rest(
        server,
        "POST",
        "/v1/completions",
        Some(&bearer(token)),
        Some(&json!({
            "language": "python",
            "segments": {
                "prefix": "from reactor import reactor_core_temperature\n\ndef check(rods):\n    return reactor_core_temperature(",
                "filepath": "src/check.py",
                "git_url": git_url
            },
            "debug_options": {"return_snippets": true}
        })),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let snippets = body["debug_data"]["snippets"]
        .as_array()
        .unwrap_or_else(|| panic!("no snippets: {body}"))
        .iter()
        .map(|s| s["filepath"].as_str().unwrap().to_string())
        .collect();
    let prompt = model
        .requests_to("/completion")
        .last()
        .expect("the model got the completion")
        .body["prompt"]
        .as_str()
        .unwrap()
        .to_string();
    (snippets, prompt)
}

#[tokio::test]
async fn ee_read_policy_filters_search_completion_and_repository_list() {
    let tmp = tempfile::tempdir().unwrap();
    let shop = make_repo(tmp.path(), "shop", &[("src/pricing.py", SHOP)]);
    let vault = make_repo(tmp.path(), "vault", &[("src/reactor.py", VAULT)]);
    let ledger = make_repo(tmp.path(), "ledger", &[("src/ledger.py", LEDGER)]);
    let model = FakeServer::start(Protocol::LlamaCpp, Script::default().pieces(["rods)"])).await;
    let embedder = FakeServer::start(Protocol::OpenAi, Script::default().embedding_dim(16)).await;
    let config = format!(
        r#"
[[repositories]]
git_url = "file://{shop}"

[[repositories]]
git_url = "file://{vault}"

[security]
local_repository_roots = ["{root}"]

{embedding}{params}{completion}"#,
        root = tmp.path().display(),
        shop = shop.display(),
        vault = vault.display(),
        embedding = openai_embedding_config(&embedder.url(), "fake-embed"),
        params = open_search_params("completion"),
        completion = llama_completion_config(&model.url()),
    );
    let server = TabbyServer::start_ee(&config, &[]);
    let admin = register_owner(&server, "admin@example.com").await;
    let member = invite_and_register(&server, &admin, "member@example.com").await;
    let outsider = invite_and_register(&server, &admin, "outsider@example.com").await;
    let a = admin.access_token.as_str();

    let repos = repository_list(&server, a).await;
    assert_eq!(names(&repos), ["shop", "vault"], "{repos:?}");
    let source = |name: &str| repos.iter().find(|(n, _)| n == name).unwrap().1.clone();
    let (shop_id, vault_id) = (source("shop"), source("vault"));
    assert!(vault_id.starts_with("config:"), "{vault_id}");
    let vault_query = json!({"query": "reactor_core_temperature SCRAM_THRESHOLD_KELVIN rods"});
    wait_until_searchable(&server, a, vault_query.clone(), "src/reactor.py").await;
    wait_until_searchable(
        &server,
        a,
        json!({"query": "compute_discounted_price", "source_id": shop_id}),
        "src/pricing.py",
    )
    .await;

    // Without read-access rows the vault is public: the outsider finds it too.
    let (status, body) = search(&server, &outsider.auth_token, vault_query.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        hit_paths(&body).contains(&"src/reactor.py".to_string()),
        "{body}"
    );

    // The admin restricts it to a group with the member in it.
    let group = restrict_to_new_group(&server, a, "vault-team", &member, &vault_id).await;
    let policy = gql_ok(
        &server,
        Some(a),
        "query($s: String!) { sourceIdAccessPolicies(sourceId: $s) { sourceId read { name members { user { email } } } } }",
        json!({"s": vault_id}),
    )
    .await;
    assert_eq!(
        policy["sourceIdAccessPolicies"],
        json!({"sourceId": vault_id, "read": [{"name": "vault-team", "members": [{"user": {"email": "member@example.com"}}]}]})
    );

    // Search: the outsider never sees vault code, by any route; the member and the admin do.
    let (status, body) = search(&server, &outsider.auth_token, vault_query.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        !hit_paths(&body).contains(&"src/reactor.py".to_string()),
        "{body}"
    );
    assert!(
        !body.to_string().contains("SCRAM_THRESHOLD_KELVIN"),
        "{body}"
    );
    assert!(
        hit_paths(&body).contains(&"src/pricing.py".to_string()),
        "public code stays visible: {body}"
    );
    for request in [
        json!({"query": "reactor_core_temperature", "source_id": vault_id}),
        json!({"query": "reactor_core_temperature", "git_url": "https://github.com/acme/vault.git"}),
    ] {
        let (status, body) = search(&server, &outsider.auth_token, request.clone()).await;
        assert_eq!(status, 404, "{request}: {body}");
        assert!(
            !body.to_string().contains("SCRAM_THRESHOLD_KELVIN"),
            "{body}"
        );
    }
    // The outsider's session JWT is filtered the same way as the auth token.
    let (_, body) = search(&server, &outsider.access_token, vault_query.clone()).await;
    assert!(
        !hit_paths(&body).contains(&"src/reactor.py".to_string()),
        "{body}"
    );
    for token in [member.auth_token.as_str(), admin.auth_token.as_str()] {
        let (status, body) = search(
            &server,
            token,
            json!({"query": "reactor_core_temperature", "source_id": vault_id}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(hit_paths(&body), ["src/reactor.py"], "{body}");
        let (_, body) = search(&server, token, vault_query.clone()).await;
        assert!(
            hit_paths(&body).contains(&"src/reactor.py".to_string()),
            "{body}"
        );
    }

    // repositoryList follows the same policy.
    assert_eq!(
        names(&repository_list(&server, &outsider.auth_token).await),
        ["shop"]
    );
    assert_eq!(
        names(&repository_list(&server, &member.auth_token).await),
        ["shop", "vault"]
    );
    assert_eq!(names(&repository_list(&server, a).await), ["shop", "vault"]);

    // Completion context: the vault's code reaches the model for the member, never for the
    // outsider.
    let vault_url = "git@github.com:acme/vault.git";
    let (snippets, prompt) =
        vault_completion(&server, &model, &outsider.auth_token, vault_url).await;
    assert!(
        !snippets.contains(&"src/reactor.py".to_string()),
        "{snippets:?}"
    );
    assert!(!prompt.contains("SCRAM_THRESHOLD_KELVIN"), "{prompt}");
    assert!(!prompt.contains("src/reactor.py"), "{prompt}");
    let (snippets, prompt) = vault_completion(&server, &model, &member.auth_token, vault_url).await;
    assert!(
        snippets.contains(&"src/reactor.py".to_string()),
        "{snippets:?}"
    );
    assert!(prompt.contains("# Path: src/reactor.py\n"), "{prompt}");
    assert!(
        prompt.contains("#     SCRAM_THRESHOLD_KELVIN = 1234"),
        "{prompt}"
    );

    // The group is the vault's only grant: deleting it would silently make the vault public
    // (upstream's behaviour), so it is refused with a message naming the source.
    let refused = gql_err(
        &server,
        Some(a),
        "mutation($id: ID!) { deleteUserGroup(id: $id) }",
        json!({"id": group}),
    )
    .await;
    assert!(
        refused["message"].as_str().unwrap().contains(&vault_id),
        "{refused}"
    );
    let (_, prompt) = vault_completion(&server, &model, &outsider.auth_token, vault_url).await;
    assert!(!prompt.contains("SCRAM_THRESHOLD_KELVIN"), "{prompt}");

    // Revoking the only grant would make the vault public too: refused unless asked for.
    let refused = gql_err(
        &server,
        Some(a),
        "mutation($s: String!, $g: ID!) { revokeSourceIdReadAccess(sourceId: $s, userGroupId: $g) }",
        json!({"s": vault_id, "g": group}),
    )
    .await;
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.contains(&vault_id) && message.contains("makePublic"),
        "{refused}"
    );
    let (_, prompt) = vault_completion(&server, &model, &outsider.auth_token, vault_url).await;
    assert!(!prompt.contains("SCRAM_THRESHOLD_KELVIN"), "{prompt}");
    gql_ok(
        &server,
        Some(a),
        "mutation($s: String!, $g: ID!) {
           revokeSourceIdReadAccess(sourceId: $s, userGroupId: $g, makePublic: true) }",
        json!({"s": vault_id, "g": group}),
    )
    .await;
    let (_, prompt) = vault_completion(&server, &model, &outsider.auth_token, vault_url).await;
    assert!(prompt.contains("SCRAM_THRESHOLD_KELVIN"), "{prompt}");
    // Without grants the group can go.
    gql_ok(
        &server,
        Some(a),
        "mutation($id: ID!) { deleteUserGroup(id: $id) }",
        json!({"id": group}),
    )
    .await;
    assert_eq!(
        names(&repository_list(&server, &outsider.auth_token).await),
        ["shop", "vault"]
    );

    // Repositories added through GraphQL: names are validated, then the new one is indexed
    // in the background and becomes searchable.
    let create = "mutation($n: String!, $u: String!) { createGitRepository(name: $n, gitUrl: $u) }";
    let ledger_url = format!("file://{}", ledger.display());
    for (name, url, path) in [
        ("1ledger", ledger_url.as_str(), "name"),
        ("led ger", ledger_url.as_str(), "name"),
        ("ledger", "not a url", "gitUrl"),
        ("again", &format!("file://{}", vault.display()), "gitUrl"),
    ] {
        let err = gql_err(&server, Some(a), create, json!({"n": name, "u": url})).await;
        assert_eq!(validation_paths(&err), [path], "{name} {url}: {err}");
    }
    let data = gql_ok(
        &server,
        Some(a),
        create,
        json!({"n": "ledger", "u": ledger_url}),
    )
    .await;
    let ledger_id = data["createGitRepository"].as_str().unwrap().to_string();
    let err = gql_err(
        &server,
        Some(a),
        create,
        json!({"n": "ledger", "u": "https://git.example.invalid/ledger"}),
    )
    .await;
    assert_eq!(validation_paths(&err), ["name"], "duplicate name: {err}");
    let git_repos = gql_ok(
        &server,
        Some(a),
        "{ gitRepositories { edges { node { id sourceId name gitUrl } } } }",
        json!({}),
    )
    .await;
    let node = &git_repos["gitRepositories"]["edges"][0]["node"];
    assert_eq!(node["id"], ledger_id.as_str(), "{git_repos}");
    assert_eq!(node["name"], "ledger");
    let ledger_source = node["sourceId"].as_str().unwrap().to_string();
    assert_eq!(ledger_source, format!("git:{ledger_id}"));
    let listed = repository_list(&server, &outsider.auth_token).await;
    assert!(
        listed.contains(&("ledger".to_string(), ledger_source.clone())),
        "{listed:?}"
    );

    wait_until_searchable(
        &server,
        &outsider.auth_token,
        json!({"query": "reconcile_ledger_balance entries", "source_id": ledger_source}),
        "src/ledger.py",
    )
    .await;
    let (_, body) = search(
        &server,
        &member.auth_token,
        json!({"query": "reconcile_ledger_balance"}),
    )
    .await;
    assert!(
        hit_paths(&body).contains(&"src/ledger.py".to_string()),
        "{body}"
    );
    // The indexed ref shows its commit.
    let head = String::from_utf8(
        Command::new("git")
            .arg("-C")
            .arg(&ledger)
            .args(["rev-parse", "HEAD"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let refs = gql_ok(
        &server,
        Some(a),
        "{ gitRepositories { edges { node { refs { name commit } } } } }",
        json!({}),
    )
    .await;
    assert_eq!(
        refs["gitRepositories"]["edges"][0]["node"]["refs"],
        json!([{"name": "main", "commit": head.trim()}]),
        "{refs}"
    );

    // Deleting it takes it out of the list and out of reach of search.
    gql_ok(
        &server,
        Some(a),
        "mutation($id: ID!) { deleteGitRepository(id: $id) }",
        json!({"id": ledger_id}),
    )
    .await;
    assert_eq!(names(&repository_list(&server, a).await), ["shop", "vault"]);
    let (status, _) = search(
        &server,
        a,
        json!({"query": "reconcile_ledger_balance", "source_id": ledger_source}),
    )
    .await;
    assert_eq!(status, 404);
    let (_, body) = search(
        &server,
        a,
        json!({"query": "reconcile_ledger_balance entries"}),
    )
    .await;
    assert!(
        !hit_paths(&body).contains(&"src/ledger.py".to_string()),
        "{body}"
    );
}
