//! LDAP sign-in ([`LdapService`]): the settings, with the service account's password sealed
//! ([`crate::secret_box`]), the connection test, and `tokenAuthLdap`. The protocol is in
//! [`client`].
//!
//! A verified directory user signs in as the account with their e-mail (the directory's
//! `email_attribute`), which is created on first sign-in within the seat limit and has no
//! password. Failures the caller could learn from (unknown user, wrong password) all answer
//! "Invalid user id or password"; a directory that cannot be reached or is misconfigured
//! answers a generic error, with the detail in the server log.

mod client;

use std::{net::IpAddr, sync::Arc};

use anyhow::Context as _;
use async_trait::async_trait;
use tabby_db::{DbConn, LdapCredentialDAO};
use tabby_schema::{
    CoreError, Result,
    auth::{TokenAuthResponse, is_valid_email},
    ldap::{LdapCredential, LdapEncryption, LdapService, UpdateLdapCredentialInput},
};
use tracing::warn;

use crate::{secret_box::SecretBox, service::auth::AuthServiceImpl};

const PASSWORD_PURPOSE: &str = "ldap_credential.bind_password";
/// What `users.external_sign_in_method` records.
pub const METHOD: &str = "ldap";
const MAX_USER_ID_LEN: usize = 256;

pub struct LdapServiceImpl {
    db: DbConn,
    secrets: Arc<SecretBox>,
    auth: Arc<AuthServiceImpl>,
}

impl LdapServiceImpl {
    pub fn new(db: DbConn, secrets: Arc<SecretBox>, auth: Arc<AuthServiceImpl>) -> Self {
        Self { db, secrets, auth }
    }

    fn settings(&self, stored: &LdapCredentialDAO) -> anyhow::Result<client::Settings> {
        let bind_password = match &stored.bind_password {
            Some(sealed) => self
                .secrets
                .open(PASSWORD_PURPOSE, sealed)
                .context("the LDAP bind password")?,
            None => String::new(),
        };
        Ok(client::Settings {
            host: stored.host.clone(),
            port: u16::try_from(stored.port).context("the stored LDAP port")?,
            encryption: LdapEncryption::from_db(&stored.encryption)
                .context("the stored LDAP encryption")?,
            skip_tls_verify: stored.skip_tls_verify,
            bind_dn: stored.bind_dn.clone(),
            bind_password,
            base_dn: stored.base_dn.clone(),
            user_filter: stored.user_filter.clone(),
            email_attribute: stored.email_attribute.clone(),
            name_attribute: stored.name_attribute.clone(),
        })
    }

    /// The account for a verified directory user: the one with their e-mail, or a new one.
    async fn account_for(&self, person: client::Person) -> Result<i64> {
        let email = person
            .email
            .filter(|e| is_valid_email(e.trim()))
            .map(|e| e.trim().to_owned())
            .ok_or_else(|| {
                warn!(
                    "LDAP user {} has no valid e-mail in the e-mail attribute",
                    person.dn
                );
                CoreError::Rejected(
                    "Your directory entry has no e-mail address; ask an admin".into(),
                )
            })?;
        let db = self.auth.db();
        if let Some(user) = db.get_user_by_email(&email).await? {
            if !user.active {
                return Err(CoreError::Rejected("User is disabled".into()));
            }
            return Ok(user.id);
        }
        self.auth.check_seat().await?;
        let name = person
            .name
            .as_deref()
            .map(str::trim)
            .filter(|n| !n.is_empty());
        let id = db.create_user(&email, None, false, name).await?;
        self.auth.invalidate_directory();
        Ok(id)
    }
}

fn credential(dao: LdapCredentialDAO) -> Result<LdapCredential> {
    Ok(LdapCredential {
        port: i32::try_from(dao.port)
            .map_err(|_| CoreError::Other(anyhow::anyhow!("the stored LDAP port is invalid")))?,
        encryption: LdapEncryption::from_db(&dao.encryption).ok_or_else(|| {
            CoreError::Other(anyhow::anyhow!("the stored LDAP encryption is invalid"))
        })?,
        host: dao.host,
        bind_dn: dao.bind_dn,
        base_dn: dao.base_dn,
        user_filter: dao.user_filter,
        skip_tls_verify: dao.skip_tls_verify,
        email_attribute: dao.email_attribute,
        name_attribute: dao.name_attribute,
        created_at: dao.created_at,
        updated_at: dao.updated_at,
    })
}

