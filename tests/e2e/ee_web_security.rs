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

/// `/graphiql` loads nothing from another origin: the page names only same-origin assets, has
/// no inline script, and it and every asset it references are served (200) under a CSP with
/// `script-src 'self'`.
#[tokio::test]
async fn ee_web_graphiql_is_served_from_embedded_assets_under_the_csp() {
    let server = TabbyServer::start_ee("", &[]);
    let csp_of = |response: &reqwest::Response| {
        response
            .headers()
            .get("content-security-policy")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let response = client().get(server.url("/graphiql")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let csp = csp_of(&response);
    for directive in [
        "script-src 'self'",
        "default-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "{directive} missing in {csp}");
    }
    assert!(!csp.contains("unsafe-eval") && !csp.contains('*'), "{csp}");
    let html = response.text().await.unwrap();
    assert!(
        !html.contains("http://") && !html.contains("https://") && !html.contains("//cdn"),
        "{html}"
    );
    let mut assets = Vec::new();
    for attribute in ["src=\"", "href=\""] {
        for (i, _) in html.match_indices(attribute) {
            let rest = &html[i + attribute.len()..];
            assets.push(rest[..rest.find('"').unwrap()].to_string());
        }
    }
    assert_eq!(
        html.matches("<script").count(),
        html.matches("<script src=\"/").count(),
        "an inline script: {html}"
    );
    assert!(assets.len() >= 5, "{assets:?}");
    let mut total = 0;
    for asset in &assets {
        assert!(asset.starts_with("/graphiql/assets/"), "{asset}");
        let response = client().get(server.url(asset)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{asset}");
        assert!(csp_of(&response).contains("script-src 'self'"), "{asset}");
        let kind = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_string();
        let expected = if asset.ends_with(".js") {
            "text/javascript"
        } else {
            "text/css"
        };
        assert!(kind.starts_with(expected), "{asset}: {kind}");
        let body = response.bytes().await.unwrap();
        total += body.len();
        if asset.ends_with(".css") {
            // Fonts and icons are inlined, never fetched from elsewhere.
            let text = String::from_utf8_lossy(&body);
            assert!(!text.contains("url(http"), "{asset}");
        }
    }
    assert!(total < 2 * 1024 * 1024, "GraphiQL weighs {total} bytes");
    let missing = client()
        .get(server.url("/graphiql/assets/..%2Fsecret"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}
