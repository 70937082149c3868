//! The browser's side of OAuth sign-in: `GET /oauth/providers` (the names set up),
//! `GET /oauth/signin?provider=…` (off to the provider, with the flow's cookie) and
//! `GET /oauth/callback/{provider}` (back from it). Both end at the web UI's sign-in page:
//! `/auth/signin#refresh_token=…` on success (in the fragment, which never reaches a server
//! log or a `Referer`; the UI redeems it at once, which also makes it worthless), or
//! `/auth/signin#error=…`.

use std::{collections::HashMap, sync::Arc};

use axum::{
    Json,
    extract::{Path, Query, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use tabby_schema::oauth::OAuthProvider;

use crate::Webserver;

const COOKIE: &str = "tabby_oauth";

fn encode(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

/// A 303 to `location`, optionally setting (or, with `Some("")`, clearing) the flow cookie.
fn see_other(location: &str, cookie: Option<&str>) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(location) {
        headers.insert(header::LOCATION, value);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if let Some(cookie) = cookie {
        let max_age = if cookie.is_empty() { 0 } else { 600 };
        let value = format!(
            "{COOKIE}={cookie}; Path=/oauth/callback; Max-Age={max_age}; HttpOnly; SameSite=Lax"
        );
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(header::SET_COOKIE, value);
        }
    }
    response
}

fn fail(message: &str) -> Response {
    see_other(&format!("/auth/signin#error={}", encode(message)), Some(""))
}

fn flow_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
}

pub async fn providers(State(server): State<Arc<Webserver>>) -> Response {
    use tabby_schema::oauth::OAuthService as _;
    match server.services.oauth.providers().await {
        Ok(list) => Json(list.iter().map(|p| p.as_str()).collect::<Vec<_>>()).into_response(),
        Err(e) => {
            tracing::warn!("cannot list the sign-in providers: {e}");
            crate::edge::WebError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot list the sign-in providers",
            )
            .into_response()
        }
    }
}

pub async fn signin(
    State(server): State<Arc<Webserver>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(provider) = query.get("provider").and_then(|p| OAuthProvider::parse(p)) else {
        return fail("Unknown sign-in provider");
    };
    match server.services.oauth.start(provider).await {
        Ok(start) => see_other(&start.authorize_url, Some(&start.cookie)),
        Err(e) => fail(&e.to_string()),
    }
}

pub async fn callback(
    State(server): State<Arc<Webserver>>,
    Path(provider): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let Some(provider) = OAuthProvider::parse(&provider) else {
        return fail("Unknown sign-in provider");
    };
    if let Some(error) = query.get("error") {
        let detail = query
            .get("error_description")
            .map(|d| format!(": {d}"))
            .unwrap_or_default();
        let shown: String = format!("{error}{detail}").chars().take(300).collect();
        return fail(&format!("The provider did not sign you in ({shown})"));
    }
    let (Some(code), Some(state)) = (query.get("code"), query.get("state")) else {
        return fail("The provider's answer has no code or state");
    };
    let cookie = flow_cookie(&headers);
    match server
        .services
        .oauth
        .finish(provider, state, code, cookie.as_deref())
        .await
    {
        Ok(done) => see_other(
            &format!("/auth/signin#refresh_token={}", encode(&done.refresh_token)),
            Some(""),
        ),
        Err(e) => fail(&e.to_string()),
    }
}
