//! GitHub and GitLab integrations: what admins see (never the token), validation, and the
//! [`IntegrationService`] trait.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use juniper::{GraphQLEnum, GraphQLInputObject, GraphQLObject, ID};

use crate::{CoreError, Result, ValidationError, connection, oauth::validated_provider_url};

#[derive(Clone, Copy, Debug, PartialEq, Eq, GraphQLEnum)]
pub enum IntegrationKind {
    Github,
    Gitlab,
    GithubSelfHosted,
    GitlabSelfHosted,
}

impl IntegrationKind {
    pub const ALL: [IntegrationKind; 4] = [
        IntegrationKind::Github,
        IntegrationKind::Gitlab,
        IntegrationKind::GithubSelfHosted,
        IntegrationKind::GitlabSelfHosted,
    ];

    pub fn as_db(self) -> &'static str {
        match self {
            IntegrationKind::Github => "github",
            IntegrationKind::Gitlab => "gitlab",
            IntegrationKind::GithubSelfHosted => "github_self_hosted",
            IntegrationKind::GitlabSelfHosted => "gitlab_self_hosted",
        }
    }

    pub fn from_db(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_db() == value)
    }

    pub fn is_github(self) -> bool {
        matches!(
            self,
            IntegrationKind::Github | IntegrationKind::GithubSelfHosted
        )
    }

    /// The API base of the cloud service; self-hosted ones need their own.
    pub fn cloud_api_base(self) -> Option<&'static str> {
        match self {
            IntegrationKind::Github => Some("https://api.github.com"),
            IntegrationKind::Gitlab => Some("https://gitlab.com"),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, GraphQLEnum)]
pub enum IntegrationStatus {
    /// Synced, no error.
    Ready,
    /// Not synced yet.
    Pending,
    /// The last sync failed; `message` says why.
    Failed,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct Integration {
    pub id: ID,
    pub kind: IntegrationKind,
    pub display_name: String,
    pub api_base: String,
    pub status: IntegrationStatus,
    pub message: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Clone, Debug, GraphQLObject)]
