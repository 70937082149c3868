//! Password resets: at most one pending reset code per user. A code is 32 random hex digits
//! (122 bits), handed out once by [`DbConn::create_password_reset`]; the table keeps only its
//! SHA-256 digest. Requesting a new code replaces the old one, and redeeming a code
//! ([`DbConn::redeem_password_reset`]) deletes it in the same statement, so it works once even
//! under concurrent requests.

use crate::{DbConn, DbError, DbResult, error::expect_one, random_hex, secret_digest as digest};
use chrono::{DateTime, Utc};

/// A pending reset; `code` is the secret itself only in what `create_password_reset` returns
/// (the table holds its digest).
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct PasswordResetDAO {
    pub id: i64,
    pub user_id: i64,
    pub code: String,
    pub created_at: DateTime<Utc>,
}

impl DbConn {
    /// Starts a reset for `user_id`, replacing any pending one, and returns the new code.
    pub async fn create_password_reset(&self, user_id: i64) -> DbResult<PasswordResetDAO> {
        on_pool!(self, pool => {
            let code = random_hex();
            let mut dao: PasswordResetDAO = sqlx::query_as(
                "INSERT INTO password_reset (user_id, code) VALUES ($1, $2)
                 ON CONFLICT (user_id) DO UPDATE
                     SET code = excluded.code, created_at = DATETIME('now')
                 RETURNING id, user_id, code, created_at",
            )
            .bind(user_id)
            .bind(digest(&code))
            .fetch_one(pool)
            .await
            .map_err(|e| DbError::from(e).missing_reference("user"))?;
            dao.code = code;
            Ok(dao)
        })
    }

    /// Redeems `code` if it exists and was issued less than `max_age_hours` ago: the reset is
    /// deleted and its user returned. An unknown, used or expired code gives `None` (an
    /// expired one is deleted too).
    pub async fn redeem_password_reset(
        &self,
        code: &str,
        max_age_hours: u32,
    ) -> DbResult<Option<i64>> {
        on_pool!(self, pool => {
            let row: Option<(i64, bool)> = sqlx::query_as(
                "DELETE FROM password_reset WHERE code = $1
                 RETURNING user_id, created_at > DATETIME('now', $2)",
            )
            .bind(digest(code))
            .bind(format!("-{max_age_hours} hours"))
            .fetch_optional(pool)
            .await?;
            Ok(row.and_then(|(user_id, fresh)| fresh.then_some(user_id)))
        })
    }

    /// The pending reset of `user_id` (its `code` is the stored digest).
    pub async fn get_password_reset_by_user_id(
        &self,
        user_id: i64,
    ) -> DbResult<Option<PasswordResetDAO>> {
        on_pool!(self, pool => {
            Ok(sqlx::query_as(
                "SELECT id, user_id, code, created_at FROM password_reset WHERE user_id = $1",
            )
            .bind(user_id)
            .fetch_optional(pool)
            .await?)
        })
    }

    pub async fn delete_password_reset_by_user_id(&self, user_id: i64) -> DbResult<()> {
        on_pool!(self, pool => {
            let result = sqlx::query("DELETE FROM password_reset WHERE user_id = $1")
                .bind(user_id)
                .execute(pool)
                .await?;
            expect_one(result.rows_affected(), "password reset")
        })
    }

    /// Removes reset codes created more than `hours` ago; returns how many.
    pub async fn delete_password_resets_older_than(&self, hours: u32) -> DbResult<u64> {
        on_pool!(self, pool => {
            let result =
                sqlx::query("DELETE FROM password_reset WHERE created_at < DATETIME('now', $1)")
                    .bind(format!("-{hours} hours"))
                    .execute(pool)
                    .await?;
            Ok(result.rows_affected())
        })
    }
}
