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
    let data = gql_ok(
        server,
        Some(token),
        "{ gitRepositories { edges { node { gitUrl } } } }",
        json!({}),
    )
    .await;
    data["gitRepositories"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"]["gitUrl"].as_str().unwrap().to_string())
        .collect()
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
    gql_ok(
        &server,
        Some(a),
        CREATE,
        json!({"n": "inside", "u": format!("file://{}", repo.display())}),
    )
    .await;
    assert_eq!(git_repository_urls(&server, a).await.len(), 1);
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
