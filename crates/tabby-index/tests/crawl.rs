//! The web crawler against sites served on loopback by the test: `llms-full.txt` first, links
//! followed breadth-first under the prefix only, depth and page limits, fragments, non-HTML
//! responses, and no request anywhere but the test's own servers.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    extract::State,
    http::{StatusCode, Uri, header},
    response::{IntoResponse, Response},
};
use tabby_index::crawl::{CrawlLimits, FetchGuard, HostResolver, Page, crawl};

/// One response of a test site.
#[derive(Clone)]
enum Reply {
    Ok(&'static str, String),
    Redirect(String),
}

fn html(body: &str) -> Reply {
    Reply::Ok("text/html; charset=utf-8", body.to_string())
}

/// A site on an ephemeral loopback port that records every request's path (and query).
struct Site {
    base: String,
    requests: Arc<Mutex<Vec<String>>>,
    pages: Arc<Mutex<HashMap<String, Reply>>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct SiteState {
    requests: Arc<Mutex<Vec<String>>>,
    pages: Arc<Mutex<HashMap<String, Reply>>>,
}

async fn handle(State(state): State<SiteState>, uri: Uri) -> Response {
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    state.requests.lock().unwrap().push(path.clone());
    let reply = state.pages.lock().unwrap().get(&path).cloned();
    match reply {
        Some(Reply::Ok(content_type, body)) => {
            ([(header::CONTENT_TYPE, content_type)], body).into_response()
        }
        Some(Reply::Redirect(to)) => {
            (StatusCode::FOUND, [(header::LOCATION, to)], "").into_response()
        }
        None => (StatusCode::NOT_FOUND, "not found").into_response(),
    }
}

impl Site {
    async fn start() -> Site {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let state = SiteState {
            requests: Arc::default(),
            pages: Arc::default(),
        };
        let app = Router::new().fallback(handle).with_state(state.clone());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Site {
            base,
            requests: state.requests,
            pages: state.pages,
            task,
        }
    }

    fn page(&self, path: &str, reply: Reply) -> &Self {
        self.pages.lock().unwrap().insert(path.to_string(), reply);
        self
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }

