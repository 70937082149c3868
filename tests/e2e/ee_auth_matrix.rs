//! Who may call what, as tables: every protected REST route without a token or with a bad one,
//! and every GraphQL field that checks its caller with each kind of wrong credential. A
//! refusal never carries data.

use serde_json::{Value, json};

use crate::{ee_support::*, support::*};

/// Every `/v1*` route with a body that would be valid.
fn rest_routes() -> Vec<(&'static str, &'static str, Option<Value>)> {
    let completion = json!({"language": "python", "segments": {"prefix": "def f(", "suffix": ""}});
    let chat = json!({"messages": [{"role": "user", "content": "hi"}]});
    vec![
        ("POST", "/v1/completions", Some(completion)),
        (
            "POST",
            "/v1/events",
            Some(json!({"type": "view", "completion_id": "c", "choice_index": 0})),
        ),
        ("GET", "/v1/health", None),
        ("POST", "/v1/health", None),
        ("POST", "/v1/chat/completions", Some(chat.clone())),
        ("POST", "/v1beta/chat/completions", Some(chat)),
        ("GET", "/v1beta/models", None),
        ("GET", "/v1beta/server_setting", None),
        ("POST", "/v1beta/search", Some(json!({"query": "def"}))),
    ]
}

#[tokio::test]
async fn ee_every_rest_route_requires_a_token() {
    let fake = FakeServer::start(Protocol::LlamaCpp, Script::default().pieces(["x"])).await;
    let server = TabbyServer::start_ee(
        &llama_completion_config(&fake.url()),
        &[("TABBY_WEBSERVER_JWT_TOKEN_SECRET", JWT_SECRET)],
    );
    let owner = register_owner(&server, "owner@example.com").await;
    let now = now();
    let bad_tokens = [
        "Bearer nope".to_string(),
        bearer(&format!("auth_{}", "ab".repeat(16))),
        bearer(&mint_jwt(JWT_SECRET, &owner.id, now - 7200, now - 3600)),
        bearer(&mint_jwt(&"x".repeat(40), &owner.id, now, now + 600)),
        format!("Bearer{}", owner.auth_token),
        "Bearer ".to_string(),
        owner.auth_token.clone(),
    ];
    for (method, path, body) in rest_routes() {
        let (status, response, headers) = rest(&server, method, path, None, body.as_ref()).await;
        assert_unauthorized(
            &format!("{method} {path} without a token"),
            status,
            &response,
            &headers,
        );
        for bad in &bad_tokens {
            let (status, response, headers) =
                rest(&server, method, path, Some(bad), body.as_ref()).await;
            assert_unauthorized(
                &format!("{method} {path} with {bad:?}"),
                status,
                &response,
                &headers,
            );
        }
        // The same request with a good token gets past the token check.
        let (status, response, _) = rest(
            &server,
            method,
            path,
            Some(&bearer(&owner.auth_token)),
            body.as_ref(),
        )
        .await;
        assert_ne!(
            status, 401,
            "{method} {path} with the auth token: {response}"
        );
        assert_ne!(status, 429, "{method} {path}: {response}");
    }
    assert_eq!(
        fake.requests_to("/completion").len(),
        1,
        "only the authorized completion reached the model"
    );
    // CORS preflights need no token.
    let response = client()
        .request(reqwest::Method::OPTIONS, server.url("/v1/completions"))
        .header("origin", "http://localhost:3000")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
}

/// What a GraphQL field requires of its caller.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Needs {
    /// A session JWT or a user auth token.
    AnyToken,
    /// A session JWT (an auth token is FORBIDDEN).
    Session,
    /// An admin's session.
    Admin,
}

struct Row {
    name: &'static str,
    query: &'static str,
    vars: Value,
    needs: Needs,
    /// A non-admin's session is FORBIDDEN (always true for `Admin`).
    member_forbidden: bool,
}

fn row(name: &'static str, needs: Needs, query: &'static str, vars: Value) -> Row {
    Row {
        name,
        query,
        vars,
        needs,
        member_forbidden: needs == Needs::Admin,
    }
}

fn member_forbidden(mut row: Row) -> Row {
    row.member_forbidden = true;
    row
}

/// Ids the rows refer to, created by the admin beforehand.
struct Fixture {
    admin: Account,
    member: Account,
    group: String,
    doomed_group: String,
    invitation: String,
    repository: String,
}

