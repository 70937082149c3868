//! Prometheus metrics for HTTP requests: a counter and a latency histogram per method, matched
//! route and status, rendered in the text exposition format at `GET /metrics`, behind a bearer
//! token when `[security] metrics_token` (or `TABBY_METRICS_TOKEN`) is set.

use std::{
    collections::BTreeMap,
    fmt::Write,
    sync::{Arc, Mutex},
    time::Instant,
};

use axum::{
    Json,
    extract::{MatchedPath, Request, State},
    http::{HeaderMap, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use sha2::{Digest, Sha256};

const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

#[derive(Default)]
struct Series {
    count: u64,
    sum: f64,
    /// Cumulative counts per bucket upper bound.
    buckets: [u64; BUCKETS.len()],
}

/// (method, route, status) → its series.
type SeriesMap = BTreeMap<(String, String, u16), Series>;

#[derive(Default, Clone)]
pub struct Metrics {
    series: Arc<Mutex<SeriesMap>>,
    /// SHA-256 of the token `/metrics` requires; `None`: open.
    token_digest: Option<[u8; 32]>,
}

impl Metrics {
    /// Metrics whose page requires `Authorization: Bearer <token>` when `token` is set.
    pub fn new(token: Option<&str>) -> Self {
        Self {
            series: Arc::default(),
            token_digest: token.map(|t| Sha256::digest(t.as_bytes()).into()),
        }
    }

    /// Whether the request may read the metrics. Digests of equal length are compared in
    /// constant time, so neither the token's bytes nor its length leak through timing.
    fn allows(&self, headers: &HeaderMap) -> bool {
        let Some(expected) = &self.token_digest else {
            return true;
        };
        let Some(given) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
        else {
            return false;
        };
        let given: [u8; 32] = Sha256::digest(given.trim().as_bytes()).into();
        given
            .iter()
            .zip(expected)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }

    fn observe(&self, method: &str, path: &str, status: u16, seconds: f64) {
        let mut series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let s = series
            .entry((method.to_string(), path.to_string(), status))
            .or_default();
        s.count += 1;
        s.sum += seconds;
        for (i, bound) in BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                s.buckets[i] += 1;
            }
        }
    }

    pub fn render(&self) -> String {
        let series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        out.push_str("# HELP http_requests_total Number of HTTP requests handled.\n");
        out.push_str("# TYPE http_requests_total counter\n");
        for ((method, path, status), s) in series.iter() {
            let _ = writeln!(
                out,
                "http_requests_total{{method=\"{method}\",path=\"{path}\",status=\"{status}\"}} {}",
                s.count
            );
        }
        out.push_str("# HELP http_requests_duration_seconds Time to produce the response.\n");
        out.push_str("# TYPE http_requests_duration_seconds histogram\n");
        for ((method, path, status), s) in series.iter() {
            let labels = format!("method=\"{method}\",path=\"{path}\",status=\"{status}\"");
            for (bound, count) in BUCKETS.iter().zip(s.buckets.iter()) {
                let _ = writeln!(
                    out,
                    "http_requests_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {count}"
                );
            }
            let _ = writeln!(
                out,
                "http_requests_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}",
                s.count
            );
            let _ = writeln!(
                out,
                "http_requests_duration_seconds_sum{{{labels}}} {}",
                s.sum
            );
            let _ = writeln!(
                out,
                "http_requests_duration_seconds_count{{{labels}}} {}",
                s.count
            );
        }
        render_prompt_cache(&mut out, &tabby_local::llm::loaded_prompt_stats());
        out
    }
}

/// The embedded runtime's counters per loaded model: prompt tokens computed and reused from
/// its prompt cache, tokens generated, seconds in forward passes, drafted tokens, and the
/// cache's size.
fn render_prompt_cache(out: &mut String, models: &[(String, tabby_local::llm::PromptStats)]) {
    if models.is_empty() {
        return;
    }
    let per_model = |f: &dyn Fn(&tabby_local::llm::PromptStats) -> Vec<(String, String)>| {
        models
            .iter()
            .flat_map(|(model, stats)| {
                f(stats)
                    .into_iter()
                    .map(move |(label, value)| (format!("model=\"{model}\"{label}"), value))
            })
            .collect::<Vec<_>>()
    };
    family(
        out,
        "tabby_prompt_tokens_total",
        "counter",
        "Prompt tokens the embedded model read, by whether they were computed or reused from \
         its prompt cache.",
        per_model(&|s| {
            vec![
                (",kind=\"computed\"".into(), s.computed.to_string()),
                (",kind=\"reused\"".into(), s.reused.to_string()),
            ]
        }),
    );
    family(
        out,
        "tabby_generated_tokens_total",
        "counter",
        "Tokens the embedded model generated.",
        per_model(&|s| vec![(String::new(), s.generated.to_string())]),
    );
    family(
        out,
        "tabby_model_seconds_total",
        "counter",
        "Seconds the embedded model spent in forward passes, over prompt chunks or over \
         generated tokens.",
        per_model(&|s| {
            vec![
                (
                    ",phase=\"prompt\"".into(),
                    format!("{:.6}", s.prompt_seconds),
                ),
                (
                    ",phase=\"decode\"".into(),
                    format!("{:.6}", s.decode_seconds),
                ),
            ]
        }),
    );
    family(
        out,
        "tabby_draft_tokens_total",
        "counter",
        "Tokens the embedded model drafted from the request's own context, by whether the \
         model then generated them.",
        per_model(&|s| {
            vec![
                (",outcome=\"accepted\"".into(), s.accepted.to_string()),
                (
                    ",outcome=\"rejected\"".into(),
                    (s.drafted - s.accepted.min(s.drafted)).to_string(),
                ),
            ]
        }),
    );
    family(
        out,
        "tabby_prompt_cache_bytes",
        "gauge",
        "KV cache bytes kept for reuse.",
        per_model(&|s| vec![(String::new(), s.cached_bytes.to_string())]),
    );
}

