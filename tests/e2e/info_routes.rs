//! Health, models, server setting, metrics and the OpenAPI document.

use serde_json::{Value, json};

use crate::support::*;

#[tokio::test]
async fn health_reports_models_machine_and_version() {
    let fake = FakeServer::start(Protocol::LlamaCpp, Script::default()).await;
    let config = llama_completion_config(&fake.url())
        + &format!(
            "\n[model.chat.http]\nkind = \"openai/chat\"\napi_endpoint = \"{}/v1\"\nmodel_name = \"chatty\"\nsupported_models = [\"chatty\"]\n",
            fake.url()
        );
    let server = TabbyServer::start(&config);
    for method in ["GET", "POST"] {
        let response = client()
            .request(method.parse().unwrap(), server.url("/v1/health"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{method}");
        let raw = response.text().await.unwrap();
        let health: Value = serde_json::from_str(&raw).unwrap();
        assert_eq!(health["model"], "Remote");
        assert_eq!(health["chat_model"], "chatty");
        assert_eq!(health["device"], "cpu");
        assert_eq!(health["cuda_devices"], json!([]));
        assert_eq!(
            health["models"]["completion"],
            json!({"remote": {"kind": "llama.cpp/completion", "api_endpoint": fake.url()}})
        );
        assert_eq!(
            health["models"]["chat"],
            json!({"remote": {"kind": "openai/chat", "model_name": "chatty", "api_endpoint": format!("{}/v1", fake.url())}})
        );
        assert!(health["cpu_count"].as_u64().unwrap() >= 1);
        assert!(health["arch"].is_string() && health["cpu_info"].is_string());
        let describe = health["version"]["git_describe"].as_str().unwrap();
        assert!(describe.starts_with('v'), "{describe}");
        for key in ["build_date", "build_timestamp", "git_sha"] {
            assert!(health["version"][key].is_string(), "{key}");
        }
        assert_eq!(health["webserver"], false, "--no-webserver");
        // Field order as upstream serializes it.
        assert!(raw.starts_with(r#"{"model":"#), "{raw}");
        assert!(raw.ends_with(r#""webserver":false}"#), "{raw}");
    }

    let (s, models) = get_json(&server.url("/v1beta/models")).await;
    assert_eq!(s, 200);
    assert_eq!(models, json!({"completion": null, "chat": ["chatty"]}));

    let (s, setting) = get_json(&server.url("/v1beta/server_setting")).await;
    assert_eq!(s, 200);
    assert_eq!(setting, json!({"disable_client_side_telemetry": false}));
}

#[tokio::test]
async fn metrics_count_requests_by_route() {
    let server = TabbyServer::start("");
    for _ in 0..3 {
        get_json(&server.url("/v1/health")).await;
    }
    let text = client()
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("# TYPE http_requests_total counter"),
        "{text}"
    );
    assert!(
        text.contains(r#"http_requests_total{method="GET",path="/v1/health",status="200"} 3"#),
        "{text}"
    );
    assert!(
        text.contains("http_requests_duration_seconds_bucket{"),
        "{text}"
    );
}

/// A scanner sending made-up methods and paths adds no series: they fold into `other` and
/// `unmatched`.
#[tokio::test]
async fn metrics_series_stay_bounded_under_unknown_methods_and_paths() {
    let server = TabbyServer::start("");
    let client = client();
    for i in 0..40 {
        let method = reqwest::Method::from_bytes(format!("SCAN{i}").as_bytes()).unwrap();
        let response = client
            .request(method, server.url(&format!("/metrics/x{i}")))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_client_error(), "{}", response.status());
        let response = client
            .request(
                reqwest::Method::from_bytes(b"SCAN").unwrap(),
                server.url("/metrics"),
            )
            .send()
            .await
            .unwrap();
        assert!(response.status().is_client_error(), "{}", response.status());
    }
    let text = client
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!text.contains("SCAN"), "{text}");
    assert!(!text.contains("/metrics/x"), "{text}");
    assert!(text.contains(r#"method="other""#), "{text}");
    let series = text
        .lines()
        .filter(|l| l.starts_with("http_requests_total{"))
        .count();
    assert!(series <= 4, "{series} series:\n{text}");
}

#[tokio::test]
async fn openapi_document_describes_every_route() {
    let server = TabbyServer::start("");
    let (s, doc) = get_json(&server.url("/api-docs/openapi.json")).await;
    assert_eq!(s, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    assert_eq!(doc["info"]["title"], "Tabby Server");
    for path in [
        "/v1/completions",
        "/v1/events",
        "/v1/health",
        "/v1/chat/completions",
        "/v1beta/models",
        "/v1beta/server_setting",
    ] {
        assert!(doc["paths"][path].is_object(), "missing {path}");
    }
    let request = &doc["components"]["schemas"]["CompletionRequest"]["properties"];
    for field in [
        "language",
        "segments",
        "user",
        "debug_options",
        "temperature",
        "seed",
        "mode",
    ] {
        assert!(request[field].is_object(), "CompletionRequest.{field}");
    }
    assert!(doc["components"]["securitySchemes"]["token"].is_object());
}

/// Probes for load balancers: `/healthz` (the process answers) and `/readyz` (the replica can
/// serve: the enterprise database answers), both without a token and without detail, while the
/// API still wants one.
#[tokio::test]
async fn healthz_and_readyz_answer_without_a_token() {
    let community = TabbyServer::start("");
    let (status, body) = get_json(&community.url("/healthz")).await;
    assert_eq!((status, body), (200, json!({"status": "ok"})));
    let (status, body) = get_json(&community.url("/readyz")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"status": "ready", "checks": {}, "index": "none"})
    );

    let ee = TabbyServer::start_ee("", &[]);
    let (status, _) = get_json(&ee.url("/v1/health")).await;
    assert_eq!(status, 401, "the API still needs a token");
    let (status, body) = get_json(&ee.url("/healthz")).await;
    assert_eq!((status, body), (200, json!({"status": "ok"})));
    let (status, body) = get_json(&ee.url("/readyz")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "ready");
    assert_eq!(body["checks"], json!({"database": "ok"}));
    // With the enterprise layer repositories can be added at run time: the index is reported
    // (not built yet here), never a reason to refuse traffic.
    assert_eq!(body["index"], "building");
    for method in ["POST", "DELETE"] {
        let response = client()
            .request(method.parse().unwrap(), ee.url("/readyz"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 405, "{method}");
    }
}
