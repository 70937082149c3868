//! OAuth / OIDC sign-in settings, one row of `oauth_credential` per provider (the client
//! secret already sealed by the caller).

use chrono::{DateTime, Utc};

use crate::{DbConn, DbResult};

#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct OAuthCredentialDAO {
    /// `github`, `google`, `gitlab` or `oidc`.
    pub provider: String,
    pub client_id: String,
    /// Sealed.
    pub client_secret: String,
    pub config_url: Option<String>,
    pub config_scopes: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl DbConn {
    pub async fn read_oauth_credential(
        &self,
        provider: &str,
    ) -> DbResult<Option<OAuthCredentialDAO>> {
        on_pool!(self, pool => {
            Ok(sqlx::query_as(
                "SELECT provider, client_id, client_secret, config_url, config_scopes, created_at,
                        updated_at
                 FROM oauth_credential WHERE provider = $1",
            )
            .bind(provider)
            .fetch_optional(pool)
            .await?)
        })
    }

    /// The providers that are set up, in a fixed order.
    pub async fn list_oauth_providers(&self) -> DbResult<Vec<String>> {
        on_pool!(self, pool => {
            Ok(
                sqlx::query_scalar("SELECT provider FROM oauth_credential ORDER BY provider")
                    .fetch_all(pool)
                    .await?,
            )
        })
    }

    /// Creates or replaces a provider's settings; `client_secret: None` keeps the stored one
    /// (and is an error for a provider that has none yet: the caller checks).
    pub async fn update_oauth_credential(
        &self,
        provider: &str,
        client_id: &str,
        client_secret: Option<&str>,
        config_url: Option<&str>,
    ) -> DbResult<()> {
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO oauth_credential (provider, client_id, client_secret, config_url)
                 VALUES ($1, $2, COALESCE($3, ''), $4)
                 ON CONFLICT (provider) DO UPDATE SET
                     client_id = excluded.client_id,
                     client_secret = CASE WHEN $5 IS NULL THEN oauth_credential.client_secret
                                          ELSE excluded.client_secret END,
                     config_url = excluded.config_url,
                     updated_at = DATETIME('now')",
            )
            .bind(provider)
            .bind(client_id)
            .bind(client_secret)
            .bind(config_url)
            .bind(client_secret)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    pub async fn delete_oauth_credential(&self, provider: &str) -> DbResult<bool> {
        on_pool!(self, pool => {
            let result = sqlx::query("DELETE FROM oauth_credential WHERE provider = $1")
                .bind(provider)
                .execute(pool)
                .await?;
            Ok(result.rows_affected() > 0)
        })
    }
}
