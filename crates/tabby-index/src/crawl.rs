//! A small, bounded web crawler for the structured-doc corpus.
//!
//! `<url>/llms-full.txt` is tried first (a site's own plain-text dump for language models);
//! otherwise pages are fetched breadth-first from the start URL, following only links under
//! the URL prefix (by default the start URL's directory), up to a link depth and a page count.
//! HTML becomes text with a tolerant tag scanner of our own: scripts, styles and other
//! non-content elements are dropped, block elements become line breaks, entities are decoded.
//!
//! Every request goes through a [`FetchGuard`]: the start page and every redirect hop are
//! checked (no loopback, private, link-local or metadata address unless allow-listed), the
//! connection is pinned to the checked addresses, and a redirect to another host is never
//! followed.

use std::{
    collections::{HashSet, VecDeque},
    time::Duration,
};

use anyhow::{Context, bail};
use url::Url;

pub use crate::fetch_guard::{FetchGuard, HostResolver, SystemResolver};

/// Redirect hops followed for one page.
const MAX_REDIRECTS: usize = 10;

#[derive(Clone, Copy, Debug)]
pub struct CrawlLimits {
    /// Links followed from the start page (0: the start page only).
    pub max_depth: usize,
    pub max_pages: usize,
    /// Larger responses are skipped.
    pub max_page_bytes: usize,
    pub request_timeout: Duration,
}

