//! HTTP entry points of the enterprise layer: GraphQL over POST, subscriptions over WebSocket,
//! and the token check in front of the editors' REST API.

use std::{net::SocketAddr, sync::Arc};

use axum::{
    Extension, Json,
    extract::{ConnectInfo, FromRequest, Request, State, WebSocketUpgrade},
    http::{HeaderValue, Method, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use juniper_axum::{extract::JuniperRequest, response::JuniperResponse};
use tabby_common::USER_HEADER_FIELD_NAME;
use tabby_schema::{
    Context,
    auth::{AuthenticationService, Claims},
};

use crate::{
    Webserver,
    edge::{WebError, bearer_token, editor_token},
};

/// Whether the URL carries a token (`?access_token=`, as upstream accepted): URLs end up in
/// proxy logs, browser histories and `Referer` headers, so such a request is refused rather
/// than served or treated as anonymous.
fn token_in_query(req: &Request) -> bool {
    req.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|pair| pair.split_once('=').map_or(pair, |(k, _)| k) == "access_token")
    })
}

const TOKEN_IN_QUERY: &str = "tokens are not accepted in the URL's query string: send \
                              `Authorization: Bearer <token>` instead";

impl Webserver {
    pub(crate) async fn context(&self, token: Option<&str>, client: Option<SocketAddr>) -> Context {
        let claims = match token {
            Some(token) => self.services.auth.verify_any_token(token).await.ok(),
            None => None,
        };
        Context {
            token: claims.as_ref().and(token).map(str::to_string),
            claims,
            locator: self.services.clone(),
            client: client.map(|a| a.ip()),
        }
    }
}

/// `POST /graphql` (and `GET /graphql?query=…`).
pub async fn graphql(State(server): State<Arc<Webserver>>, req: Request) -> Response {
    if token_in_query(&req) {
        let mut response = (
            StatusCode::UNAUTHORIZED,
            Json(serde_json::json!({
                "errors": [{
                    "message": TOKEN_IN_QUERY,
                    "extensions": {"code": "UNAUTHORIZED"},
                }]
            })),
        )
            .into_response();
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"tabby\""),
        );
        return response;
    }
    let token = bearer_token(req.headers()).map(str::to_string);
    let client = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    let JuniperRequest(request) = match JuniperRequest::from_request(req, &()).await {
        Ok(r) => r,
        Err(rejection) => return rejection,
    };
    let max_batch = server.directory.security().graphql_max_batch;
    if let juniper::http::GraphQLBatchRequest::Batch(operations) = &request
        && operations.len() > max_batch
    {
        // Refused before anything runs: a batch is one request to the rate limits.
        return (
            StatusCode::BAD_REQUEST,
            Json(serde_json::json!({
                "errors": [{
                    "message": format!(
                        "A GraphQL batch may hold at most {max_batch} operations; this one has {} \
                         (see `[security] graphql_max_batch`)",
                        operations.len()
                    ),
                    "extensions": {"code": "BATCH_TOO_LARGE"},
                }]
            })),
        )
            .into_response();
    }
    let ctx = server.context(token.as_deref(), client).await;
    JuniperResponse(request.execute(&*server.schema, &ctx).await).into_response()
}

/// `GET /subscriptions`: GraphQL over WebSocket, `graphql-transport-ws` or the legacy
/// `graphql-ws`, chosen by the client's `Sec-WebSocket-Protocol`. The token travels in the
/// `connection_init` payload as `{"authorization": "Bearer <token>"}`; a connection without
/// one is anonymous, one with a bad token is refused. See [`crate::subscriptions`] for the
/// limits and the session checks.
pub async fn subscriptions(
    State(server): State<Arc<Webserver>>,
    client: Option<Extension<ConnectInfo<SocketAddr>>>,
    upgrade: WebSocketUpgrade,
) -> Response {
    let client = client.map(|Extension(ConnectInfo(addr))| addr);
    upgrade
        .protocols(["graphql-transport-ws", "graphql-ws"])
        .max_message_size(crate::subscriptions::MAX_MESSAGE_BYTES)
        .max_frame_size(crate::subscriptions::MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| crate::subscriptions::serve(socket, server, client))
}

