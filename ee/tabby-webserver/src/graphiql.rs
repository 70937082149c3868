//! `GET /graphiql`: the GraphiQL IDE from assets embedded in the binary (`ee/tabby-ui/vendor/
//! graphiql`: GraphiQL 3, React 18) with a bootstrap of our own (`ee/tabby-ui/graphiql`), so
//! the page loads nothing from another origin and runs under a CSP with `script-src 'self'`
//! and no inline script.

use axum::{
    extract::{Path, Request},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};

/// GraphiQL's CSS inlines its fonts and icons as `data:` URLs and sets inline styles.
pub const CSP: &str = "default-src 'self'; script-src 'self'; connect-src 'self'; \
                       img-src 'self' data:; font-src 'self' data:; \
                       style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; \
                       base-uri 'none'; form-action 'none'";

const PAGE: &[u8] = include_bytes!("../../tabby-ui/graphiql/index.html");

/// Served under `/graphiql/assets/{name}`.
const ASSETS: &[(&str, &[u8])] = &[
    (
        "graphiql-init.js",
        include_bytes!("../../tabby-ui/graphiql/graphiql-init.js"),
    ),
    (
        "graphiql-page.css",
        include_bytes!("../../tabby-ui/graphiql/graphiql-page.css"),
    ),
    (
        "graphiql.min.js",
        include_bytes!("../../tabby-ui/vendor/graphiql/graphiql.min.js"),
    ),
    (
        "graphiql.min.css",
        include_bytes!("../../tabby-ui/vendor/graphiql/graphiql.min.css"),
    ),
    (
        "react.production.min.js",
        include_bytes!("../../tabby-ui/vendor/graphiql/react.production.min.js"),
    ),
    (
        "react-dom.production.min.js",
        include_bytes!("../../tabby-ui/vendor/graphiql/react-dom.production.min.js"),
    ),
];

/// Every response carries the CSP, scripts included (harmless there, and simple to check).
fn embedded(req: &Request, name: &str, bytes: &'static [u8]) -> Response {
    let mut response = crate::ui::respond_with(req, StatusCode::OK, name, bytes, CSP);
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    response
}

pub async fn page(req: Request) -> Response {
    embedded(&req, "index.html", PAGE)
}

pub async fn asset(Path(name): Path<String>, req: Request) -> Response {
    match ASSETS.iter().find(|(n, _)| *n == name) {
        Some((name, bytes)) => embedded(&req, name, bytes),
        None => (
            StatusCode::NOT_FOUND,
            axum::Json(serde_json::json!({"error": format!("no GraphiQL asset {name}")})),
        )
            .into_response(),
    }
}
