//! The `WebCrawler` job: a web document's site crawled into the doc corpus.

use anyhow::bail;
use tabby_index::doc::{DocFields, DocIndexer, StructuredDoc};

use super::{JobLog, JobService, WebCrawlerJob};

/// Crawls a site into pages (plugged in by the server).
#[async_trait::async_trait]
pub trait WebCrawler: Send + Sync {
    async fn crawl(
        &self,
        url: &str,
        url_prefix: Option<&str>,
        log: &JobLog,
    ) -> anyhow::Result<Vec<CrawledPage>>;

    /// Why `url` may never be crawled (it resolves to an internal address that is not
    /// allow-listed), checked when a user adds it; `None` when it may be tried.
    async fn refusal(&self, _url: &str) -> Option<String> {
        None
    }
}

/// The crawler of `tabby-index` over HTTP, with its default limits, reaching only public
/// addresses and those `[security] fetch_allowed_hosts` allows.
#[derive(Default)]
pub struct HttpCrawler {
    pub limits: tabby_index::crawl::CrawlLimits,
    pub guard: tabby_index::crawl::FetchGuard,
}

impl HttpCrawler {
    pub fn new(fetch_allowed_hosts: &[String]) -> Self {
        Self {
            limits: Default::default(),
            guard: tabby_index::crawl::FetchGuard::new(fetch_allowed_hosts),
        }
    }
}

#[async_trait::async_trait]
impl WebCrawler for HttpCrawler {
    async fn crawl(
        &self,
        url: &str,
        url_prefix: Option<&str>,
        log: &JobLog,
    ) -> anyhow::Result<Vec<CrawledPage>> {
        let pages = tabby_index::crawl::crawl(url, url_prefix, self.limits, &self.guard, &|line| {
            log.info(line)
        })
        .await?;
        Ok(pages
            .into_iter()
            .map(|p| CrawledPage {
                url: p.url,
                title: p.title,
                text: p.text,
            })
            .collect())
    }

    async fn refusal(&self, url: &str) -> Option<String> {
        self.guard.internal_refusal(url).await
    }
}

#[derive(Clone, Debug)]
pub struct CrawledPage {
    pub url: String,
    pub title: String,
    pub text: String,
}

impl JobService {
    pub(super) async fn crawl(&self, job: &WebCrawlerJob, log: &JobLog) -> anyhow::Result<()> {
        let deps = self.deps()?;
        let Some(crawler) = self.crawler.get().cloned() else {
            bail!("no web crawler is set up");
        };
        let pages = crawler
            .crawl(&job.url, job.url_prefix.as_deref(), log)
            .await?;
        if pages.is_empty() {
            bail!("no page could be fetched from {}", job.url);
        }
        let mut docs = DocIndexer::open(&deps.index_dir, deps.embedding.clone())?;
        docs.delete_source(&job.source_id)?;
        for page in &pages {
            docs.add(&StructuredDoc {
                source_id: job.source_id.clone(),
                id: format!("{}:{}", job.source_id, page.url),
                fields: DocFields::Web {
                    title: page.title.clone(),
                    link: page.url.clone(),
                    body: page.text.clone(),
                },
            })
            .await?;
        }
        docs.commit()?;
        log.info(format!("indexed {} pages of {}", pages.len(), job.url));
        Ok(())
    }
}
