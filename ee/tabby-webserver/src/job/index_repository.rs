//! The `SchedulerGitRepository` job: a repository's code into the code index, its recent
//! commits into the doc corpus.

use tabby_index::{
    CodeIndexer, RepositoryToIndex,
    doc::{DocFields, DocIndexer, StructuredDoc, recent_commits},
};

use super::{CodeRepositoryJob, JobDeps, JobLog, JobService};

/// Commits indexed per repository (newest first).
pub const COMMITS_PER_REPOSITORY: usize = 1000;

/// Syncs and indexes one repository's code (fetching with `auth` when given), then lets the
/// index merge its segments.
pub(super) async fn index_code(
    deps: &JobDeps,
    repo: &RepositoryToIndex,
    log: &JobLog,
    auth: Option<&tabby_index::GitHttpAuth>,
) -> anyhow::Result<()> {
    let mut indexer = CodeIndexer::open(
        &deps.index_dir,
        deps.embedding.clone(),
        deps.languages.clone(),
    )
    .await?;
    indexer
        .index_repository_with(repo, &deps.repositories_dir, log, auth)
        .await?;
    tokio::task::spawn_blocking(move || indexer.finish()).await??;
    Ok(())
}

impl JobService {
    pub(super) async fn index_repository(
        &self,
        job: &CodeRepositoryJob,
        log: &JobLog,
    ) -> anyhow::Result<()> {
        let deps = self.deps()?;
        // The allow-list may have shrunk since the repository was added.
        if !self.is_config_source(&job.source_id) {
            crate::service::repository::check_local_repository(
                self.directory.security(),
                &job.git_url,
            )
            .map_err(anyhow::Error::msg)?;
        }
        let repo = RepositoryToIndex {
            source_id: job.source_id.clone(),
            git_url: job.git_url.clone(),
            refs: job.git_refs.clone(),
        };
        index_code(&deps, &repo, log, None).await?;
        // Commits go into the structured-doc corpus under the repository's source id.
        match recent_commits(
            &job.git_url,
            &deps.repositories_dir,
            &job.git_refs,
            COMMITS_PER_REPOSITORY,
        ) {
            Ok(commits) => {
                let mut docs = DocIndexer::open(&deps.index_dir, deps.embedding.clone())?;
                let known = docs.doc_ids(&job.source_id)?;
                let mut added = 0;
                for commit in commits {
                    let id = format!("{}:commit:{}", job.source_id, commit.sha);
                    if known.contains(&id) {
                        continue;
                    }
                    docs.add(&StructuredDoc {
                        source_id: job.source_id.clone(),
                        id,
                        fields: DocFields::Commit {
                            sha: commit.sha,
                            message: commit.message,
                            author_email: commit.author_email,
                            author_at: commit.author_at,
                        },
                    })
                    .await?;
                    added += 1;
                }
                docs.commit()?;
                log.info(format!("indexed {added} new commits"));
            }
            // A plain directory has no commits.
            Err(e) => log.info(format!("no commits indexed: {e:#}")),
        }
        Ok(())
    }
}