/// One metric family in Prometheus text: its HELP and TYPE lines, then a line per
/// (labels, value).
fn family(out: &mut String, name: &str, kind: &str, help: &str, samples: Vec<(String, String)>) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, value) in samples {
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

/// The method label: one of HTTP's own methods, else `other` (any token is a valid method, so
/// a client could otherwise add a series per request).
fn method_label(method: &axum::http::Method) -> &'static str {
    const KNOWN: [&str; 9] = [
        "GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "TRACE", "CONNECT",
    ];
    KNOWN
        .into_iter()
        .find(|k| *k == method.as_str())
        .unwrap_or("other")
}

/// Middleware recording every request. Unmatched paths are grouped as `unmatched` and unknown
/// methods as `other`, so that scanners cannot grow the series without bound.
pub async fn track(State(metrics): State<Metrics>, request: Request, next: Next) -> Response {
    let method = method_label(request.method()).to_string();
    let path = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let start = Instant::now();
    let response = next.run(request).await;
    metrics.observe(
        &method,
        &path,
        response.status().as_u16(),
        start.elapsed().as_secs_f64(),
    );
    response
}

pub async fn render(State(metrics): State<Metrics>, headers: HeaderMap) -> Response {
    if !metrics.allows(&headers) {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer realm=\"metrics\"")],
            Json(serde_json::json!({
                "error": "/metrics needs `Authorization: Bearer <token>` with the server's \
                          metrics token (`[security] metrics_token`)"
            })),
        )
            .into_response();
    }
    (
        [("content-type", "text/plain; version=0.0.4")],
        metrics.render(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(authorization: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, authorization.parse().unwrap());
        h
    }

    #[test]
    fn the_token_is_required_only_when_set() {
        assert!(Metrics::new(None).allows(&HeaderMap::new()));
        let m = Metrics::new(Some("s3cret-metrics"));
        assert!(m.allows(&headers("Bearer s3cret-metrics")));
        for wrong in [
            "Bearer s3cret-metric",
            "Bearer s3cret-metricsx",
            "Token s3cret-metrics",
            "s3cret-metrics",
            "Bearer ",
        ] {
            assert!(!m.allows(&headers(wrong)), "{wrong}");
        }
        assert!(!m.allows(&HeaderMap::new()));
    }

    #[test]
    fn the_embedded_models_counters_are_rendered_per_model() {
        let stats = tabby_local::llm::PromptStats {
            computed: 120,
            reused: 380,
            cached_bytes: 4096,
            generated: 17,
            prompt_seconds: 0.25,
            decode_seconds: 1.5,
            drafted: 9,
            accepted: 6,
        };
        let mut out = String::new();
        render_prompt_cache(&mut out, &[("Qwen".to_string(), stats)]);
        for line in [
            "tabby_prompt_tokens_total{model=\"Qwen\",kind=\"computed\"} 120",
            "tabby_prompt_tokens_total{model=\"Qwen\",kind=\"reused\"} 380",
            "tabby_generated_tokens_total{model=\"Qwen\"} 17",
            "tabby_model_seconds_total{model=\"Qwen\",phase=\"prompt\"} 0.250000",
            "tabby_model_seconds_total{model=\"Qwen\",phase=\"decode\"} 1.500000",
            "tabby_prompt_cache_bytes{model=\"Qwen\"} 4096",
            "tabby_draft_tokens_total{model=\"Qwen\",outcome=\"accepted\"} 6",
            "tabby_draft_tokens_total{model=\"Qwen\",outcome=\"rejected\"} 3",
            "# TYPE tabby_prompt_cache_bytes gauge",
            "# TYPE tabby_model_seconds_total counter",
        ] {
            assert!(
                out.lines().any(|l| l == line),
                "{line} missing from:\n{out}"
            );
        }
        let mut none = String::new();
        render_prompt_cache(&mut none, &[]);
        assert!(none.is_empty());
    }
}
