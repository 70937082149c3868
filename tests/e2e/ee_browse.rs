//! The code browser on real git repositories: the directory listing and raw files at a ref
//! (`/repositories/{kind}/{id}/rev/{rev}/{path}`, session JWT only, never served as HTML),
//! `repositoryGrep` (regex, `f:`, `lang:`, negation, line numbers and match ranges; a
//! pathological pattern refused or answered in linear time), `repositorySearch`, and the read
//! policy: a private repository answers a non-member exactly like one that does not exist.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{ee_support::*, support::*};

const MAIN_V1: &str = "fn main() {\n    println!(\"v1\");\n}\n";
const MAIN_V2: &str = "fn main() {\n    greet(\"v2\");\n}\n\nfn greet(who: &str) {\n    println!(\"hello {who}\");\n}\n";

const GREP: &str = "query($k: RepositoryKind!, $id: ID!, $rev: String, $q: String!) {
    repositoryGrep(kind: $k, id: $id, rev: $rev, query: $q) {
        elapsedMs truncated files { path lines { lineNumber text subMatches { bytesStart bytesEnd } } } } }";

fn paths(out: &Value) -> Vec<String> {
    out["repositoryGrep"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect()
}

async fn raw(
    server: &TabbyServer,
    token: Option<&str>,
    path: &str,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut request = client().get(server.url(path));
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().await.unwrap())
}

