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
