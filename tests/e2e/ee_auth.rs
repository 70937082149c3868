//! The enterprise layer's authentication end to end: `tabby serve` without `--no-webserver`
//! keeps users in SQLite, signs sessions with HS256 JWTs, and requires a JWT or a user auth
//! token on every `/v1*` route.

use std::time::Duration;

use serde_json::{Value, json};

use crate::{ee_support::*, support::*};

const TOKEN_AUTH: &str = "mutation($e: String!, $p: String!) {
    tokenAuth(email: $e, password: $p) { accessToken refreshToken }
}";
const REFRESH: &str = "mutation($t: String!) {
    refreshToken(refreshToken: $t) { accessToken refreshToken refreshExpiresAt }
}";

async fn health(server: &TabbyServer, authorization: Option<&str>) -> (u16, Value) {
    let (status, body, _) = rest(server, "GET", "/v1/health", authorization, None).await;
    (status, body)
}

async fn me_email(server: &TabbyServer, token: &str) -> Value {
    let body = graphql(
        &server.url("/graphql"),
        Some(token),
        "{ me { email } }",
        json!({}),
    )
    .await;
    body["data"]["me"]["email"].clone()
}

#[tokio::test]
async fn ee_tokens_on_rest_and_graphql() {
    let server = TabbyServer::start_ee("", &[("TABBY_WEBSERVER_JWT_TOKEN_SECRET", JWT_SECRET)]);
    let info = "{ serverInfo { isAdminInitialized } }";
    let data = gql_ok(&server, None, info, json!({})).await;
    assert_eq!(data["serverInfo"]["isAdminInitialized"], false);
    let owner = register_owner(&server, "owner@example.com").await;
    let data = gql_ok(&server, None, info, json!({})).await;
    assert_eq!(data["serverInfo"]["isAdminInitialized"], true);

    // REST: no token, bad tokens → 401 JSON; the auth token and the JWT → 200.
    let (status, body, headers) = rest(&server, "GET", "/v1/health", None, None).await;
    assert_unauthorized("no token", status, &body, &headers);
    for bad in [
        "Bearer nope".to_string(),
        bearer(&format!("auth_{}", "0".repeat(32))),
        bearer(&owner.access_token[..owner.access_token.len() - 2]),
        bearer(&owner.auth_token.to_uppercase()),
    ] {
        let (status, body, headers) = rest(&server, "GET", "/v1/health", Some(&bad), None).await;
        assert_unauthorized(&bad, status, &body, &headers);
    }
    for good in [
        bearer(&owner.auth_token),
        bearer(&owner.access_token),
        format!("Token {}", owner.access_token),
        format!("Token {}", owner.auth_token),
    ] {
        let (status, body) = health(&server, Some(&good)).await;
        assert_eq!(status, 200, "{good}: {body}");
        assert_eq!(body["webserver"], true, "{body}");
    }

    // GraphQL: the JWT and the auth token identify the user for `me`.
    assert_eq!(me_email(&server, &owner.access_token).await, owner.email);
    assert_eq!(me_email(&server, &owner.auth_token).await, owner.email);
    let err = gql_err(&server, Some("nope"), "{ me { email } }", json!({})).await;
    assert_eq!(code(&err), Some("UNAUTHORIZED"), "{err}");
    // A token in the URL is refused (401), over GET and POST, even a valid one.
    let response = client()
        .get(server.url(&format!(
            "/graphql?query=%7Bme%7Bemail%7D%7D&access_token={}",
            owner.access_token
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert!(response.headers().get("www-authenticate").is_some());
    let body: Value = response.json().await.unwrap();
    assert_eq!(code(&body["errors"][0]), Some("UNAUTHORIZED"), "{body}");
    assert!(
        body["errors"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Authorization: Bearer")),
        "{body}"
    );
    let body = graphql(
        &server.url(&format!("/graphql?access_token={}", owner.auth_token)),
        None,
        "{ me { email } }",
        json!({}),
    )
    .await;
    assert!(body["data"].is_null(), "{body}");
    assert_eq!(code(&body["errors"][0]), Some("UNAUTHORIZED"), "{body}");
    // On GraphQL only the `Bearer` scheme carries a token (as upstream's `AuthBearer`).
    let response = client()
        .post(server.url("/graphql"))
        .header("authorization", format!("Token {}", owner.access_token))
        .json(&json!({"query": "{ me { email } }"}))
        .send()
        .await
        .unwrap();
    let body: Value = response.json().await.unwrap();
    assert_eq!(code(&body["errors"][0]), Some("UNAUTHORIZED"), "{body}");

    // A JWT minted with the server's secret: expired → rejected everywhere, fresh → accepted.
    let now = now();
    let expired = mint_jwt(JWT_SECRET, &owner.id, now - 3600, now - 60);
    let (status, body, headers) =
        rest(&server, "GET", "/v1/health", Some(&bearer(&expired)), None).await;
    assert_unauthorized("expired JWT", status, &body, &headers);
    let err = gql_err(&server, Some(&expired), "{ me { email } }", json!({})).await;
    assert_eq!(code(&err), Some("UNAUTHORIZED"), "{err}");
    let err = gql_err(
        &server,
        None,
        "mutation($t: String!) { verifyToken(token: $t) }",
        json!({"t": expired}),
    )
    .await;
    assert_eq!(code(&err), Some("UNAUTHORIZED"), "{err}");

    let fresh = mint_jwt(JWT_SECRET, &owner.id, now, now + 600);
    assert_eq!(health(&server, Some(&bearer(&fresh))).await.0, 200);
    assert_eq!(me_email(&server, &fresh).await, owner.email);
    let data = gql_ok(
        &server,
        None,
        "mutation($t: String!) { verifyToken(token: $t) }",
        json!({"t": fresh}),
    )
    .await;
    assert_eq!(data["verifyToken"], true);
    // The same claims signed with another secret are refused.
    let forged = mint_jwt(&JWT_SECRET.replace('e', "f"), &owner.id, now, now + 600);
    assert_eq!(health(&server, Some(&bearer(&forged))).await.0, 401);
    gql_err(&server, Some(&forged), "{ me { email } }", json!({})).await;

    // Refresh: a new pair; the old refresh token stops working, the new one works once.
    let data = gql_ok(&server, None, REFRESH, json!({"t": owner.refresh_token})).await;
    let refreshed = &data["refreshToken"];
    let access = refreshed["accessToken"].as_str().unwrap();
    let refresh = refreshed["refreshToken"].as_str().unwrap();
    assert_ne!(refresh, owner.refresh_token);
    assert_eq!(me_email(&server, access).await, owner.email);
    assert_eq!(health(&server, Some(&bearer(access))).await.0, 200);
    let expires =
        chrono::DateTime::parse_from_rfc3339(refreshed["refreshExpiresAt"].as_str().unwrap())
            .unwrap()
            .timestamp();
    let in_7_days = now + 7 * 24 * 3600;
    assert!(
        (expires - in_7_days).abs() < 600,
        "refreshExpiresAt {} is not ~7 days ahead",
        refreshed["refreshExpiresAt"]
    );
    let err = gql_err(&server, None, REFRESH, json!({"t": owner.refresh_token})).await;
    assert_eq!(code(&err), Some("UNAUTHORIZED"), "old refresh token: {err}");
    let data = gql_ok(&server, None, REFRESH, json!({"t": refresh})).await;
    assert_ne!(data["refreshToken"]["refreshToken"], refresh);
    gql_err(&server, None, REFRESH, json!({"t": refresh})).await;

    // Resetting the auth token retires the old one.
    let data = gql_ok(
        &server,
        Some(&owner.access_token),
        "mutation { resetUserAuthToken }",
        json!({}),
    )
    .await;
    assert_eq!(data["resetUserAuthToken"], true);
    let me = gql_ok(&server, Some(&owner.access_token), ME, json!({})).await;
    let new_auth = me["me"]["authToken"].as_str().unwrap();
    assert_ne!(new_auth, owner.auth_token);
    assert_eq!(
        health(&server, Some(&bearer(&owner.auth_token))).await.0,
        401
    );
    assert_eq!(health(&server, Some(&bearer(new_auth))).await.0, 200);
}

#[tokio::test]
async fn ee_invitations_and_disabled_users() {
    let server = TabbyServer::start_ee("", &[]);
    let owner = register_owner(&server, "owner@example.com").await;
    let register = "mutation($e: String!, $p: String!, $c: String) {
        register(email: $e, password1: $p, password2: $p, invitationCode: $c, name: \"X\") { accessToken }
    }";

    // After the owner, registering needs an invitation.
    let err = gql_err(
        &server,
        None,
        register,
        json!({"e": "bob@example.com", "p": PASSWORD}),
    )
    .await;
    assert_eq!(validation_paths(&err), ["invitationCode"], "{err}");
    // Field validation happens before anything else and names every bad field.
    let err = gql_err(
        &server,
        None,
        "mutation { register(email: \"nope\", password1: \"short\", password2: \"other\", name: \" \") { accessToken } }",
        json!({}),
    )
    .await;
    assert_eq!(
        validation_paths(&err),
        ["email", "password1", "password2", "name"]
    );

    let code_for_bob = create_invitation(&server, &owner, "bob@example.com").await;
    // An invitation only works for its own address.
    let err = gql_err(
        &server,
        None,
        register,
        json!({"e": "eve@example.com", "p": PASSWORD, "c": code_for_bob}),
    )
    .await;
    assert_eq!(validation_paths(&err), ["invitationCode"], "{err}");
    let data = gql_ok(
        &server,
        None,
        register,
        json!({"e": "bob@example.com", "p": PASSWORD, "c": code_for_bob}),
    )
    .await;
    let bob_jwt = data["register"]["accessToken"]
        .as_str()
        .unwrap()
        .to_string();
    let bob = gql_ok(&server, Some(&bob_jwt), ME, json!({})).await["me"].clone();
    assert_eq!(bob["isAdmin"], false);
    let bob_id = bob["id"].as_str().unwrap();
    let bob_auth = bob["authToken"].as_str().unwrap();
    // The invitation is used up.
    let list = gql_ok(
        &server,
        Some(&owner.access_token),
        "{ invitations { edges { node { email } } } }",
        json!({}),
    )
    .await;
    assert_eq!(list["invitations"]["edges"], json!([]), "{list}");
    let err = gql_err(
        &server,
        None,
        register,
        json!({"e": "bob@example.com", "p": PASSWORD, "c": code_for_bob}),
    )
    .await;
    assert_eq!(validation_paths(&err), ["invitationCode"], "{err}");

    // Bob signs in (a refresh token to test later) and uses REST with both tokens.
    let data = gql_ok(
        &server,
        None,
        TOKEN_AUTH,
        json!({"e": "bob@example.com", "p": PASSWORD}),
    )
    .await;
    let bob_refresh = data["tokenAuth"]["refreshToken"]
        .as_str()
        .unwrap()
        .to_string();
    for token in [bob_auth, bob_jwt.as_str()] {
        assert_eq!(health(&server, Some(&bearer(token))).await.0, 200);
    }

    // The admin disables Bob: both his tokens stop working at once, and he cannot sign in.
    let disable = "mutation($id: ID!, $a: Boolean!) { updateUserActive(id: $id, active: $a) }";
    let err = gql_err(
        &server,
        Some(&bob_jwt),
        disable,
        json!({"id": owner.id, "a": false}),
    )
    .await;
    assert_eq!(code(&err), Some("FORBIDDEN"), "{err}");
    let data = gql_ok(
        &server,
        Some(&owner.access_token),
        disable,
        json!({"id": bob_id, "a": false}),
    )
    .await;
    assert_eq!(data["updateUserActive"], true);
    for token in [bob_auth, bob_jwt.as_str()] {
        let (status, body, headers) =
            rest(&server, "GET", "/v1/health", Some(&bearer(token)), None).await;
        assert_unauthorized("disabled user", status, &body, &headers);
        let err = gql_err(&server, Some(token), "{ me { email } }", json!({})).await;
        assert_eq!(code(&err), Some("UNAUTHORIZED"), "{err}");
    }
    let err = gql_err(
        &server,
        None,
        TOKEN_AUTH,
        json!({"e": "bob@example.com", "p": PASSWORD}),
    )
    .await;
    assert_eq!(err["message"], "User is disabled", "{err}");
    let err = gql_err(&server, None, REFRESH, json!({"t": bob_refresh})).await;
    assert_eq!(code(&err), Some("UNAUTHORIZED"), "{err}");
    let users = gql_ok(
        &server,
        Some(&owner.access_token),
        "{ users { edges { node { email active } } } }",
        json!({}),
    )
    .await;
    assert!(
        users["users"]["edges"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["node"] == json!({"email": "bob@example.com", "active": false})),
        "{users}"
    );
    // The admin cannot disable themselves.
    let err = gql_err(
        &server,
        Some(&owner.access_token),
        disable,
        json!({"id": owner.id, "a": false}),
    )
    .await;
    assert!(err["message"].as_str().unwrap().contains("own"), "{err}");

    // Enabled again, his auth token works again; the sessions he had ended with the
    // deactivation (upstream would honour the old access token until it expires), so he signs
    // in anew.
    gql_ok(
        &server,
        Some(&owner.access_token),
        disable,
        json!({"id": bob_id, "a": true}),
    )
    .await;
    assert_eq!(health(&server, Some(&bearer(bob_auth))).await.0, 200);
    assert_eq!(health(&server, Some(&bearer(&bob_jwt))).await.0, 401);
    let fresh = gql_ok(
        &server,
        None,
        "mutation($e: String!, $p: String!) { tokenAuth(email: $e, password: $p) { accessToken } }",
        json!({"e": "bob@example.com", "p": PASSWORD}),
    )
    .await["tokenAuth"]["accessToken"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(health(&server, Some(&bearer(&fresh))).await.0, 200);
}

#[tokio::test]
async fn ee_sessions_survive_restart_and_the_user_header_is_the_servers() {
    let mut server = TabbyServer::start_ee("", &[]);
    let owner = register_owner(&server, "owner@example.com").await;

    // A client-sent x-tabby-user is replaced by the token's user.
    let response = client()
        .post(server.url("/v1/events"))
        .header("authorization", bearer(&owner.auth_token))
        .header("x-tabby-user", "mallory")
        .json(&json!({"type": "view", "completion_id": "cmpl-spoof", "choice_index": 0}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let query = "query($s: DateTime!, $e: DateTime!) {
        userEvents(start: $s, end: $e) { edges { node { userId kind payload } } }
    }";
    let vars = json!({"s": "2000-01-01T00:00:00Z", "e": "2100-01-01T00:00:00Z"});
    let events = poll(
        "the view event in userEvents",
        Duration::from_secs(10),
        || async {
            let data = gql_ok(&server, Some(&owner.access_token), query, vars.clone()).await;
            let edges = data["userEvents"]["edges"].as_array().unwrap().clone();
            (!edges.is_empty()).then_some(edges)
        },
    )
    .await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["node"]["userId"], owner.id.as_str());
    assert_eq!(events[0]["node"]["kind"], "VIEW");
    assert!(
        events[0]["node"]["payload"]
            .as_str()
            .unwrap()
            .contains("cmpl-spoof")
    );

    // Restart on the same TABBY_ROOT, no secret in the environment: the one persisted in the
    // database still verifies the old session.
    server.restart(&[]);
    let logged = read_events(server.root());
    let view: Vec<_> = logged
        .iter()
        .filter(|e| e["event"]["view"].is_object())
        .collect();
    assert_eq!(view.len(), 1, "{logged:?}");
    assert_eq!(view[0]["user"], owner.id.as_str(), "{logged:?}");
    assert!(!format!("{logged:?}").contains("mallory"), "{logged:?}");

    assert_eq!(
        health(&server, Some(&bearer(&owner.access_token))).await.0,
        200
    );
    assert_eq!(
        health(&server, Some(&bearer(&owner.auth_token))).await.0,
        200
    );
    assert_eq!(me_email(&server, &owner.access_token).await, owner.email);
    let data = gql_ok(&server, None, REFRESH, json!({"t": owner.refresh_token})).await;
    let access = data["refreshToken"]["accessToken"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(me_email(&server, &access).await, owner.email);

    // A secret in the environment takes precedence: sessions signed with the persisted one
    // end, auth tokens (stored in the database) keep working.
    server.restart(&[("TABBY_WEBSERVER_JWT_TOKEN_SECRET", JWT_SECRET)]);
    assert_eq!(health(&server, Some(&bearer(&access))).await.0, 401);
    assert_eq!(
        health(&server, Some(&bearer(&owner.auth_token))).await.0,
        200
    );
    let now = now();
    let minted = mint_jwt(JWT_SECRET, &owner.id, now, now + 60);
    assert_eq!(me_email(&server, &minted).await, owner.email);
}

#[tokio::test]
async fn ee_failed_sign_ins_are_rate_limited() {
    let server = TabbyServer::start_ee("", &[]);
    let owner = register_owner(&server, "owner@example.com").await;
    let attempt = |email: &'static str, password: &'static str| {
        let server = &server;
        async move {
            graphql(
                &server.url("/graphql"),
                None,
                TOKEN_AUTH,
                json!({"e": email, "p": password}),
            )
            .await
        }
    };
    // An unknown address and a wrong password look the same.
    let unknown = attempt("nobody@example.com", PASSWORD).await;
    assert_eq!(
        unknown["errors"][0]["message"],
        "Invalid email address or password"
    );
    assert!(unknown["data"].is_null(), "{unknown}");

    let mut limited_after = None;
    for i in 0..15 {
        let body = attempt("owner@example.com", "Wr0ng!pass").await;
        assert!(body["data"].is_null(), "{body}");
        let error = &body["errors"][0];
        if code(error) == Some("TOO_MANY_REQUESTS") {
            limited_after = Some(i);
            break;
        }
        assert_eq!(
            error["message"], "Invalid email address or password",
            "{body}"
        );
        assert!(error["extensions"]["code"].is_null(), "{body}");
    }
    let limited_after = limited_after.expect("15 failed sign-ins were never rate limited");
    assert!(
        (3..=12).contains(&limited_after),
        "limited after {limited_after} failures"
    );
    // While limited, even the right password is refused; other addresses are not limited.
    let body = attempt("owner@example.com", PASSWORD).await;
    assert_eq!(
        code(&body["errors"][0]),
        Some("TOO_MANY_REQUESTS"),
        "{body}"
    );
    assert!(body["data"].is_null());
    let other = attempt("nobody@example.com", PASSWORD).await;
    assert_eq!(
        other["errors"][0]["message"], "Invalid email address or password",
        "{other}"
    );
    // The existing session is untouched.
    assert_eq!(me_email(&server, &owner.access_token).await, owner.email);
}

#[tokio::test]
async fn ee_rest_rate_limit_is_per_user_and_spares_health() {
    let server = TabbyServer::start_ee("", &[]);
    let owner = register_owner(&server, "owner@example.com").await;
    let bob = invite_and_register(&server, &owner, "bob@example.com").await;
    let auth = bearer(&owner.auth_token);

    // A burst of 200 at once: about 120 pass (the bucket's initial tokens plus what refills
    // while the burst is served), the rest get 429.
    let answers = futures::future::join_all(
        (0..200).map(|_| rest(&server, "GET", "/v1beta/models", Some(&auth), None)),
    )
    .await;
    let ok = answers
        .iter()
        .filter(|(status, _, _)| *status == 200)
        .count();
    let limited: Vec<_> = answers
        .iter()
        .filter(|(status, _, _)| *status == 429)
        .collect();
    let statuses: Vec<u16> = answers.iter().map(|(status, _, _)| *status).collect();
    assert_eq!(ok + limited.len(), 200, "{statuses:?}");
    assert!(
        (120..=160).contains(&ok),
        "{ok} of 200 passed: {statuses:?}"
    );
    for (_, body, headers) in &limited {
        assert!(
            body["error"]
                .as_str()
                .is_some_and(|e| e.contains("rate limit")),
            "{body}"
        );
        assert_eq!(body.as_object().unwrap().len(), 1, "{body}");
        assert!(headers.get("retry-after").is_some());
    }
    // The same user over the JWT shares the bucket.
    let (status, _, _) = rest(
        &server,
        "GET",
        "/v1beta/models",
        Some(&bearer(&owner.access_token)),
        None,
    )
    .await;
    assert_eq!(status, 429);
    // Health checks are exempt, other users have their own bucket, GraphQL is not limited.
    for _ in 0..5 {
        assert_eq!(health(&server, Some(&auth)).await.0, 200);
    }
    let (status, body, _) = rest(
        &server,
        "GET",
        "/v1beta/models",
        Some(&bearer(&bob.auth_token)),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(me_email(&server, &owner.access_token).await, owner.email);
}