impl Default for CrawlLimits {
    fn default() -> Self {
        Self {
            max_depth: 3,
            max_pages: 200,
            max_page_bytes: 4 * 1024 * 1024,
            request_timeout: Duration::from_secs(30),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Page {
    pub url: String,
    pub title: String,
    pub text: String,
}

/// The text of an HTML document, its title and the targets of its links (as written).
#[derive(Debug, Default, PartialEq)]
pub struct HtmlDocument {
    pub title: String,
    pub text: String,
    pub links: Vec<String>,
}

const SKIPPED: [&str; 8] = [
    "script", "style", "noscript", "svg", "template", "head", "iframe", "canvas",
];
const BLOCKS: [&str; 30] = [
    "p",
    "div",
    "br",
    "li",
    "ul",
    "ol",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "tr",
    "td",
    "th",
    "table",
    "section",
    "article",
    "header",
    "footer",
    "nav",
    "pre",
    "blockquote",
    "hr",
    "main",
    "aside",
    "dt",
    "dd",
    "figure",
    "form",
];

fn decode_entities(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let end = rest[..rest.len().min(12)].find(';');
        let decoded = end.and_then(|end| {
            let name = &rest[1..end];
            let c = match name {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" | "#39" => Some('\''),
                "nbsp" => Some(' '),
                _ => name
                    .strip_prefix("#x")
                    .or_else(|| name.strip_prefix("#X"))
                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                    .or_else(|| name.strip_prefix('#').and_then(|d| d.parse().ok()))
                    .and_then(char::from_u32),
            }?;
            Some((c, end + 1))
        });
        match decoded {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The value of attribute `name` in a tag's inside (`a href="x" class=y`).
fn attribute(tag: &str, name: &str) -> Option<String> {
    let lower = tag.to_ascii_lowercase();
    let mut from = 0;
    while let Some(found) = lower[from..].find(name) {
        let at = from + found;
        from = at + name.len();
        let before_ok = at == 0 || lower.as_bytes()[at - 1].is_ascii_whitespace();
        let after = lower[from..].trim_start();
        if !before_ok || !after.starts_with('=') {
            continue;
        }
        let value_start = tag.len() - after.len() + 1;
        let value = tag[value_start..].trim_start();
        let parsed = match value.chars().next()? {
            q @ ('"' | '\'') => value[1..].split(q).next()?.to_string(),
            _ => value
                .split(|c: char| c.is_whitespace() || c == '>')
                .next()?
                .to_string(),
        };
        return Some(decode_entities(&parsed));
    }
    None
}

/// Parses HTML leniently into text, title and links.
pub fn parse_html(html: &str) -> HtmlDocument {
    let mut doc = HtmlDocument::default();
    let mut text = String::new();
    let mut title = String::new();
    let mut in_title = false;
    let mut rest = html;
    while !rest.is_empty() {
        let Some(lt) = rest.find('<') else {
            text.push_str(&decode_entities(rest));
            break;
        };
        let chunk = decode_entities(&rest[..lt]);
        if in_title {
            title.push_str(&chunk);
        } else {
            text.push_str(&chunk);
        }
        rest = &rest[lt..];
        if rest.starts_with("<!--") {
            rest = rest.find("-->").map_or("", |end| &rest[end + 3..]);
            continue;
        }
        let Some(gt) = rest.find('>') else {
            break;
        };
        let inside = &rest[1..gt];
        rest = &rest[gt + 1..];
        let closing = inside.starts_with('/');
        let name: String = inside
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        if name == "title" {
            in_title = !closing;
            continue;
        }
        if !closing && SKIPPED.contains(&name.as_str()) && !inside.ends_with('/') {
            // Skip to the matching close tag (a <title> inside <head> is still read).
            let close = format!("</{name}");
            let lower = rest.to_ascii_lowercase();
            if name == "head"
                && let Some(t) = lower.find("<title")
                && lower.find(&close).is_none_or(|c| t < c)
            {
                let after = &rest[t..];
                if let (Some(open_end), Some(close_at)) =
                    (after.find('>'), after.to_ascii_lowercase().find("</title"))
                    && open_end < close_at
                {
                    title.push_str(&decode_entities(&after[open_end + 1..close_at]));
                }
            }
            rest = match lower.find(&close) {
                Some(at) => rest[at..].find('>').map_or("", |end| &rest[at + end + 1..]),
                None => "",
            };
            continue;
        }
        if name == "a"
            && !closing
            && let Some(href) = attribute(inside, "href")
        {
            doc.links.push(href);
        }
        if BLOCKS.contains(&name.as_str()) {
            text.push('\n');
        }
    }
    doc.title = title.split_whitespace().collect::<Vec<_>>().join(" ");
    let lines: Vec<String> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .collect();
    doc.text = lines.join("\n");
    doc
}

/// Where links may lead: the given prefix, else the start URL up to its last `/`.
fn default_prefix(start: &Url) -> String {
    let s = start.as_str();
    let path_start = s.find(start.path()).unwrap_or(s.len());
    match s[path_start..].rfind('/') {
        Some(slash) => s[..path_start + slash + 1].to_string(),
        None => format!("{s}/"),
    }
}

/// The response's URL (after redirects), content type and body; `None` when it is not a
/// success or is too large.
/// Whether `url` is under `prefix` (a plain string prefix, normalized by [`normalize_prefix`]).
fn within(url: &str, prefix: &str) -> bool {
    url.starts_with(prefix)
}

/// A prefix in URL form: a bare origin gets its `/` (`http://h:4000` must not cover
/// `http://h:40001/…`); anything else is kept as written.
fn normalize_prefix(prefix: &str) -> String {
    match Url::parse(prefix) {
        Ok(url) if url.path() == "/" && !prefix.ends_with('/') && url.query().is_none() => {
            url.to_string()
        }
        _ => prefix.to_string(),
    }
}

/// `llms-full.txt` next to the start page: in the start URL's directory when it names a file
/// (`/docs/index.html` → `/docs/llms-full.txt`), else under it (`/docs` → `/docs/llms-full.txt`).
fn llms_full_txt(start: &Url) -> anyhow::Result<Url> {
    let path = start.path();
    let last = path.rsplit('/').next().unwrap_or_default();
    let base = if path.ends_with('/') || last.contains('.') {
        default_prefix(start)
    } else {
        format!(
            "{}/",
            start
                .as_str()
                .split(['?', '#'])
                .next()
                .unwrap_or_default()
                .trim_end_matches('/')
        )
    };
    Ok(Url::parse(&base)?.join("llms-full.txt")?)
}

/// Whether `a` and `b` are the same host and port (a redirect may not leave it).
fn same_host(a: &Url, b: &Url) -> bool {
    a.host_str() == b.host_str() && a.port_or_known_default() == b.port_or_known_default()
}

async fn fetch(
    client: &reqwest::Client,
    guard: &FetchGuard,
    url: &Url,
    limits: &CrawlLimits,
) -> anyhow::Result<Option<(Url, String, String)>> {
    let mut current = url.clone();
    let mut hops = 0;
    let response = loop {
        guard.check(&current).await?;
        let response = client.get(current.clone()).send().await?;
        if !response.status().is_redirection() {
            break response;
        }
        let Some(location) = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
        else {
            return Ok(None);
        };
        let next = current
            .join(location)
            .with_context(|| format!("{current} redirects to an invalid URL"))?;
        if !same_host(&current, &next) {
            bail!(
                "it redirects to another host ({}), which is not followed",
                next.host_str().unwrap_or_default()
            );
        }
        hops += 1;
        if hops > MAX_REDIRECTS {
            bail!("more than {MAX_REDIRECTS} redirects");
        }
        current = next;
    };
    let final_url = current;
    if !response.status().is_success() {
        return Ok(None);
    }
    if response
        .content_length()
        .is_some_and(|n| n as usize > limits.max_page_bytes)
    {
        return Ok(None);
    }
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let bytes = response.bytes().await?;
    if bytes.len() > limits.max_page_bytes {
        return Ok(None);
    }
    Ok(Some((
        final_url,
        content_type,
        String::from_utf8_lossy(&bytes).into_owned(),
    )))
}

/// Crawls `start` within `prefix` (see the module doc), reaching only what `guard` allows.
/// `log` receives one line per page. A start page the guard refuses is an error that says why.
pub async fn crawl(
    start: &str,
    prefix: Option<&str>,
    limits: CrawlLimits,
    guard: &FetchGuard,
    log: &(dyn Fn(&str) + Send + Sync),
) -> anyhow::Result<Vec<Page>> {
    let start_url = Url::parse(start).with_context(|| format!("{start:?} is not a URL"))?;
    if !matches!(start_url.scheme(), "http" | "https") {
        bail!("only http(s) URLs can be crawled, not {start}");
    }
    guard
        .check(&start_url)
        .await
        .with_context(|| format!("cannot crawl {start_url}"))?;
    let client = guard.client(
        reqwest::Client::builder()
            .timeout(limits.request_timeout)
            .user_agent(concat!("tabby-rs-crawler/", env!("CARGO_PKG_VERSION"))),
    )?;

    let llms = llms_full_txt(&start_url)?;
    if let Ok(Some((_, content_type, text))) = fetch(&client, guard, &llms, &limits).await
        && (content_type.starts_with("text/plain") || content_type.starts_with("text/markdown"))
        && !text.trim().is_empty()
    {
        log(&format!("using {llms}"));
        let title = text
            .lines()
            .find_map(|l| l.strip_prefix("# "))
            .map(str::trim)
            .unwrap_or_else(|| start_url.host_str().unwrap_or(start))
            .to_string();
        return Ok(vec![Page {
            url: llms.to_string(),
            title,
            text: text.trim().to_string(),
        }]);
    }

    let prefix = prefix
        .map(normalize_prefix)
        .unwrap_or_else(|| default_prefix(&start_url));
    let mut queue = VecDeque::from([(start_url.clone(), 0usize)]);
    let mut seen: HashSet<String> = HashSet::from([start_url.to_string()]);
    let mut pages = Vec::new();
    while let Some((url, depth)) = queue.pop_front() {
        if pages.len() >= limits.max_pages {
            break;
        }
        let (base, content_type, body) = match fetch(&client, guard, &url, &limits).await {
            // A redirect out of the prefix (or to another site) is not followed (the start
            // page itself is always read).
            Ok(Some(page)) if depth > 0 && !within(page.0.as_str(), &prefix) => {
                log(&format!("skipped {url}: it redirects outside {prefix}"));
                continue;
            }
            Ok(Some(page)) => page,
            Ok(None) => {
                log(&format!("skipped {url}"));
                continue;
            }
            Err(e) => {
                log(&format!("cannot fetch {url}: {e:#}"));
                continue;
            }
        };
        let document = if content_type.starts_with("text/html") || content_type.is_empty() {
            parse_html(&body)
        } else if content_type.starts_with("text/") {
            HtmlDocument {
                title: String::new(),
                text: body.trim().to_string(),
                links: vec![],
            }
        } else {
            continue;
        };
        if depth < limits.max_depth {
            for link in &document.links {
                // Relative links are relative to where a redirect led, as in a browser.
                let Ok(mut target) = base.join(link) else {
                    continue;
                };
                target.set_fragment(None);
                let key = target.to_string();
                if within(target.as_str(), &prefix) && seen.insert(key) {
                    queue.push_back((target, depth + 1));
                }
            }
        }
        if document.text.is_empty() {
            continue;
        }
        log(&format!("fetched {url}"));
        pages.push(Page {
            title: if document.title.is_empty() {
                url.to_string()
            } else {
                document.title
            },
            url: url.to_string(),
            text: document.text,
        });
    }
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_to_text_title_and_links() {
        let html = r#"<!doctype html><html><head><title>Install &amp; Run</title>
            <style>body { color: red }</style><script>var x = "<p>no</p>";</script></head>
            <body><nav><a href="/docs/a.html#top">A</a> | <a href='b.html'>B</a></nav>
            <!-- a comment <p>hidden</p> -->
            <h1>Installing</h1><p>Run <code>tabby&nbsp;serve</code> &lt;port&gt; &#169; &#x41;</p>
            <ul><li>one</li><li>two</li></ul><a href=c.html class=x>C</a></body></html>"#;
        let doc = parse_html(html);
        assert_eq!(doc.title, "Install & Run");
        assert_eq!(doc.links, ["/docs/a.html#top", "b.html", "c.html"]);
        assert!(
            doc.text.contains("Installing\nRun tabby serve <port> © A"),
            "{}",
            doc.text
        );
        assert!(doc.text.contains("one\ntwo"), "{}", doc.text);
        assert!(
            !doc.text.contains("color") && !doc.text.contains("no") && !doc.text.contains("hidden")
        );
    }

    #[test]
    fn broken_html_does_not_panic() {
        for html in [
            "<",
            "<a href=",
            "<p>unclosed",
            "&#xZZ; &unknown; &",
            "<script>never closed",
            "<!-- open",
        ] {
            let _ = parse_html(html);
        }
        assert_eq!(decode_entities("a &amp b &#65;"), "a &amp b A");
    }

    #[test]
    fn prefix_boundaries_and_llms_location() {
        assert_eq!(normalize_prefix("http://h:4000"), "http://h:4000/");
        assert!(!within(
            "http://h:40001/docs/a",
            &normalize_prefix("http://h:4000")
        ));
        assert!(within(
            "http://h:4000/docs/a.html",
            &normalize_prefix("http://h:4000/docs/a")
        ));
        for (start, expected) in [
            ("http://h/docs/index.html", "http://h/docs/llms-full.txt"),
            ("http://h/docs/", "http://h/docs/llms-full.txt"),
            ("http://h/docs", "http://h/docs/llms-full.txt"),
            ("http://h", "http://h/llms-full.txt"),
        ] {
            assert_eq!(
                llms_full_txt(&Url::parse(start).unwrap()).unwrap().as_str(),
                expected
            );
        }
    }

    #[test]
    fn prefixes() {
        let url = Url::parse("http://h:1/docs/index.html").unwrap();
        assert_eq!(default_prefix(&url), "http://h:1/docs/");
        let url = Url::parse("http://h:1/docs/").unwrap();
        assert_eq!(default_prefix(&url), "http://h:1/docs/");
        let url = Url::parse("http://h:1").unwrap();
        assert_eq!(default_prefix(&url), "http://h:1/");
    }
}