/// A GET written by hand on a socket, so the path reaches the server unnormalized.
fn raw_http(server: &TabbyServer, path: &str, token: &str) -> String {
    use std::io::{Read, Write};
    let url = reqwest::Url::parse(&server.url("/")).unwrap();
    let mut stream =
        std::net::TcpStream::connect((url.host_str().unwrap(), url.port().unwrap())).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n",
        url.host_str().unwrap()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[tokio::test]
async fn code_browser_tree_files_grep_and_policy() {
    let work = tempfile::tempdir().unwrap();
    let long_a = format!("{}\n", "a".repeat(100_000));
    let repo = make_repo(
        work.path(),
        "shop",
        &[
            ("src/main.rs", MAIN_V1),
            ("src/lib.rs", "pub fn lib_helper() -> u32 { 42 }\n"),
            ("docs/readme.md", "# Shop\n\nhello docs\n"),
            (
                "web/index.html",
                "<script>alert(document.domain)</script>\n",
            ),
            ("data/aaa.txt", &long_a),
        ],
    );
    git(&repo, &["tag", "v1"]);
    std::fs::write(repo.join("src/main.rs"), MAIN_V2).unwrap();
    git(&repo, &["commit", "-qam", "v2"]);
    let private = make_repo(
        work.path(),
        "vault",
        &[("secret.rs", "fn vault_key() {}\n")],
    );

    let config = format!(
        "[[repositories]]\ngit_url = \"file://{}\"\n\n[security]\nlocal_repository_roots = [{}]\n",
        repo.display(),
        json!(work.path().display().to_string())
    );
    let server = TabbyServer::start_ee(&config, &[]);
    let owner = register_owner(&server, "owner@example.com").await;
    let member = invite_and_register(&server, &owner, "member@example.com").await;
    let token = owner.access_token.as_str();
    let group = create_group(&server, token, "vault-team").await;
    gql_ok(
        &server,
        Some(token),
        "mutation($u: String!, $g: [ID!]) {
            createGitRepository(name: \"vault\", gitUrl: $u, userGroupIds: $g) }",
        json!({"u": format!("file://{}", private.display()), "g": [group]}),
    )
    .await;

    let list = gql_ok(
        &server,
        Some(token),
        "{ repositoryList { id kind name } }",
        json!({}),
    )
    .await;
    let find = |name: &str| {
        list["repositoryList"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in {list}"))
            .clone()
    };
    let shop = find("shop");
    let vault = find("vault");
    assert_eq!(shop["kind"], "GIT_CONFIG");
    let shop_id = shop["id"].as_str().unwrap();
    let vault_id = vault["id"].as_str().unwrap();

    // The root at a ref: directories first, paths from the root.
    let (status, headers, body) = raw(
        &server,
        Some(token),
        &format!("/repositories/gitconfig/{shop_id}/rev/main/"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(headers["content-type"], "application/vnd.directory+json");
    let entries: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        entries["entries"],
        json!([
            {"kind": "dir", "basename": "data"},
            {"kind": "dir", "basename": "docs"},
            {"kind": "dir", "basename": "src"},
            {"kind": "dir", "basename": "web"},
        ])
    );
    let (_, _, body) = raw(
        &server,
        Some(token),
        &format!("/repositories/gitconfig/{shop_id}/resolve/src"),
    )
    .await;
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["entries"],
        json!([{"kind": "file", "basename": "src/lib.rs"}, {"kind": "file", "basename": "src/main.rs"}])
    );

    // A file at the branch and at an older tag.
    let (status, headers, body) = raw(
        &server,
        Some(token),
        &format!("/repositories/gitconfig/{shop_id}/rev/main/src/main.rs"),
    )
    .await;
    assert_eq!((status, body.as_str()), (200, MAIN_V2));
    assert_eq!(headers["content-type"], "text/plain; charset=utf-8");
    let (_, _, body) = raw(
        &server,
        Some(token),
        &format!("/repositories/gitconfig/{shop_id}/rev/v1/src/main.rs"),
    )
    .await;
    assert_eq!(body, MAIN_V1);
    // HTML from the repository is never rendered from this origin.
    let (_, headers, _) = raw(
        &server,
        Some(token),
        &format!("/repositories/gitconfig/{shop_id}/rev/main/web/index.html"),
    )
    .await;
    assert_eq!(headers["content-type"], "text/plain; charset=utf-8");
    assert!(
        headers["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("sandbox")
    );
    assert_eq!(headers["x-content-type-options"], "nosniff");

    // The attacker's requests.
    for (path, expected) in [
        (
            format!("/repositories/gitconfig/{shop_id}/rev/main~1/src/main.rs"),
            400,
        ),
        (
            format!("/repositories/gitconfig/{shop_id}/rev/%3A%2Fmain/src/main.rs"),
            400,
        ),
        (
            format!("/repositories/gitconfig/{shop_id}/rev/nope/src/main.rs"),
            404,
        ),
        (
            format!("/repositories/gitconfig/{shop_id}/rev/main/no/such/file"),
            404,
        ),
        (
            "/repositories/gitconfig/not-an-id/rev/main/".to_string(),
            404,
        ),
        ("/repositories/github/x/rev/main/".to_string(), 404),
    ] {
        let (status, _, body) = raw(&server, Some(token), &path).await;
        assert_eq!(status, expected, "{path}: {body}");
        assert!(
            serde_json::from_str::<Value>(&body).unwrap()["error"].is_string(),
            "{body}"
        );
    }
    // `..` as the client sends it, byte for byte (HTTP clients resolve dot segments first).
    let traversal = raw_http(
        &server,
        &format!("/repositories/gitconfig/{shop_id}/rev/main/src/../../../../etc/passwd"),
        token,
    );
    assert!(traversal.starts_with("HTTP/1.1 400"), "{traversal}");
    assert!(!traversal.contains("root:"), "{traversal}");
    let root = format!("/repositories/gitconfig/{shop_id}/rev/main/");
    assert_eq!(raw(&server, None, &root).await.0, 401);
    assert_eq!(
        raw(&server, Some(&owner.auth_token), &root).await.0,
        401,
        "sessions only"
    );
    let (status, _, _) = raw(
        &server,
        Some(token),
        &format!("{root}?access_token={token}"),
    )
    .await;
    assert_eq!(status, 401, "never a token in the URL");

    // Grep: a regex over lines, with positions; path, language and negation filters.
    let vars = |q: &str| json!({"k": "GIT_CONFIG", "id": shop_id, "q": q});
    let out = gql_ok(&server, Some(token), GREP, vars("fn \\w+")).await;
    assert_eq!(paths(&out), ["src/lib.rs", "src/main.rs"]);
    let main = &out["repositoryGrep"]["files"][1];
    assert_eq!(
        main["lines"],
        json!([
            {"lineNumber": 1, "text": "fn main() {", "subMatches": [{"bytesStart": 0, "bytesEnd": 7}]},
            {"lineNumber": 5, "text": "fn greet(who: &str) {", "subMatches": [{"bytesStart": 0, "bytesEnd": 8}]},
        ])
    );
    let out = gql_ok(
        &server,
        Some(token),
        GREP,
        json!({"k": "GIT_CONFIG", "id": shop_id, "rev": "v1", "q": "greet"}),
    )
    .await;
    assert_eq!(paths(&out), Vec::<String>::new(), "not at v1");
    assert_eq!(
        paths(&gql_ok(&server, Some(token), GREP, vars("hello")).await),
        ["docs/readme.md", "src/main.rs"]
    );
    assert_eq!(
        paths(&gql_ok(&server, Some(token), GREP, vars("hello lang:rust")).await),
        ["src/main.rs"]
    );
    assert_eq!(
        paths(&gql_ok(&server, Some(token), GREP, vars("hello -f:^src/")).await),
        ["docs/readme.md"]
    );
    assert_eq!(
        paths(&gql_ok(&server, Some(token), GREP, vars("f:\\.rs$ -f:lib")).await),
        ["src/main.rs"]
    );
    // Pathological patterns: a program too large is refused; exponential-backtracking
    // shapes run in linear time over a 100 KB line.
    let err = gql_err(&server, Some(token), GREP, vars("(a{1000}){1000}")).await;
    assert_eq!(validation_paths(&err), ["query"]);
    let started = Instant::now();
    let out = gql_ok(&server, Some(token), GREP, vars("^(a|aa)*(a*)*X$")).await;
    assert_eq!(paths(&out), Vec::<String>::new());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let err = gql_err(
        &server,
        Some(token),
        GREP,
        json!({"k": "GIT_CONFIG", "id": shop_id, "rev": "HEAD@{1}", "q": "x"}),
    )
    .await;
    assert_eq!(validation_paths(&err), ["rev"]);

    // File names by fuzzy match.
    let found = gql_ok(
        &server,
        Some(token),
        "query($id: ID!) { repositorySearch(kind: GIT_CONFIG, id: $id, pattern: \"smain\") { type path indices } }",
        json!({"id": shop_id}),
    )
    .await;
    assert_eq!(
        found["repositorySearch"][0]["path"], "src/main.rs",
        "{found}"
    );
    assert_eq!(found["repositorySearch"][0]["type"], "file");

    // The private repository: the owner reads it, a non-member gets "not found" everywhere.
    let vault_vars = json!({"k": "GIT", "id": vault_id, "q": "vault_key"});
    assert_eq!(
        paths(&gql_ok(&server, Some(token), GREP, vault_vars.clone()).await),
        ["secret.rs"]
    );
    let err = gql_err(&server, Some(&member.access_token), GREP, vault_vars).await;
    assert_eq!(code(&err), Some("NOT_FOUND"), "{err}");
    let err = gql_err(
        &server,
        Some(&member.access_token),
        GREP,
        json!({"k": "GIT", "id": "nonexistent", "q": "x"}),
    )
    .await;
    assert_eq!(code(&err), Some("NOT_FOUND"), "the same answer: {err}");
    let vault_root = format!("/repositories/git/{vault_id}/rev/main/secret.rs");
    assert_eq!(raw(&server, Some(token), &vault_root).await.0, 200);
    let (status, _, body) = raw(&server, Some(&member.access_token), &vault_root).await;
    assert_eq!(status, 404);
    assert!(!body.contains("vault_key"));
    // The member reads the public one.
    assert_eq!(
        paths(
            &gql_ok(
                &server,
                Some(&member.access_token),
                GREP,
                vars("lib_helper")
            )
            .await
        ),
        ["src/lib.rs"]
    );
}
