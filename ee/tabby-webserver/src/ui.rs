//! The web UI, embedded at compile time from `ee/tabby-ui` and served as the router's
//! fallback: known files by name (with their content type and an ETag), page routes of the
//! single-page app as `index.html`, and a 404 page for anything else. API-looking paths keep
//! the JSON 404 of the REST API.

use axum::{
    extract::Request,
    http::{HeaderValue, Method, StatusCode, header},
    response::{IntoResponse, Response},
};
use sha2::{Digest, Sha256};

use crate::edge::WebError;

include!(concat!(env!("OUT_DIR"), "/ui_assets.rs"));

fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("txt") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

fn asset(name: &str) -> Option<&'static [u8]> {
    UI_ASSETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, bytes)| *bytes)
}

fn etag(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    format!(
        "\"{}\"",
        digest[..12]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    )
}

/// Paths that belong to the APIs, never to the UI.
fn is_api(path: &str) -> bool {
    [
        "/v1",
        "/graphql",
        "/graphiql",
        "/subscriptions",
        "/api-docs",
        "/metrics",
        "/background-jobs",
        "/oauth",
        "/repositories",
    ]
    .iter()
    .any(|prefix| path == *prefix || path.starts_with(&format!("{prefix}/")))
        || path.starts_with("/v1beta")
}

/// Page routes of the app (served as `index.html`; the app routes on the client).
fn is_page(path: &str) -> bool {
    const PAGES: [&str; 20] = [
        "/",
        "/chat",
        "/threads",
        "/browse",
        "/profile",
        "/usage",
        "/jobs",
        "/auth/signin",
        "/auth/signup",
        "/auth/forgot-password",
        "/auth/reset-password",
        "/settings/team",
        "/settings/mail",
        "/settings/integrations",
        "/settings/security",
        "/settings/ldap",
        "/settings/oauth",
        "/settings/groups",
        "/settings/repositories",
        "/settings/documents",
    ];
    PAGES.contains(&path)
        || path
            .strip_prefix("/threads/")
            .is_some_and(|id| !id.is_empty() && !id.contains('/'))
}

/// The UI's pages: same-origin scripts and connections only, never framed.
const CSP: &str = "default-src 'self'; connect-src 'self'; img-src 'self' data:; \
                   style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; \
                   form-action 'self'";

fn respond(req: &Request, status: StatusCode, name: &str, bytes: &'static [u8]) -> Response {
    respond_with(req, status, name, bytes, CSP)
}

/// An embedded file with its content type, ETag and `no-cache`; HTML also gets `csp` and
/// `X-Frame-Options: DENY`.
pub(crate) fn respond_with(
    req: &Request,
    status: StatusCode,
    name: &str,
    bytes: &'static [u8],
    csp: &'static str,
) -> Response {
    let tag = etag(bytes);
    let cached = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == tag);
    let mut response = if cached && status == StatusCode::OK {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (status, bytes).into_response()
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(name)),
    );
    // Revalidate every time (cheap with the ETag): the files have no content hash in their
    // names, and a new server version must never run an old script.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(value) = HeaderValue::from_str(&tag) {
        headers.insert(header::ETAG, value);
    }
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if name.ends_with(".html") {
        headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(csp),
        );
        // Sign-up and reset links carry their code in the query: never pass it on.
        headers.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
    }
    response
}

/// The fallback of the whole router.
pub async fn fallback(req: Request) -> Response {
    let path = req.uri().path().to_string();
    if is_api(&path) {
        return WebError::not_found(format!("no route for {} {path}", req.method()))
            .into_response();
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return WebError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed").into_response();
    }
    let name = path.trim_start_matches('/');
    if !name.contains('/')
        && !name.is_empty()
        && name != "index.html"
        && let Some(bytes) = asset(name)
    {
        return respond(&req, StatusCode::OK, name, bytes);
    }
    if is_page(&path) {
        return respond(
            &req,
            StatusCode::OK,
            "index.html",
            asset("index.html").unwrap_or(b""),
        );
    }
    respond(
        &req,
        StatusCode::NOT_FOUND,
        "404.html",
        asset("404.html").unwrap_or(b"not found"),
    )
}

#[cfg(test)]
mod tests {
    use axum::body::Body;

    use super::*;

    async fn get(path: &str) -> Response {
        fallback(Request::builder().uri(path).body(Body::empty()).unwrap()).await
    }

    #[tokio::test]
    async fn assets_pages_api_and_not_found() {
        for (path, status, kind) in [
            ("/", 200, "text/html"),
            ("/threads/abc123", 200, "text/html"),
            ("/settings/team", 200, "text/html"),
            ("/app.js", 200, "text/javascript"),
            ("/style.css", 200, "text/css"),
            ("/favicon.svg", 200, "image/svg+xml"),
            ("/nope", 404, "text/html"),
            ("/threads/a/b", 404, "text/html"),
            ("/v1/nope", 404, "application/json"),
            ("/v1beta/nope", 404, "application/json"),
        ] {
            let response = get(path).await;
            assert_eq!(response.status().as_u16(), status, "{path}");
            let ct = response.headers()[header::CONTENT_TYPE].to_str().unwrap();
            assert!(ct.starts_with(kind), "{path}: {ct}");
        }
        let first = get("/app.js").await;
        let tag = first.headers()[header::ETAG].clone();
        let again = fallback(
            Request::builder()
                .uri("/app.js")
                .header(header::IF_NONE_MATCH, tag)
                .body(Body::empty())
                .unwrap(),
        )
        .await;
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        assert!(UI_ASSETS.iter().any(|(n, _)| *n == "index.html"));
    }
}
