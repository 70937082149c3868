//! Password resets: at most one pending reset code (a random UUID) per user. Requesting a new
//! one replaces the old; how long a code stays valid is the caller's rule, checked against
//! `created_at`.

use chrono::{DateTime, Utc};

use crate::{DbConn, DbError, DbResult, error::expect_one};

/// A row of `password_reset`.
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
        sqlx::query_as(
            "INSERT INTO password_reset (user_id, code) VALUES (?, ?)
             ON CONFLICT (user_id) DO UPDATE
                 SET code = excluded.code, created_at = DATETIME('now')
             RETURNING id, user_id, code, created_at",
        )
        .bind(user_id)
        .bind(uuid::Uuid::new_v4().to_string())
        .fetch_one(&self.pool)
        .await
        .map_err(|e| DbError::from(e).missing_reference("user"))
    }

    pub async fn get_password_reset_by_code(
        &self,
        code: &str,
    ) -> DbResult<Option<PasswordResetDAO>> {
        Ok(sqlx::query_as(
            "SELECT id, user_id, code, created_at FROM password_reset WHERE code = ?",
        )
        .bind(code)
        .fetch_optional(&self.pool)
        .await?)
    }

    pub async fn get_password_reset_by_user_id(
        &self,
        user_id: i64,
    ) -> DbResult<Option<PasswordResetDAO>> {
        Ok(sqlx::query_as(
            "SELECT id, user_id, code, created_at FROM password_reset WHERE user_id = ?",
        )
        .bind(user_id)
        .fetch_optional(&self.pool)
        .await?)
    }

    pub async fn delete_password_reset_by_user_id(&self, user_id: i64) -> DbResult<()> {
        let result = sqlx::query("DELETE FROM password_reset WHERE user_id = ?")
            .bind(user_id)
            .execute(&self.pool)
            .await?;
        expect_one(result.rows_affected(), "password reset")
    }

    /// Removes reset codes created more than `hours` ago; returns how many.
    pub async fn delete_password_resets_older_than(&self, hours: u32) -> DbResult<u64> {
        let result =
            sqlx::query("DELETE FROM password_reset WHERE created_at < DATETIME('now', ?)")
                .bind(format!("-{hours} hours"))
                .execute(&self.pool)
                .await?;
        Ok(result.rows_affected())
    }
}
