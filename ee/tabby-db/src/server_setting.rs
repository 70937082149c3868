//! Server-wide settings (the single row of `server_setting`) and the persisted JWT secret
//! (`server_secrets`).
//!
//! The secret lives in its own table so that nothing that reads settings for display can
//! return it. Upstream Tabby draws a new secret in every process, which signs everyone out on
//! restart; keeping it here makes sessions survive restarts.

use crate::{DbConn, DbResult, random_hex};

/// The row of `server_setting`.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct ServerSettingDAO {
    /// Comma-separated e-mail domains allowed to register; `None` or empty means any.
    pub security_allowed_register_domain_list: Option<String>,
    pub security_disable_client_side_telemetry: bool,
    pub security_disable_password_login: bool,
    pub network_external_url: String,
    pub billing_enterprise_license: Option<String>,
    pub branding_logo: Option<String>,
    pub branding_icon: Option<String>,
}

impl ServerSettingDAO {
    /// The allowed registration domains, trimmed, without empty entries.
    pub fn allowed_register_domains(&self) -> Vec<&str> {
        self.security_allowed_register_domain_list
            .as_deref()
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|domain| !domain.is_empty())
            .collect()
    }
}

impl DbConn {
    /// The settings, with defaults if they were never changed.
    pub async fn read_server_setting(&self) -> DbResult<ServerSettingDAO> {
        on_pool!(self, pool => {
            // The migration creates the row; recreate it with defaults should it ever be missing.
            sqlx::query("INSERT INTO server_setting (id) VALUES (1) ON CONFLICT DO NOTHING")
                .execute(pool)
                .await?;
            Ok(sqlx::query_as(
                "SELECT security_allowed_register_domain_list, security_disable_client_side_telemetry,
                        security_disable_password_login, network_external_url,
                        billing_enterprise_license, branding_logo, branding_icon
                 FROM server_setting WHERE id = 1",
            )
            .fetch_one(pool)
            .await?)
        })
    }

    pub async fn update_security_setting(
        &self,
        allowed_register_domain_list: Option<&str>,
        disable_client_side_telemetry: bool,
        disable_password_login: bool,
    ) -> DbResult<()> {
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO server_setting (id, security_allowed_register_domain_list,
                     security_disable_client_side_telemetry, security_disable_password_login)
                 VALUES (1, $1, $2, $3)
                 ON CONFLICT (id) DO UPDATE SET
                     security_allowed_register_domain_list =
                         excluded.security_allowed_register_domain_list,
                     security_disable_client_side_telemetry =
                         excluded.security_disable_client_side_telemetry,
                     security_disable_password_login = excluded.security_disable_password_login",
            )
            .bind(allowed_register_domain_list)
            .bind(disable_client_side_telemetry)
            .bind(disable_password_login)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    pub async fn update_network_setting(&self, external_url: &str) -> DbResult<()> {
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO server_setting (id, network_external_url) VALUES (1, $1)
                 ON CONFLICT (id) DO UPDATE SET network_external_url = excluded.network_external_url",
            )
            .bind(external_url)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    /// Stores (or, with `None`, removes) the enterprise license.
    pub async fn update_enterprise_license(&self, license: Option<&str>) -> DbResult<()> {
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO server_setting (id, billing_enterprise_license) VALUES (1, $1)
                 ON CONFLICT (id) DO UPDATE
                     SET billing_enterprise_license = excluded.billing_enterprise_license",
            )
            .bind(license)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    pub async fn update_branding_setting(
        &self,
        logo: Option<&str>,
        icon: Option<&str>,
    ) -> DbResult<()> {
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO server_setting (id, branding_logo, branding_icon) VALUES (1, $1, $2)
                 ON CONFLICT (id) DO UPDATE
                     SET branding_logo = excluded.branding_logo,
                         branding_icon = excluded.branding_icon",
            )
            .bind(logo)
            .bind(icon)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    /// The server's JWT signing secret: generated (64 hex digits) on first use, then the same
    /// value forever, even when several processes ask at once.
    pub async fn get_or_create_jwt_secret(&self) -> DbResult<String> {
        on_pool!(self, pool => {
            let candidate = format!("{}{}", random_hex(), random_hex());
            sqlx::query("INSERT INTO server_secrets (id, jwt_secret) VALUES (1, $1) ON CONFLICT DO NOTHING")
                .bind(candidate)
                .execute(pool)
                .await?;
            Ok(
                sqlx::query_scalar("SELECT jwt_secret FROM server_secrets WHERE id = 1")
                    .fetch_one(pool)
                    .await?,
            )
        })
    }

    /// The secret stored secrets are sealed with: generated (64 hex digits) on first use,
    /// then the same value forever, like the JWT secret.
    pub async fn get_or_create_encryption_secret(&self) -> DbResult<String> {
        on_pool!(self, pool => {
            self.get_or_create_jwt_secret().await?;
            let candidate = format!("{}{}", random_hex(), random_hex());
            sqlx::query(
                "UPDATE server_secrets SET encryption_secret = $1
                 WHERE id = 1 AND encryption_secret IS NULL",
            )
            .bind(candidate)
            .execute(pool)
            .await?;
            Ok(
                sqlx::query_scalar("SELECT encryption_secret FROM server_secrets WHERE id = 1")
                    .fetch_one(pool)
                    .await?,
            )
        })
    }
}
