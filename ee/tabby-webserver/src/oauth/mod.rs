//! OAuth 2.0 / OpenID Connect sign-in: the settings ([`OAuthService`], the client secret
//! sealed by [`crate::secret_box`]), the flows in progress, and signing a provider's user in.
//!
//! A flow starts at `/oauth/signin?provider=…` ([`routes`]): a random `state`, a PKCE
//! verifier and an OIDC `nonce` are kept here (10 minutes, single use, bounded in number),
//! and a random cookie binds the flow to the browser that started it, so a callback link
//! handed to someone else signs nobody in. The callback redeems the code
//! ([`provider::identify`]) and signs in the account with the provider's verified e-mail: an
//! existing one, or a new one only when the address was invited or its domain is open to
//! self sign-up (within the seat limit).

mod provider;
pub mod routes;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use async_trait::async_trait;
use base64::Engine as _;
use sha2::{Digest, Sha256};
use tabby_db::DbConn;
use tabby_schema::{
    CoreError, Result,
    auth::is_valid_email,
    oauth::{OAuthCredential, OAuthProvider, OAuthService, UpdateOAuthCredentialInput},
};
use tracing::warn;

use crate::{secret_box::SecretBox, service::auth::AuthServiceImpl};

const SECRET_PURPOSE: &str = "oauth_credential.client_secret";
/// A sign-in must come back from the provider within this.
const FLOW_LIFETIME: Duration = Duration::from_secs(600);
/// Flows in progress at most (each a few hundred bytes); more are refused until some end.
const MAX_FLOWS: usize = 10_000;

struct Flow {
    provider: OAuthProvider,
    verifier: String,
    nonce: String,
    /// SHA-256 of the cookie value given to the browser that started the flow.
    browser: [u8; 32],
    started: Instant,
}

/// What the browser is sent to the provider with, and the cookie that binds it.
pub struct Start {
    pub authorize_url: String,
    pub cookie: String,
}

/// A finished sign-in: the refresh token the web UI redeems.
pub struct SignedIn {
    pub refresh_token: String,
}

pub struct OAuthServiceImpl {
    db: DbConn,
    secrets: Arc<SecretBox>,
    auth: Arc<AuthServiceImpl>,
    http: reqwest::Client,
    flows: Mutex<HashMap<String, Flow>>,
}

