//! The registration token (row 1 of `registration_token`): a UUID that authorizes workers and
//! the ingestion API. Created when the database is opened; admins can rotate it.

use crate::{DbConn, DbResult};

const TOKEN_ROW_ID: i64 = 1;

impl DbConn {
    pub(crate) async fn ensure_registration_token(&self) -> DbResult<()> {
        on_pool!(self, pool => {
            sqlx::query("INSERT INTO registration_token (id, token) VALUES ($1, $2) ON CONFLICT DO NOTHING")
                .bind(TOKEN_ROW_ID)
                .bind(uuid::Uuid::new_v4().to_string())
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    /// The current registration token.
    pub async fn read_registration_token(&self) -> DbResult<String> {
        on_pool!(self, pool => {
            Ok(
                sqlx::query_scalar("SELECT token FROM registration_token WHERE id = $1")
                    .bind(TOKEN_ROW_ID)
                    .fetch_one(pool)
                    .await?,
            )
        })
    }

    /// Replaces the registration token with a new random UUID and returns it.
    pub async fn reset_registration_token(&self) -> DbResult<String> {
        on_pool!(self, pool => {
            let token = uuid::Uuid::new_v4().to_string();
            sqlx::query(
                "INSERT INTO registration_token (id, token) VALUES ($1, $2)
                 ON CONFLICT (id) DO UPDATE SET token = excluded.token, updated_at = DATETIME('now')",
            )
            .bind(TOKEN_ROW_ID)
            .bind(&token)
            .execute(pool)
            .await?;
            Ok(token)
        })
    }
}
