//! Mail through a real SMTP server (aiosmtpd, pinned in tests/smtp/requirements.txt, run by
//! tests/smtp/sink.py on loopback): SMTP settings with a sealed password, a test mail,
//! invitation mails whose link registers, password resets by mail (single use, same answer
//! for unknown addresses, sessions ended), reset links made by an admin, self sign-up by
//! mailed invitation, failed jobs mailed to admins, retries while the SMTP server is down and
//! what the admin sees of them, the security setting and seat limits.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use serde_json::{Value, json};

use crate::{ee_support::*, support::*};

/// A running `tests/smtp/sink.py`; killed on drop.
pub struct Sink {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Sink {
    /// `port` 0: a free one. `auth`: `user:password` required.
    pub fn start(port: u16, auth: Option<&str>) -> Sink {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(venv_python("smtp"));
        cmd.args(["-W", "ignore"])
            .arg(tests_dir("smtp").join("sink.py"))
            .arg(dir.path())
            .args(["--port", &port.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(auth) = auth {
            cmd.args(["--auth", auth]);
        }
        let mut child = cmd.spawn().expect("start the SMTP sink");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let port = line
            .trim()
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("the SMTP sink did not start: {line:?}"))
            .parse()
            .unwrap();
        Sink { child, port, dir }
    }

    /// Where each received mail is written (`NNNN.json`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn mails(&self) -> Vec<Value> {
        mails_in(self.dir.path())
    }

    /// Waits for a mail to `to` whose subject contains `subject`.
    async fn wait_for(&self, to: &str, subject: &str) -> Value {
        poll(
            &format!("a mail to {to} about {subject:?}"),
            Duration::from_secs(30),
            || async {
                self.mails().into_iter().find(|m| {
                    m["rcpt_tos"] == json!([to]) && m["subject"].as_str().unwrap().contains(subject)
                })
            },
        )
        .await
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn mails_in(dir: &Path) -> Vec<Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        .collect()
}

/// The first `http…` link in a mail's body.
fn link(mail: &Value) -> String {
    let body = mail["body"].as_str().unwrap();
    body.split_whitespace()
        .find(|w| w.starts_with("http") && w.contains("/auth/"))
        .unwrap_or_else(|| panic!("no link in {body}"))
        .to_string()
}

fn query_param(url: &str, name: &str) -> String {
    let url = reqwest::Url::parse(url).unwrap();
    url.query_pairs()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no {name} in {url}"))
        .1
        .into_owned()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

const SMTP_USER: &str = "tabby-mailer";
const SMTP_PASSWORD: &str = "sm7p-Pa55word-not-in-the-db";

const UPDATE_EMAIL: &str = "mutation($i: EmailSettingInput!) { updateEmailSetting(input: $i) }";
const EMAIL_SETTING: &str = "{ emailSetting { smtpUsername smtpServer smtpPort fromAddress
    encryption authMethod pendingDeliveries failedDeliveries lastDeliveryError } }";
const TEST_MAIL: &str = "mutation($to: String!) { sendTestEmail(to: $to) }";
const RESET_MAIL: &str = "mutation($e: String!) { requestPasswordResetEmail(input: {email: $e}) }";
const RESET: &str = "mutation($c: String!, $p: String!, $q: String!) {
    passwordReset(input: {code: $c, password1: $p, password2: $q}) }";
const SIGN_IN: &str = "mutation($e: String!, $p: String!) {
    tokenAuth(email: $e, password: $p) { accessToken refreshToken } }";
const NEW_PASSWORD: &str = "N3w-Passw0rd!";

fn smtp_input(port: u16, password: Option<&str>) -> Value {
    json!({
        "smtpUsername": SMTP_USER,
        "smtpPassword": password,
        "smtpServer": "127.0.0.1",
        "smtpPort": port,
        "fromAddress": "tabby@example.com",
        "encryption": "NONE",
        "authMethod": "PLAIN",
    })
}

