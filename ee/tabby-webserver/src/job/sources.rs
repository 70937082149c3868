//! The sources jobs run on, read from the config and the database when a run is enqueued and
//! again when it starts (a job never runs a URL from its command).

use super::{CodeRepositoryJob, JobService, WebCrawlerJob};

impl JobService {
    pub(super) fn is_config_source(&self, source_id: &str) -> bool {
        self.directory
            .config_repositories()
            .iter()
            .any(|r| r.source_id == source_id)
    }

    /// Every repository (config and GraphQL) as index jobs.
    pub(super) async fn repository_jobs(&self) -> anyhow::Result<Vec<CodeRepositoryJob>> {
        let snapshot = self.directory.snapshot().await?;
        let mut jobs: Vec<CodeRepositoryJob> = self
            .directory
            .config_repositories()
            .iter()
            .map(|r| CodeRepositoryJob {
                git_url: r.git_url.clone(),
                source_id: r.source_id.clone(),
                git_refs: r.refs.clone(),
            })
            .collect();
        jobs.extend(snapshot.db_repositories.iter().map(|r| CodeRepositoryJob {
            git_url: r.git_url.clone(),
            source_id: crate::directory::git_source_id(r.id),
            git_refs: r.refs.clone(),
        }));
        Ok(jobs)
    }

    /// The active provided repositories: (source id, git URL) each.
    pub(super) async fn provided_sources(&self) -> anyhow::Result<Vec<(String, String)>> {
        Ok(self
            .directory
            .snapshot()
            .await?
            .provided_repositories
            .iter()
            .map(|p| {
                (
                    crate::directory::provided_source_id(p.repo.id),
                    p.repo.git_url.clone(),
                )
            })
            .collect())
    }

    /// The repository with `source_id` as it is now (URL with its credentials, current refs).
    pub(super) async fn repository_job(
        &self,
        source_id: &str,
    ) -> anyhow::Result<Option<CodeRepositoryJob>> {
        Ok(self
            .repository_jobs()
            .await?
            .into_iter()
            .find(|r| r.source_id == source_id))
    }

    /// The crawl of the web document with `source_id`, from its row.
    pub(super) async fn web_crawler_job(
        &self,
        source_id: &str,
    ) -> anyhow::Result<Option<WebCrawlerJob>> {
        let Some(id) = source_id
            .strip_prefix("custom_web_document:")
            .and_then(tabby_schema::decode_id)
        else {
            return Ok(None);
        };
        Ok(self
            .db
            .get_web_document(id)
            .await?
            .map(|dao| WebCrawlerJob {
                source_id: web_document_source_id(dao.id),
                url: dao.url,
                url_prefix: None,
            }))
    }
}

/// Source id of a web document.
pub fn web_document_source_id(id: i64) -> String {
    format!("custom_web_document:{}", tabby_schema::encode_id(id))
}
