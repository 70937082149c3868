//! LDAP sign-in settings (the single row of `ldap_credential`; the bind password already
//! sealed by the caller) and the record of users' sign-ins through it.

use crate::{DbConn, DbResult};

/// The row of `ldap_credential`; `bind_password` is sealed.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct LdapCredentialDAO {
    pub host: String,
    pub port: i64,
    pub bind_dn: String,
    pub bind_password: Option<String>,
    pub base_dn: String,
    pub user_filter: String,
    /// `none`, `starttls` or `ldaps`.
    pub encryption: String,
    pub skip_tls_verify: bool,
    pub email_attribute: String,
    pub name_attribute: Option<String>,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

impl DbConn {
    pub async fn read_ldap_credential(&self) -> DbResult<Option<LdapCredentialDAO>> {
        on_pool!(self, pool => {
            Ok(sqlx::query_as(
                "SELECT host, port, bind_dn, bind_password, base_dn, user_filter, encryption,
                        skip_tls_verify, email_attribute, name_attribute, created_at, updated_at
                 FROM ldap_credential WHERE id = 1",
            )
            .fetch_optional(pool)
            .await?)
        })
    }

    /// Creates or replaces the settings (`created_at`/`updated_at` of `value` are ignored).
    /// `bind_password`: `Some` stores it (sealed), `None` keeps the stored one.
    pub async fn update_ldap_credential(&self, value: &LdapCredentialDAO) -> DbResult<()> {
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO ldap_credential (id, host, port, bind_dn, bind_password, base_dn,
                     user_filter, encryption, skip_tls_verify, email_attribute, name_attribute)
                 VALUES (1, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                 ON CONFLICT (id) DO UPDATE SET
                     host = excluded.host,
                     port = excluded.port,
                     bind_dn = excluded.bind_dn,
                     bind_password = COALESCE(excluded.bind_password, ldap_credential.bind_password),
                     base_dn = excluded.base_dn,
                     user_filter = excluded.user_filter,
                     encryption = excluded.encryption,
                     skip_tls_verify = excluded.skip_tls_verify,
                     email_attribute = excluded.email_attribute,
                     name_attribute = excluded.name_attribute,
                     updated_at = DATETIME('now')",
            )
            .bind(&value.host)
            .bind(value.port)
            .bind(&value.bind_dn)
            .bind(&value.bind_password)
            .bind(&value.base_dn)
            .bind(&value.user_filter)
            .bind(&value.encryption)
            .bind(value.skip_tls_verify)
            .bind(&value.email_attribute)
            .bind(&value.name_attribute)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    /// Removes the settings; returns whether there were any.
    pub async fn delete_ldap_credential(&self) -> DbResult<bool> {
        on_pool!(self, pool => {
            let result = sqlx::query("DELETE FROM ldap_credential WHERE id = 1")
                .execute(pool)
                .await?;
            Ok(result.rows_affected() > 0)
        })
    }

    /// Records that `user_id` just signed in through `method` (e.g. `ldap`).
    pub async fn record_external_sign_in(&self, user_id: i64, method: &str) -> DbResult<()> {
        on_pool!(self, pool => {
            sqlx::query(
                "UPDATE users SET external_sign_in_method = $1, external_sign_in_at = DATETIME('now')
                 WHERE id = $2",
            )
            .bind(method)
            .bind(user_id)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    /// Whether an active admin has signed in through `method`.
    pub async fn admin_signed_in_with(&self, method: &str) -> DbResult<bool> {
        on_pool!(self, pool => {
            Ok(sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM users
                     WHERE active AND is_admin AND external_sign_in_method = $1)",
            )
            .bind(method)
            .fetch_one(pool)
            .await?)
        })
    }
}
