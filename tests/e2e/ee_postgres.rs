//! The enterprise layer on PostgreSQL (`[database] url`): an installation that started on the
//! embedded SQLite file moves to PostgreSQL with `tabby db migrate-sqlite-to-postgres`
//! without losing data. The rest of the enterprise suite runs on PostgreSQL too when
//! `TABBY_TEST_POSTGRES_URL` is set (`scripts/test.sh` does, in its second pass).

use serde_json::json;

use crate::{
    ee_support::{PASSWORD, bearer, create_invitation, gql_ok, graphql, register_owner, rest},
    support::*,
};

/// `tabby db migrate-sqlite-to-postgres` with `args`, on `server`'s root.
/// `TABBY_DATABASE_URL` is `env_url` when given, else unset.
fn migrate_with(
    server: &TabbyServer,
    args: &[&str],
    env_url: Option<&str>,
) -> std::process::Output {
    let mut command = std::process::Command::new(tabby_bin());
    command
        .args(["db", "migrate-sqlite-to-postgres"])
        .args(args)
        .env("TABBY_ROOT", server.root())
        .env_remove("TABBY_DATABASE_URL");
    if let Some(url) = env_url {
        command.env("TABBY_DATABASE_URL", url);
    }
    command.output().expect("run tabby db")
}

fn migrate(server: &TabbyServer, args: &[&str]) -> std::process::Output {
    migrate_with(server, args, None)
}

/// `GET /v1/health` with `auth_token`: its status.
async fn health(server: &TabbyServer, auth_token: &str) -> u16 {
    rest(server, "GET", "/v1/health", Some(&bearer(auth_token)), None)
        .await
        .0
}

#[tokio::test]
async fn ee_postgres_a_sqlite_installation_moves_to_postgres_without_losing_data() {
    let Some(url) = test_database() else {
        eprintln!("{TEST_POSTGRES_URL_VAR} is not set: the move to PostgreSQL is not tested");
        return;
    };
    // An installation on SQLite: an owner, a member's invitation, a repository, a refresh
    // token, usage.
    let mut server = TabbyServer::start_sqlite_ee("");
    let owner = register_owner(&server, "owner@example.com").await;
    let code = create_invitation(&server, &owner, "member@example.com").await;
    gql_ok(
        &server,
        Some(&owner.access_token),
        "mutation { createGitRepository(name: \"moved\", gitUrl: \"https://git.example.invalid/moved\") }",
        json!({}),
    )
    .await;
    assert_eq!(health(&server, &owner.auth_token).await, 200);

    // The copy is refused while the target is no PostgreSQL URL; nothing happens.
    let out = migrate(&server, &["--to", "mysql://a@127.0.0.1/b"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("postgres://"),
        "{out:?}"
    );

    // Stop the server, copy, and point the config at PostgreSQL (the password stays out of
    // the command line: TABBY_DATABASE_URL).
    assert!(server.terminate().success());
    let out = migrate_with(&server, &[], Some(&url));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("users: 1 rows"), "{stdout}");
    assert!(stdout.contains("invitations: 1 rows"), "{stdout}");
    assert!(stdout.contains("repositories: 1 rows"), "{stdout}");
    server.move_to_database(&url);
    std::fs::rename(
        server.root().join("ee/db.sqlite"),
        server.root().join("ee/db.sqlite.moved"),
    )
    .unwrap();
    server.restart(&[]);
    assert!(
        !server.root().join("ee/db.sqlite").exists(),
        "the server on PostgreSQL made no new SQLite file"
    );

    // Everything is there: the owner signs in with the same password, the same auth token
    // authenticates, the invitation registers, the repository is listed, and the JWT secret
    // moved too (the access token issued on SQLite is still valid).
    let signed_in = graphql(
        &server.url("/graphql"),
        None,
        "mutation($e: String!, $p: String!) { tokenAuth(email: $e, password: $p) { accessToken } }",
        json!({"e": "owner@example.com", "p": PASSWORD}),
    )
    .await;
    assert!(
        signed_in["data"]["tokenAuth"]["accessToken"].is_string(),
        "{signed_in}"
    );
    assert_eq!(health(&server, &owner.auth_token).await, 200);
    let repos = gql_ok(
        &server,
        Some(&owner.access_token),
        "{ gitRepositories { edges { node { name gitUrl } } } }",
        json!({}),
    )
    .await;
    assert_eq!(
        repos["gitRepositories"]["edges"][0]["node"]["name"], "moved",
        "{repos}"
    );
    let registered = graphql(
        &server.url("/graphql"),
        None,
        "mutation($e: String!, $p: String!, $c: String) { register(email: $e, password1: $p, password2: $p, name: \"m\", invitationCode: $c) { accessToken } }",
        json!({"e": "member@example.com", "p": PASSWORD, "c": code}),
    )
    .await;
    assert!(
        registered["data"]["register"]["accessToken"].is_string(),
        "{registered}"
    );
    // New rows continue after the copied ids.
    let users = server.sql("SELECT id FROM users ORDER BY id");
    assert_eq!(users.lines().collect::<Vec<_>>(), ["1", "2"], "{users}");

    // A second copy into the database, which now holds data, is refused and changes nothing.
    std::fs::rename(
        server.root().join("ee/db.sqlite.moved"),
        server.root().join("ee/db.sqlite"),
    )
    .unwrap();
    let out = migrate(&server, &["--to", &url]);
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("already holds data"), "{stderr}");
    assert_eq!(server.sql("SELECT COUNT(*) FROM users").trim(), "2");

    // A database that cannot be reached is named in the error without its password.
    let out = migrate(
        &server,
        &["--to", "postgres://tabby:hunter2@127.0.0.1:1/none"],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("postgres://tabby:***@127.0.0.1:1/none"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
}
