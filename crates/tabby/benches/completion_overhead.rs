//! The server's own cost per completion: `tabby` in-process on loopback in front of an instant
//! fake llama.cpp server, driven by 1 and by 32 concurrent clients with an editor-sized request.
//! The same load sent straight to the fake is measured too, so the difference is what tabby
//! adds (JSON, prompt building, stop words, event log, two extra HTTP hops).
//!
//! The model's rate limit (default 1200 requests/minute, as upstream) is lifted so that the
//! server itself is measured.
//!
//! With the enterprise layer (the default build), the same load is also sent through the token
//! check (a user's auth token; the per-user rate limit lifted), so its cost shows separately,
//! and then 32 clients are spread over two web replicas on one root (one SQLite database, one
//! process here, so the same cores), against the same 32 clients on one replica.
//!
//! With `TABBY_BENCH_DATABASE_URL=postgres://…` (an empty database, e.g. on the cluster of
//! `bash scripts/postgres.sh`), the enterprise part runs on PostgreSQL instead of SQLite.
//!
//! Run: `cargo bench -p tabby --bench completion_overhead` (figures on stdout).

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use fake_model_servers::{FakeServer, Protocol, Script};
use serde_json::{Value, json};
use tabby_common::{config::Config, path::TabbyPaths};

fn request_body() -> Value {
    let prefix: String = (0..20)
        .map(|i| format!("    value_{i} = compute(value_{i}, factor={i})\n"))
        .collect();
    let suffix: String = (0..20).map(|i| format!("    log(value_{i})\n")).collect();
    json!({
        "language": "python",
        "segments": {
            "prefix": prefix,
            "suffix": suffix,
            "filepath": "src/app/compute.py",
            "git_url": "https://github.com/example/app.git",
            "declarations": [{"filepath": "src/app/math.py", "body": "def compute(x, factor):\n    return x * factor\n"}],
            "relevant_snippets_from_recently_opened_files": [
                {"filepath": "src/app/log.py", "body": "def log(v):\n    print(v)\n", "score": 1.0}
            ]
        }
    })
}

async fn run_load(
    url: String,
    body: Value,
    clients: usize,
    per_client: usize,
    token: Option<String>,
) -> (Vec<Duration>, Duration) {
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let body = Arc::new(body);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (http, url, body, token) = (http.clone(), url.clone(), body.clone(), token.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(per_client);
            for _ in 0..per_client {
                let t = Instant::now();
                let mut request = http.post(&url).json(&*body);
                if let Some(token) = &token {
                    request = request.bearer_auth(token);
                }
                let response = request.send().await.unwrap();
                assert!(response.status().is_success(), "{}", response.status());
                let _ = response.bytes().await.unwrap();
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    (all, start.elapsed())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn report(label: &str, mut latencies: Vec<Duration>, wall: Duration) -> (Duration, Duration) {
    latencies.sort();
    let (p50, p99) = (percentile(&latencies, 0.5), percentile(&latencies, 0.99));
    println!(
        "{label:<34} n={:<6} p50={:>8.3} ms  p99={:>8.3} ms  {:>8.0} req/s",
        latencies.len(),
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        latencies.len() as f64 / wall.as_secs_f64()
    );
    (p50, p99)
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let fake = FakeServer::start(
            Protocol::LlamaCpp,
            Script::default().instant().pieces(["    total = sum(values)", "\n\n"]),
        )
        .await;
        let root = tempfile::tempdir().unwrap();
        let config = Config::parse(
            std::path::Path::new("bench.toml"),
            &format!(
                "[model.completion.http]\nkind = \"llama.cpp/completion\"\napi_endpoint = \"{}\"\nprompt_template = \"<|fim_prefix|>{{prefix}}<|fim_suffix|>{{suffix}}<|fim_middle|>\"\n[model.completion.http.rate_limit]\nrequest_per_minute = 100000000\n",
                fake.url()
            ),
        )
        .unwrap();
        let app = tabby::serve::build_app(&config, &TabbyPaths::new(root.path()), Some(false), None, Default::default()).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        tokio::spawn(async move { axum::serve(listener, app.router).await });

        let tabby_url = format!("http://{addr}/v1/completions");
        let fake_url = format!("{}/completion", fake.url());
        let fake_body = json!({"prompt": "x", "n_predict": 64, "stream": true});

        // Warm up connections and caches.
        run_load(tabby_url.clone(), request_body(), 4, 50, None).await;

        println!("completion overhead (instant fake llama.cpp model, loopback, {} cores)",
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
        for (clients, per_client) in [(1usize, 2000usize), (32, 250)] {
            let (lat, wall) = run_load(tabby_url.clone(), request_body(), clients, per_client, None).await;
            let (t50, t99) = report(&format!("tabby /v1/completions c={clients}"), lat, wall);
            let (lat, wall) = run_load(fake_url.clone(), fake_body.clone(), clients, per_client, None).await;
            let (f50, f99) = report(&format!("fake model alone      c={clients}"), lat, wall);
            println!(
                "{:<34} p50={:>8.3} ms  p99={:>8.3} ms",
                format!("tabby's own share     c={clients}"),
                (t50.saturating_sub(f50)).as_secs_f64() * 1e3,
                (t99.saturating_sub(f99)).as_secs_f64() * 1e3
            );
        }

        #[cfg(feature = "ee")]
        enterprise(&config, &fake).await;
    });
}

/// One enterprise-layer server (a web replica: it serves, it runs no jobs) on the root
/// `paths`, listening on loopback; its address.
#[cfg(feature = "ee")]
async fn start_replica(config: &Config, paths: &TabbyPaths) -> std::net::SocketAddr {
    use tabby_webserver::{BucketSpec, Webserver, WebserverOptions};
    let server = Webserver::new(WebserverOptions {
        db_path: paths.ee_db_file(),
        database_url: config.database.url.clone(),
        jobs_dir: paths.ee_dir().join("jobs"),
        repositories_dir: paths.repositories_dir(),
        config_repositories: vec![],
        security: Default::default(),
        email: Default::default(),
        rest_rate_limit: Some(BucketSpec {
            capacity: 1e12,
            initial: 1e12,
            per_second: 1e12,
        }),
    })
    .await
    .unwrap();
    let layers = tabby::serve::Layers {
        event_loggers: vec![server.event_logger()],
        protect_api: Some(Box::new({
            let server = server.clone();
            move |api| server.protect(api)
        })),
        routes: Some(server.routes()),
        fallback: Some(Webserver::ui_fallback()),
        readiness: None,
    };
    let app = tabby::serve::build_app(config, paths, Some(true), None, layers).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.router
                .into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .await
    });
    addr
}