/// Points the server's mail at `port` and its links at the server itself.
async fn set_up_mail(server: &TabbyServer, admin: &str, port: u16) {
    gql_ok(
        server,
        Some(admin),
        UPDATE_EMAIL,
        json!({"i": smtp_input(port, Some(SMTP_PASSWORD))}),
    )
    .await;
    gql_ok(
        server,
        Some(admin),
        "mutation($u: String!) { updateNetworkSetting(input: {externalUrl: $u}) }",
        json!({"u": server.url("/")}),
    )
    .await;
}

/// Waits until the admin sees no mail pending.
async fn outbox_drained(server: &TabbyServer, admin: &str) {
    poll("the outbox to drain", Duration::from_secs(10), || async {
        let s = gql_ok(server, Some(admin), EMAIL_SETTING, json!({})).await;
        (s["emailSetting"]["pendingDeliveries"] == 0).then_some(())
    })
    .await;
}

async fn sign_in(server: &TabbyServer, email: &str, password: &str) -> Value {
    graphql(
        &server.url("/graphql"),
        None,
        SIGN_IN,
        json!({"e": email, "p": password}),
    )
    .await
}

#[tokio::test]
async fn invitations_test_mail_and_password_resets_go_through_a_real_smtp_server() {
    let sink = Sink::start(0, Some(&format!("{SMTP_USER}:{SMTP_PASSWORD}")));
    let root = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let server = TabbyServer::start_ee(
        &format!(
            "[security]\nlocal_repository_roots = [{}]\n",
            json!(root.path().display().to_string())
        ),
        &[],
    );
    let owner = register_owner(&server, "owner@example.com").await;
    let token = owner.access_token.as_str();

    // Not set up yet: nothing to read, a test mail says so, reset mails are unavailable.
    assert_eq!(
        gql_ok(&server, Some(token), EMAIL_SETTING, json!({})).await["emailSetting"],
        Value::Null
    );
    let err = gql_err(
        &server,
        Some(token),
        TEST_MAIL,
        json!({"to": "owner@example.com"}),
    )
    .await;
    assert!(
        err["message"].as_str().unwrap().contains("not set up"),
        "{err}"
    );
    let err = gql_err(&server, None, RESET_MAIL, json!({"e": "owner@example.com"})).await;
    assert!(
        err["message"].as_str().unwrap().contains("ask an admin"),
        "{err}"
    );
    let info = gql_ok(
        &server,
        None,
        "{ serverInfo { isEmailConfigured } }",
        json!({}),
    )
    .await;
    assert_eq!(info["serverInfo"]["isEmailConfigured"], false);

    // Bad settings name each field; nothing is stored.
    let mut bad = smtp_input(0, Some("x"));
    bad["smtpServer"] = json!("smtp.example.com\r\nRCPT TO:<victim@example.com>");
    bad["fromAddress"] = json!("tabby");
    let err = gql_err(&server, Some(token), UPDATE_EMAIL, json!({"i": bad})).await;
    assert_eq!(
        validation_paths(&err),
        ["smtpServer", "smtpPort", "fromAddress"]
    );
    set_up_mail(&server, token, sink.port).await;

    // The password is never returned and is not stored in the clear.
    let setting =
        gql_ok(&server, Some(token), EMAIL_SETTING, json!({})).await["emailSetting"].clone();
    assert_eq!(setting["smtpUsername"], SMTP_USER);
    assert_eq!(setting["smtpPort"], sink.port);
    assert_eq!(setting["encryption"], "NONE");
    assert_eq!(setting["pendingDeliveries"], 0);
    assert!(!setting.to_string().contains(SMTP_PASSWORD));
    assert_not_stored_in_clear(&server, SMTP_PASSWORD);
    let info = gql_ok(
        &server,
        None,
        "{ serverInfo { isEmailConfigured } }",
        json!({}),
    )
    .await;
    assert_eq!(info["serverInfo"]["isEmailConfigured"], true);

    // A test mail, authenticated with the sealed password.
    gql_ok(
        &server,
        Some(token),
        TEST_MAIL,
        json!({"to": "owner@example.com"}),
    )
    .await;
    let test = sink.wait_for("owner@example.com", "test mail").await;
    assert_eq!(test["mail_from"], "tabby@example.com");

    // An invitation is mailed; its link opens the sign-up page and registers.
    let code = create_invitation(&server, &owner, "bob@example.com").await;
    let invitation = sink.wait_for("bob@example.com", "invited").await;
    let url = link(&invitation);
    assert!(url.starts_with(&server.url("/auth/signup?")), "{url}");
    assert_eq!(query_param(&url, "invitationCode"), code);
    let page = client().get(&url).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("<script"));
    let data = gql_ok(
        &server,
        None,
        "mutation($c: String!, $p: String!) { register(email: \"bob@example.com\", password1: $p,
            password2: $p, invitationCode: $c, name: \"Bob\") { accessToken } }",
        json!({"c": query_param(&url, "invitationCode"), "p": PASSWORD}),
    )
    .await;
    let bob_session = data["register"]["accessToken"]
        .as_str()
        .unwrap()
        .to_string();

    // Reset mails: an unknown address gets the same answer and no mail.
    for email in ["nobody@example.com", "bob@example.com"] {
        let data = gql_ok(&server, None, RESET_MAIL, json!({"e": email})).await;
        assert_eq!(data["requestPasswordResetEmail"], true);
    }
    let reset = sink.wait_for("bob@example.com", "Reset").await;
    let url = link(&reset);
    assert!(
        url.starts_with(&server.url("/auth/reset-password?")),
        "{url}"
    );
    let code = query_param(&url, "code");
    let page = client().get(&url).send().await.unwrap();
    assert_eq!(page.status(), 200);
    outbox_drained(&server, token).await;
    assert!(
        sink.mails()
            .iter()
            .all(|m| m["rcpt_tos"] != json!(["nobody@example.com"])),
        "no mail to an address without an account"
    );

    // A weak password is refused without using the code; then the code works once.
    let err = gql_err(
        &server,
        None,
        RESET,
        json!({"c": code, "p": "weak", "q": "weak"}),
    )
    .await;
    assert_eq!(validation_paths(&err), ["password1"]);
    let err = gql_err(
        &server,
        None,
        RESET,
        json!({"c": code, "p": NEW_PASSWORD, "q": "Other-Passw0rd!"}),
    )
    .await;
    assert_eq!(validation_paths(&err), ["password2"]);
    gql_ok(
        &server,
        None,
        RESET,
        json!({"c": code, "p": NEW_PASSWORD, "q": NEW_PASSWORD}),
    )
    .await;
    let err = gql_err(
        &server,
        None,
        RESET,
        json!({"c": code, "p": NEW_PASSWORD, "q": NEW_PASSWORD}),
    )
    .await;
    assert_eq!(validation_paths(&err), ["code"], "single use");
    let err = gql_err(
        &server,
        None,
        RESET,
        json!({"c": "0".repeat(32), "p": NEW_PASSWORD, "q": NEW_PASSWORD}),
    )
    .await;
    assert_eq!(validation_paths(&err), ["code"], "a guessed code");
    // The old password and the old session stop working; the new password signs in.
    let old = sign_in(&server, "bob@example.com", PASSWORD).await;
    assert!(
        old["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("Invalid email address or password")
    );
    let err = gql_err(&server, Some(&bob_session), ME, json!({})).await;
    assert_eq!(code_of(&err), Some("UNAUTHORIZED"), "{err}");
    let new = sign_in(&server, "bob@example.com", NEW_PASSWORD).await;
    assert!(new["data"]["tokenAuth"]["accessToken"].is_string(), "{new}");
    let bob_token = new["data"]["tokenAuth"]["accessToken"]
        .as_str()
        .unwrap()
        .to_string();

    // A reset link older than an hour no longer works.
    let before = sink.mails().len();
    gql_ok(&server, None, RESET_MAIL, json!({"e": "bob@example.com"})).await;
    let stale = poll("a second reset mail", Duration::from_secs(30), || async {
        let mails = sink.mails();
        (mails.len() > before).then(|| mails[before..].to_vec())
    })
    .await;
    let stale_code = query_param(&link(&stale[0]), "code");
    sqlite(
        &server,
        "UPDATE password_reset SET created_at = DATETIME('now', '-2 hours');",
    );
    let err = gql_err(
        &server,
        None,
        RESET,
        json!({"c": stale_code, "p": PASSWORD, "q": PASSWORD}),
    )
    .await;
    assert_eq!(validation_paths(&err), ["code"], "expired");

    // A reset link made by an admin (for users without mail), also single use; a non-admin
    // may not make one, and only the owner may make one for an admin.
    let bob_id = gql_ok(&server, Some(&bob_token), ME, json!({})).await["me"]["id"].clone();
    const GENERATE: &str = "mutation($u: ID!) { generateResetPasswordUrl(userId: $u) }";
    let url = gql_ok(&server, Some(token), GENERATE, json!({"u": bob_id})).await
        ["generateResetPasswordUrl"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        url.starts_with(&server.url("/auth/reset-password?code=")),
        "{url}"
    );
    let err = gql_err(&server, Some(&bob_token), GENERATE, json!({"u": owner.id})).await;
    assert_eq!(code_of(&err), Some("FORBIDDEN"), "{err}");
    gql_ok(
        &server,
        None,
        RESET,
        json!({"c": query_param(&url, "code"), "p": PASSWORD, "q": PASSWORD}),
    )
    .await;
    assert!(sign_in(&server, "bob@example.com", PASSWORD).await["data"]["tokenAuth"].is_object());

    // Non-admins see and change none of the mail settings.
    let bob_token =
        sign_in(&server, "bob@example.com", PASSWORD).await["data"]["tokenAuth"]["accessToken"]
            .as_str()
            .unwrap()
            .to_string();
    for (query, vars) in [
        (EMAIL_SETTING, json!({})),
        (UPDATE_EMAIL, json!({"i": smtp_input(25, None)})),
        (TEST_MAIL, json!({"to": "bob@example.com"})),
        ("mutation { deleteEmailSetting }", json!({})),
    ] {
        // `emailSetting` is nullable: its error comes with `data: {emailSetting: null}`.
        let body = graphql(&server.url("/graphql"), Some(&bob_token), query, vars).await;
        assert_eq!(
            code_of(&body["errors"][0]),
            Some("FORBIDDEN"),
            "{query}: {body}"
        );
        assert!(!body.to_string().contains("smtpServer\":\""), "{body}");
    }

    // A failed job is mailed to the admins (and only to them).
    let missing = root.path().join("no-such-repository");
    gql_ok(
        &server,
        Some(token),
        "mutation($u: String!) { createGitRepository(name: \"missing\", gitUrl: $u) }",
        json!({"u": format!("file://{}", missing.display())}),
    )
    .await;
    let failed = sink
        .wait_for("owner@example.com", "job scheduler_git failed")
        .await;
    let body = failed["body"].as_str().unwrap();
    assert!(body.contains("/background-jobs/"), "{body}");
    assert!(
        sink.mails()
            .iter()
            .all(|m| !(m["rcpt_tos"] == json!(["bob@example.com"])
                && m["subject"].as_str().unwrap().contains("job"))),
        "job failures go to admins only"
    );
}

