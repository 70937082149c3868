//! Helpers for the enterprise layer's tests: GraphQL over HTTP, accounts and their tokens,
//! REST calls with an `Authorization` header, and JWTs minted by the test.

use std::time::Duration;

use reqwest::{Method, header::HeaderMap};
use serde_json::{Value, json};

use crate::support::*;

/// A password that passes the server's rules (8–20 characters, upper, lower, digit, other).
pub const PASSWORD: &str = "Passw0rd!x";

/// `TABBY_WEBSERVER_JWT_TOKEN_SECRET` for tests that mint their own tokens.
pub const JWT_SECRET: &str = "e2e-secret-0b6d2e4a-7f1c-4c8e-9a3b-5d6e7f8a9b0c";

/// POSTs a GraphQL request to `url` (the server's `/graphql`), with `Authorization: Bearer
/// <token>` when `token` is given, and returns the response body (`{data, errors}`).
pub async fn graphql(url: &str, token: Option<&str>, query: &str, variables: Value) -> Value {
    let mut request = client()
        .post(url)
        .json(&json!({"query": query, "variables": variables}));
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = request.send().await.expect("graphql request");
    let status = response.status().as_u16();
    let text = response.text().await.expect("graphql body");
    serde_json::from_str(&text)
        .unwrap_or_else(|_| panic!("GraphQL answered {status} with a non-JSON body: {text}"))
}

/// A GraphQL request that must succeed: returns `data`.
pub async fn gql_ok(server: &TabbyServer, token: Option<&str>, query: &str, vars: Value) -> Value {
    let body = graphql(&server.url("/graphql"), token, query, vars).await;
    assert!(
        body.get("errors")
            .is_none_or(|e| e.as_array().is_some_and(|e| e.is_empty())),
        "{query}\nfailed: {body}"
    );
    assert!(!body["data"].is_null(), "{query}\nno data: {body}");
    body["data"].clone()
}

