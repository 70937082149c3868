//! LDAP sign-in against a real directory: Debian's OpenLDAP `slapd`, started by the test on
//! loopback with a generated configuration, seeded with users in nested OUs (`slapadd`), with
//! StartTLS on a self-signed certificate (`openssl`). Settings with a sealed bind password, the
//! connection test, sign-in (first sign-in creates the account, an existing e-mail signs into
//! its account), the attacker's user ids (filter injection, empty password), a deactivated
//! user, password sign-in turned off once an admin has signed in by LDAP, and a directory
//! that is down.

use std::{
    net::TcpStream,
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use serde_json::{Value, json};

use crate::{ee_support::*, support::*};

const SLAPD: &str = "/usr/sbin/slapd";
const SLAPADD: &str = "/usr/sbin/slapadd";
const BASE: &str = "dc=example,dc=org";
const SERVICE_DN: &str = "cn=tabby,ou=services,dc=example,dc=org";
const SERVICE_PASSWORD: &str = "svc-Secret-not-in-the-db";
const ALICE_PASSWORD: &str = "alice-Pass1";
const BOB_PASSWORD: &str = "bob-Pass1";
const OWNER_LDAP_PASSWORD: &str = "owner-ldap-Pass1";

/// A running slapd; killed on drop.
pub struct Directory {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn seed() -> String {
    let person = |uid: &str, ou: &str, cn: &str, mail: &str, password: &str| {
        format!(
            "dn: uid={uid},{ou}\nobjectClass: inetOrgPerson\nuid: {uid}\ncn: {cn}\n\
             sn: {cn}\nmail: {mail}\nuserPassword: {password}\n\n"
        )
    };
    let ou =
        |dn: &str, name: &str| format!("dn: {dn}\nobjectClass: organizationalUnit\nou: {name}\n\n");
    let people = format!("ou=people,{BASE}");
    let engineering = format!("ou=engineering,{people}");
    [
        format!("dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\no: Example\ndc: example\n\n"),
        ou(&people, "people"),
        ou(&engineering, "engineering"),
        ou(&format!("ou=services,{BASE}"), "services"),
        format!(
            "dn: {SERVICE_DN}\nobjectClass: person\ncn: tabby\nsn: tabby\nuserPassword: {SERVICE_PASSWORD}\n\n"
        ),
        person("alice", &people, "Alice Liddell", "alice@example.org", ALICE_PASSWORD),
        person("bob", &engineering, "Bob Builder", "bob@example.org", BOB_PASSWORD),
        person("owner", &people, "The Owner", "owner@example.org", OWNER_LDAP_PASSWORD),
        // No e-mail: verified, but there is no account to sign into.
        format!(
            "dn: uid=nomail,{people}\nobjectClass: inetOrgPerson\nuid: nomail\ncn: No Mail\nsn: Mail\nuserPassword: nomail-Pass1\n\n"
        ),
    ]
    .concat()
}

impl Directory {
    /// slapd on a free loopback port with StartTLS, seeded with the test's users.
    pub fn start() -> Directory {
        assert!(
            Path::new(SLAPD).exists(),
            "this test needs Debian's slapd at {SLAPD} (scripts/test.sh installs it)"
        );
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("data")).unwrap();
        run(Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=127.0.0.1",
            ])
            .arg("-keyout")
            .arg(d.join("key.pem"))
            .arg("-out")
            .arg(d.join("cert.pem")));
        let conf = format!(
            "include /etc/ldap/schema/core.schema\n\
             include /etc/ldap/schema/cosine.schema\n\
             include /etc/ldap/schema/inetorgperson.schema\n\
             pidfile {d}/slapd.pid\n\
             TLSCertificateFile {d}/cert.pem\n\
             TLSCertificateKeyFile {d}/key.pem\n\
             modulepath /usr/lib/ldap\n\
             moduleload back_mdb\n\
             database mdb\n\
             maxsize 10485760\n\
             suffix \"{BASE}\"\n\
             rootdn \"cn=admin,{BASE}\"\n\
             rootpw admin-secret\n\
             directory {d}/data\n\
             access to attrs=userPassword by anonymous auth by * none\n\
             access to * by dn.exact=\"{SERVICE_DN}\" read by * none\n",
            d = d.display()
        );
        std::fs::write(d.join("slapd.conf"), conf).unwrap();
        std::fs::write(d.join("seed.ldif"), seed()).unwrap();
        run(Command::new(SLAPADD)
            .arg("-f")
            .arg(d.join("slapd.conf"))
            .arg("-l")
            .arg(d.join("seed.ldif")));
        let mut directory = Directory {
            child: None,
            port: free_port(),
            dir,
        };
        directory.spawn();
        directory
    }

    fn spawn(&mut self) {
        let d = self.dir.path();
        let child = Command::new(SLAPD)
            .arg("-f")
            .arg(d.join("slapd.conf"))
            .args(["-h", &format!("ldap://127.0.0.1:{}/", self.port), "-d", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start slapd");
        self.child = Some(child);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "slapd did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Directory {
    fn drop(&mut self) {
        self.stop();
    }
}

const UPDATE: &str = "mutation($i: UpdateLdapCredentialInput!) { updateLdapCredential(input: $i) }";
const TEST: &str = "mutation($i: UpdateLdapCredentialInput!) { testLdapConnection(input: $i) }";
const SIGN_IN: &str = "mutation($u: String!, $p: String!) {
    tokenAuthLdap(userId: $u, password: $p) { accessToken refreshToken } }";

fn input(port: u16, encryption: &str, skip_verify: bool, password: Option<&str>) -> Value {
    json!({
        "host": "127.0.0.1",
        "port": port,
        "bindDn": SERVICE_DN,
        "bindPassword": password,
        "baseDn": BASE,
        "userFilter": "(&(objectClass=inetOrgPerson)(uid=%s))",
        "encryption": encryption,
        "skipTlsVerify": skip_verify,
        "emailAttribute": "mail",
        "nameAttribute": "cn",
    })
}

async fn ldap_sign_in(server: &TabbyServer, user: &str, password: &str) -> Value {
    graphql(
        &server.url("/graphql"),
        None,
        SIGN_IN,
        json!({"u": user, "p": password}),
    )
    .await
}

fn error_message(body: &Value) -> String {
    assert!(body["data"].is_null(), "{body}");
    body["errors"][0]["message"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn ldap_sign_in_against_slapd() {
    let mut directory = Directory::start();
    let server = TabbyServer::start_ee("", &[]);
    let owner = register_owner(&server, "owner@example.org").await;
    let token = owner.access_token.as_str();

    // Not set up: no provider, and the mutation says so.
    let providers = gql_ok(&server, None, "{ authProviders { kind } }", json!({})).await;
    assert_eq!(providers["authProviders"], json!([]));
    let body = ldap_sign_in(&server, "alice", ALICE_PASSWORD).await;
    assert!(error_message(&body).contains("not set up"), "{body}");

    // Bad settings name their fields.
    let mut bad = input(directory.port, "START_TLS", true, Some(SERVICE_PASSWORD));
    bad["userFilter"] = json!("uid=%s");
    bad["host"] = json!("ldap://127.0.0.1");
    let err = gql_err(&server, Some(token), UPDATE, json!({"i": bad})).await;
    assert_eq!(validation_paths(&err), ["host", "userFilter"]);

    // The connection test: a wrong service password, an unverifiable certificate, then
    // StartTLS with verification skipped (the test's self-signed certificate).
    let err = gql_err(
        &server,
        Some(token),
        TEST,
        json!({"i": input(directory.port, "START_TLS", true, Some("wrong"))}),
    )
    .await;
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("refused the service account"),
        "{err}"
    );
    let err = gql_err(
        &server,
        Some(token),
        TEST,
        json!({"i": input(directory.port, "START_TLS", false, Some(SERVICE_PASSWORD))}),
    )
    .await;
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .starts_with("The LDAP connection test failed")
            && err["message"].as_str().unwrap().contains("certificate"),
        "{err}"
    );
    gql_ok(
        &server,
        Some(token),
        TEST,
        json!({"i": input(directory.port, "START_TLS", true, Some(SERVICE_PASSWORD))}),
    )
    .await;
    gql_ok(
        &server,
        Some(token),
        UPDATE,
        json!({"i": input(directory.port, "START_TLS", true, Some(SERVICE_PASSWORD))}),
    )
    .await;
    // With the stored password (none in the input).
    gql_ok(
        &server,
        Some(token),
        TEST,
        json!({"i": input(directory.port, "START_TLS", true, None)}),
    )
    .await;

    // The bind password is never returned nor stored in the clear.
    let stored = gql_ok(
        &server,
        Some(token),
        "{ ldapCredential { host port bindDn baseDn userFilter encryption skipTlsVerify
            emailAttribute nameAttribute } }",
        json!({}),
    )
    .await;
    assert_eq!(stored["ldapCredential"]["encryption"], "START_TLS");
    assert!(!stored.to_string().contains(SERVICE_PASSWORD));
    assert_not_stored_in_clear(&server, SERVICE_PASSWORD);
    let providers = gql_ok(&server, None, "{ authProviders { kind } }", json!({})).await;
    assert_eq!(providers["authProviders"], json!([{"kind": "LDAP"}]));

    // First sign-in creates the account from the directory entry; again signs into it.
    let body = ldap_sign_in(&server, "alice", ALICE_PASSWORD).await;
    let alice = body["data"]["tokenAuthLdap"]["accessToken"]
        .as_str()
        .unwrap_or_else(|| panic!("{body}"))
        .to_string();
    let me = gql_ok(
        &server,
        Some(&alice),
        "{ me { id email name isAdmin isSsoUser isPasswordSet } }",
        json!({}),
    )
    .await["me"]
        .clone();
    assert_eq!(me["email"], "alice@example.org");
    assert_eq!(me["name"], "Alice Liddell");
    assert_eq!(me["isAdmin"], false);
    assert_eq!(me["isSsoUser"], true);
    assert_eq!(me["isPasswordSet"], false);
    let again = ldap_sign_in(&server, " alice ", ALICE_PASSWORD).await;
    let again = again["data"]["tokenAuthLdap"]["accessToken"]
        .as_str()
        .unwrap();
    assert_eq!(
        gql_ok(&server, Some(again), "{ me { id } }", json!({})).await["me"]["id"],
        me["id"]
    );
    // A user in a nested OU (the search covers the subtree).
    let body = ldap_sign_in(&server, "bob", BOB_PASSWORD).await;
    assert!(
        body["data"]["tokenAuthLdap"]["accessToken"].is_string(),
        "{body}"
    );

    // Wrong password, unknown user, empty password (an unauthenticated bind the directory
    // would accept) and filter injection all get the same answer.
    for (user, password) in [
        ("alice", "wrong-Pass1"),
        ("nobody", ALICE_PASSWORD),
        ("alice", ""),
        ("*", ALICE_PASSWORD),
        ("alice)(uid=*", ALICE_PASSWORD),
        ("*)(|(uid=*", ALICE_PASSWORD),
        ("al*", ALICE_PASSWORD),
    ] {
        let body = ldap_sign_in(&server, user, password).await;
        assert_eq!(
            error_message(&body),
            "Invalid user id or password",
            "{user:?}: {body}"
        );
    }
    // Verified, but the entry has no e-mail: no account is made.
    let body = ldap_sign_in(&server, "nomail", "nomail-Pass1").await;
    assert!(error_message(&body).contains("no e-mail"), "{body}");
    let users = gql_ok(
        &server,
        Some(token),
        "{ users { edges { node { email } } } }",
        json!({}),
    )
    .await;
    assert_eq!(
        users["users"]["edges"].as_array().unwrap().len(),
        3,
        "{users}"
    );

    // No password reset mail for a directory account (it has no password to reset).
    // (Mail is not set up here; the reset path is covered in ee_mail.)

    // A non-admin sees none of the settings.
    let body = graphql(
        &server.url("/graphql"),
        Some(&alice),
        "{ ldapCredential { host } }",
        json!({}),
    )
    .await;
    assert_eq!(code(&body["errors"][0]), Some("FORBIDDEN"), "{body}");
    let err = gql_err(
        &server,
        Some(&alice),
        TEST,
        json!({"i": input(directory.port, "NONE", false, None)}),
    )
    .await;
    assert_eq!(code(&err), Some("FORBIDDEN"), "{err}");

    // A deactivated user cannot sign in through the directory either.
    gql_ok(
        &server,
        Some(token),
        "mutation($id: ID!) { updateUserActive(id: $id, active: false) }",
        json!({"id": me["id"]}),
    )
    .await;
    let body = ldap_sign_in(&server, "alice", ALICE_PASSWORD).await;
    assert_eq!(error_message(&body), "User is disabled");

    // Password sign-in can be turned off only once an admin has signed in by LDAP.
    const SECURITY: &str = "mutation($off: Boolean!) { updateSecuritySetting(input: {
        allowedRegisterDomainList: [], disableClientSideTelemetry: false,
        disablePasswordLogin: $off }) }";
    let err = gql_err(&server, Some(token), SECURITY, json!({"off": true})).await;
    assert_eq!(validation_paths(&err), ["disablePasswordLogin"]);
    let body = ldap_sign_in(&server, "owner", OWNER_LDAP_PASSWORD).await;
    let owner_ldap = body["data"]["tokenAuthLdap"]["accessToken"]
        .as_str()
        .unwrap_or_else(|| panic!("{body}"))
        .to_string();
    assert_eq!(
        gql_ok(
            &server,
            Some(&owner_ldap),
            "{ me { id isOwner } }",
            json!({})
        )
        .await["me"],
        json!({"id": owner.id, "isOwner": true}),
        "the existing account with the directory's e-mail"
    );
    gql_ok(&server, Some(token), SECURITY, json!({"off": true})).await;
    let body = graphql(
        &server.url("/graphql"),
        None,
        "mutation { tokenAuth(email: \"owner@example.org\", password: \"Passw0rd!x\") { accessToken } }",
        json!({}),
    )
    .await;
    assert!(error_message(&body).contains("turned off"), "{body}");
    let body = ldap_sign_in(&server, "owner", OWNER_LDAP_PASSWORD).await;
    assert!(
        body["data"]["tokenAuthLdap"]["accessToken"].is_string(),
        "{body}"
    );
    // An invitation cannot be used to make a password account either.
    let code = create_invitation(&server, &owner, "carol@example.org").await;
    let body = graphql(
        &server.url("/graphql"),
        None,
        "mutation($c: String!, $p: String!) { register(email: \"carol@example.org\",
            password1: $p, password2: $p, invitationCode: $c, name: \"Carol\") { accessToken } }",
        json!({"c": code, "p": PASSWORD}),
    )
    .await;
    assert!(error_message(&body).contains("turned off"), "{body}");
    // Removing LDAP now would lock everyone out.
    let err = gql_err(
        &server,
        Some(token),
        "mutation { deleteLdapCredential }",
        json!({}),
    )
    .await;
    assert!(
        err["message"].as_str().unwrap().contains("turn it back on"),
        "{err}"
    );
    gql_ok(&server, Some(token), SECURITY, json!({"off": false})).await;

    // The directory is down: a clear, generic error (the detail is in the server log).
    directory.stop();
    let body = ldap_sign_in(&server, "bob", BOB_PASSWORD).await;
    assert!(
        error_message(&body).contains("not working right now"),
        "{body}"
    );
    assert!(server.stderr().contains("LDAP sign-in of \"bob\" failed"));
    directory.spawn();
    let body = ldap_sign_in(&server, "bob", BOB_PASSWORD).await;
    assert!(
        body["data"]["tokenAuthLdap"]["accessToken"].is_string(),
        "{body}"
    );

    gql_ok(
        &server,
        Some(token),
        "mutation { deleteLdapCredential }",
        json!({}),
    )
    .await;
    let body = ldap_sign_in(&server, "bob", BOB_PASSWORD).await;
    assert!(error_message(&body).contains("not set up"), "{body}");
}