fn code_of(error: &Value) -> Option<&str> {
    code(error)
}

/// The SMTP server is down: the mail waits and is retried (the admin sees the error), is
/// delivered once the server is up, and is given up after `max_attempts` with a
/// notification. The password sealed under another encryption secret does not open.
#[tokio::test]
async fn undeliverable_mail_is_retried_shown_to_admins_and_given_up() {
    let port = free_port();
    let mut server =
        TabbyServer::start_ee("[email]\nmax_attempts = 3\nretry_initial_secs = 1\n", &[]);
    let owner = register_owner(&server, "owner@example.com").await;
    let token = owner.access_token.clone();
    gql_ok(
        &server,
        Some(&token),
        UPDATE_EMAIL,
        json!({"i": smtp_input(port, Some(SMTP_PASSWORD))}),
    )
    .await;

    // Nobody listens: the test mail's one attempt fails with the SMTP error.
    let err = gql_err(
        &server,
        Some(&token),
        TEST_MAIL,
        json!({"to": "owner@example.com"}),
    )
    .await;
    let message = err["message"].as_str().unwrap();
    assert!(
        message.starts_with("The test mail was not sent: "),
        "{message}"
    );
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");

    // An invitation mail waits for the server, with its error shown.
    create_invitation(&server, &owner, "carol@example.com").await;
    let setting = poll("a failed attempt", Duration::from_secs(20), || async {
        let s =
            gql_ok(&server, Some(&token), EMAIL_SETTING, json!({})).await["emailSetting"].clone();
        (s["pendingDeliveries"] == 1 && s["lastDeliveryError"].is_string()).then_some(s)
    })
    .await;
    assert!(
        setting["lastDeliveryError"]
            .as_str()
            .unwrap()
            .contains("127.0.0.1"),
        "{setting}"
    );
    let sink = Sink::start(port, Some(&format!("{SMTP_USER}:{SMTP_PASSWORD}")));
    sink.wait_for("carol@example.com", "invited").await;
    outbox_drained(&server, &token).await;
    assert_eq!(sink.mails().len(), 1, "delivered once");
    drop(sink);

    // Down for good: given up after three attempts (1 s and 4 s apart), admins notified.
    create_invitation(&server, &owner, "dave@example.com").await;
    let setting = poll(
        "the mail to be given up",
        Duration::from_secs(30),
        || async {
            let s = gql_ok(&server, Some(&token), EMAIL_SETTING, json!({})).await["emailSetting"]
                .clone();
            (s["failedDeliveries"] == 1).then_some(s)
        },
    )
    .await;
    assert_eq!(setting["pendingDeliveries"], 0, "{setting}");
    let notes = gql_ok(
        &server,
        Some(&token),
        "{ notifications { content } }",
        json!({}),
    )
    .await;
    let notes = notes["notifications"].to_string();
    assert!(
        notes.contains("dave@example.com") && notes.contains("after 3 attempts"),
        "{notes}"
    );

    // Another encryption secret: the stored password does not open, and the error says what
    // to do; entering it again works.
    server.restart(&[(
        "TABBY_WEBSERVER_ENCRYPTION_SECRET",
        "another-secret-0123456789abcdef0123456789",
    )]);
    let sink = Sink::start(port, Some(&format!("{SMTP_USER}:{SMTP_PASSWORD}")));
    let err = gql_err(
        &server,
        Some(&token),
        TEST_MAIL,
        json!({"to": "owner@example.com"}),
    )
    .await;
    assert!(
        err["message"].as_str().unwrap().contains("enter it again"),
        "{err}"
    );
    gql_ok(
        &server,
        Some(&token),
        UPDATE_EMAIL,
        json!({"i": smtp_input(port, Some(SMTP_PASSWORD))}),
    )
    .await;
    gql_ok(
        &server,
        Some(&token),
        TEST_MAIL,
        json!({"to": "owner@example.com"}),
    )
    .await;
    sink.wait_for("owner@example.com", "test mail").await;
}