/// Every field of schema.rs that checks its caller, with arguments that succeed when the
/// right caller sends them (in this order).
fn rows(f: &Fixture) -> Vec<Row> {
    use Needs::*;
    let window = json!({"s": "2000-01-01T00:00:00Z", "e": "2100-01-01T00:00:00Z"});
    vec![
        row(
            "registrationToken",
            Admin,
            "{ registrationToken }",
            json!({}),
        ),
        row("me", AnyToken, "{ me { id email } }", json!({})),
        row("jobs", Session, "{ jobs }", json!({})),
        row(
            "users",
            Session,
            "{ users { edges { node { id email } } } }",
            json!({}),
        ),
        row(
            "invitations",
            Admin,
            "{ invitations { edges { node { id code } } } }",
            json!({}),
        ),
        row(
            "gitRepositories",
            Admin,
            "{ gitRepositories { edges { node { id gitUrl } } } }",
            json!({}),
        ),
        row(
            "repositoryList",
            AnyToken,
            "{ repositoryList { sourceId } }",
            json!({}),
        ),
        row(
            "dailyStatsInPastYear",
            Session,
            "{ dailyStatsInPastYear { completions } }",
            json!({}),
        ),
        row(
            "dailyStats",
            Session,
            "query($s: DateTime!, $e: DateTime!) { dailyStats(start: $s, end: $e) { completions } }",
            window.clone(),
        ),
        member_forbidden(row(
            "dailyStats of another user",
            Session,
            "query($s: DateTime!, $e: DateTime!, $u: [ID!]) { dailyStats(start: $s, end: $e, users: $u) { completions } }",
            json!({"s": window["s"], "e": window["e"], "u": [f.admin.id]}),
        )),
        member_forbidden(row(
            "dailyStatsInPastYear of another user",
            Session,
            "query($u: [ID!]) { dailyStatsInPastYear(users: $u) { completions } }",
            json!({"u": [f.admin.id]}),
        )),
        row(
            "userEvents",
            Admin,
            "query($s: DateTime!, $e: DateTime!) { userEvents(start: $s, end: $e) { edges { node { id payload } } } }",
            window.clone(),
        ),
        row(
            "userGroups",
            Session,
            "{ userGroups { id name members { user { email } } } }",
            json!({}),
        ),
        row(
            "sourceIdAccessPolicies",
            Admin,
            "query($s: String!) { sourceIdAccessPolicies(sourceId: $s) { sourceId read { name } } }",
            json!({"s": "config:whatever"}),
        ),
        row(
            "passwordChange",
            Session,
            "mutation($o: String, $n: String!) { passwordChange(input: {oldPassword: $o, newPassword1: $n, newPassword2: $n}) }",
            json!({"o": PASSWORD, "n": "N3w-Passw0rd"}),
        ),
        row(
            "logoutAllSessions",
            Session,
            "mutation { logoutAllSessions }",
            json!({}),
        ),
        row(
            "createInvitation",
            Admin,
            "mutation($e: String!) { createInvitation(email: $e) }",
            json!({"e": "matrix@example.com"}),
        ),
        row(
            "deleteInvitation",
            Admin,
            "mutation($id: ID!) { deleteInvitation(id: $id) }",
            json!({"id": f.invitation}),
        ),
        row(
            "updateUserActive",
            Admin,
            "mutation($id: ID!) { updateUserActive(id: $id, active: true) }",
            json!({"id": f.member.id}),
        ),
        row(
            "updateUserRole",
            Admin,
            "mutation($id: ID!) { updateUserRole(id: $id, isAdmin: false) }",
            json!({"id": f.member.id}),
        ),
        member_forbidden(row(
            "updateUserName of another user",
            Session,
            "mutation($id: ID!) { updateUserName(id: $id, name: \"Renamed\") }",
            json!({"id": f.admin.id}),
        )),
        row(
            "resetRegistrationToken",
            Admin,
            "mutation { resetRegistrationToken }",
            json!({}),
        ),
        row(
            "createUserGroup",
            Admin,
            "mutation { createUserGroup(input: {name: \"matrix\"}) }",
            json!({}),
        ),
        row(
            "deleteUserGroup",
            Admin,
            "mutation($id: ID!) { deleteUserGroup(id: $id) }",
            json!({"id": f.doomed_group}),
        ),
        member_forbidden(row(
            "upsertUserGroupMembership",
            Session,
            "mutation($g: ID!, $u: ID!) { upsertUserGroupMembership(input: {userGroupId: $g, userId: $u, isGroupAdmin: false}) }",
            json!({"g": f.group, "u": f.member.id}),
        )),
        member_forbidden(row(
            "deleteUserGroupMembership",
            Session,
            "mutation($g: ID!, $u: ID!) { deleteUserGroupMembership(userGroupId: $g, userId: $u) }",
            json!({"g": f.group, "u": f.member.id}),
        )),
        row(
            "grantSourceIdReadAccess",
            Admin,
            "mutation($g: ID!) { grantSourceIdReadAccess(sourceId: \"config:whatever\", userGroupId: $g) }",
            json!({"g": f.group}),
        ),
        row(
            "revokeSourceIdReadAccess",
            Admin,
            "mutation($g: ID!) { revokeSourceIdReadAccess(sourceId: \"config:whatever\", userGroupId: $g, makePublic: true) }",
            json!({"g": f.group}),
        ),
        row(
            "createGitRepository",
            Admin,
            "mutation { createGitRepository(name: \"matrix\", gitUrl: \"https://git.example.invalid/matrix\") }",
            json!({}),
        ),
        row(
            "updateGitRepository",
            Admin,
            "mutation($id: ID!) { updateGitRepository(id: $id, refs: [\"main\"]) }",
            json!({"id": f.repository}),
        ),
        row(
            "deleteGitRepository",
            Admin,
            "mutation($id: ID!) { deleteGitRepository(id: $id) }",
            json!({"id": f.repository}),
        ),
        // Last: it retires the member's auth token.
        row(
            "resetUserAuthToken",
            Session,
            "mutation { resetUserAuthToken }",
            json!({}),
        ),
    ]
}

