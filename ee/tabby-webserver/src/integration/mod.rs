//! GitHub and GitLab integrations ([`IntegrationService`]): a token (sealed by
//! [`crate::secret_box`], never returned) and an API base; the
//! `SyncThirdPartyRepositories` job ([`IntegrationSync::sync`]) lists what the token can see
//! ([`vendor`]) into `provided_repositories`, at creation, on every change and hourly. A
//! failed sync keeps the last list and shows its error on the integration.
//!
//! An admin activates a provided repository; the `SchedulerGithubGitlabRepository` job
//! (`job/index_provided.rs`) then indexes its code, cloned with the token
//! ([`IntegrationAccess::git_auth`]: a header for the vendor's own host only), and its issues
//! and pull/merge requests, at once and hourly. Its source id is
//! `provided_repository:<id>`, under the same read policies as every other source.

pub mod vendor;

use std::sync::Arc;

use anyhow::Context as _;
use async_trait::async_trait;
use juniper::ID;
use tabby_db::{DbConn, IntegrationDAO, ProvidedRepositoryDAO, SyncCounts};
use tabby_schema::{
    AsID, AsRowid, CoreError, Result,
    integration::{
        CreateIntegrationInput, Integration, IntegrationConnection, IntegrationKind,
        IntegrationService, IntegrationStatus, ProvidedRepository, ProvidedRepositoryConnection,
        UpdateIntegrationInput,
    },
    relay::RelayArgs,
};

use crate::{
    directory::Directory,
    job::{BackgroundJobEvent, JobService},
    secret_box::SecretBox,
};

const TOKEN_PURPOSE: &str = "integrations.access_token";

/// What the sync job needs: the database, the key and an HTTP client.
pub struct IntegrationSync {
    db: DbConn,
    secrets: Arc<SecretBox>,
    http: reqwest::Client,
}

impl IntegrationSync {
    pub fn new(db: DbConn, secrets: Arc<SecretBox>) -> Self {
        Self {
            db,
            secrets,
            http: vendor::http_client(),
        }
    }

    /// The opened token and API base of `integration`.
    pub fn access(&self, integration: &IntegrationDAO) -> anyhow::Result<IntegrationAccess> {
        let kind = IntegrationKind::from_db(&integration.kind)
            .context("the stored integration kind is invalid")?;
        Ok(IntegrationAccess {
            kind,
            base: api_base(kind, integration),
            token: self
                .secrets
                .open(TOKEN_PURPOSE, &integration.access_token)
                .context("the integration's token")?,
        })
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    pub fn db(&self) -> &DbConn {
        &self.db
    }

    /// Lists the repositories of integration `id` into `provided_repositories`; on failure
    /// the integration carries the error and the list stays as it was.
    pub async fn sync(&self, id: i64) -> anyhow::Result<SyncCounts> {
        let integration = self
            .db
            .get_integration(id)
            .await?
            .with_context(|| format!("integration {} no longer exists", id.as_id()))?;
        let outcome = async {
            let kind = IntegrationKind::from_db(&integration.kind)
                .context("the stored integration kind is invalid")?;
            let token = self
                .secrets
                .open(TOKEN_PURPOSE, &integration.access_token)
                .context("the integration's token")?;
            let base = api_base(kind, &integration);
            let repositories = vendor::list_repositories(&self.http, kind, &base, &token).await?;
            Ok::<_, anyhow::Error>(
                self.db
                    .sync_provided_repositories(id, &repositories)
                    .await?,
            )
        }
        .await;
        if let Err(e) = &outcome
            && let Err(db) = self.db.set_integration_error(id, &format!("{e:#}")).await
        {
            tracing::warn!("cannot record the sync error of integration {id}: {db}");
        }
        outcome
    }
}

/// What calls to an integration's vendor need.
pub struct IntegrationAccess {
    pub kind: IntegrationKind,
    pub base: String,
    pub token: String,
}

impl std::fmt::Debug for IntegrationAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IntegrationAccess({:?}, {}, ***)", self.kind, self.base)
    }
}

impl IntegrationAccess {
    pub fn api<'a>(&'a self, http: &'a reqwest::Client) -> vendor::Api<'a> {
        vendor::Api {
            http,
            kind: self.kind,
            base: &self.base,
            token: &self.token,
        }
    }

