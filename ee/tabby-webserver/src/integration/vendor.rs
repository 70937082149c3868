//! Listing the repositories a token can see: GitHub's `GET /user/repos` (pages through the
//! `Link: <…>; rel="next"` header) and GitLab's `GET /api/v4/projects?membership=true` (pages
//! through `X-Next-Page`; projects of every subgroup the user is a member of come with it).
//! A refused token and rate limits are errors that say what to do; a next-page link to
//! another host is not followed.

use std::time::Duration;

use anyhow::{Context as _, bail};
use reqwest::{StatusCode, header::HeaderMap};
use serde_json::Value;
use tabby_db::VendorRepository;
use tabby_schema::integration::IntegrationKind;

const PER_PAGE: usize = 100;
/// 100 pages of 100: a token that sees more than 10,000 repositories is cut there.
const MAX_PAGES: usize = 100;
const MAX_PAGE_BYTES: usize = 16 << 20;

pub fn http_client() -> reqwest::Client {
    crate::outbound::client(Duration::from_secs(20))
}

/// The `rel="next"` URL of a `Link` header.
fn next_link(headers: &HeaderMap) -> Option<String> {
    let link = headers.get("link")?.to_str().ok()?;
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        params
            .split(';')
            .any(|p| p.trim() == "rel=\"next\"")
            .then(|| {
                url.trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_owned()
            })
    })
}

/// Why a page was refused, in words an admin can act on.
fn refusal(vendor: &str, status: StatusCode, headers: &HeaderMap) -> anyhow::Error {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if status == StatusCode::UNAUTHORIZED {
        return anyhow::anyhow!(
            "{vendor} refused the token (401): it was revoked, expired or mistyped; update the \
             integration with a new one"
        );
    }
    let limited = status == StatusCode::TOO_MANY_REQUESTS
        || (status == StatusCode::FORBIDDEN
            && (header("x-ratelimit-remaining") == Some("0") || header("retry-after").is_some()));
    if limited {
        let when = header("retry-after")
            .map(|s| format!("in {s} s"))
            .or_else(|| {
                header("x-ratelimit-reset")
                    .and_then(|t| t.parse::<i64>().ok())
                    .and_then(|t| chrono::DateTime::from_timestamp(t, 0))
                    .map(|t| format!("at {}", t.to_rfc3339()))
            })
            .unwrap_or_else(|| "later".into());
        return anyhow::anyhow!(
            "{vendor} is rate-limiting this token ({status}); the sync runs again {when} or at \
             the next hourly run"
        );
    }
    if status == StatusCode::FORBIDDEN {
        return anyhow::anyhow!(
            "{vendor} refused the request (403): the token lacks a scope (GitHub: repo; GitLab: \
             read_api)"
        );
    }
    anyhow::anyhow!("{vendor} answered {status}")
}

/// Every repository `token` can see through `api_base`.
pub async fn list_repositories(
    http: &reqwest::Client,
    kind: IntegrationKind,
    api_base: &str,
    token: &str,
) -> anyhow::Result<Vec<VendorRepository>> {
    let base = url::Url::parse(api_base).context("the API base is not a URL")?;
    let github = kind.is_github();
    let vendor = if github { "GitHub" } else { "GitLab" };
    let mut next = Some(if github {
        format!(
            "{}/user/repos?per_page={PER_PAGE}&sort=full_name",
            api_base.trim_end_matches('/')
        )
    } else {
        format!(
            "{}/api/v4/projects?membership=true&simple=true&per_page={PER_PAGE}&page=1",
            api_base.trim_end_matches('/')
        )
    });
    let mut out = Vec::new();
    for _ in 0..MAX_PAGES {
        let Some(url) = next.take() else {
            return Ok(out);
        };
        let parsed = url::Url::parse(&url).context("a next-page link is not a URL")?;
        if parsed.origin() != base.origin() {
            bail!(
                "{vendor} sent a next-page link to another host ({}); not followed",
                parsed.origin().ascii_serialization()
            );
        }
        let request = http.get(parsed);
        let request = if github {
            request
                .bearer_auth(token)
                .header("accept", "application/vnd.github+json")
        } else {
            request.header("private-token", token)
        };
        let response = request
            .send()
            .await
            .with_context(|| format!("cannot reach {vendor} at {api_base}"))?;
        let status = response.status();
        let headers = response.headers().clone();
        if !status.is_success() {
            return Err(refusal(vendor, status, &headers));
        }
        let bytes =
            crate::outbound::read_bounded(response, MAX_PAGE_BYTES, &format!("{vendor}'s page"))
                .await?;
        let page: Vec<Value> = serde_json::from_slice(&bytes)
            .with_context(|| format!("{vendor}'s page is not a JSON list"))?;
        for repo in &page {
            let (id, name, url) = if github {
                (&repo["id"], &repo["full_name"], &repo["clone_url"])
            } else {
                (
                    &repo["id"],
                    &repo["path_with_namespace"],
                    &repo["http_url_to_repo"],
                )
            };
            let (Some(name), Some(url)) = (name.as_str(), url.as_str()) else {
                continue;
            };
            let id = match id {
                Value::Number(n) => n.to_string(),
                Value::String(s) => s.clone(),
                _ => continue,
            };
            out.push(VendorRepository {
                vendor_id: id,
                name: name.to_owned(),
                git_url: url.to_owned(),
            });
        }
        next = if github {
            next_link(&headers)
        } else {
            headers
                .get("x-next-page")
                .and_then(|v| v.to_str().ok())
                .filter(|p| !p.trim().is_empty())
                .and_then(|p| p.trim().parse::<u32>().ok())
                .map(|p| {
                    format!(
                        "{}/api/v4/projects?membership=true&simple=true&per_page={PER_PAGE}&page={p}",
                        api_base.trim_end_matches('/')
                    )
                })
        };
    }
    if next.is_none() {
        return Ok(out);
    }
    bail!(
        "{vendor} lists more than {} repositories for this token; the sync stops there",
        MAX_PAGES * PER_PAGE
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_headers() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "link",
            r#"<https://api.github.com/user/repos?page=2>; rel="next", <https://api.github.com/user/repos?page=5>; rel="last""#
                .parse()
                .unwrap(),
        );
        assert_eq!(
            next_link(&headers).as_deref(),
            Some("https://api.github.com/user/repos?page=2")
        );
        headers.insert(
            "link",
            r#"<https://x/?page=1>; rel="prev""#.parse().unwrap(),
        );
        assert_eq!(next_link(&headers), None);
    }
}
