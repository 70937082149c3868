//! [`SettingService`]: server info for the sign-in page, and the security setting.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use async_trait::async_trait;
use tabby_db::DbConn;
use tabby_schema::{
    CoreError, Result,
    setting::{NetworkSetting, SecuritySetting, SecuritySettingInput, ServerInfo, SettingService},
};

use crate::mail::Mailer;

pub struct SettingServiceImpl {
    pub db: DbConn,
    pub mailer: Arc<Mailer>,
    /// Set when a chat model is available (the Answer Engine is on).
    pub is_chat_enabled: AtomicBool,
}

impl SettingServiceImpl {
    /// Whether an admin can sign in without a password: LDAP or an OAuth provider is set up
    /// and an active admin has signed in through it.
    async fn admin_has_other_sign_in(&self) -> Result<bool> {
        if self.db.read_ldap_credential().await?.is_some()
            && self.db.admin_signed_in_with(crate::ldap::METHOD).await?
        {
            return Ok(true);
        }
        for provider in self.db.list_oauth_providers().await? {
            if self
                .db
                .admin_signed_in_with(&format!("oauth:{provider}"))
                .await?
            {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

#[async_trait]
impl SettingService for SettingServiceImpl {
    async fn server_info(&self) -> Result<ServerInfo> {
        let setting = self.db.read_server_setting().await?;
        Ok(ServerInfo {
            is_admin_initialized: self.db.get_user(tabby_db::OWNER_USER_ID).await?.is_some(),
            is_chat_enabled: self.is_chat_enabled.load(Ordering::Relaxed),
            is_email_configured: self.mailer.is_configured().await?,
            allow_self_signup: !setting.allowed_register_domains().is_empty(),
            disable_password_login: setting.security_disable_password_login,
            is_demo_mode: false,
        })
    }

    async fn security_setting(&self) -> Result<SecuritySetting> {
        let setting = self.db.read_server_setting().await?;
        Ok(SecuritySetting {
            allowed_register_domain_list: setting
                .allowed_register_domains()
                .into_iter()
                .map(str::to_owned)
                .collect(),
            disable_client_side_telemetry: setting.security_disable_client_side_telemetry,
            disable_password_login: setting.security_disable_password_login,
        })
    }

    async fn update_security_setting(&self, input: SecuritySettingInput) -> Result<()> {
        let domains = input.validated_domains()?;
        if input.disable_password_login && !self.admin_has_other_sign_in().await? {
            return Err(CoreError::invalid(
                "disablePasswordLogin",
                "Password sign-in can only be turned off once another sign-in method works \
                 for an admin: set up LDAP or an OAuth provider and sign in through it as an \
                 admin first",
            ));
        }
        let list = domains.join(",");
        self.db
            .update_security_setting(
                (!list.is_empty()).then_some(list.as_str()),
                input.disable_client_side_telemetry,
                input.disable_password_login,
            )
            .await?;
        Ok(())
    }

    async fn network_setting(&self) -> Result<NetworkSetting> {
        Ok(NetworkSetting {
            external_url: self.db.read_server_setting().await?.network_external_url,
        })
    }

    async fn update_network_setting(&self, external_url: &str) -> Result<()> {
        self.db.update_network_setting(external_url).await?;
        Ok(())
    }
}