    /// The token as git credentials for cloning `git_url`, which must be an https URL on
    /// the vendor's own host (the API's host, or the host it is `api.` of: `github.com` for
    /// `api.github.com`): a listing that points clones elsewhere never gets the token.
    pub fn git_auth(&self, git_url: &str) -> anyhow::Result<tabby_index::GitHttpAuth> {
        let api_host = url::Url::parse(&self.base)
            .ok()
            .and_then(|u| u.host_str().map(str::to_ascii_lowercase))
            .context("the integration's API base has no host")?;
        let clone_host = url::Url::parse(git_url)
            .ok()
            .filter(|u| u.scheme() == "https")
            .and_then(|u| u.host_str().map(str::to_ascii_lowercase));
        let allowed = |host: &str| host == api_host || api_host.strip_prefix("api.") == Some(host);
        match clone_host {
            Some(host) if allowed(&host) => {}
            _ => anyhow::bail!(
                "the clone URL {} is not an https URL on {api_host}; the token is not sent there",
                tabby_common::git_url::redact_url(git_url)
            ),
        }
        // GitHub takes a token as the password of `x-access-token`, GitLab of `oauth2`.
        let user = if self.kind.is_github() {
            "x-access-token"
        } else {
            "oauth2"
        };
        tabby_index::GitHttpAuth::basic(git_url, user, &self.token)
    }
}

fn api_base(kind: IntegrationKind, dao: &IntegrationDAO) -> String {
    dao.api_base
        .clone()
        .or(kind.cloud_api_base().map(str::to_owned))
        .unwrap_or_default()
}

pub struct IntegrationServiceImpl {
    db: DbConn,
    secrets: Arc<SecretBox>,
    jobs: Arc<JobService>,
    directory: Arc<Directory>,
    repositories_dir: std::path::PathBuf,
}

impl IntegrationServiceImpl {
    pub fn new(
        db: DbConn,
        secrets: Arc<SecretBox>,
        jobs: Arc<JobService>,
        directory: Arc<Directory>,
        repositories_dir: std::path::PathBuf,
    ) -> Self {
        Self {
            db,
            secrets,
            jobs,
            directory,
            repositories_dir,
        }
    }

    async fn provided(&self, dao: ProvidedRepositoryDAO) -> Result<ProvidedRepository> {
        let refs = crate::service::repository::git_references(
            &self.repositories_dir,
            &dao.git_url,
            &dao.refs,
        );
        let job_info = self.jobs.job_info(&index_event(dao.id)).await?;
        Ok(ProvidedRepository {
            id: dao.id.as_id(),
            integration_id: dao.integration_id.as_id(),
            active: dao.active,
            display_name: dao.name,
            git_url: tabby_common::git_url::redact_url(&dao.git_url),
            vendor_id: dao.vendor_id,
            refs,
            job_info,
            created_at: dao.created_at,
            updated_at: dao.updated_at,
        })
    }

    async fn sync_soon(&self, id: i64) -> Result<()> {
        self.jobs
            .trigger(&BackgroundJobEvent::SyncThirdPartyRepositories(
                id.as_id().to_string(),
            ))
            .await
            .map_err(CoreError::Other)?;
        Ok(())
    }
}

fn integration(dao: IntegrationDAO) -> Result<Integration> {
    let kind = IntegrationKind::from_db(&dao.kind)
        .ok_or_else(|| CoreError::Other(anyhow::anyhow!("invalid integration kind")))?;
    Ok(Integration {
        id: dao.id.as_id(),
        api_base: api_base(kind, &dao),
        kind,
        display_name: dao.display_name,
        status: match (&dao.error, dao.synced) {
            (Some(_), _) => IntegrationStatus::Failed,
            (None, true) => IntegrationStatus::Ready,
            (None, false) => IntegrationStatus::Pending,
        },
        message: dao.error,
        created_at: dao.created_at,
        updated_at: dao.updated_at,
    })
}

/// The indexing job of provided repository `id`.
pub fn index_event(id: i64) -> BackgroundJobEvent {
    BackgroundJobEvent::SchedulerGithubGitlabRepository(id.as_id().to_string())
}