    fn count(&self, path: &str) -> usize {
        self.requests().iter().filter(|p| *p == path).count()
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn limits(max_depth: usize, max_pages: usize) -> CrawlLimits {
    CrawlLimits {
        max_depth,
        max_pages,
        max_page_bytes: 64 * 1024,
        request_timeout: Duration::from_secs(10),
    }
}

/// The test sites listen on loopback, which a crawl must be told it may reach.
fn loopback_allowed() -> FetchGuard {
    FetchGuard::new(&["127.0.0.1".to_string()])
}

async fn run(start: &str, prefix: Option<&str>, limits: CrawlLimits) -> (Vec<Page>, Vec<String>) {
    run_with(start, prefix, limits, &loopback_allowed())
        .await
        .unwrap()
}

async fn run_with(
    start: &str,
    prefix: Option<&str>,
    limits: CrawlLimits,
    guard: &FetchGuard,
) -> anyhow::Result<(Vec<Page>, Vec<String>)> {
    let log = Mutex::new(Vec::new());
    let pages = crawl(start, prefix, limits, guard, &|line: &str| {
        log.lock().unwrap().push(line.to_string())
    })
    .await?;
    Ok((pages, log.into_inner().unwrap()))
}

fn urls(pages: &[Page]) -> Vec<String> {
    pages.iter().map(|p| p.url.clone()).collect()
}

/// A documentation site under `/docs/` with a chain of pages
/// index → a → deep1 → deep2 → deep3, a sibling b, links out of the prefix, to another
/// origin, repeated with fragments, and responses that are not HTML.
async fn docs_site(outside: &Site) -> Site {
    let site = Site::start().await;
    site.page(
        "/docs/index.html",
        html(&format!(
            r#"<html><head><title>Home</title></head><body><h1>Welcome home</h1>
            <a href="a.html">A</a> <a href="a.html#install">A again</a>
            <a href="/docs/a.html#usage">A once more</a> <a href="./b.html">B</a>
            <a href="/blog/post.html">Blog (outside the prefix)</a>
            <a href="{}">Another origin</a>
            <a href="/docs/logo.png">Logo</a> <a href="/docs/data.json">Data</a>
            <a href="/docs/notes.txt">Notes</a> <a href="/docs/missing.html">Gone</a>
            <a href="mailto:someone@example.com">Mail</a> <a href="javascript:void(0)">JS</a>
            </body></html>"#,
            outside.url("/docs/elsewhere.html")
        )),
    );
    site.page(
        "/docs/a.html",
        html(r#"<title>Page A</title><p>Alpha page text</p><a href="deep1.html">deeper</a><a href="index.html">home</a>"#),
    );
    site.page(
        "/docs/b.html",
        html(r##"<title>Page B</title><p>Bravo page text</p><a href="#top">top</a>"##),
    );
    site.page(
        "/docs/deep1.html",
        html(r#"<title>Deep 1</title><p>first level down</p><a href="deep2.html">deeper</a>"#),
    );
    site.page(
        "/docs/deep2.html",
        html(r#"<title>Deep 2</title><p>second level down</p><a href="deep3.html">deeper</a>"#),
    );
    site.page(
        "/docs/deep3.html",
        html(r#"<title>Deep 3</title><p>third level down</p>"#),
    );
    site.page(
        "/blog/post.html",
        html("<title>Blog</title><p>outside the docs</p>"),
    );
    site.page(
        "/docs/logo.png",
        Reply::Ok("image/png", "\u{89}PNG not text".into()),
    );
    site.page(
        "/docs/data.json",
        Reply::Ok("application/json", r#"{"secret": "json payload"}"#.into()),
    );
    site.page(
        "/docs/notes.txt",
        Reply::Ok("text/plain", "Plain notes for the docs".into()),
    );
    site
}

#[tokio::test]
async fn links_are_followed_under_the_prefix_to_the_depth_limit() {
    let outside = Site::start().await;
    outside.page("/docs/elsewhere.html", html("<p>another origin</p>"));
    let site = docs_site(&outside).await;
    let start = site.url("/docs/index.html");

    let (pages, log) = run(&start, None, limits(2, 200)).await;
    // Breadth-first: the start page, then depth 1 in link order, then depth 2.
    assert_eq!(
        urls(&pages),
        [
            site.url("/docs/index.html"),
            site.url("/docs/a.html"),
            site.url("/docs/b.html"),
            site.url("/docs/notes.txt"),
            site.url("/docs/deep1.html"),
        ],
        "log: {log:#?}"
    );
    let by_url: HashMap<&str, &Page> = pages.iter().map(|p| (p.url.as_str(), p)).collect();
    let a = by_url[site.url("/docs/a.html").as_str()];
    assert_eq!(a.title, "Page A");
    assert!(a.text.contains("Alpha page text"), "{}", a.text);
    // Text pages are kept as they are, titled by their URL.
    let notes = by_url[site.url("/docs/notes.txt").as_str()];
    assert_eq!(notes.text, "Plain notes for the docs");
    assert_eq!(notes.title, site.url("/docs/notes.txt"));

    // Depth: deep1 is two links away and fetched; deep2 is three and never requested.
    assert_eq!(site.count("/docs/deep1.html"), 1);
    assert_eq!(site.count("/docs/deep2.html"), 0);
    assert_eq!(site.count("/docs/deep3.html"), 0);
    // Fragments and back links: every page is requested once.
    for path in ["/docs/index.html", "/docs/a.html", "/docs/b.html"] {
        assert_eq!(site.count(path), 1, "{path}: {:?}", site.requests());
    }
    // Outside the prefix (same host or another origin): never requested.
    assert_eq!(site.count("/blog/post.html"), 0);
    assert!(outside.requests().is_empty(), "{:?}", outside.requests());
    // Non-HTML, non-text responses are fetched (their type is only known then) but skipped.
    assert!(
        !pages
            .iter()
            .any(|p| p.url.ends_with(".png") || p.url.ends_with(".json"))
    );
    assert!(!pages.iter().any(|p| p.text.contains("json payload")));
    // A missing page is skipped, not fatal.
    assert_eq!(site.count("/docs/missing.html"), 1);
    // Every request went to the site itself: llms-full.txt next to the start page first, then pages of the prefix.
    let requests = site.requests();
    assert_eq!(requests[0], "/docs/llms-full.txt", "{requests:?}");
    assert!(
        requests[1..].iter().all(|p| p.starts_with("/docs/")),
        "{requests:?}"
    );
}

#[tokio::test]
async fn depth_zero_is_the_start_page_only_and_depth_three_is_the_default() {
    let outside = Site::start().await;
    let site = docs_site(&outside).await;
    let start = site.url("/docs/index.html");

    let (pages, _) = run(&start, None, limits(0, 200)).await;
    assert_eq!(urls(&pages), std::slice::from_ref(&start));
    assert_eq!(site.requests().len(), 2, "{:?}", site.requests());

    assert_eq!(CrawlLimits::default().max_depth, 3);
    assert_eq!(CrawlLimits::default().max_pages, 200);
    let (pages, _) = run(&start, None, CrawlLimits::default()).await;
    assert!(urls(&pages).contains(&site.url("/docs/deep2.html")));
    assert!(!urls(&pages).contains(&site.url("/docs/deep3.html")));
    assert_eq!(site.count("/docs/deep3.html"), 0);
}

#[tokio::test]
async fn the_page_limit_stops_the_crawl() {
    let site = Site::start().await;
    let links: String = (0..20)
        .map(|i| format!(r#"<a href="p{i}.html">page {i}</a>"#))
        .collect();
    site.page(
        "/docs/",
        html(&format!("<title>Index</title><p>All pages</p>{links}")),
    );
    for i in 0..20 {
        site.page(
            &format!("/docs/p{i}.html"),
            html(&format!("<title>P{i}</title><p>page number {i}</p>")),
        );
    }
    let (pages, _) = run(&site.url("/docs/"), None, limits(3, 5)).await;
    assert_eq!(pages.len(), 5, "{:#?}", urls(&pages));
    assert_eq!(
        urls(&pages)[1..],
        (0..4)
            .map(|i| site.url(&format!("/docs/p{i}.html")))
            .collect::<Vec<_>>()
    );
    // No page is fetched past the limit (one request for llms-full.txt, five pages).
    assert_eq!(site.requests().len(), 6, "{:?}", site.requests());
}

#[tokio::test]
async fn an_explicit_prefix_narrows_or_widens_the_crawl() {
    let outside = Site::start().await;
    let site = docs_site(&outside).await;
    let start = site.url("/docs/index.html");

    // Narrower: only /docs/a…
    let (pages, _) = run(&start, Some(&site.url("/docs/a")), limits(3, 200)).await;
    assert_eq!(
        urls(&pages),
        [site.url("/docs/index.html"), site.url("/docs/a.html")]
    );
    assert_eq!(site.count("/docs/b.html"), 0);

    // Wider: the whole site, so the blog post is crawled too.
    let (pages, _) = run(&start, Some(&site.url("/")), limits(1, 200)).await;
    assert!(urls(&pages).contains(&site.url("/blog/post.html")));
    assert!(outside.requests().is_empty());
}

#[tokio::test]
async fn llms_full_txt_is_used_instead_of_crawling_when_present() {
    let site = Site::start().await;
    site.page(
        "/docs/llms-full.txt",
        Reply::Ok(
            "text/plain; charset=utf-8",
            "\n# Widget Docs\n\nEverything about widgets.\n".into(),
        ),
    );
    site.page(
        "/docs/",
        html(r#"<title>Docs</title><p>html</p><a href="a.html">a</a>"#),
    );
    site.page("/docs/a.html", html("<p>a</p>"));

    let (pages, log) = run(&site.url("/docs/"), None, limits(3, 200)).await;
    assert_eq!(
        pages,
        [Page {
            url: site.url("/docs/llms-full.txt"),
            title: "Widget Docs".into(),
            text: "# Widget Docs\n\nEverything about widgets.".into(),
        }]
    );
    assert_eq!(site.requests(), ["/docs/llms-full.txt"]);
    assert!(log.iter().any(|l| l.contains("llms-full.txt")), "{log:?}");

    // Served as HTML (e.g. a single-page app answering every path), it is not a dump.
    let spa = Site::start().await;
    spa.page("/docs/llms-full.txt", html("<p>app shell</p>"));
    spa.page("/docs/", html("<title>Docs</title><p>real page</p>"));
    let (pages, _) = run(&spa.url("/docs/"), None, limits(3, 200)).await;
    assert_eq!(urls(&pages), [spa.url("/docs/")]);
    // Empty, it is not used either.
    let empty = Site::start().await;
    empty.page("/llms-full.txt", Reply::Ok("text/plain", "  \n".into()));
    empty.page("/", html("<title>Root</title><p>root page</p>"));
    let (pages, _) = run(&empty.url("/"), None, limits(3, 200)).await;
    assert_eq!(urls(&pages), [empty.url("/")]);
}

#[tokio::test]
async fn redirects_inside_the_prefix_are_followed_and_pages_without_text_are_dropped() {
    let site = Site::start().await;
    site.page(
        "/docs/",
        html(r#"<title>Docs</title><p>start</p><a href="old.html">old</a><a href="empty.html">e</a><a href="big.html">big</a>"#),
    );
    site.page("/docs/old.html", Reply::Redirect("/docs/new.html".into()));
    site.page(
        "/docs/new.html",
        html("<title>New</title><p>moved here</p>"),
    );
    site.page(
        "/docs/empty.html",
        html(r#"<title>Empty</title><script>only()</script><a href="child.html"></a>"#),
    );
    site.page("/docs/child.html", html("<p>child of an empty page</p>"));
    site.page(
        "/docs/big.html",
        html(&format!("<p>{}</p>", "x".repeat(100 * 1024))),
    );
    let (pages, _) = run(&site.url("/docs/"), None, limits(3, 200)).await;
    let titles: Vec<(String, String)> = pages
        .iter()
        .map(|p| (p.url.clone(), p.title.clone()))
        .collect();
    assert_eq!(
        titles,
        [
            (site.url("/docs/"), "Docs".to_string()),
            // Recorded under the URL that was linked.
            (site.url("/docs/old.html"), "New".to_string()),
            // A page without text is not kept, but its links are followed.
            (site.url("/docs/child.html"), site.url("/docs/child.html")),
        ]
    );
    // The oversized page was skipped.
    assert_eq!(site.count("/docs/big.html"), 1);
}

#[tokio::test]
async fn bad_start_urls_are_errors() {
    let quiet = |_: &str| {};
    for url in ["not a url", "ftp://127.0.0.1/docs/", "file:///etc/passwd"] {
        assert!(
            crawl(url, None, limits(1, 1), &loopback_allowed(), &quiet)
                .await
                .is_err(),
            "{url}"
        );
    }
    // A site that does not answer yields no pages rather than an error.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let pages = crawl(
        &format!("http://{closed}/docs/"),
        None,
        limits(1, 10),
        &loopback_allowed(),
        &quiet,
    )
    .await
    .unwrap();
    assert!(pages.is_empty());
}

#[tokio::test]
async fn links_of_a_redirected_page_are_relative_to_where_it_led() {
    // `/docs/guide` answers with a redirect to `/docs/guide/` (as servers do for
    // directories); its relative links are relative to the latter, as in a browser.
    let site = Site::start().await;
    site.page(
        "/docs/",
        html(r#"<title>Docs</title><p>start</p><a href="guide">guide</a>"#),
    );
    site.page("/docs/guide", Reply::Redirect("/docs/guide/".into()));
    site.page(
        "/docs/guide/",
        html(r#"<title>Guide</title><p>guide index</p><a href="install.html">install</a>"#),
    );
    site.page(
        "/docs/guide/install.html",
        html("<title>Install</title><p>how to install</p>"),
    );
    let (pages, log) = run(&site.url("/docs/"), None, limits(3, 200)).await;
    assert_eq!(
        urls(&pages),
        [
            site.url("/docs/"),
            site.url("/docs/guide"),
            site.url("/docs/guide/install.html"),
        ],
        "requests: {:?}\nlog: {log:#?}",
        site.requests()
    );
    assert_eq!(site.count("/docs/install.html"), 0, "{:?}", site.requests());
}

// ---- SSRF: what a crawl may reach ----

/// Names resolved by the test: every name of the test's own sites resolves to loopback, the
/// others to the internal addresses an attacker would aim at.
struct StubResolver(HashMap<String, std::net::IpAddr>);

#[async_trait::async_trait]
impl HostResolver for StubResolver {
    async fn lookup(&self, host: &str) -> std::io::Result<Vec<std::net::IpAddr>> {
        self.0
            .get(host)
            .map(|ip| vec![*ip])
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "unknown host"))
    }
}

fn stub_guard(allowed: &[&str]) -> FetchGuard {
    let names = [
        ("docs.test", "127.0.0.1"),
        ("metadata.test", "169.254.169.254"),
        ("intranet.test", "10.0.0.7"),
    ];
    FetchGuard::with_resolver(
        &allowed.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        Arc::new(StubResolver(
            names
                .iter()
                .map(|(n, ip)| (n.to_string(), ip.parse().unwrap()))
                .collect(),
        )),
    )
}

/// `site`'s URL for `path` under the host name `host` (it resolves to the site's loopback port).
fn named(site: &Site, host: &str, path: &str) -> String {
    site.url(path).replace("127.0.0.1", host)
}

#[tokio::test]
async fn a_start_page_on_an_internal_address_is_refused_before_any_request() {
    let site = Site::start().await;
    site.page("/docs/", html("<title>Secret</title><p>internal only</p>"));
    for start in [site.url("/docs/"), named(&site, "docs.test", "/docs/")] {
        let err = run_with(&start, None, limits(1, 10), &stub_guard(&[]))
            .await
            .unwrap_err();
        let message = format!("{err:#}");
        assert!(message.contains("127.0.0.1"), "{message}");
        assert!(message.contains("fetch_allowed_hosts"), "{message}");
    }
    assert!(site.requests().is_empty(), "{:?}", site.requests());
    // Allow-listed by name or by address, the same site is crawled.
    for allowed in ["docs.test", "127.0.0.0/8"] {
        let (pages, _) = run_with(
            &named(&site, "docs.test", "/docs/"),
            None,
            limits(1, 10),
            &stub_guard(&[allowed]),
        )
        .await
        .unwrap();
        assert_eq!(pages.len(), 1, "{allowed}");
    }
}

#[tokio::test]
async fn redirects_to_internal_addresses_or_other_hosts_are_not_followed() {
    let site = Site::start().await;
    let port = site.base.rsplit(':').next().unwrap().to_string();
    site.page(
        "/docs/",
        html(r#"<title>Docs</title><p>start</p><a href="meta.html">m</a><a href="intra.html">i</a><a href="loop.html">l</a><a href="ok.html">ok</a>"#),
    );
    site.page(
        "/docs/meta.html",
        Reply::Redirect(format!("http://metadata.test:{port}/latest/meta-data/")),
    );
    site.page(
        "/docs/intra.html",
        Reply::Redirect(format!("http://intranet.test:{port}/docs/x.html")),
    );
    site.page(
        "/docs/loop.html",
        Reply::Redirect(format!("http://127.0.0.1:{port}/docs/ok.html")),
    );
    site.page("/docs/ok.html", html("<title>OK</title><p>same host</p>"));
    site.page("/latest/meta-data/", html("<p>iam credentials</p>"));
    site.page("/docs/x.html", html("<p>intranet page</p>"));

    // The crawl runs on docs.test (allow-listed); the redirects lead to other hosts.
    let (pages, log) = run_with(
        &named(&site, "docs.test", "/docs/"),
        None,
        limits(2, 50),
        &stub_guard(&["docs.test"]),
    )
    .await
    .unwrap();
    let got = urls(&pages);
    assert_eq!(
        got,
        [
            named(&site, "docs.test", "/docs/"),
            named(&site, "docs.test", "/docs/ok.html")
        ],
        "log: {log:#?}"
    );
    for line in ["meta.html", "intra.html", "loop.html"] {
        assert!(
            log.iter()
                .any(|l| l.contains(line) && l.contains("another host")),
            "{line}: {log:#?}"
        );
    }
    assert_eq!(site.count("/latest/meta-data/"), 0);
    assert_eq!(site.count("/docs/x.html"), 0);
}
