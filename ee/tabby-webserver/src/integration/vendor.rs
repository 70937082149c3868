//! The vendors' REST APIs: the repositories a token can see (GitHub's `GET /user/repos`,
//! GitLab's `GET /api/v4/projects?membership=true`, which includes the projects of every
//! subgroup the user is a member of), and a repository's issues and pull/merge requests with
//! their changed files. Lists page through `Link: <…>; rel="next"` (GitHub) or
//! `X-Next-Page` (GitLab).
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

/// One integration's API: its kind, base URL and token.
pub struct Api<'a> {
    pub http: &'a reqwest::Client,
    pub kind: IntegrationKind,
    pub base: &'a str,
    pub token: &'a str,
}

impl Api<'_> {
    fn vendor(&self) -> &'static str {
        if self.kind.is_github() {
            "GitHub"
        } else {
            "GitLab"
        }
    }

    fn url(&self, path_and_query: &str) -> String {
        format!("{}{path_and_query}", self.base.trim_end_matches('/'))
    }

    /// Reads the pages of a list from `first`, following `Link: rel="next"` (GitHub) or
    /// `X-Next-Page` (GitLab) on the base's origin only, handing each page's items to
    /// `on_page` until it answers `false`. Errors past [`MAX_PAGES`] pages when `strict`.
    async fn pages(
        &self,
        first: String,
        strict: bool,
        mut on_page: impl FnMut(Vec<Value>) -> anyhow::Result<bool>,
    ) -> anyhow::Result<()> {
        let base = url::Url::parse(self.base).context("the API base is not a URL")?;
        let vendor = self.vendor();
        let mut next = Some(first);
        for _ in 0..MAX_PAGES {
            let Some(url) = next.take() else {
                return Ok(());
            };
            let parsed = url::Url::parse(&url).context("a next-page link is not a URL")?;
            if parsed.origin() != base.origin() {
                bail!(
                    "{vendor} sent a next-page link to another host ({}); not followed",
                    parsed.origin().ascii_serialization()
                );
            }
            let request = self.http.get(parsed.clone());
            let request = if self.kind.is_github() {
                request
                    .bearer_auth(self.token)
                    .header("accept", "application/vnd.github+json")
            } else {
                request.header("private-token", self.token)
            };
            let response = request
                .send()
                .await
                .with_context(|| format!("cannot reach {vendor} at {}", self.base))?;
            let status = response.status();
            let headers = response.headers().clone();
            if !status.is_success() {
                return Err(refusal(vendor, status, &headers));
            }
            let bytes = crate::outbound::read_bounded(
                response,
                MAX_PAGE_BYTES,
                &format!("{vendor}'s page"),
            )
            .await?;
            let page: Vec<Value> = serde_json::from_slice(&bytes)
                .with_context(|| format!("{vendor}'s page is not a JSON list"))?;
            if !on_page(page)? {
                return Ok(());
            }
            next = if self.kind.is_github() {
                next_link(&headers)
            } else {
                headers
                    .get("x-next-page")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|p| p.trim().parse::<u32>().ok())
                    .map(|p| with_page(&parsed, p))
            };
        }
        if next.is_none() || !strict {
            return Ok(());
        }
        bail!(
            "{vendor} lists more than {} items here; the sync stops there",
            MAX_PAGES * PER_PAGE
        )
    }
}

/// `url` with its `page` parameter set to `page`.
fn with_page(url: &url::Url, page: u32) -> String {
    let mut url = url.clone();
    let kept: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(k, _)| k != "page")
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    url.query_pairs_mut()
        .clear()
        .extend_pairs(kept)
        .append_pair("page", &page.to_string());
    url.to_string()
}

