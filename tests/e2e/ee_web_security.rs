//! Attacks on the web layer itself, each written as the attacker's request: tokens in URLs,
//! an open `/metrics`, GraphiQL from a third-party CDN, floods of mail-sending flows.

use serde_json::{Value, json};

use crate::{ee_support::*, support::*};

/// A token in the query string is never a credential, even a valid one with no header: the
/// request is refused (401) with a message saying to send the header.
#[tokio::test]
async fn ee_web_a_token_in_the_query_string_is_refused() {
    let server = TabbyServer::start_ee("", &[]);
    let owner = register_owner(&server, "owner@example.com").await;
    for token in [&owner.access_token, &owner.auth_token] {
        for path in [
            format!("/graphql?query=%7Bme%7Bemail%7D%7D&access_token={token}"),
            format!("/background-jobs/{}/logs?access_token={token}", owner.id),
        ] {
            let response = client().get(server.url(&path)).send().await.unwrap();
            assert_eq!(response.status(), 401, "{path}");
            let body: Value = response.json().await.unwrap();
            assert!(
                body.to_string().contains("Authorization: Bearer"),
                "{path}: {body}"
            );
        }
        let response = client()
            .post(server.url(&format!("/graphql?access_token={token}")))
            .json(&json!({"query": "{ me { email } }"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401);
    }
    // The header still works.
    let response = client()
        .get(server.url("/graphql?query=%7Bme%7Bemail%7D%7D"))
        .header("authorization", bearer(&owner.access_token))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["data"]["me"]["email"], "owner@example.com", "{body}");
}
