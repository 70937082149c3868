//! The web layer's HTTP edge: the one place that reads a request's credentials and the one
//! error body every REST route of this crate answers with.

use std::borrow::Cow;

use axum::{
    Json,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};

/// An `Authorization` value split at its first space: `(scheme, token)`, the token trimmed
/// and not empty.
pub fn parse_authorization(value: &str) -> Option<(&str, &str)> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    let token = token.trim();
    (!token.is_empty()).then_some((scheme, token))
}

/// The token of an `Authorization` value `Bearer <token>` (the scheme in any case, RFC 7235).
pub fn bearer_value(value: &str) -> Option<&str> {
    parse_authorization(value)
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token)
}

/// The token of `Authorization: Bearer <token>`; `None` when the header is missing, not text,
/// another scheme, or empty. Tokens are read from this header only (and from the WebSocket's
/// `connection_init`), never from a query string, where proxies and logs keep them.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    bearer_value(headers.get(header::AUTHORIZATION)?.to_str().ok()?)
}

/// The token of `Authorization: <any scheme> <token>`: the editors' `/v1*` routes take any
/// scheme word, as upstream does, so editors configured with e.g. `Token` keep working.
pub fn editor_token(headers: &HeaderMap) -> Option<&str> {
    parse_authorization(headers.get(header::AUTHORIZATION)?.to_str().ok()?).map(|(_, t)| t)
}

/// A refusal or failure of this crate's REST routes: `{"error": "<message>"}` with its status,
/// `WWW-Authenticate` on a 401, and `Connection: close` when the request's body may still be
/// on its way (see [`WebError::closing`]).
#[derive(Debug)]
pub struct WebError {
    pub status: StatusCode,
    pub message: Cow<'static, str>,
    close: bool,
    retry_after: Option<u32>,
}

impl WebError {
    pub fn new(status: StatusCode, message: impl Into<Cow<'static, str>>) -> Self {
        WebError {
            status,
            message: message.into(),
            close: false,
            retry_after: None,
        }
    }

    pub fn unauthorized(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, message)
    }

    pub fn not_found(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// A refusal answered before the body was read: the connection cannot carry another
    /// request, and `Connection: close` says so (instead of a pooled client finding out with
    /// a broken pipe on its next request).
    pub fn closing(mut self) -> Self {
        self.close = true;
        self
    }

    pub fn retry_after(mut self, seconds: u32) -> Self {
        self.retry_after = Some(seconds);
        self
    }
}

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            Json(serde_json::json!({ "error": self.message })),
        )
            .into_response();
        let headers = response.headers_mut();
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"tabby\""),
            );
        }
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.close {
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn with(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn bearer_tokens() {
        assert_eq!(bearer_token(&with("Bearer auth_abc")), Some("auth_abc"));
        assert_eq!(bearer_token(&with("bearer  auth_abc ")), Some("auth_abc"));
        assert_eq!(bearer_token(&with("BEARER auth_abc")), Some("auth_abc"));
        for refused in [
            "Basic dXNlcjpwdw==",
            "Bearer",
            "Bearer   ",
            "auth_abc",
            "Bearerauth_abc",
        ] {
            assert_eq!(bearer_token(&with(refused)), None, "{refused}");
        }
        assert_eq!(bearer_token(&HeaderMap::new()), None);
        assert_eq!(editor_token(&with("Token auth_abc")), Some("auth_abc"));
        assert_eq!(editor_token(&with("Bearer auth_abc")), Some("auth_abc"));
        assert_eq!(editor_token(&with("auth_abc")), None);
        assert_eq!(editor_token(&with("Token ")), None);
    }

    #[tokio::test]
    async fn errors_are_one_json_body() {
        let response = WebError::unauthorized("missing token")
            .closing()
            .into_response();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(response.headers()[header::CONNECTION], "close");
        assert!(response.headers().contains_key(header::WWW_AUTHENTICATE));
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        assert_eq!(body, r#"{"error":"missing token"}"#);
        let response = WebError::new(StatusCode::TOO_MANY_REQUESTS, "slow down")
            .retry_after(1)
            .into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        assert!(!response.headers().contains_key(header::CONNECTION));
    }
}
