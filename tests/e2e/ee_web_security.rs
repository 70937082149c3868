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

async fn metrics_status(server: &TabbyServer, authorization: Option<&str>) -> u16 {
    let mut request = client().get(server.url("/metrics"));
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    request.send().await.unwrap().status().as_u16()
}

/// With `[security] metrics_token`, a scraper without the token (or with a user's session)
/// gets a 401; with `Bearer <token>` the metrics. `TABBY_METRICS_TOKEN` overrides the file.
#[tokio::test]
async fn ee_web_metrics_require_the_configured_token() {
    let config = "[security]\nmetrics_token = \"scrape-0b6d2e4a7f1c\"\n";
    let server = TabbyServer::start_ee(config, &[]);
    let owner = register_owner(&server, "owner@example.com").await;
    for wrong in [
        None,
        Some("Bearer scrape-0b6d2e4a7f1"),
        Some("Bearer scrape-0b6d2e4a7f1cc"),
        Some("scrape-0b6d2e4a7f1c"),
        Some(bearer(&owner.access_token).as_str()),
    ] {
        assert_eq!(metrics_status(&server, wrong).await, 401, "{wrong:?}");
    }
    let response = client().get(server.url("/metrics")).send().await.unwrap();
    assert!(response.headers().get("www-authenticate").is_some());
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("metrics_token"),
        "{body}"
    );
    assert_eq!(
        metrics_status(&server, Some("Bearer scrape-0b6d2e4a7f1c")).await,
        200
    );

    let server = TabbyServer::start_ee(config, &[("TABBY_METRICS_TOKEN", "from-the-env-1234")]);
    assert_eq!(
        metrics_status(&server, Some("Bearer scrape-0b6d2e4a7f1c")).await,
        401
    );
    assert_eq!(
        metrics_status(&server, Some("Bearer from-the-env-1234")).await,
        200
    );
}