/// The row an input stands for; the password sealed when given.
fn dao(input: &UpdateLdapCredentialInput, sealed: Option<String>) -> LdapCredentialDAO {
    let now = chrono::Utc::now();
    LdapCredentialDAO {
        host: input.host.trim().to_owned(),
        port: i64::from(input.port),
        bind_dn: input.bind_dn.trim().to_owned(),
        bind_password: sealed,
        base_dn: input.base_dn.trim().to_owned(),
        user_filter: input.user_filter.trim().to_owned(),
        encryption: input.encryption.as_db().to_owned(),
        skip_tls_verify: input.skip_tls_verify,
        email_attribute: input.email_attribute.trim().to_owned(),
        name_attribute: input
            .name_attribute
            .as_deref()
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_owned),
        created_at: now,
        updated_at: now,
    }
}

#[async_trait]
impl LdapService for LdapServiceImpl {
    async fn read_credential(&self) -> Result<Option<LdapCredential>> {
        self.db
            .read_ldap_credential()
            .await?
            .map(credential)
            .transpose()
    }

    async fn update_credential(&self, input: &UpdateLdapCredentialInput) -> Result<()> {
        let sealed = input
            .bind_password
            .as_deref()
            .map(|p| self.secrets.seal(PASSWORD_PURPOSE, p));
        self.db.update_ldap_credential(&dao(input, sealed)).await?;
        Ok(())
    }

    async fn delete_credential(&self) -> Result<()> {
        if self
            .db
            .read_server_setting()
            .await?
            .security_disable_password_login
        {
            return Err(CoreError::Rejected(
                "Password sign-in is turned off: turn it back on (Settings → Security) before \
                 removing LDAP, or nobody could sign in"
                    .into(),
            ));
        }
        if !self.db.delete_ldap_credential().await? {
            return Err(CoreError::NotFound("LDAP is not set up"));
        }
        Ok(())
    }

    async fn test_connection(&self, input: &UpdateLdapCredentialInput) -> Result<()> {
        let stored_password = self
            .db
            .read_ldap_credential()
            .await?
            .and_then(|c| c.bind_password);
        let sealed = match &input.bind_password {
            Some(p) => Some(self.secrets.seal(PASSWORD_PURPOSE, p)),
            None => stored_password,
        };
        let settings = self.settings(&dao(input, sealed))?;
        client::test(&settings)
            .await
            .map_err(|e| CoreError::Rejected(format!("The LDAP connection test failed: {e:#}")))
    }

    async fn token_auth_ldap(
        &self,
        user_id: &str,
        password: &str,
        client: Option<IpAddr>,
    ) -> Result<TokenAuthResponse> {
        let Some(stored) = self.db.read_ldap_credential().await? else {
            return Err(CoreError::Rejected(
                "LDAP sign-in is not set up on this server".into(),
            ));
        };
        if user_id.len() > MAX_USER_ID_LEN || user_id.chars().any(char::is_control) {
            return Err(CoreError::invalid(
                "userId",
                "At most 256 characters, without control characters",
            ));
        }
        let key = format!("ldap:{}", user_id.trim().to_lowercase());
        self.auth.charge_sign_in(&key, client).await?;
        let settings = self.settings(&stored)?;
        let verdict = client::verify(&settings, user_id, password)
            .await
            .map_err(|e| {
                warn!("LDAP sign-in of {user_id:?} failed: {e:#}");
                CoreError::Rejected(
                    "Sign-in through LDAP is not working right now; an admin can check the LDAP \
                     settings (the server log has the details)"
                        .into(),
                )
            })?;
        let person = match verdict {
            client::Verdict::Verified(person) => person,
            client::Verdict::Rejected => {
                return Err(CoreError::Rejected("Invalid user id or password".into()));
            }
        };
        self.auth.refund_sign_in(&key, client).await?;
        let id = self.account_for(person).await?;
        self.db.record_external_sign_in(id, METHOD).await?;
        let (access_token, refresh) = self.auth.issue_tokens(id).await?;
        Ok(TokenAuthResponse {
            access_token,
            refresh_token: refresh.token,
        })
    }
}