async fn expect_code(
    server: &TabbyServer,
    row: &Row,
    who: &str,
    token: Option<&str>,
    expected: &str,
) {
    let body = graphql(&server.url("/graphql"), token, row.query, row.vars.clone()).await;
    assert!(
        body["data"].is_null(),
        "{} as {who}: data leaked: {body}",
        row.name
    );
    let error = &body["errors"][0];
    assert_eq!(code(error), Some(expected), "{} as {who}: {body}", row.name);
}

#[tokio::test]
async fn ee_every_graphql_field_checks_its_caller() {
    let server = TabbyServer::start_ee("", &[]);
    let admin = register_owner(&server, "owner@example.com").await;
    let member = invite_and_register(&server, &admin, "member@example.com").await;
    let t = Some(admin.access_token.as_str());
    let id = |data: Value, field: &str| data[field].as_str().unwrap().to_string();
    let group = id(
        gql_ok(
            &server,
            t,
            "mutation { createUserGroup(input: {name: \"eng\"}) }",
            json!({}),
        )
        .await,
        "createUserGroup",
    );
    let doomed_group = id(
        gql_ok(
            &server,
            t,
            "mutation { createUserGroup(input: {name: \"doomed\"}) }",
            json!({}),
        )
        .await,
        "createUserGroup",
    );
    let invitation = id(
        gql_ok(
            &server,
            t,
            "mutation { createInvitation(email: \"later@example.com\") }",
            json!({}),
        )
        .await,
        "createInvitation",
    );
    let repository = id(
        gql_ok(
            &server,
            t,
            "mutation { createGitRepository(name: \"fixture\", gitUrl: \"https://git.example.invalid/fixture\") }",
            json!({}),
        )
        .await,
        "createGitRepository",
    );
    let fixture = Fixture {
        admin,
        member,
        group,
        doomed_group,
        invitation,
        repository,
    };
    let rows = rows(&fixture);
    let (admin, member) = (&fixture.admin, &fixture.member);
    let now = now();
    let expired = mint_jwt(
        "irrelevant-secret-irrelevant-secret!",
        &admin.id,
        now - 7200,
        now - 3600,
    );

    for row in &rows {
        expect_code(&server, row, "anonymous", None, "UNAUTHORIZED").await;
        expect_code(&server, row, "a bad token", Some("nope"), "UNAUTHORIZED").await;
        expect_code(
            &server,
            row,
            "an unknown auth token",
            Some(&format!("auth_{}", "c".repeat(32))),
            "UNAUTHORIZED",
        )
        .await;
        expect_code(
            &server,
            row,
            "an expired JWT of another secret",
            Some(&expired),
            "UNAUTHORIZED",
        )
        .await;
        if row.needs != Needs::AnyToken {
            // Even an admin's auth token is not a session.
            expect_code(
                &server,
                row,
                "the admin's auth token",
                Some(&admin.auth_token),
                "FORBIDDEN",
            )
            .await;
            expect_code(
                &server,
                row,
                "a member's auth token",
                Some(&member.auth_token),
                "FORBIDDEN",
            )
            .await;
        }
        if row.member_forbidden {
            expect_code(
                &server,
                row,
                "a member's session",
                Some(&member.access_token),
                "FORBIDDEN",
            )
            .await;
        }
    }

    // Nothing above changed anything: the fixture is intact.
    let groups = gql_ok(
        &server,
        Some(&admin.access_token),
        "{ userGroups { name members { user { email } } } }",
        json!({}),
    )
    .await;
    assert_eq!(
        groups["userGroups"],
        json!([{"name": "doomed", "members": []}, {"name": "eng", "members": []}]),
        "{groups}"
    );
    let admin_me = gql_ok(
        &server,
        Some(&admin.access_token),
        "{ me { name } }",
        json!({}),
    )
    .await;
    assert_eq!(admin_me["me"]["name"], "Owner");

    // The right caller succeeds with the same requests (so the refusals above mean something).
    // Changing the password and signing out everywhere end the member's sessions, access
    // tokens included: the old one is then refused and the member signs in again.
    let mut member_session = member.access_token.clone();
    let mut member_password = PASSWORD.to_string();
    for row in &rows {
        let token = match (row.needs, row.member_forbidden) {
            (Needs::AnyToken, _) => &member.auth_token,
            (_, true) => &admin.access_token,
            (Needs::Session, false) => &member_session,
            (Needs::Admin, false) => unreachable!(),
        };
        let body = graphql(
            &server.url("/graphql"),
            Some(token),
            row.query,
            row.vars.clone(),
        )
        .await;
        assert!(
            body.get("errors").is_none() && !body["data"].is_null(),
            "{} by the right caller failed: {body}",
            row.name
        );
        if matches!(row.name, "passwordChange" | "logoutAllSessions") {
            if row.name == "passwordChange" {
                member_password = row.vars["n"].as_str().unwrap().to_string();
            }
            let refused = gql_err(&server, Some(&member_session), "{ me { id } }", json!({})).await;
            assert_eq!(
                code(&refused),
                Some("UNAUTHORIZED"),
                "{}: {refused}",
                row.name
            );
            let (status, _, _) = rest(
                &server,
                "GET",
                "/v1beta/models",
                Some(&bearer(&member_session)),
                None,
            )
            .await;
            assert_eq!(
                status, 401,
                "{}: the ended session still reaches /v1",
                row.name
            );
            member_session = gql_ok(
                &server,
                None,
                "mutation($e: String!, $p: String!) { tokenAuth(email: $e, password: $p) { accessToken } }",
                json!({"e": member.email, "p": member_password}),
            )
            .await["tokenAuth"]["accessToken"]
                .as_str()
                .unwrap()
                .to_string();
        }
    }
    let data = gql_ok(
        &server,
        Some(&admin.access_token),
        "{ me { name } }",
        json!({}),
    )
    .await;
    assert_eq!(data["me"]["name"], "Renamed");
    // The member's old auth token was reset by the last row.
    let (status, _, _) = rest(
        &server,
        "GET",
        "/v1/health",
        Some(&bearer(&member.auth_token)),
        None,
    )
    .await;
    assert_eq!(status, 401);
    // `users` never carries secrets.
    let body = graphql(
        &server.url("/graphql"),
        Some(&member_session),
        "{ users { edges { node { authToken } } } }",
        json!({}),
    )
    .await;
    assert!(body["data"].is_null(), "{body}");
    assert!(!body.to_string().contains("auth_"), "{body}");
    let data = gql_ok(
        &server,
        Some(&member_session),
        "{ users { edges { node { email isAdmin } } } }",
        json!({}),
    )
    .await;
    // A member who administers no group sees only themselves (see `ee_security` for the rest).
    assert_eq!(
        data["users"]["edges"],
        json!([{"node": {"email": "member@example.com", "isAdmin": false}}]),
        "{data}"
    );
    // Members may rename themselves.
    let data = gql_ok(
        &server,
        Some(&member_session),
        "mutation($id: ID!) { updateUserName(id: $id, name: \"Me\") }",
        json!({"id": member.id}),
    )
    .await;
    assert_eq!(data["updateUserName"], true);
}
