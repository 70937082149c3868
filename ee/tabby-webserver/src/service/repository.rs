//! [`RepositoryService`]: git repositories stored in SQLite (`git:<id>`) next to the ones from
//! `config.toml` (`config:<hashid>`).

use std::{path::PathBuf, sync::Arc};

use async_trait::async_trait;
use juniper::ID;
use tabby_common::{
    config::SecurityConfig,
    git_url::{GitUrl, local_path, redact_url},
};
use tabby_db::{DbConn, DbError, RepositoryDAO};
use tabby_schema::{
    AccessPolicy, AsID, CoreError, Result,
    relay::RelayArgs,
    repository::{
        FileEntrySearchResult, GitReference, GitRepository, GitRepositoryConnection, GrepFile,
        GrepLine, GrepSubMatch, Repository, RepositoryGrepOutput, RepositoryKind,
        RepositoryService,
    },
};

use crate::{
    directory::{Directory, git_source_id},
    job::{BackgroundJobEvent, CodeRepositoryJob, JobService},
};

pub struct RepositoryServiceImpl {
    db: DbConn,
    directory: Arc<Directory>,
    repositories_dir: PathBuf,
    jobs: Arc<JobService>,
    browser: Arc<crate::browse::CodeBrowser>,
}

fn as_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Refs as stored: trimmed, without empties or duplicates.
pub(crate) fn normalize_refs(refs: Vec<String>) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for r in refs {
        let r = r.trim().to_string();
        if r.is_empty() {
            continue;
        }
        if r.chars().any(|c| c.is_whitespace() || c.is_control()) || r.starts_with('-') {
            return Err(CoreError::invalid(
                "refs",
                format!("{r:?} is not a valid git ref"),
            ));
        }
        if !out.contains(&r) {
            out.push(r);
        }
    }
    Ok(out)
}

impl RepositoryServiceImpl {
    pub fn new(
        db: DbConn,
        directory: Arc<Directory>,
        repositories_dir: PathBuf,
        jobs: Arc<JobService>,
    ) -> Self {
        Self {
            browser: Arc::new(crate::browse::CodeBrowser::new(
                directory.clone(),
                repositories_dir.clone(),
            )),
            db,
            directory,
            repositories_dir,
            jobs,
        }
    }

    /// The code browser over the same repositories.
    pub fn browser(&self) -> Arc<crate::browse::CodeBrowser> {
        self.browser.clone()
    }

    fn references(&self, git_url: &str, refs: &[String]) -> Vec<GitReference> {
        git_references(&self.repositories_dir, git_url, refs)
    }

    fn index_event(dao: &RepositoryDAO) -> BackgroundJobEvent {
        BackgroundJobEvent::SchedulerGitRepository(CodeRepositoryJob {
            git_url: dao.git_url.clone(),
            source_id: git_source_id(dao.id),
            git_refs: dao.refs.clone(),
        })
    }

    async fn git_repository(&self, dao: RepositoryDAO) -> Result<GitRepository> {
        let job_info = self.jobs.job_info(&Self::index_event(&dao)).await?;
        Ok(GitRepository {
            id: dao.id.as_id(),
            source_id: git_source_id(dao.id),
            refs: self.references(&dao.git_url, &dao.refs),
            name: dao.name,
            git_url: redact_url(&dao.git_url),
            job_info,
        })
    }

    /// The repository list changed: refresh the snapshot and index (or collect) at once.
    async fn changed(&self, id: Option<i64>) -> Result<()> {
        self.directory.invalidate();
        let event = match id {
            Some(id) => match self.db.get_repository(id).await? {
                Some(dao) => Self::index_event(&dao),
                None => return Ok(()),
            },
            None => BackgroundJobEvent::IndexGarbageCollection,
        };
        self.jobs.trigger(&event).await?;
        Ok(())
    }
}

/// The refs of a repository with the commit each resolves to in its local copy (empty before
/// the first sync); the default branch when `refs` is empty.
pub fn git_references(
    repositories_dir: &std::path::Path,
    git_url: &str,
    refs: &[String],
) -> Vec<GitReference> {
    let resolved = tabby_index::ref_commits(git_url, repositories_dir, refs);
    let names: Vec<String> = if refs.is_empty() {
        resolved.iter().map(|(name, _)| name.clone()).collect()
    } else {
        refs.to_vec()
    };
    names
        .into_iter()
        .map(|name| GitReference {
            commit: resolved
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, c)| c.clone())
                .unwrap_or_default(),
            name,
        })
        .collect()
}