/// Self sign-up by mailed invitation for allowed domains only, the security setting's rules,
/// and the seat limit.
#[tokio::test]
async fn self_signup_security_setting_and_seats() {
    let sink = Sink::start(0, None);
    let server = TabbyServer::start_ee("[security]\nmax_users = 3\nmax_admins = 1\n", &[]);
    let owner = register_owner(&server, "owner@example.com").await;
    let token = owner.access_token.as_str();
    gql_ok(
        &server,
        Some(token),
        UPDATE_EMAIL,
        json!({"i": {
            "smtpUsername": "", "smtpServer": "127.0.0.1", "smtpPort": sink.port,
            "fromAddress": "tabby@example.com", "encryption": "NONE", "authMethod": "NONE"
        }}),
    )
    .await;

    const UPDATE_SECURITY: &str = "mutation($d: [String!]!, $off: Boolean!) {
        updateSecuritySetting(input: {allowedRegisterDomainList: $d,
            disableClientSideTelemetry: false, disablePasswordLogin: $off}) }";
    const REQUEST: &str = "mutation($e: String!) {
        requestInvitationEmail(input: {email: $e}) { id email code } }";
    // Closed until a domain is allowed.
    let err = gql_err(&server, None, REQUEST, json!({"e": "eve@corp.example"})).await;
    assert!(
        err["message"].as_str().unwrap().contains("not open"),
        "{err}"
    );
    let err = gql_err(
        &server,
        Some(token),
        UPDATE_SECURITY,
        json!({"d": ["corp.example", "*.evil"], "off": false}),
    )
    .await;
    assert_eq!(validation_paths(&err), ["allowedRegisterDomainList"]);
    // Turning password sign-in off would lock everyone out: no other method exists.
    let err = gql_err(
        &server,
        Some(token),
        UPDATE_SECURITY,
        json!({"d": [], "off": true}),
    )
    .await;
    assert_eq!(validation_paths(&err), ["disablePasswordLogin"]);
    gql_ok(
        &server,
        Some(token),
        UPDATE_SECURITY,
        json!({"d": [" Corp.Example "], "off": false}),
    )
    .await;
    let setting = gql_ok(
        &server,
        Some(token),
        "{ securitySetting { allowedRegisterDomainList disablePasswordLogin } }",
        json!({}),
    )
    .await;
    assert_eq!(
        setting["securitySetting"]["allowedRegisterDomainList"],
        json!(["corp.example"])
    );
    let info = gql_ok(
        &server,
        None,
        "{ serverInfo { allowSelfSignup } }",
        json!({}),
    )
    .await;
    assert_eq!(info["serverInfo"]["allowSelfSignup"], true);

    // An allowed address cannot register without proving it owns the mailbox.
    let err = gql_err(
        &server,
        None,
        "mutation($p: String!) { register(email: \"eve@corp.example\", password1: $p,
            password2: $p, name: \"Eve\") { accessToken } }",
        json!({"p": PASSWORD}),
    )
    .await;
    assert_eq!(validation_paths(&err), ["invitationCode"]);
    // The invitation goes to the mailbox, not into the answer.
    let answer = gql_ok(&server, None, REQUEST, json!({"e": "eve@corp.example"})).await;
    assert_eq!(answer["requestInvitationEmail"]["code"], "");
    let err = gql_err(
        &server,
        None,
        REQUEST,
        json!({"e": "mallory@other.example"}),
    )
    .await;
    assert!(
        err["message"].as_str().unwrap().contains("not open"),
        "{err}"
    );
    let mail = sink.wait_for("eve@corp.example", "invited").await;
    let code = query_param(&link(&mail), "invitationCode");
    const REGISTER_WITH: &str = "mutation($e: String!, $p: String!, $c: String!) {
        register(email: $e, password1: $p, password2: $p, invitationCode: $c, name: \"N\") {
            accessToken } }";
    gql_ok(
        &server,
        None,
        REGISTER_WITH,
        json!({"e": "eve@corp.example", "p": PASSWORD, "c": code}),
    )
    .await;
    // Asking again for an address with an account mails a note, and answers the same.
    let again = gql_ok(&server, None, REQUEST, json!({"e": "eve@corp.example"})).await;
    assert_eq!(again["requestInvitationEmail"]["code"], "");
    sink.wait_for("eve@corp.example", "Your Tabby account")
        .await;

    // Header injection through an address is refused before anything is queued.
    let err = gql_err(
        &server,
        Some(token),
        "mutation($e: String!) { createInvitation(email: $e) }",
        json!({"e": "x@corp.example\r\nBcc: victim@example.com"}),
    )
    .await;
    assert_eq!(validation_paths(&err), ["email"]);

    // Seats: owner + eve + one more, then registration is refused.
    let frank = invite_and_register(&server, &owner, "frank@example.com").await;
    let code = create_invitation(&server, &owner, "grace@example.com").await;
    let err = gql_err(
        &server,
        None,
        REGISTER_WITH,
        json!({"e": "grace@example.com", "p": PASSWORD, "c": code}),
    )
    .await;
    assert!(
        err["message"].as_str().unwrap().contains("max_users"),
        "{err}"
    );
    // One admin at most: the owner.
    let err = gql_err(
        &server,
        Some(token),
        "mutation($id: ID!) { updateUserRole(id: $id, isAdmin: true) }",
        json!({"id": frank.id}),
    )
    .await;
    assert!(
        err["message"].as_str().unwrap().contains("max_admins"),
        "{err}"
    );
}