fn vendor_id(value: &Value) -> Option<String> {
    match value {
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// Every repository `token` can see through `api_base`.
pub async fn list_repositories(
    http: &reqwest::Client,
    kind: IntegrationKind,
    api_base: &str,
    token: &str,
) -> anyhow::Result<Vec<VendorRepository>> {
    let api = Api {
        http,
        kind,
        base: api_base,
        token,
    };
    let github = kind.is_github();
    let first = if github {
        api.url(&format!("/user/repos?per_page={PER_PAGE}&sort=full_name"))
    } else {
        api.url(&format!(
            "/api/v4/projects?membership=true&simple=true&per_page={PER_PAGE}&page=1"
        ))
    };
    let mut out = Vec::new();
    api.pages(first, true, |page| {
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
            let (Some(name), Some(url), Some(id)) = (name.as_str(), url.as_str(), vendor_id(id))
            else {
                continue;
            };
            out.push(VendorRepository {
                vendor_id: id,
                name: name.to_owned(),
                git_url: url.to_owned(),
            });
        }
        Ok(true)
    })
    .await?;
    Ok(out)
}

/// An issue or a pull/merge request as the doc corpus takes it.
#[derive(Clone, Debug, PartialEq)]
pub struct VendorDoc {
    /// `issue` or `pull`.
    pub kind: &'static str,
    /// The number within the repository (GitHub `number`, GitLab `iid`).
    pub number: String,
    pub title: String,
    pub link: String,
    pub author: Option<String>,
    pub body: String,
    /// Issues: closed. Pulls: merged.
    pub done: bool,
    /// Pulls: the patch summary.
    pub diff: String,
}

/// Characters of an issue's or pull request's description kept.
pub const MAX_BODY_CHARS: usize = 16 * 1024;
/// Bytes of a pull request's patch summary.
pub const MAX_DIFF_BYTES: usize = 8 * 1024;
/// Pull requests whose changed files are read per run (one request each); later ones are
/// indexed without their patch summary.
pub const MAX_DIFFS_PER_RUN: usize = 200;

fn text(value: &Value) -> String {
    let s = value.as_str().unwrap_or_default();
    s.chars().take(MAX_BODY_CHARS).collect()
}

/// A changed file: its path, lines added and removed (when the vendor says), its patch.
type ChangedFile = (String, Option<(u64, u64)>, String);

/// The changed files (`path (+added -removed)`), then as much of each patch as fits.
fn patch_summary(files: &[ChangedFile]) -> String {
    let mut out = String::new();
    for (path, counts, _) in files {
        match counts {
            Some((added, removed)) => out.push_str(&format!("{path} (+{added} -{removed})\n")),
            None => out.push_str(&format!("{path}\n")),
        }
    }
    for (path, _, patch) in files {
        if out.len() >= MAX_DIFF_BYTES {
            break;
        }
        if patch.is_empty() {
            continue;
        }
        out.push_str(&format!("\n--- {path}\n{patch}\n"));
    }
    if out.len() > MAX_DIFF_BYTES {
        let mut cut = MAX_DIFF_BYTES;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
    }
    out
}

/// Where the fields of an issue or pull request are in each vendor's JSON.
struct Shape {
    number: &'static str,
    link: &'static str,
    author: [&'static str; 2],
    body: &'static str,
}

const GITHUB_SHAPE: Shape = Shape {
    number: "number",
    link: "html_url",
    author: ["user", "login"],
    body: "body",
};
const GITLAB_SHAPE: Shape = Shape {
    number: "iid",
    link: "web_url",
    author: ["author", "username"],
    body: "description",
};

impl Shape {
    fn doc(&self, kind: &'static str, item: &Value) -> Option<VendorDoc> {
        let done = match kind {
            // GitHub and GitLab both say when a pull was merged; GitLab also by its state.
            "pull" => !item["merged_at"].is_null() || item["state"] == "merged",
            _ => item["state"] == "closed",
        };
        Some(VendorDoc {
            kind,
            number: vendor_id(&item[self.number])?,
            title: text(&item["title"]),
            link: text(&item[self.link]),
            author: item[self.author[0]][self.author[1]]
                .as_str()
                .map(str::to_owned),
            body: text(&item[self.body]),
            done,
            diff: String::new(),
        })
    }
}

/// `owner/repo` as a URL path, or an error for a name that is not one (a `..` segment would
/// send the token to another path of the API).
fn github_repo_path(name: &str) -> anyhow::Result<String> {
    let segment_ok = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    match name.split_once('/') {
        Some((owner, repo)) if segment_ok(owner) && segment_ok(repo) => Ok(name.to_owned()),
        _ => bail!("{name:?} is not a GitHub owner/repository name"),
    }
}

/// Issues and pull/merge requests of the repository `name` (GitHub: `owner/repo`) or project
/// `project_id` (GitLab) changed since `since` (all of them when `None`).
pub async fn list_documents(
    api: &Api<'_>,
    name: &str,
    project_id: &str,
    since: Option<chrono::DateTime<chrono::Utc>>,
) -> anyhow::Result<Vec<VendorDoc>> {
    let since_param = since.map(|t| {
        url::form_urlencoded::byte_serialize(
            t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                .as_bytes(),
        )
        .collect::<String>()
    });
    let (shape, issues_url, pulls_url, files_url) = if api.kind.is_github() {
        let repo = github_repo_path(name)?;
        let since = since_param
            .map(|s| format!("&since={s}"))
            .unwrap_or_default();
        (
            GITHUB_SHAPE,
            format!(
                "/repos/{repo}/issues?state=all&sort=updated&direction=asc&per_page={PER_PAGE}{since}"
            ),
            // Newest first, read until one older than `since` (this list takes no `since`).
            format!(
                "/repos/{repo}/pulls?state=all&sort=updated&direction=desc&per_page={PER_PAGE}"
            ),
            format!("/repos/{repo}/pulls/{{n}}/files?per_page={PER_PAGE}"),
        )
    } else {
        if project_id.is_empty() || !project_id.chars().all(|c| c.is_ascii_digit()) {
            bail!("{project_id:?} is not a GitLab project id");
        }
        let after = since_param
            .map(|s| format!("&updated_after={s}"))
            .unwrap_or_default();
        let project = format!("/api/v4/projects/{project_id}");
        (
            GITLAB_SHAPE,
            format!("{project}/issues?scope=all&per_page={PER_PAGE}&page=1{after}"),
            format!(
                "{project}/merge_requests?state=all&scope=all&per_page={PER_PAGE}&page=1{after}"
            ),
            format!("{project}/merge_requests/{{n}}/diffs?per_page={PER_PAGE}&page=1"),
        )
    };
    let mut docs = Vec::new();
    api.pages(api.url(&issues_url), false, |page| {
        // GitHub's issues list holds pull requests too; they come from their own list.
        docs.extend(
            page.iter()
                .filter(|issue| issue["pull_request"].is_null())
                .filter_map(|issue| shape.doc("issue", issue)),
        );
        Ok(true)
    })
    .await?;
    let mut pulls = Vec::new();
    api.pages(api.url(&pulls_url), false, |page| {
        for pull in &page {
            let updated = pull["updated_at"]
                .as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
            if let (Some(since), Some(updated)) = (since, updated)
                && updated < since
            {
                return Ok(false);
            }
            pulls.extend(shape.doc("pull", pull));
        }
        Ok(true)
    })
    .await?;
    for pull in pulls.iter_mut().take(MAX_DIFFS_PER_RUN) {
        let mut files = Vec::new();
        api.pages(
            api.url(&files_url.replace("{n}", &pull.number)),
            false,
            |page| {
                for file in &page {
                    // GitHub: filename, additions, deletions, patch. GitLab: new_path, diff.
                    let path = file.get("filename").unwrap_or(&file["new_path"]);
                    let counts = file["additions"].as_u64().zip(file["deletions"].as_u64());
                    let patch = file.get("patch").unwrap_or(&file["diff"]);
                    files.push((text(path), counts, text(patch)));
                }
                // The first page (100 files) is enough for a summary.
                Ok(false)
            },
        )
        .await?;
        pull.diff = patch_summary(&files);
    }
    docs.extend(pulls);
    Ok(docs)
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

    #[test]
    fn repository_names_cannot_leave_their_api_path() {
        assert_eq!(github_repo_path("octo/app.rs").unwrap(), "octo/app.rs");
        for bad in [
            "octo",
            "../admin",
            "octo/..",
            "octo/a/b",
            "octo/a?x=1",
            "octo/a%2F..",
            "/a",
            "a/",
        ] {
            assert!(github_repo_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn both_vendors_shapes_read_issues_and_pulls() {
        let gh = serde_json::json!({"number": 5, "title": "T", "html_url": "L", "user": {"login": "u"},
            "body": null, "state": "closed", "merged_at": "2026-01-01T00:00:00Z"});
        let issue = GITHUB_SHAPE.doc("issue", &gh).unwrap();
        assert_eq!(
            (issue.number.as_str(), issue.done, issue.body.as_str()),
            ("5", true, "")
        );
        assert!(GITHUB_SHAPE.doc("pull", &gh).unwrap().done);
        let gl = serde_json::json!({"iid": "9", "title": "T", "web_url": "L", "author": {"username": "v"},
            "description": "D", "state": "opened", "merged_at": null});
        let issue = GITLAB_SHAPE.doc("issue", &gl).unwrap();
        assert_eq!(
            (issue.number.as_str(), issue.done, issue.author.as_deref()),
            ("9", false, Some("v"))
        );
        assert!(!GITLAB_SHAPE.doc("pull", &gl).unwrap().done);
        assert!(
            GITLAB_SHAPE
                .doc("issue", &serde_json::json!({"title": "no id"}))
                .is_none()
        );
    }

    #[test]
    fn gitlab_pages_keep_the_query() {
        let url = url::Url::parse(
            "https://gl.example/api/v4/projects/5/issues?per_page=100&page=1&updated_after=x",
        )
        .unwrap();
        assert_eq!(
            with_page(&url, 3),
            "https://gl.example/api/v4/projects/5/issues?per_page=100&updated_after=x&page=3"
        );
    }

    #[test]
    fn patch_summaries_list_the_files_then_fit_the_patches() {
        let files = vec![
            (
                "src/a.rs".to_string(),
                Some((3, 1)),
                "@@ -1 +1 @@\n-x\n+y".to_string(),
            ),
            (
                "README.md".to_string(),
                None,
                "x".repeat(3 * MAX_DIFF_BYTES),
            ),
        ];
        let summary = patch_summary(&files);
        assert!(
            summary.starts_with("src/a.rs (+3 -1)\nREADME.md\n"),
            "{summary}"
        );
        assert!(summary.contains("--- src/a.rs\n@@ -1 +1 @@"));
        assert_eq!(summary.len(), MAX_DIFF_BYTES);
    }
}
