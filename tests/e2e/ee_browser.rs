//! The web UI in a real browser: Debian's headless Chromium driven by playwright-core
//! (`tests/browser/ui-test.mjs`, pinned in `tests/browser/package-lock.json`) against the real
//! binary with a fake chat model and an indexed repository. Screenshots of the main pages go
//! to `$CARGO_TARGET_TMPDIR/browser-screenshots` (test artifacts, not committed); the page
//! weight of the first load is printed.
//!
//! Needs Node.js 20+, npm and `/usr/bin/chromium` (`scripts/test.sh` installs them).

use std::{path::Path, process::Command, time::Duration};

use serde_json::{Value, json};

use crate::{ee_policy::SHOP, ee_support::*, support::*};

const ANSWER: [&str; 4] = [
    "The discount ",
    "is applied in ",
    "`compute_discounted_price`",
    " [[citation:1]].",
];

#[tokio::test]
async fn ee_browser_sign_in_ask_and_manage_the_team() {
    assert!(
        Path::new("/usr/bin/chromium").exists(),
        "this test needs Debian's chromium at /usr/bin/chromium (scripts/test.sh installs it)"
    );
    npm_ci(
        &tests_dir("browser"),
        "node_modules/playwright-core/package.json",
    );
    let work = tempfile::tempdir().unwrap();
    let repo = make_repo(work.path(), "shop", &[("src/pricing.py", SHOP)]);

    let chat = FakeServer::start(
        Protocol::OpenAi,
        Script::default()
            .when("Reply with SNIPPET", ["SNIPPET"])
            .pieces(ANSWER),
    )
    .await;
    let config = format!(
        "{}[[repositories]]\ngit_url = \"file://{}\"\n",
        openai_chat_config(&chat.url(), "fake"),
        repo.display()
    );
    let server = TabbyServer::start_ee(&config, &[]);
    // The repository is indexed by a job right after start; wait for its chunks via the
    // index directory (no account exists yet to search with).
    poll(
        "the repository to be indexed",
        Duration::from_secs(60),
        || {
            let root = server.root().to_path_buf();
            async move {
                let meta = std::fs::read_to_string(root.join("index/tabby-index.json")).ok()?;
                meta.contains("\"code\"").then_some(())
            }
        },
    )
    .await;

    // A real SMTP server receives the mails the UI's flows send.
    let sink = crate::ee_mail::Sink::start(0, None);
    // And a real LDAP directory for the LDAP settings page and sign-in.
    let directory = crate::ee_ldap::Directory::start();
    // And an OpenID Connect provider whose user is the admin.
    let idp = crate::ee_oauth::Idp::start("ada@example.com").await;
    // And a GitHub Enterprise-shaped REST server for the Integrations page.
    let vendor = crate::ee_integrations::start_vendor().await;
    let vendor_url = vendor.lock().unwrap().url.clone();
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser-screenshots");
    let expected = "The discount is applied in";
    let out = tokio::task::spawn_blocking({
        let url = server.url("");
        let shots = shots.clone();
        let port = sink.port.to_string();
        let mail_dir = sink.dir().to_path_buf();
        let ldap_port = directory.port.to_string();
        let idp_url = idp.url.clone();
        let vendor_url = vendor_url.clone();
        move || {
            Command::new("node")
                .arg(tests_dir("browser").join("ui-test.mjs"))
                .arg(&url)
                .arg(&shots)
                .arg(expected)
                .arg(&port)
                .arg(&mail_dir)
                .arg(&ldap_port)
                .arg(&idp_url)
                .arg(&vendor_url)
                .arg(crate::ee_integrations::GOOD_TOKEN)
                .output()
                .expect("run node")
        }
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "the browser run failed:\n{}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        server.stderr()
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("the driver prints JSON");
    eprintln!("browser report: {report}");
    assert_eq!(
        report["blockedRequests"], 0,
        "the UI must not reach outside: {report}"
    );
    let weight = report["pageWeightBytes"].as_u64().unwrap();
    assert!(
        weight > 10_000 && weight < 200_000,
        "first-load weight {weight} bytes"
    );
    for name in [
        "signup",
        "answer",
        "team",
        "groups",
        "repositories",
        "jobs",
        "chat",
        "mail",
        "security",
        "reset-password",
        "ldap",
        "oauth",
        "code",
        "integrations",
    ] {
        assert!(
            shots.join(format!("{name}.png")).is_file(),
            "missing screenshot {name}"
        );
    }

    // What the browser did is in the database: a thread with the streamed answer, the
    // invited user registered, a group, a read grant on the repository, the new password.
    let admin = gql_ok(
        &server,
        None,
        "mutation { tokenAuth(email: \"ada@example.com\", password: \"Adm1n-pass!2\") { accessToken } }",
        json!({}),
    )
    .await["tokenAuth"]["accessToken"]
        .as_str()
        .unwrap()
        .to_string();
    let data = gql_ok(
        &server,
        Some(&admin),
        "{ myThreads { edges { node { id } } } invitations { edges { node { email } } }
           users { edges { node { email } } } userGroups { name } repositoryList { sourceId name }
           securitySetting { allowedRegisterDomainList } }",
        json!({}),
    )
    .await;
    assert_eq!(
        data["myThreads"]["edges"].as_array().unwrap().len(),
        1,
        "{data}"
    );
    assert_eq!(
        data["invitations"]["edges"],
        json!([]),
        "bob used his: {data}"
    );
    assert!(
        data["users"]["edges"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["node"]["email"] == "bob@example.com"),
        "{data}"
    );
    assert_eq!(
        data["securitySetting"]["allowedRegisterDomainList"],
        json!(["example.org"])
    );
    assert_eq!(data["userGroups"][0]["name"], "secret-team");
    let source = data["repositoryList"][0]["sourceId"].as_str().unwrap();
    let policy = gql_ok(
        &server,
        Some(&admin),
        "query($s: String!) { sourceIdAccessPolicies(sourceId: $s) { read { name } } }",
        json!({"s": source}),
    )
    .await;
    assert_eq!(
        policy["sourceIdAccessPolicies"]["read"][0]["name"],
        "secret-team"
    );
}

/// The UI's pages may not be framed (clickjacking), connect only to their own origin (the
/// same-origin WebSocket included under CSP 3's `'self'`), and load nothing from elsewhere.
#[tokio::test]
async fn ee_ui_pages_are_served_with_a_strict_content_security_policy() {
    let server = TabbyServer::start_ee("", &[]);
    for path in ["/", "/threads", "/no-such-page"] {
        let response = client().get(server.url(path)).send().await.unwrap();
        let expected = if path == "/no-such-page" { 404 } else { 200 };
        assert_eq!(response.status(), expected, "{path}");
        let csp = response
            .headers()
            .get("content-security-policy")
            .unwrap_or_else(|| panic!("{path}: no CSP"))
            .to_str()
            .unwrap()
            .to_string();
        for directive in [
            "default-src 'self'",
            "connect-src 'self';",
            "frame-ancestors 'none'",
            "base-uri 'none'",
        ] {
            assert!(
                csp.contains(directive),
                "{path}: {directive} missing in {csp}"
            );
        }
        assert!(!csp.contains("ws:") && !csp.contains('*'), "{path}: {csp}");
        assert_eq!(response.headers()["x-frame-options"], "DENY", "{path}");
    }
}

/// GraphiQL runs in a real browser from the embedded assets, under its CSP, with no request
/// leaving the server: a query with the UI's stored session returns the user.
#[tokio::test]
async fn ee_browser_graphiql_runs_a_query_under_its_csp() {
    assert!(
        Path::new("/usr/bin/chromium").exists(),
        "this test needs Debian's chromium at /usr/bin/chromium (scripts/test.sh installs it)"
    );
    npm_ci(
        &tests_dir("browser"),
        "node_modules/playwright-core/package.json",
    );
    let server = TabbyServer::start_ee("", &[]);
    let owner = register_owner(&server, "owner@example.com").await;
    let out = tokio::task::spawn_blocking({
        let url = server.url("");
        let token = owner.access_token.clone();
        move || {
            Command::new("node")
                .arg(tests_dir("browser").join("graphiql-test.mjs"))
                .arg(url.trim_end_matches('/'))
                .arg(token)
                .output()
                .expect("run node")
        }
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "GraphiQL in the browser failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).expect("the script prints JSON");
    assert!(
        result["result"]
            .as_str()
            .is_some_and(|r| r.contains("owner@example.com")),
        "{result}"
    );
}
