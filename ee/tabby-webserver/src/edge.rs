//! The web layer's HTTP edge: the one place that reads a request's credentials and the one
//! error body every REST route of this crate answers with.

use axum::http::{HeaderMap, header};

/// The token of `Authorization: Bearer <token>` (the scheme in any case, RFC 7235), trimmed;
/// `None` when the header is missing, not text, another scheme, or empty. Tokens are read
/// from this header only: never from a query string, where proxies and logs keep them.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim_start().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
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
    }
}