#[async_trait]
impl IntegrationService for IntegrationServiceImpl {
    async fn create(&self, input: &CreateIntegrationInput, api_base: Option<&str>) -> Result<ID> {
        let sealed = self.secrets.seal(TOKEN_PURPOSE, input.access_token.trim());
        let id = self
            .db
            .create_integration(
                input.kind.as_db(),
                input.display_name.trim(),
                &sealed,
                api_base,
            )
            .await?;
        self.sync_soon(id).await?;
        Ok(id.as_id())
    }

    async fn update(&self, input: &UpdateIntegrationInput, api_base: Option<&str>) -> Result<()> {
        let id = input.id.as_rowid()?;
        let sealed = input
            .access_token
            .as_deref()
            .map(|t| self.secrets.seal(TOKEN_PURPOSE, t.trim()));
        self.db
            .update_integration(
                id,
                input.kind.as_db(),
                input.display_name.trim(),
                sealed.as_deref(),
                api_base,
            )
            .await
            .map_err(CoreError::not_found_as("Integration not found"))?;
        self.sync_soon(id).await
    }

    async fn delete(&self, id: &ID, kind: IntegrationKind) -> Result<()> {
        let rowid = id.as_rowid()?;
        match self.db.get_integration(rowid).await? {
            Some(dao) if dao.kind == kind.as_db() => {}
            _ => return Err(CoreError::NotFound("Integration not found")),
        }
        self.db
            .delete_integration(rowid)
            .await
            .map_err(CoreError::not_found_as("Integration not found"))?;
        // Its repositories' code and documents leave the index.
        self.directory.invalidate();
        self.jobs
            .trigger(&BackgroundJobEvent::IndexGarbageCollection)
            .await
            .map_err(CoreError::Other)?;
        Ok(())
    }

    async fn list(
        &self,
        ids: Vec<i64>,
        kind: Option<IntegrationKind>,
        page: RelayArgs,
    ) -> Result<IntegrationConnection> {
        let page = page
            .paginate(
                |i: &Integration| i.id.to_string(),
                |p| async move {
                    self.db
                        .list_integrations(&ids, kind.map(IntegrationKind::as_db), p)
                        .await?
                        .into_iter()
                        .map(integration)
                        .collect()
                },
            )
            .await?;
        Ok(page.into())
    }

    async fn list_repositories(
        &self,
        ids: Vec<i64>,
        kind: Option<IntegrationKind>,
        active: Option<bool>,
        page: RelayArgs,
    ) -> Result<ProvidedRepositoryConnection> {
        let page = page
            .paginate(
                |r: &ProvidedRepository| r.id.to_string(),
                |p| async move {
                    let rows = self
                        .db
                        .list_provided_repositories(
                            &ids,
                            kind.map(IntegrationKind::as_db),
                            active,
                            p,
                        )
                        .await?;
                    let mut out = Vec::with_capacity(rows.len());
                    for dao in rows {
                        out.push(self.provided(dao).await?);
                    }
                    Ok(out)
                },
            )
            .await?;
        Ok(page.into())
    }

    async fn update_repository_active(
        &self,
        id: &ID,
        active: bool,
        refs: Option<Vec<String>>,
    ) -> Result<()> {
        let rowid = id.as_rowid()?;
        let refs = refs
            .map(crate::service::repository::normalize_refs)
            .transpose()?;
        self.db
            .update_provided_repository_active(rowid, active, refs.as_deref())
            .await
            .map_err(CoreError::not_found_as("Provided repository not found"))?;
        self.directory.invalidate();
        let event = if active {
            index_event(rowid)
        } else {
            // Its code and documents leave the index.
            BackgroundJobEvent::IndexGarbageCollection
        };
        self.jobs.trigger(&event).await.map_err(CoreError::Other)?;
        Ok(())
    }

    async fn update_repository_refs(&self, id: &ID, refs: Vec<String>) -> Result<()> {
        let rowid = id.as_rowid()?;
        let refs = crate::service::repository::normalize_refs(refs)?;
        self.db
            .update_provided_repository_refs(rowid, &refs)
            .await
            .map_err(CoreError::not_found_as("Provided repository not found"))?;
        let active = self
            .db
            .get_provided_repository(rowid)
            .await?
            .is_some_and(|(r, _)| r.active);
        if active {
            self.jobs
                .trigger(&index_event(rowid))
                .await
                .map_err(CoreError::Other)?;
        }
        Ok(())
    }
}