/// `GET /background-jobs/{id}/logs`: a run's log as text, for admins with a session JWT
/// (`Authorization: Bearer`; the UI fetches it with the header).
pub async fn job_logs(
    State(server): State<Arc<Webserver>>,
    axum::extract::Path(id): axum::extract::Path<String>,
    req: Request,
) -> Response {
    if token_in_query(&req) {
        return WebError::new(StatusCode::UNAUTHORIZED, TOKEN_IN_QUERY).into_response();
    }
    let Some(token) = bearer_token(req.headers()).map(str::to_string) else {
        return WebError::new(StatusCode::UNAUTHORIZED, "missing token: sign in").into_response();
    };
    let claims = match server.services.auth.verify_access_token(&token).await {
        Ok(claims) => claims,
        Err(_) => {
            return WebError::new(StatusCode::UNAUTHORIZED, "invalid or expired session")
                .into_response();
        }
    };
    let snapshot = match server.directory.snapshot().await {
        Ok(s) => s,
        Err(_) => {
            return WebError::new(StatusCode::SERVICE_UNAVAILABLE, "cannot check access now")
                .into_response();
        }
    };
    if !snapshot
        .users
        .get(&claims.user_id)
        .is_some_and(|u| u.is_admin)
    {
        return WebError::new(StatusCode::FORBIDDEN, "job logs are for admins").into_response();
    }
    let Some(rowid) = tabby_schema::decode_id(&id) else {
        return WebError::new(StatusCode::NOT_FOUND, "no such job run").into_response();
    };
    let path = crate::job::JobLog::path(server.jobs.jobs_dir(), rowid);
    match tokio::fs::read(&path).await {
        // Logs written by older versions may hold credentials in URLs.
        Ok(bytes) => (
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            tabby_common::git_url::redact_urls_in(&String::from_utf8_lossy(&bytes)),
        )
            .into_response(),
        Err(_) => WebError::not_found("no log for this job run (yet)").into_response(),
    }
}

/// In front of `/v1*`: a JWT or a user auth token is required (any scheme word before it, as
/// upstream), each user gets 120 requests a minute (health checks exempt), the request gets
/// the server's own `x-tabby-user` (a client-sent one is dropped) and the repositories the
/// user may read.
pub async fn require_token(
    State(server): State<Arc<Webserver>>,
    mut req: Request,
    next: Next,
) -> Response {
    if req.method() == Method::OPTIONS {
        return next.run(req).await;
    }
    let Some(token) = editor_token(req.headers()).map(str::to_string) else {
        return WebError::unauthorized(
            "missing token: send `Authorization: Bearer <token>` with your auth token from \
             the web UI (or a session token)",
        )
        .closing()
        .into_response();
    };
    let (Claims { user_id, .. }, snapshot) = match server.services.auth.authenticate(&token).await {
        Ok(found) => found,
        Err(tabby_schema::CoreError::Other(e)) => {
            tracing::error!("cannot check a token: {e:#}");
            return WebError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "cannot check the token now",
            )
            .into_response();
        }
        Err(_) => {
            return WebError::unauthorized(
                "invalid token: it is unknown, expired, or its user is disabled",
            )
            .closing()
            .into_response();
        }
    };
    let path = req.uri().path();
    let exempt = path.ends_with("/v1/health") || path.ends_with("/v1beta/health");
    if !exempt && !server.rest_limiter.try_acquire(&user_id) {
        return WebError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate limit exceeded: at most 120 requests per minute per user",
        )
        .retry_after(1)
        .closing()
        .into_response();
    }
    let policy = snapshot.policy_for(user_id);
    let allowed = policy.filter_repositories(&snapshot.all_repositories);
    let docs = tabby_common::api::doc::AllowedDocSources::new(move |s| policy.can_read(s));
    let headers = req.headers_mut();
    headers.remove(USER_HEADER_FIELD_NAME);
    if let Ok(value) = HeaderValue::from_str(&tabby_schema::encode_id(user_id)) {
        headers.insert(USER_HEADER_FIELD_NAME, value);
    }
    req.extensions_mut().insert(allowed);
    req.extensions_mut().insert(docs);
    next.run(req).await
}