/// The same completions through the enterprise layer's token check; then 32 clients spread
/// over two replicas on one root (one database) against the same 32 on one of them.
#[cfg(feature = "ee")]
async fn enterprise(config: &Config, fake: &FakeServer) {
    let mut config = config.clone();
    config.database.url = std::env::var("TABBY_BENCH_DATABASE_URL").ok();
    println!(
        "enterprise layer on {}",
        if config.database.url.is_some() {
            "PostgreSQL"
        } else {
            "SQLite"
        }
    );
    let config = &config;
    let root = tempfile::tempdir().unwrap();
    let paths = TabbyPaths::new(root.path());
    let addr = start_replica(config, &paths).await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let graphql = format!("http://{addr}/graphql");
    let register: Value = http
        .post(&graphql)
        .json(&json!({"query": "mutation { register(email: \"bench@example.com\", password1: \"Bench-pass1\", password2: \"Bench-pass1\", name: \"Bench\") { accessToken } }"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let jwt = register["data"]["register"]["accessToken"]
        .as_str()
        .unwrap()
        .to_string();
    let me: Value = http
        .post(&graphql)
        .bearer_auth(&jwt)
        .json(&json!({"query": "{ me { authToken } }"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = me["data"]["me"]["authToken"].as_str().unwrap().to_string();
    let url = format!("http://{addr}/v1/completions");
    let _ = fake;
    // `clients` clients sending `per_client` requests each to `url` as the user.
    let load = |url: String, clients: usize, per_client: usize| {
        run_load(
            url,
            request_body(),
            clients,
            per_client,
            Some(token.clone()),
        )
    };
    load(url.clone(), 4, 50).await;
    for (clients, per_client) in [(1usize, 2000usize), (32, 250)] {
        let (lat, wall) = load(url.clone(), clients, per_client).await;
        report(&format!("with token check (ee) c={clients}"), lat, wall);
    }

    // A second replica on the same root: the user and token are the database's.
    let second = start_replica(config, &paths).await;
    let second_url = format!("http://{second}/v1/completions");
    load(second_url.clone(), 4, 50).await;
    let (lat, wall) = load(url.clone(), 32, 250).await;
    report("one replica         c=32", lat, wall);
    let ((mut lat, a_wall), (b_lat, b_wall)) =
        tokio::join!(load(url.clone(), 16, 250), load(second_url, 16, 250));
    lat.extend(b_lat);
    report("two replicas, 16 each c=32", lat, a_wall.max(b_wall));
}