/// The repository kind of an integration's repositories.
pub fn provided_kind(kind: tabby_schema::integration::IntegrationKind) -> RepositoryKind {
    use tabby_schema::integration::IntegrationKind;
    match kind {
        IntegrationKind::Github => RepositoryKind::Github,
        IntegrationKind::Gitlab => RepositoryKind::Gitlab,
        IntegrationKind::GithubSelfHosted => RepositoryKind::GithubSelfHosted,
        IntegrationKind::GitlabSelfHosted => RepositoryKind::GitlabSelfHosted,
    }
}

/// A repository added through GraphQL may be local only below `[security]
/// local_repository_roots` (config.toml's own entries may be anywhere).
pub fn check_local_repository(security: &SecurityConfig, git_url: &str) -> Result<(), String> {
    let Some(path) = local_path(git_url) else {
        return Ok(());
    };
    if security.allows_local_repository(&path) {
        return Ok(());
    }
    let roots = if security.local_repository_roots.is_empty() {
        "none are configured".to_string()
    } else {
        security
            .local_repository_roots
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    Err(format!(
        "Local repository {} is not below a directory of `[security] local_repository_roots` \
         in config.toml ({roots}); add a root there or use a remote URL",
        path.display()
    ))
}

fn db_error(e: DbError) -> CoreError {
    match e {
        DbError::AlreadyExists { .. } => CoreError::invalid(
            "name",
            "A repository with this name or git URL already exists",
        ),
        DbError::NotFound { .. } => CoreError::NotFound("Repository not found"),
        other => other.into(),
    }
}

#[async_trait]
impl RepositoryService for RepositoryServiceImpl {
    async fn list_git(&self, page: RelayArgs) -> Result<GitRepositoryConnection> {
        let page = page
            .paginate(
                |r: &GitRepository| r.id.to_string(),
                |p| async move {
                    let mut out = Vec::new();
                    for dao in self.db.list_repositories(p).await? {
                        out.push(self.git_repository(dao).await?);
                    }
                    Ok(out)
                },
            )
            .await?;
        Ok(page.into())
    }

    async fn create_git(
        &self,
        name: &str,
        git_url: &str,
        refs: Vec<String>,
        user_group_ids: Vec<i64>,
    ) -> Result<ID> {
        let refs = normalize_refs(refs)?;
        check_local_repository(self.directory.security(), git_url)
            .map_err(|message| CoreError::invalid("gitUrl", message))?;
        if self
            .directory
            .config_repositories()
            .iter()
            .any(|r| r.git_url == git_url)
        {
            return Err(CoreError::invalid(
                "gitUrl",
                "This repository is already configured in config.toml",
            ));
        }
        let id = self
            .db
            .create_repository_readable_by(name, git_url, &refs, &user_group_ids, git_source_id)
            .await
            .map_err(|e| match e {
                DbError::NotFound { .. } => {
                    CoreError::invalid("userGroupIds", "No user group has one of these ids")
                }
                other => db_error(other),
            })?;
        self.changed(Some(id)).await?;
        Ok(id.as_id())
    }

    async fn update_git(&self, id: i64, refs: Vec<String>) -> Result<()> {
        let refs = normalize_refs(refs)?;
        self.db
            .update_repository_refs(id, &refs)
            .await
            .map_err(db_error)?;
        self.changed(Some(id)).await?;
        Ok(())
    }

    async fn delete_git(&self, id: i64) -> Result<()> {
        self.db.delete_repository(id).await.map_err(db_error)?;
        self.changed(None).await?;
        Ok(())
    }

    async fn repository_list(&self, policy: &AccessPolicy) -> Result<Vec<Repository>> {
        let snapshot = self.directory.snapshot().await?;
        let mut out = Vec::new();
        for (i, repo) in self.directory.config_repositories().iter().enumerate() {
            if !policy.can_read(&repo.source_id) {
                continue;
            }
            out.push(Repository {
                id: (i as i64).as_id(),
                source_id: repo.source_id.clone(),
                source_kind: "git".into(),
                source_name: repo.name.clone(),
                name: repo.name.clone(),
                kind: RepositoryKind::GitConfig,
                git_url: redact_url(&repo.canonical_git_url),
                refs: self.references(&repo.git_url, &repo.refs),
                job_info: self
                    .jobs
                    .job_info(&BackgroundJobEvent::SchedulerGitRepository(
                        CodeRepositoryJob {
                            git_url: repo.git_url.clone(),
                            source_id: repo.source_id.clone(),
                            git_refs: repo.refs.clone(),
                        },
                    ))
                    .await?,
            });
        }
        for dao in &snapshot.db_repositories {
            let source_id = git_source_id(dao.id);
            if !policy.can_read(&source_id) {
                continue;
            }
            out.push(Repository {
                id: dao.id.as_id(),
                source_id,
                source_kind: "git".into(),
                source_name: dao.name.clone(),
                name: dao.name.clone(),
                kind: RepositoryKind::Git,
                git_url: redact_url(&tabby_common::git_url::canonicalize_git_url(&dao.git_url)),
                refs: self.references(&dao.git_url, &dao.refs),
                job_info: self.jobs.job_info(&Self::index_event(dao)).await?,
            });
        }
        for entry in &snapshot.provided_repositories {
            let dao = &entry.repo;
            let source_id = crate::directory::provided_source_id(dao.id);
            if !policy.can_read(&source_id) {
                continue;
            }
            out.push(Repository {
                id: dao.id.as_id(),
                source_id,
                source_kind: if entry.kind.is_github() {
                    "github"
                } else {
                    "gitlab"
                }
                .into(),
                source_name: dao.name.clone(),
                name: dao.name.clone(),
                kind: provided_kind(entry.kind),
                git_url: redact_url(&tabby_common::git_url::canonicalize_git_url(&dao.git_url)),
                refs: self.references(&dao.git_url, &dao.refs),
                job_info: self
                    .jobs
                    .job_info(&crate::integration::index_event(dao.id))
                    .await?,
            });
        }
        Ok(out)
    }

    async fn grep(
        &self,
        policy: &AccessPolicy,
        kind: RepositoryKind,
        id: &ID,
        rev: Option<&str>,
        query: &str,
    ) -> Result<RepositoryGrepOutput> {
        let target = self.browser.target(policy, kind, id).await?;
        let (browser, rev, query) = (
            self.browser.clone(),
            rev.map(str::to_owned),
            query.to_owned(),
        );
        let out = tokio::task::spawn_blocking(move || {
            let snapshot = browser.snapshot(&target, rev.as_deref())?;
            browser.grep(&snapshot, &query)
        })
        .await
        .map_err(|e| CoreError::Other(anyhow::anyhow!("grep failed: {e}")))??;
        Ok(RepositoryGrepOutput {
            elapsed_ms: i32::try_from(out.elapsed.as_millis()).unwrap_or(i32::MAX),
            truncated: out.truncated.map(str::to_owned),
            files: out
                .files
                .into_iter()
                .map(|f| GrepFile {
                    path: f.path,
                    lines: f
                        .lines
                        .into_iter()
                        .map(|l| GrepLine {
                            line_number: as_i32(l.number),
                            text: l.text,
                            sub_matches: l
                                .matches
                                .into_iter()
                                .map(|(a, b)| GrepSubMatch {
                                    bytes_start: as_i32(a),
                                    bytes_end: as_i32(b),
                                })
                                .collect(),
                        })
                        .collect(),
                })
                .collect(),
        })
    }

    async fn search_files(
        &self,
        policy: &AccessPolicy,
        kind: RepositoryKind,
        id: &ID,
        rev: Option<&str>,
        pattern: &str,
    ) -> Result<Vec<FileEntrySearchResult>> {
        let target = self.browser.target(policy, kind, id).await?;
        let (browser, rev, pattern) = (
            self.browser.clone(),
            rev.map(str::to_owned),
            pattern.to_owned(),
        );
        let found = tokio::task::spawn_blocking(move || {
            let snapshot = browser.snapshot(&target, rev.as_deref())?;
            browser.search(&snapshot, &pattern)
        })
        .await
        .map_err(|e| CoreError::Other(anyhow::anyhow!("search failed: {e}")))??;
        Ok(found
            .into_iter()
            .map(|(path, indices)| FileEntrySearchResult {
                r#type: "file".into(),
                path,
                indices,
            })
            .collect())
    }
}

/// The display name of a config repository: the last path segment of its URL.
pub fn repository_name(git_url: &str) -> String {
    GitUrl::parse(git_url)
        .map(|u| u.name().to_string())
        .unwrap_or_else(|| git_url.rsplit('/').next().unwrap_or(git_url).to_string())
}