#[graphql(context = crate::Context)]
pub struct ProvidedRepository {
    pub id: ID,
    pub integration_id: ID,
    /// Whether its code, issues and pull requests are indexed.
    pub active: bool,
    pub display_name: String,
    pub git_url: String,
    pub vendor_id: String,
    /// The refs indexed (the default branch when none are set), with the commit each
    /// resolves to in the mirror (empty before the first index run).
    pub refs: Vec<crate::repository::GitReference>,
    /// Its `scheduler_github_gitlab` job and the latest run.
    pub job_info: crate::job::JobInfo,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

connection!(IntegrationConnection, IntegrationEdge, Integration);
connection!(
    ProvidedRepositoryConnection,
    ProvidedRepositoryEdge,
    ProvidedRepository,
    crate::Context
);

#[derive(Clone, Debug, GraphQLInputObject)]
pub struct CreateIntegrationInput {
    pub display_name: String,
    pub access_token: String,
    pub kind: IntegrationKind,
    /// Required for self-hosted kinds (e.g. `https://ghe.example.com/api/v3` or
    /// `https://gitlab.example.com`); not used for the cloud services.
    pub api_base: Option<String>,
}

#[derive(Clone, Debug, GraphQLInputObject)]
pub struct UpdateIntegrationInput {
    pub id: ID,
    pub display_name: String,
    /// `null` keeps the stored token.
    pub access_token: Option<String>,
    pub kind: IntegrationKind,
    pub api_base: Option<String>,
}

/// Checks the common fields; returns the API base to store (`None` for the cloud).
pub fn validate_integration(
    kind: IntegrationKind,
    display_name: &str,
    access_token: Option<&str>,
    api_base: Option<&str>,
) -> Result<Option<String>> {
    let mut errors = Vec::new();
    let mut push = |path: &str, message: &str| {
        errors.push(ValidationError {
            path: path.into(),
            message: message.into(),
        })
    };
    let name = display_name.trim();
    if name.is_empty() || name.len() > 100 || name.chars().any(char::is_control) {
        push(
            "displayName",
            "The name is required: at most 100 characters",
        );
    }
    if let Some(token) = access_token
        && (token.trim().is_empty()
            || token.len() > 1024
            || token.chars().any(|c| c.is_control() || c == ' '))
    {
        push(
            "accessToken",
            "The token is required: at most 1024 characters, no spaces",
        );
    }
    let base = match (
        kind.cloud_api_base(),
        api_base.map(str::trim).filter(|b| !b.is_empty()),
    ) {
        (Some(_), Some(_)) => {
            push(
                "apiBase",
                "The cloud services take no API base; use a self-hosted kind",
            );
            None
        }
        (Some(_), None) => None,
        (None, None) => {
            push("apiBase", "A self-hosted server needs its API base URL");
            None
        }
        (None, Some(url)) => match validated_provider_url(url) {
            Ok(url) => Some(url),
            Err(message) => {
                push("apiBase", message);
                None
            }
        },
    };
    CoreError::check(errors)?;
    Ok(base)
}

#[async_trait]
pub trait IntegrationService: Send + Sync {
    /// Creates the integration and starts its first sync.
    async fn create(&self, input: &CreateIntegrationInput, api_base: Option<&str>) -> Result<ID>;
    /// Changes it and syncs again.
    async fn update(&self, input: &UpdateIntegrationInput, api_base: Option<&str>) -> Result<()>;
    async fn delete(&self, id: &ID, kind: IntegrationKind) -> Result<()>;
    async fn list(
        &self,
        ids: Vec<i64>,
        kind: Option<IntegrationKind>,
        page: crate::relay::RelayArgs,
    ) -> Result<IntegrationConnection>;
    async fn list_repositories(
        &self,
        ids: Vec<i64>,
        kind: Option<IntegrationKind>,
        active: Option<bool>,
        page: crate::relay::RelayArgs,
    ) -> Result<ProvidedRepositoryConnection>;
    /// Turns indexing of a provided repository on (indexed at once) or off (its code and
    /// documents leave the index); `refs: None` keeps the refs.
    async fn update_repository_active(
        &self,
        id: &ID,
        active: bool,
        refs: Option<Vec<String>>,
    ) -> Result<()>;
    async fn update_repository_refs(&self, id: &ID, refs: Vec<String>) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integration_fields_are_checked() {
        assert_eq!(
            validate_integration(IntegrationKind::Github, "GitHub", Some("ghp_x"), None).unwrap(),
            None
        );
        assert_eq!(
            validate_integration(
                IntegrationKind::GitlabSelfHosted,
                "GL",
                Some("glpat-x"),
                Some("https://gitlab.example.com/")
            )
            .unwrap()
            .as_deref(),
            Some("https://gitlab.example.com")
        );
        for (kind, name, token, base) in [
            (IntegrationKind::Github, "", Some("t"), None),
            (IntegrationKind::Github, "x", Some(""), None),
            (
                IntegrationKind::Github,
                "x",
                Some("t"),
                Some("https://evil.example"),
            ),
            (IntegrationKind::GithubSelfHosted, "x", Some("t"), None),
            (
                IntegrationKind::GitlabSelfHosted,
                "x",
                Some("t"),
                Some("http://10.0.0.1"),
            ),
            (
                IntegrationKind::GitlabSelfHosted,
                "x",
                Some("t"),
                Some("file:///etc"),
            ),
        ] {
            assert!(
                validate_integration(kind, name, token, base).is_err(),
                "{name} {base:?}"
            );
        }
        for kind in IntegrationKind::ALL {
            assert_eq!(IntegrationKind::from_db(kind.as_db()), Some(kind));
        }
    }
}
