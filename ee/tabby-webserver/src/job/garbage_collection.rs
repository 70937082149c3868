//! The `IndexGarbageCollection` job: code and docs of sources that are gone leave the index.

use tabby_db::Pagination;
use tabby_index::{CodeIndexer, doc::DocIndexer};

use super::{JobLog, JobService, ingestion::ingested_doc_id, sources::web_document_source_id};

impl JobService {
    /// Removes code and docs of sources that no longer exist: repositories dropped from the
    /// config or deleted, provided repositories deactivated or gone, deleted web documents, deleted ingested documents.
    pub(super) async fn garbage_collect(&self, log: &JobLog) -> anyhow::Result<()> {
        let deps = self.deps()?;
        let jobs = self.repository_jobs().await?;
        let provided = self.provided_sources().await?;
        let urls: Vec<String> = jobs
            .iter()
            .map(|r| r.git_url.clone())
            .chain(provided.iter().map(|(_, url)| url.clone()))
            .collect();
        let repositories_dir = deps.repositories_dir.clone();
        let removed = tokio::task::spawn_blocking(move || {
            tabby_index::remove_stale_mirrors(&repositories_dir, &urls)
        })
        .await?;
        if !removed.is_empty() {
            log.info(format!(
                "removed {} mirrors of repositories that are gone (or named by an older version)",
                removed.len()
            ));
        }
        let repositories: Vec<String> = jobs
            .into_iter()
            .map(|r| r.source_id)
            .chain(provided.into_iter().map(|(source_id, _)| source_id))
            .collect();
        {
            let mut indexer = CodeIndexer::open(
                &deps.index_dir,
                deps.embedding.clone(),
                deps.languages.clone(),
            )
            .await?;
            for removed in indexer.remove_other_sources(&repositories)? {
                log.info(format!("removed code of {removed}: no longer a repository"));
            }
        }
        let web: Vec<String> = self
            .db
            .list_web_documents(&[], None, Pagination::all())
            .await?
            .iter()
            .map(|d| web_document_source_id(d.id))
            .collect();
        let mut docs = DocIndexer::open(&deps.index_dir, deps.embedding.clone())?;
        let mut removed = 0;
        for source in docs.sources()? {
            if let Some(name) = source.strip_prefix("ingested:") {
                let keep: std::collections::HashSet<String> = self
                    .db
                    .list_ingested_doc_ids(name)
                    .await?
                    .iter()
                    .map(|id| ingested_doc_id(name, id))
                    .collect();
                for id in docs.doc_ids(&source)? {
                    if !keep.contains(&id) {
                        docs.delete(&id);
                        removed += 1;
                    }
                }
            } else if !repositories.contains(&source) && !web.contains(&source) {
                docs.delete_source(&source)?;
                log.info(format!(
                    "removed the documents of {source}: the source is gone"
                ));
            }
        }
        docs.commit()?;
        if removed > 0 {
            log.info(format!("removed {removed} deleted ingested documents"));
        }
        Ok(())
    }
}
