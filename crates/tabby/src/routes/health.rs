use std::sync::Arc;

use axum::{Json, extract::State};

use super::ApiState;
use crate::services::health::HealthState;

#[utoipa::path(
    get,
    path = "/v1/health",
    operation_id = "health",
    tag = "v1",
    responses((status = 200, description = "Success", body = HealthState, content_type = "application/json")),
    security(("token" = []))
)]
pub async fn health(State(state): State<Arc<ApiState>>) -> Json<HealthState> {
    Json(state.health.clone())
}

/// A check a replica must pass to take traffic; its error names what is not ready.
pub type ReadinessCheck =
    Arc<dyn Fn() -> futures::future::BoxFuture<'static, Result<(), &'static str>> + Send + Sync>;

/// How long one answer of the readiness check is reused: `/readyz` needs no token, so a
/// flood of probes costs at most one database query a second.
const READY_CHECK_TTL: std::time::Duration = std::time::Duration::from_secs(1);

/// The last answer of the readiness check and when it was taken.
type LastCheck = Arc<tokio::sync::Mutex<Option<(std::time::Instant, Result<(), &'static str>)>>>;

/// What `/readyz` looks at.
#[derive(Clone)]
pub struct Readiness {
    /// The enterprise layer's check (its database), when there is one.
    pub check: Option<ReadinessCheck>,
    /// Shared by the probes (one check runs at a time; the others wait for its answer).
    pub last: LastCheck,
    /// Code search, when repositories can be indexed: reported, never a reason to refuse
    /// traffic (completions and chat work before the first index).
    pub code_search: Option<Arc<crate::services::code::CodeSearchService>>,
}

/// Liveness for a load balancer or an orchestrator: the process answers. No auth, no detail.
pub async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok"}))
}

/// Readiness: 200 when this replica can serve (the enterprise database answers within 2 s),
/// else 503 naming the failing check. No auth; nothing but check names and states.
pub async fn readyz(
    State(readiness): State<Readiness>,
) -> (axum::http::StatusCode, Json<serde_json::Value>) {
    let mut checks = serde_json::Map::new();
    let mut ready = true;
    if let Some(check) = &readiness.check {
        let answer = {
            let mut last = readiness.last.lock().await;
            match *last {
                Some((at, answer)) if at.elapsed() < READY_CHECK_TTL => answer,
                _ => {
                    let answer = check().await;
                    *last = Some((std::time::Instant::now(), answer));
                    answer
                }
            }
        };
        match answer {
            Ok(()) => {
                checks.insert("database".into(), "ok".into());
            }
            Err(what) => {
                ready = false;
                checks.insert(what.into(), "failing".into());
            }
        }
    }
    let index = match &readiness.code_search {
        None => "none",
        Some(search) if search.index_versions().is_some() => "ready",
        Some(_) => "building",
    };
    let status = if ready {
        axum::http::StatusCode::OK
    } else {
        axum::http::StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(serde_json::json!({
            "status": if ready { "ready" } else { "not_ready" },
            "checks": checks,
            "index": index,
        })),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failing_check_makes_the_replica_not_ready_and_names_only_the_check() {
        let failing: ReadinessCheck = Arc::new(|| Box::pin(async { Err("database") }));
        let (status, Json(body)) = readyz(State(Readiness {
            check: Some(failing),
            last: Default::default(),
            code_search: None,
        }))
        .await;
        assert_eq!(status, axum::http::StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            body,
            serde_json::json!({"status": "not_ready", "checks": {"database": "failing"}, "index": "none"})
        );
        // A passing check runs once for a burst of probes within its TTL.
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let passing: ReadinessCheck = {
            let runs = runs.clone();
            Arc::new(move || {
                runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Box::pin(async { Ok(()) })
            })
        };
        let readiness = Readiness {
            check: Some(passing),
            last: Default::default(),
            code_search: None,
        };
        for _ in 0..50 {
            let (status, Json(body)) = readyz(State(readiness.clone())).await;
            assert_eq!(status, axum::http::StatusCode::OK);
            assert_eq!(body["checks"], serde_json::json!({"database": "ok"}));
        }
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
