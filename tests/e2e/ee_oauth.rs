//! OAuth 2.0 / OpenID Connect sign-in against identity providers the test runs on loopback:
//! an OIDC issuer (discovery, JWKS, authorize, token; ID tokens signed with a test RSA key
//! made by `openssl`, PKCE checked) and a GitHub Enterprise-shaped OAuth server (authorize,
//! access_token, `/api/v3/user`, `/api/v3/user/emails`). The browser is driven with plain
//! HTTP and the cookie it would keep: settings with a sealed secret, sign-in of an invited
//! user and of an existing account, and the attacker's cases — unknown or replayed state, a
//! callback in another browser, an uninvited address, an unverified e-mail, expired, wrongly
//! signed, wrong-audience, wrong-issuer, nonce-less and `alg: none` ID tokens.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use axum::{
    Form, Json, Router,
    extract::{Query, State},
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::{StatusCode, header};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::{ee_support::*, support::*};

const CLIENT_ID: &str = "tabby-client";
const CLIENT_SECRET: &str = "oauth-Client-secret-not-in-the-db";

/// How the fake issuer misbehaves in its next ID tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Good,
    Expired,
    OtherKey,
    WrongAudience,
    WrongIssuer,
    NoNonce,
    AlgNone,
    Unverified,
}

struct IdpState {
    url: String,
    mode: Mode,
    email: String,
    /// code → (S256 challenge, nonce, redirect_uri)
    codes: HashMap<String, (String, Option<String>, String)>,
    key: EncodingKey,
    other_key: EncodingKey,
    jwk: Value,
    issued: usize,
}

type Shared = Arc<Mutex<IdpState>>;

fn b64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n =
            chunk.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// An RSA key by `openssl`: (private PEM, modulus bytes).
