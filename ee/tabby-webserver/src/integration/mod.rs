//! GitHub and GitLab integrations ([`IntegrationService`]): a token (sealed by
//! [`crate::secret_box`], never returned) and an API base; the
//! `SyncThirdPartyRepositories` job ([`IntegrationSync::sync`]) lists what the token can see
//! ([`vendor`]) into `provided_repositories`, at creation, on every change and hourly. A
//! failed sync keeps the last list and shows its error on the integration.
//!
//! Not built yet: indexing a provided repository's code and its issues and pull/merge
//! requests (`SchedulerGithubGitlabRepository`), and with it activating one.

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
}

impl IntegrationServiceImpl {
    pub fn new(db: DbConn, secrets: Arc<SecretBox>, jobs: Arc<JobService>) -> Self {
        Self { db, secrets, jobs }
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

fn provided(dao: ProvidedRepositoryDAO) -> ProvidedRepository {
    ProvidedRepository {
        id: dao.id.as_id(),
        integration_id: dao.integration_id.as_id(),
        active: dao.active,
        display_name: dao.name,
        git_url: tabby_common::git_url::redact_url(&dao.git_url),
        vendor_id: dao.vendor_id,
        created_at: dao.created_at,
        updated_at: dao.updated_at,
    }
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
            .map_err(CoreError::not_found_as("Integration not found"))
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
                    Ok(self
                        .db
                        .list_provided_repositories(
                            &ids,
                            kind.map(IntegrationKind::as_db),
                            active,
                            p,
                        )
                        .await?
                        .into_iter()
                        .map(provided)
                        .collect())
                },
            )
            .await?;
        Ok(page.into())
    }
}