fn random_token() -> String {
    let mut bytes = [0u8; 32];
    aws_lc_rs::rand::fill(&mut bytes).expect("the system RNG works");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn digest(value: &str) -> [u8; 32] {
    Sha256::digest(value.as_bytes()).into()
}

/// The PKCE S256 challenge of a verifier.
fn challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

impl OAuthServiceImpl {
    pub fn new(db: DbConn, secrets: Arc<SecretBox>, auth: Arc<AuthServiceImpl>) -> Self {
        Self {
            db,
            secrets,
            auth,
            http: provider::http_client(),
            flows: Mutex::new(HashMap::new()),
        }
    }

    async fn redirect_uri(&self, provider: OAuthProvider) -> Result<String> {
        let base = self.db.read_server_setting().await?.network_external_url;
        Ok(format!(
            "{}/oauth/callback/{}",
            base.trim_end_matches('/'),
            provider.as_str()
        ))
    }

    /// Starts a sign-in with `provider`.
    pub async fn start(&self, provider: OAuthProvider) -> Result<Start> {
        let credential = self
            .db
            .read_oauth_credential(provider.as_str())
            .await?
            .ok_or_else(|| {
                CoreError::Rejected(format!(
                    "Sign-in with {} is not set up on this server",
                    provider.as_str()
                ))
            })?;
        let endpoints = provider::endpoints(&self.http, provider, credential.config_url.as_deref())
            .await
            .map_err(|e| self.unavailable(provider, e))?;
        let (state, verifier, nonce, cookie) = (
            random_token(),
            random_token(),
            random_token(),
            random_token(),
        );
        let url = provider::authorize_url(
            &endpoints,
            &credential.client_id,
            &self.redirect_uri(provider).await?,
            &state,
            &challenge(&verifier),
            &nonce,
        )
        .map_err(|e| self.unavailable(provider, e))?;
        {
            let mut flows = self.flows.lock().expect("flows lock");
            flows.retain(|_, f| f.started.elapsed() < FLOW_LIFETIME);
            if flows.len() >= MAX_FLOWS {
                return Err(CoreError::TooManyRequests(
                    "Too many sign-ins in progress; try again in a few minutes".into(),
                ));
            }
            flows.insert(
                state,
                Flow {
                    provider,
                    verifier,
                    nonce,
                    browser: digest(&cookie),
                    started: Instant::now(),
                },
            );
        }
        Ok(Start {
            authorize_url: url,
            cookie,
        })
    }

    fn unavailable(&self, provider: OAuthProvider, error: anyhow::Error) -> CoreError {
        warn!("sign-in with {} failed: {error:#}", provider.as_str());
        CoreError::Rejected(format!(
            "Sign-in with {} is not working right now; an admin can check its settings (the \
             server log has the details)",
            provider.as_str()
        ))
    }

    /// Finishes a sign-in: the flow of `state` (used up, whatever the outcome), started by the
    /// browser holding `cookie`, redeems `code`.
    pub async fn finish(
        &self,
        provider: OAuthProvider,
        state: &str,
        code: &str,
        cookie: Option<&str>,
    ) -> Result<SignedIn> {
        let flow = self.flows.lock().expect("flows lock").remove(state);
        let flow = flow
            .filter(|f| f.started.elapsed() < FLOW_LIFETIME && f.provider == provider)
            .ok_or_else(|| {
                CoreError::Rejected(
                    "This sign-in is unknown, was already used or took longer than 10 minutes; \
                     start again"
                        .into(),
                )
            })?;
        if cookie.map(digest) != Some(flow.browser) {
            return Err(CoreError::Rejected(
                "This sign-in was started in another browser; start again here".into(),
            ));
        }
        let credential = self
            .db
            .read_oauth_credential(provider.as_str())
            .await?
            .ok_or_else(|| CoreError::Rejected("This sign-in method was removed".into()))?;
        let secret = self
            .secrets
            .open(SECRET_PURPOSE, &credential.client_secret)
            .map_err(|e| self.unavailable(provider, e))?;
        let endpoints = provider::endpoints(&self.http, provider, credential.config_url.as_deref())
            .await
            .map_err(|e| self.unavailable(provider, e))?;
        let identity = provider::identify(
            &self.http,
            &endpoints,
            &provider::Redemption {
                client_id: &credential.client_id,
                client_secret: &secret,
                redirect_uri: &self.redirect_uri(provider).await?,
                code,
                verifier: &flow.verifier,
                nonce: &flow.nonce,
            },
        )
        .await
        .map_err(|e| {
            warn!("sign-in with {} refused: {e:#}", provider.as_str());
            CoreError::Rejected(format!("Sign-in with {} failed: {e:#}", provider.as_str()))
        })?;
        let user_id = self.account_for(&identity).await?;
        self.db
            .record_external_sign_in(user_id, &format!("oauth:{}", provider.as_str()))
            .await?;
        let (_, refresh) = self.auth.issue_tokens(user_id).await?;
        Ok(SignedIn {
            refresh_token: refresh.token,
        })
    }

    /// The account of a provider's user: by e-mail, or new if invited or self sign-up allows.
    async fn account_for(&self, identity: &provider::Identity) -> Result<i64> {
        let email = identity.email.trim();
        if !is_valid_email(email) {
            return Err(CoreError::Rejected(format!(
                "The provider's e-mail address {email:?} is not valid"
            )));
        }
        if let Some(user) = self.db.get_user_by_email(email).await? {
            if !user.active {
                return Err(CoreError::Rejected("User is disabled".into()));
            }
            return Ok(user.id);
        }
        let name = identity
            .name
            .as_deref()
            .map(str::trim)
            .filter(|n| !n.is_empty());
        // An expired invitation counts as none, as for registration with a password.
        let invitation = self
            .db
            .get_invitation_by_email(email)
            .await?
            .filter(|i| !self.auth.invitation_expired(i));
        let id = if let Some(invitation) = invitation {
            self.auth.check_seat().await?;
            self.db
                .create_user_with_invitation(email, None, false, name, invitation.id)
                .await?
        } else if self.auth.may_self_signup(email).await? {
            self.auth.check_seat().await?;
            self.db.create_user(email, None, false, name).await?
        } else {
            return Err(CoreError::Rejected(format!(
                "There is no account for {email} on this server; ask an admin for an invitation"
            )));
        };
        self.auth.invalidate_directory();
        Ok(id)
    }
}

#[async_trait]
impl OAuthService for OAuthServiceImpl {
    async fn read_credential(&self, provider: OAuthProvider) -> Result<Option<OAuthCredential>> {
        Ok(self
            .db
            .read_oauth_credential(provider.as_str())
            .await?
            .map(|c| OAuthCredential {
                provider,
                client_id: c.client_id,
                config_url: c.config_url,
                created_at: c.created_at,
                updated_at: c.updated_at,
            }))
    }

    async fn providers(&self) -> Result<Vec<OAuthProvider>> {
        Ok(self
            .db
            .list_oauth_providers()
            .await?
            .iter()
            .filter_map(|p| OAuthProvider::parse(p))
            .collect())
    }

    async fn update_credential(
        &self,
        input: &UpdateOAuthCredentialInput,
        config_url: Option<&str>,
    ) -> Result<()> {
        let exists = self
            .db
            .read_oauth_credential(input.provider.as_str())
            .await?
            .is_some();
        if input.client_secret.is_none() && !exists {
            return Err(CoreError::invalid(
                "clientSecret",
                "The client secret is required for a new provider",
            ));
        }
        let sealed = input
            .client_secret
            .as_deref()
            .map(|s| self.secrets.seal(SECRET_PURPOSE, s));
        self.db
            .update_oauth_credential(
                input.provider.as_str(),
                input.client_id.trim(),
                sealed.as_deref(),
                config_url,
            )
            .await?;
        Ok(())
    }

    async fn delete_credential(&self, provider: OAuthProvider) -> Result<()> {
        let setting = self.db.read_server_setting().await?;
        if setting.security_disable_password_login {
            return Err(CoreError::Rejected(
                "Password sign-in is turned off: turn it back on (Settings → Security) before \
                 removing a sign-in method, or nobody could sign in"
                    .into(),
            ));
        }
        if !self.db.delete_oauth_credential(provider.as_str()).await? {
            return Err(CoreError::NotFound("This provider is not set up"));
        }
        Ok(())
    }

    async fn callback_url(&self, provider: OAuthProvider) -> Result<String> {
        self.redirect_uri(provider).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkce_challenge_is_rfc7636_s256() {
        // RFC 7636, appendix B.
        assert_eq!(
            challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        let a = random_token();
        assert_eq!(a.len(), 43);
        assert_ne!(a, random_token());
    }
}