fn rsa_key(dir: &std::path::Path, name: &str) -> (Vec<u8>, Vec<u8>) {
    let path = dir.join(format!("{name}.pem"));
    let out = std::process::Command::new("openssl")
        .args(["genrsa", "-out"])
        .arg(&path)
        .arg("2048")
        .output()
        .expect("this test needs openssl (scripts/test.sh installs it)");
    assert!(out.status.success(), "{out:?}");
    let out = std::process::Command::new("openssl")
        .args(["rsa", "-noout", "-modulus", "-in"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let hex = text.trim().strip_prefix("Modulus=").unwrap();
    let modulus = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    (std::fs::read(&path).unwrap(), modulus)
}

pub struct Idp {
    pub url: String,
    state: Shared,
    _keys: tempfile::TempDir,
}

impl Idp {
    /// An OIDC issuer and GitHub Enterprise-shaped server on a loopback port; every sign-in
    /// there is `email`'s.
    pub async fn start(email: &str) -> Idp {
        let keys = tempfile::tempdir().unwrap();
        let (pem, modulus) = rsa_key(keys.path(), "good");
        let (other_pem, _) = rsa_key(keys.path(), "other");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let url = format!("http://127.0.0.1:{}", addr.port());
        let state = Arc::new(Mutex::new(IdpState {
            url: url.clone(),
            mode: Mode::Good,
            email: email.to_owned(),
            codes: HashMap::new(),
            key: EncodingKey::from_rsa_pem(&pem).unwrap(),
            other_key: EncodingKey::from_rsa_pem(&other_pem).unwrap(),
            jwk: json!({"kty": "RSA", "kid": "k1", "alg": "RS256", "use": "sig",
                        "n": b64url(&modulus), "e": "AQAB"}),
            issued: 0,
        }));
        let app = Router::new()
            .route("/.well-known/openid-configuration", get(discovery))
            .route("/jwks", get(jwks))
            .route("/authorize", get(authorize))
            .route("/login/oauth/authorize", get(authorize))
            .route("/token", post(token))
            .route("/login/oauth/access_token", post(token))
            .route("/api/v3/user", get(github_user))
            .route("/api/v3/user/emails", get(github_emails))
            .with_state(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Idp {
            url,
            state,
            _keys: keys,
        }
    }

    fn set(&self, mode: Mode, email: &str) {
        let mut s = self.state.lock().unwrap();
        s.mode = mode;
        s.email = email.to_owned();
    }
}

async fn discovery(State(s): State<Shared>) -> Json<Value> {
    let url = s.lock().unwrap().url.clone();
    Json(json!({
        "issuer": url,
        "authorization_endpoint": format!("{url}/authorize"),
        "token_endpoint": format!("{url}/token"),
        "jwks_uri": format!("{url}/jwks"),
        "response_types_supported": ["code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
    }))
}

async fn jwks(State(s): State<Shared>) -> Json<Value> {
    Json(json!({"keys": [s.lock().unwrap().jwk.clone()]}))
}

/// Signs in whoever asks (the user is `email`) and sends the browser back with a code.
async fn authorize(State(s): State<Shared>, Query(q): Query<HashMap<String, String>>) -> Response {
    assert_eq!(q["client_id"], CLIENT_ID);
    assert_eq!(q["response_type"], "code");
    assert_eq!(q["code_challenge_method"], "S256");
    let code = format!("code-{}", uuid_like());
    s.lock().unwrap().codes.insert(
        code.clone(),
        (
            q["code_challenge"].clone(),
            q.get("nonce").cloned(),
            q["redirect_uri"].clone(),
        ),
    );
    let sep = if q["redirect_uri"].contains('?') {
        '&'
    } else {
        '?'
    };
    Redirect::to(&format!(
        "{}{sep}code={code}&state={}",
        q["redirect_uri"],
        url_encode(&q["state"])
    ))
    .into_response()
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn url_encode(v: &str) -> String {
    reqwest::Url::parse_with_params("http://x/", &[("v", v)])
        .unwrap()
        .query()
        .unwrap()
        .trim_start_matches("v=")
        .to_owned()
}

/// Redeems a code once, with the client secret and the PKCE verifier.
async fn token(State(s): State<Shared>, Form(f): Form<HashMap<String, String>>) -> Response {
    let mut s = s.lock().unwrap();
    let refuse =
        |error: &str| (StatusCode::BAD_REQUEST, Json(json!({"error": error}))).into_response();
    if f.get("client_id").map(String::as_str) != Some(CLIENT_ID)
        || f.get("client_secret").map(String::as_str) != Some(CLIENT_SECRET)
    {
        return refuse("invalid_client");
    }
    let Some((challenge, nonce, redirect_uri)) = s.codes.remove(&f["code"]) else {
        return refuse("invalid_grant");
    };
    if b64url(&Sha256::digest(f["code_verifier"].as_bytes())) != challenge
        || f["redirect_uri"] != redirect_uri
    {
        return refuse("invalid_grant");
    }
    s.issued += 1;
    let now = now();
    let mut claims = json!({
        "iss": s.url, "sub": "user-1", "aud": CLIENT_ID, "iat": now, "exp": now + 300,
        "nonce": nonce, "email": s.email, "email_verified": true, "name": "Olivia Idp",
    });
    match s.mode {
        Mode::Expired => {
            claims["iat"] = json!(now - 7200);
            claims["exp"] = json!(now - 3600);
        }
        Mode::WrongAudience => claims["aud"] = json!("someone-else"),
        Mode::WrongIssuer => claims["iss"] = json!("https://evil.example"),
        Mode::NoNonce => {
            claims.as_object_mut().unwrap().remove("nonce");
        }
        Mode::Unverified => claims["email_verified"] = json!(false),
        _ => {}
    }
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("k1".into());
    let id_token = match s.mode {
        Mode::OtherKey => jsonwebtoken::encode(&header, &claims, &s.other_key).unwrap(),
        Mode::AlgNone => {
            let head = b64url(br#"{"alg":"none","typ":"JWT","kid":"k1"}"#);
            format!("{head}.{}.", b64url(claims.to_string().as_bytes()))
        }
        _ => jsonwebtoken::encode(&header, &claims, &s.key).unwrap(),
    };
    Json(json!({"access_token": "at-1", "token_type": "bearer", "id_token": id_token}))
        .into_response()
}

async fn github_user() -> Json<Value> {
    Json(json!({"login": "octo", "name": "Octo Cat"}))
}

async fn github_emails(State(s): State<Shared>) -> Json<Value> {
    let s = s.lock().unwrap();
    Json(json!([
        {"email": "secondary@example.com", "primary": false, "verified": true},
        {"email": s.email, "primary": true, "verified": s.mode != Mode::Unverified},
    ]))
}

fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

fn location(response: &reqwest::Response) -> String {
    response
        .headers()
        .get(header::LOCATION)
        .unwrap_or_else(|| panic!("no Location: {response:?}"))
        .to_str()
        .unwrap()
        .to_owned()
}

/// A browser's trip: our sign-in → the provider → our callback (with the cookie, unless
/// `lose_cookie`). The fragment the web UI gets: `Ok(refresh token)` or `Err(message)`.
/// Also returns the callback URL, for replays.
async fn trip(
    server: &TabbyServer,
    provider: &str,
    lose_cookie: bool,
) -> (Result<String, String>, String) {
    let b = browser();
    let start = b
        .get(server.url(&format!("/oauth/signin?provider={provider}")))
        .send()
        .await
        .unwrap();
    assert_eq!(start.status(), StatusCode::SEE_OTHER, "{start:?}");
    let to_provider = location(&start);
    if to_provider.starts_with("/auth/signin#error=") {
        return (Err(fragment_value(&to_provider, "error")), String::new());
    }
    let cookie = start
        .headers()
        .get(header::SET_COOKIE)
        .expect("the flow cookie")
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    assert!(
        start.headers()[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("HttpOnly")
    );
    let at_provider = b.get(&to_provider).send().await.unwrap();
    let callback = location(&at_provider);
    assert!(
        callback.starts_with(&server.url(&format!("/oauth/callback/{provider}?"))),
        "{callback}"
    );
    (
        callback_result(server, &callback, (!lose_cookie).then_some(cookie.as_str())).await,
        callback,
    )
}

async fn callback_result(
    _server: &TabbyServer,
    callback: &str,
    cookie: Option<&str>,
) -> Result<String, String> {
    let mut request = browser().get(callback);
    if let Some(cookie) = cookie {
        request = request.header(header::COOKIE, cookie);
    }
    let back = request.send().await.unwrap();
    assert_eq!(back.status(), StatusCode::SEE_OTHER, "{back:?}");
    let to = location(&back);
    if to.contains("#refresh_token=") {
        Ok(fragment_value(&to, "refresh_token"))
    } else {
        assert!(to.starts_with("/auth/signin#error="), "{to}");
        Err(fragment_value(&to, "error"))
    }
}

fn fragment_value(location: &str, name: &str) -> String {
    let fragment = location.split_once('#').unwrap().1;
    reqwest::Url::parse(&format!("http://x/?{fragment}"))
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == name)
        .unwrap()
        .1
        .into_owned()
}

async fn redeem(server: &TabbyServer, refresh: &str) -> String {
    gql_ok(
        server,
        None,
        "mutation($r: String!) { refreshToken(refreshToken: $r) { accessToken } }",
        json!({"r": refresh}),
    )
    .await["refreshToken"]["accessToken"]
        .as_str()
        .unwrap()
        .to_owned()
}

const UPDATE: &str =
    "mutation($i: UpdateOAuthCredentialInput!) { updateOauthCredential(input: $i) }";

#[tokio::test]
async fn oidc_and_github_sign_in_against_loopback_providers() {
    let idp = Idp::start("invited@example.com").await;
    let server = TabbyServer::start_ee("", &[]);
    let owner = register_owner(&server, "owner@example.com").await;
    let token = owner.access_token.as_str();
    gql_ok(
        &server,
        Some(token),
        "mutation($u: String!) { updateNetworkSetting(input: {externalUrl: $u}) }",
        json!({"u": server.url("/")}),
    )
    .await;

    // Not set up: the trip ends at once with an error.
    let (result, _) = trip(&server, "oidc", false).await;
    assert!(result.unwrap_err().contains("not set up"));

    // Settings: bad input names its fields; a new provider needs its secret; the secret is
    // never returned nor stored in the clear.
    let err = gql_err(
        &server,
        Some(token),
        UPDATE,
        json!({"i": {"provider": "OIDC", "clientId": CLIENT_ID, "clientSecret": CLIENT_SECRET,
                     "configUrl": "http://idp.example.com"}}),
    )
    .await;
    assert_eq!(
        validation_paths(&err),
        ["configUrl"],
        "plain http only to loopback"
    );
    let err = gql_err(
        &server,
        Some(token),
        UPDATE,
        json!({"i": {"provider": "OIDC", "clientId": CLIENT_ID, "configUrl": idp.url}}),
    )
    .await;
    assert_eq!(validation_paths(&err), ["clientSecret"]);
    gql_ok(
        &server,
        Some(token),
        UPDATE,
        json!({"i": {"provider": "OIDC", "clientId": CLIENT_ID, "clientSecret": CLIENT_SECRET,
                     "configUrl": idp.url}}),
    )
    .await;
    let data = gql_ok(
        &server,
        Some(token),
        "{ oauthCredential(provider: OIDC) { provider clientId configUrl }
           oauthCallbackUrl(provider: OIDC) }",
        json!({}),
    )
    .await;
    assert_eq!(data["oauthCredential"]["clientId"], CLIENT_ID);
    assert_eq!(data["oauthCallbackUrl"], server.url("/oauth/callback/oidc"));
    assert!(!data.to_string().contains(CLIENT_SECRET));
    assert_not_stored_in_clear(&server, CLIENT_SECRET);
    let providers = gql_ok(&server, None, "{ authProviders { kind } }", json!({})).await;
    assert_eq!(providers["authProviders"], json!([{"kind": "OAUTH_OIDC"}]));
    let (_, list) = get_json(&server.url("/oauth/providers")).await;
    assert_eq!(list, json!(["oidc"]));

    // An address with no invitation (and no open domain) gets no account.
    idp.set(Mode::Good, "stranger@example.com");
    let (result, _) = trip(&server, "oidc", false).await;
    assert!(
        result
            .unwrap_err()
            .contains("no account for stranger@example.com")
    );

    // An expired invitation counts as none.
    create_invitation(&server, &owner, "late@example.com").await;
    sqlite(
        &server,
        "UPDATE invitations SET created_at = DATETIME('now', '-8 days') WHERE email = 'late@example.com';",
    );
    idp.set(Mode::Good, "late@example.com");
    let (result, _) = trip(&server, "oidc", false).await;
    assert!(
        result
            .unwrap_err()
            .contains("no account for late@example.com")
    );

    // The invited address signs in; its account is made from the ID token.
    create_invitation(&server, &owner, "invited@example.com").await;
    idp.set(Mode::Good, "invited@example.com");
    let (result, callback) = trip(&server, "oidc", false).await;
    let access = redeem(&server, &result.expect("signed in")).await;
    let me = gql_ok(
        &server,
        Some(&access),
        "{ me { email name isSsoUser } }",
        json!({}),
    )
    .await;
    assert_eq!(
        me["me"],
        json!({"email": "invited@example.com", "name": "Olivia Idp", "isSsoUser": true})
    );
    let users_before = gql_ok(
        &server,
        Some(token),
        "{ users { edges { node { id } } } }",
        json!({}),
    )
    .await;

    // The same callback again: its state was used up.
    let replay = callback_result(&server, &callback, None).await;
    assert!(replay.unwrap_err().contains("already used"));
    // A callback in another browser (no flow cookie) signs nobody in.
    let (result, _) = trip(&server, "oidc", true).await;
    assert!(result.unwrap_err().contains("another browser"));
    // A made-up state.
    let forged = format!("{}/oauth/callback/oidc?code=x&state=forged", server.url(""));
    assert!(
        callback_result(&server, &forged, Some("tabby_oauth=x"))
            .await
            .unwrap_err()
            .contains("unknown")
    );
    // The provider's own refusal is shown.
    let denied = format!(
        "{}/oauth/callback/oidc?error=access_denied&error_description=no",
        server.url("")
    );
    assert!(
        callback_result(&server, &denied, None)
            .await
            .unwrap_err()
            .contains("access_denied")
    );

    // Bad ID tokens.
    for (mode, expected) in [
        (Mode::Expired, "ExpiredSignature"),
        (Mode::OtherKey, "InvalidSignature"),
        (Mode::WrongAudience, "InvalidAudience"),
        (Mode::WrongIssuer, "InvalidIssuer"),
        (Mode::NoNonce, "nonce"),
        (Mode::AlgNone, "ID token"),
        (Mode::Unverified, "has not verified"),
    ] {
        idp.set(mode, "invited@example.com");
        let (result, _) = trip(&server, "oidc", false).await;
        let message = result.expect_err(&format!("{mode:?} must not sign in"));
        assert!(message.contains(expected), "{mode:?}: {message}");
    }
    let users_after = gql_ok(
        &server,
        Some(token),
        "{ users { edges { node { id } } } }",
        json!({}),
    )
    .await;
    assert_eq!(users_before, users_after, "nothing half-created");

    // GitHub (Enterprise at the fake's base URL): the owner's verified primary e-mail signs
    // into the owner's account; an unverified one does not.
    gql_ok(
        &server,
        Some(token),
        UPDATE,
        json!({"i": {"provider": "GITHUB", "clientId": CLIENT_ID, "clientSecret": CLIENT_SECRET,
                     "configUrl": idp.url}}),
    )
    .await;
    idp.set(Mode::Unverified, "owner@example.com");
    let (result, _) = trip(&server, "github", false).await;
    assert!(result.unwrap_err().contains("no verified primary e-mail"));
    idp.set(Mode::Good, "owner@example.com");
    let (result, _) = trip(&server, "github", false).await;
    let access = redeem(&server, &result.expect("signed in")).await;
    let me = gql_ok(&server, Some(&access), "{ me { id isOwner } }", json!({})).await;
    assert_eq!(me["me"]["id"], owner.id);

    // The owner has now signed in through GitHub: password sign-in may be turned off.
    gql_ok(
        &server,
        Some(token),
        "mutation { updateSecuritySetting(input: {allowedRegisterDomainList: [],
            disableClientSideTelemetry: false, disablePasswordLogin: true}) }",
        json!({}),
    )
    .await;
    let err = gql_err(
        &server,
        Some(token),
        "mutation { deleteOauthCredential(provider: GITHUB) }",
        json!({}),
    )
    .await;
    assert!(
        err["message"].as_str().unwrap().contains("turn it back on"),
        "{err}"
    );

    // Non-admins see none of it.
    let body = graphql(
        &server.url("/graphql"),
        Some(&access_of_invited(&server, &idp).await),
        "{ oauthCredential(provider: OIDC) { clientId } }",
        json!({}),
    )
    .await;
    assert_eq!(code(&body["errors"][0]), Some("FORBIDDEN"), "{body}");
}

async fn access_of_invited(server: &TabbyServer, idp: &Idp) -> String {
    idp.set(Mode::Good, "invited@example.com");
    let (result, _) = trip(server, "oidc", false).await;
    redeem(server, &result.expect("signed in")).await
}