/// A GraphQL request that must fail without any data: returns the first error.
pub async fn gql_err(server: &TabbyServer, token: Option<&str>, query: &str, vars: Value) -> Value {
    let body = graphql(&server.url("/graphql"), token, query, vars).await;
    let errors = body["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("{query}\nexpected an error: {body}"));
    assert!(!errors.is_empty(), "{query}\nexpected an error: {body}");
    assert!(body["data"].is_null(), "{query}\ndata leaked: {body}");
    errors[0].clone()
}

/// `extensions.code` of a GraphQL error (`UNAUTHORIZED`, `FORBIDDEN`, …).
pub fn code(error: &Value) -> Option<&str> {
    error["extensions"]["code"].as_str()
}

/// The `path`s of a validation error (`extensions["validation-errors"].errors`), after checking
/// its message.
pub fn validation_paths(error: &Value) -> Vec<String> {
    assert_eq!(error["message"], "Invalid input parameters", "{error}");
    error["extensions"]["validation-errors"]["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("no validation errors: {error}"))
        .iter()
        .map(|e| {
            assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{e}");
            e["path"].as_str().expect("path").to_string()
        })
        .collect()
}

/// A registered user and their credentials.
#[derive(Clone, Debug)]
pub struct Account {
    /// The user's GraphQL id (a hashid of the row id; also the JWT `sub`).
    pub id: String,
    pub email: String,
    /// Session JWT.
    pub access_token: String,
    pub refresh_token: String,
    /// The editor token `auth_…`.
    pub auth_token: String,
    pub is_admin: bool,
}

const REGISTER: &str = "mutation($email: String!, $p: String!, $code: String, $name: String!) {
    register(email: $email, password1: $p, password2: $p, invitationCode: $code, name: $name) {
        accessToken refreshToken
    }
}";

pub const ME: &str = "{ me { id email name isAdmin isOwner active authToken } }";

async fn account(server: &TabbyServer, email: &str, tokens: &Value) -> Account {
    let access_token = tokens["accessToken"]
        .as_str()
        .expect("accessToken")
        .to_string();
    let refresh_token = tokens["refreshToken"]
        .as_str()
        .expect("refreshToken")
        .to_string();
    let me = gql_ok(server, Some(&access_token), ME, json!({})).await["me"].clone();
    assert_eq!(me["email"], email, "{me}");
    let auth_token = me["authToken"].as_str().unwrap().to_string();
    assert!(
        auth_token.len() == 37
            && auth_token.starts_with("auth_")
            && auth_token[5..].chars().all(|c| c.is_ascii_hexdigit()),
        "{auth_token}"
    );
    Account {
        id: me["id"].as_str().unwrap().to_string(),
        email: email.to_string(),
        access_token,
        refresh_token,
        auth_token,
        is_admin: me["isAdmin"].as_bool().unwrap(),
    }
}

/// Registers the first user (owner and admin), no invitation needed.
pub async fn register_owner(server: &TabbyServer, email: &str) -> Account {
    let data = gql_ok(
        server,
        None,
        REGISTER,
        json!({"email": email, "p": PASSWORD, "name": "Owner"}),
    )
    .await;
    let owner = account(server, email, &data["register"]).await;
    assert!(owner.is_admin, "the first user is admin");
    owner
}

/// The admin invites `email`; the invitee registers with the code.
pub async fn invite_and_register(server: &TabbyServer, admin: &Account, email: &str) -> Account {
    let code = create_invitation(server, admin, email).await;
    let data = gql_ok(
        server,
        None,
        REGISTER,
        json!({"email": email, "p": PASSWORD, "code": code, "name": email.split('@').next()}),
    )
    .await;
    let user = account(server, email, &data["register"]).await;
    assert!(!user.is_admin, "invited users are not admins");
    user
}

/// Creates a user group as `admin`; returns its id.
pub async fn create_group(server: &TabbyServer, admin: &str, name: &str) -> String {
    gql_ok(
        server,
        Some(admin),
        "mutation($n: String!) { createUserGroup(input: {name: $n}) }",
        json!({"n": name}),
    )
    .await["createUserGroup"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Adds (or updates) `user` in `group` as `admin`.
pub async fn add_member(
    server: &TabbyServer,
    admin: &str,
    group: &str,
    user: &str,
    is_group_admin: bool,
) {
    gql_ok(
        server,
        Some(admin),
        "mutation($g: ID!, $u: ID!, $a: Boolean!) { upsertUserGroupMembership(input: {userGroupId: $g, userId: $u, isGroupAdmin: $a}) }",
        json!({"g": group, "u": user, "a": is_group_admin}),
    )
    .await;
}

/// `field` of every node of a Relay connection, as strings.
pub fn node_strings(connection: &Value, field: &str) -> Vec<String> {
    connection["edges"]
        .as_array()
        .unwrap_or_else(|| panic!("not a connection: {connection}"))
        .iter()
        .map(|e| e["node"][field].as_str().unwrap().to_string())
        .collect()
}

/// Creates an invitation; returns its code (from `invitations`).
pub async fn create_invitation(server: &TabbyServer, admin: &Account, email: &str) -> String {
    let data = gql_ok(
        server,
        Some(&admin.access_token),
        "mutation($e: String!) { createInvitation(email: $e) }",
        json!({"e": email}),
    )
    .await;
    let id = data["createInvitation"].as_str().unwrap().to_string();
    let list = gql_ok(
        server,
        Some(&admin.access_token),
        "{ invitations { edges { node { id email code } } } }",
        json!({}),
    )
    .await;
    let node = list["invitations"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["node"])
        .find(|n| n["id"] == id.as_str())
        .unwrap_or_else(|| panic!("invitation {id} not listed: {list}"))
        .clone();
    assert_eq!(node["email"], email);
    node["code"].as_str().unwrap().to_string()
}

/// `Bearer <token>`.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// A REST call with `authorization` as the whole `Authorization` header (none when `None`);
/// returns (status, body as JSON or Null, headers).
pub async fn rest(
    server: &TabbyServer,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: Option<&Value>,
) -> (u16, Value, HeaderMap) {
    let mut request = client().request(
        Method::from_bytes(method.as_bytes()).unwrap(),
        server.url(path),
    );
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        headers,
    )
}

/// Asserts a 401 with a JSON `{"error": …}` body and nothing else.
pub fn assert_unauthorized(what: &str, status: u16, body: &Value, headers: &HeaderMap) {
    assert_eq!(status, 401, "{what}: {body}");
    let object = body
        .as_object()
        .unwrap_or_else(|| panic!("{what}: not a JSON object: {body}"));
    assert!(
        object["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{what}: {body}"
    );
    assert_eq!(object.len(), 1, "{what}: only an error, no data: {body}");
    assert!(
        headers.get("www-authenticate").is_some(),
        "{what}: 401 without WWW-Authenticate"
    );
}

/// An HS256 JWT as the server issues them, signed with `secret`.
pub fn mint_jwt(secret: &str, sub: &str, iat: i64, exp: i64) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({"exp": exp, "iat": iat, "sub": sub}),
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()).expect("HMAC key"),
    )
    .expect("encode JWT")
}

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Calls `probe` every 100 ms until it returns `Some`, for at most `limit`.
pub async fn poll<T, F, Fut>(what: &str, limit: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        if std::time::Instant::now() > deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Restricts `source_id` to a new group `name` with `member` in it (as `admin_token`); returns
/// the group's id.
pub async fn restrict_to_new_group(
    server: &TabbyServer,
    admin_token: &str,
    name: &str,
    member: &Account,
    source_id: &str,
) -> String {
    let group = create_group(server, admin_token, name).await;
    add_member(server, admin_token, &group, &member.id, false).await;
    gql_ok(
        server,
        Some(admin_token),
        "mutation($s: String!, $g: ID!) { grantSourceIdReadAccess(sourceId: $s, userGroupId: $g) }",
        json!({"s": source_id, "g": group}),
    )
    .await;
    group
}

/// Runs `sql` on the server's database (to age rows in tests); see [`TabbyServer::sql`].
pub fn sqlite(server: &TabbyServer, sql: &str) {
    server.sql(sql);
}

/// Fails if the server's database (its files, or a dump of its PostgreSQL database) holds
/// `secret` byte for byte (it must be stored sealed or hashed).
pub fn assert_not_stored_in_clear(server: &TabbyServer, secret: &str) {
    let stored = server.database_bytes();
    assert!(!stored.is_empty(), "the database holds nothing");
    for bytes in stored {
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "the database holds a secret in the clear"
        );
    }
}