/// `GET /repositories/{kind}/{id}/rev/{rev}/{*path}` (and `…/resolve/{*path}` for the default
/// branch): a file's bytes or a directory's entries from the code browser, for a signed-in
/// session (JWT) that may read the repository. Files are always `text/plain` or
/// `application/octet-stream` under a sandboxing CSP, never rendered as HTML from this
/// origin; a directory is `application/vnd.directory+json`
/// `{"entries": [{"kind": "dir"|"file", "basename": "<path from the root>"}]}` as upstream.
pub async fn repository_file(
    State(server): State<Arc<Webserver>>,
    axum::extract::Path(params): axum::extract::Path<std::collections::HashMap<String, String>>,
    req: Request,
) -> Response {
    use tabby_schema::{repository::RepositoryKind, user_group::AccessPolicyService as _};
    if token_in_query(&req) {
        return WebError::new(StatusCode::UNAUTHORIZED, TOKEN_IN_QUERY).into_response();
    }
    let Some(token) = bearer_token(req.headers()).map(str::to_string) else {
        return WebError::new(StatusCode::UNAUTHORIZED, "missing token: sign in").into_response();
    };
    let Ok(claims) = server.services.auth.verify_access_token(&token).await else {
        return WebError::new(StatusCode::UNAUTHORIZED, "invalid or expired session")
            .into_response();
    };
    let kind = match params.get("kind").map(String::as_str) {
        Some("git") => RepositoryKind::Git,
        Some("gitconfig") => RepositoryKind::GitConfig,
        Some("github") => RepositoryKind::Github,
        Some("gitlab") => RepositoryKind::Gitlab,
        Some("githubselfhosted") => RepositoryKind::GithubSelfHosted,
        Some("gitlabselfhosted") => RepositoryKind::GitlabSelfHosted,
        _ => return WebError::not_found("Repository not found").into_response(),
    };
    let id = juniper::ID::new(params.get("id").cloned().unwrap_or_default());
    let rev = params.get("rev").cloned();
    let path = params.get("path").cloned().unwrap_or_default();
    let policy = match server.services.user_group.policy_for(claims.user_id).await {
        Ok(policy) => policy,
        Err(_) => {
            return WebError::new(StatusCode::SERVICE_UNAVAILABLE, "cannot check access now")
                .into_response();
        }
    };
    let browser = server.services.repository.browser();
    let target = match browser.target(&policy, kind, &id).await {
        Ok(target) => target,
        Err(_) => return WebError::not_found("Repository not found").into_response(),
    };
    let entry = tokio::task::spawn_blocking(move || {
        let snapshot = browser.snapshot(&target, rev.as_deref())?;
        browser.entry(&snapshot, &path)
    })
    .await;
    let entry = match entry {
        Ok(Ok(entry)) => entry,
        Ok(Err(tabby_schema::CoreError::InvalidInput(errors))) => {
            let message = errors
                .first()
                .map(|e| e.message.clone())
                .unwrap_or_default();
            return WebError::new(StatusCode::BAD_REQUEST, message).into_response();
        }
        Ok(Err(e)) => return WebError::not_found(e.to_string()).into_response(),
        Err(_) => {
            return WebError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot read the repository",
            )
            .into_response();
        }
    };
    match entry {
        crate::browse::Entry::Dir(entries) => {
            let entries: Vec<_> = entries
                .into_iter()
                .map(|(dir, path)| {
                    serde_json::json!({"kind": if dir { "dir" } else { "file" }, "basename": path})
                })
                .collect();
            (
                [(header::CONTENT_TYPE, "application/vnd.directory+json")],
                serde_json::json!({ "entries": entries }).to_string(),
            )
                .into_response()
        }
        crate::browse::Entry::File(bytes) => {
            let text = tabby_index::code::filter::as_text(&bytes).is_ok();
            let mut response = bytes.into_response();
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                axum::http::HeaderValue::from_static(if text {
                    "text/plain; charset=utf-8"
                } else {
                    "application/octet-stream"
                }),
            );
            headers.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                axum::http::HeaderValue::from_static("nosniff"),
            );
            headers.insert(
                header::CONTENT_SECURITY_POLICY,
                axum::http::HeaderValue::from_static("sandbox; default-src 'none'"),
            );
            response
        }
    }
}
