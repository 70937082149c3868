//! OAuth 2.0 / OpenID Connect sign-in settings: the providers, what admins see (never the
//! client secret), validation, and the [`OAuthService`] trait. The sign-in itself is the
//! `/oauth/*` routes of the webserver.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use juniper::{GraphQLEnum, GraphQLInputObject, GraphQLObject};

use crate::{CoreError, Result, ValidationError};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, GraphQLEnum)]
pub enum OAuthProvider {
    /// github.com, or GitHub Enterprise Server at `configUrl`.
    Github,
    /// Google (OpenID Connect).
    Google,
    /// gitlab.com, or a self-hosted GitLab at `configUrl` (OpenID Connect).
    Gitlab,
    /// Any OpenID Connect provider; `configUrl` is its issuer (discovery at
    /// `<issuer>/.well-known/openid-configuration`).
    Oidc,
}

impl OAuthProvider {
    pub const ALL: [OAuthProvider; 4] = [
        OAuthProvider::Github,
        OAuthProvider::Google,
        OAuthProvider::Gitlab,
        OAuthProvider::Oidc,
    ];

    /// The name in the database and in `/oauth/*` URLs.
    pub fn as_str(self) -> &'static str {
        match self {
            OAuthProvider::Github => "github",
            OAuthProvider::Google => "google",
            OAuthProvider::Gitlab => "gitlab",
            OAuthProvider::Oidc => "oidc",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct OAuthCredential {
    pub provider: OAuthProvider,
    pub client_id: String,
    pub config_url: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Clone, Debug, GraphQLInputObject)]
#[graphql(name = "UpdateOAuthCredentialInput")]
pub struct UpdateOAuthCredentialInput {
    pub provider: OAuthProvider,
    pub client_id: String,
    /// `null` keeps the stored secret.
    pub client_secret: Option<String>,
    /// Required for OIDC (the issuer); for GitHub and GitLab the base URL of a self-hosted
    /// server (`null`: github.com / gitlab.com); not used for Google.
    pub config_url: Option<String>,
}

/// An `https` URL (or `http` to a loopback address, for a provider on the same machine)
/// without credentials, query or fragment; returned without a trailing slash.
pub fn validated_provider_url(text: &str) -> std::result::Result<String, &'static str> {
    let url = url::Url::parse(text.trim()).map_err(|_| "Not a URL like https://idp.example.com")?;
    let loopback = match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d == "localhost",
        None => return Err("The URL must name a host"),
    };
    if !(url.scheme() == "https" || (url.scheme() == "http" && loopback)) {
        return Err("The URL must be https:// (http:// only to a loopback address)");
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("The URL must not carry credentials");
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("The URL must not have a query or a fragment");
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

impl UpdateOAuthCredentialInput {
    /// Checks the input; returns the normalized `configUrl`.
    pub fn validate(&self) -> Result<Option<String>> {
        let mut errors = Vec::new();
        let mut push = |path: &str, message: &str| {
            errors.push(ValidationError {
                path: path.into(),
                message: message.into(),
            })
        };
        let id = self.client_id.trim();
        if id.is_empty() || id.len() > 512 || id.chars().any(|c| c.is_control() || c == ' ') {
            push(
                "clientId",
                "The client ID is required: at most 512 characters, no spaces",
            );
        }
        if let Some(secret) = &self.client_secret
            && (secret.is_empty() || secret.len() > 1024 || secret.chars().any(char::is_control))
        {
            push(
                "clientSecret",
                "The client secret must be 1 to 1024 characters, without control characters",
            );
        }
        let url = match (self.provider, self.config_url.as_deref().map(str::trim)) {
            (OAuthProvider::Oidc, None | Some("")) => {
                push(
                    "configUrl",
                    "The issuer URL of the OpenID Connect provider is required",
                );
                None
            }
            (OAuthProvider::Google, Some(u)) if !u.is_empty() => {
                push("configUrl", "Google takes no URL");
                None
            }
            (_, Some(u)) if !u.is_empty() => match validated_provider_url(u) {
                Ok(url) => Some(url),
                Err(message) => {
                    push("configUrl", message);
                    None
                }
            },
            _ => None,
        };
        CoreError::check(errors)?;
        Ok(url)
    }
}

#[async_trait]
pub trait OAuthService: Send + Sync {
    async fn read_credential(&self, provider: OAuthProvider) -> Result<Option<OAuthCredential>>;
    /// The providers that are set up.
    async fn providers(&self) -> Result<Vec<OAuthProvider>>;
    /// `config_url` already validated; a new provider needs a client secret.
    async fn update_credential(
        &self,
        input: &UpdateOAuthCredentialInput,
        config_url: Option<&str>,
    ) -> Result<()>;
    async fn delete_credential(&self, provider: OAuthProvider) -> Result<()>;
    /// The redirect URI to register with the provider.
    async fn callback_url(&self, provider: OAuthProvider) -> Result<String>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(provider: OAuthProvider, url: Option<&str>) -> UpdateOAuthCredentialInput {
        UpdateOAuthCredentialInput {
            provider,
            client_id: "client".into(),
            client_secret: Some("secret".into()),
            config_url: url.map(Into::into),
        }
    }

    #[test]
    fn provider_settings_are_checked() {
        assert_eq!(
            input(
                OAuthProvider::Oidc,
                Some("https://idp.example.com/realms/x/")
            )
            .validate()
            .unwrap()
            .as_deref(),
            Some("https://idp.example.com/realms/x")
        );
        assert_eq!(input(OAuthProvider::Github, None).validate().unwrap(), None);
        assert!(
            input(OAuthProvider::Gitlab, Some("http://127.0.0.1:8929"))
                .validate()
                .is_ok()
        );
        for (provider, url) in [
            (OAuthProvider::Oidc, None),
            (OAuthProvider::Oidc, Some("http://idp.example.com")),
            (OAuthProvider::Oidc, Some("https://u:p@idp.example.com")),
            (OAuthProvider::Oidc, Some("https://idp.example.com/?x=1")),
            (OAuthProvider::Gitlab, Some("javascript:alert(1)")),
            (OAuthProvider::Google, Some("https://accounts.google.com")),
        ] {
            assert!(
                input(provider, url).validate().is_err(),
                "{provider:?} {url:?}"
            );
        }
        let mut bad = input(OAuthProvider::Github, None);
        bad.client_id = "a b".into();
        bad.client_secret = Some(String::new());
        match bad.validate() {
            Err(CoreError::InvalidInput(errors)) => assert_eq!(
                errors.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(),
                ["clientId", "clientSecret"]
            ),
            other => panic!("{other:?}"),
        }
        for p in OAuthProvider::ALL {
            assert_eq!(OAuthProvider::parse(p.as_str()), Some(p));
        }
    }
}
