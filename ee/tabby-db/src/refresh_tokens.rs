//! Refresh tokens: long-lived, single-use secrets that buy a new access token.
//!
//! Each token is 32 random hex digits, expires [`REFRESH_TOKEN_LIFETIME_DAYS`] after it is
//! issued and is replaced by a new one on every refresh ([`DbConn::rotate_refresh_token`]),
//! atomically, so a token can be redeemed only once even under concurrent requests.
//! Expiry times are computed by SQLite's clock, like every other timestamp in the schema.

use chrono::{DateTime, Utc};

use crate::{DbConn, DbError, DbResult, error::expect_one, random_hex};

pub const REFRESH_TOKEN_LIFETIME_DAYS: i64 = 7;

const INSERT_TOKEN: &str = "INSERT INTO refresh_tokens (user_id, token, expires_at)
     VALUES (?, ?, DATETIME('now', ?))
     RETURNING id, user_id, token, expires_at, created_at";

/// The SQLite date modifier for a new token's expiry.
fn lifetime_modifier() -> String {
    format!("+{REFRESH_TOKEN_LIFETIME_DAYS} days")
}

/// A row of `refresh_tokens`.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct RefreshTokenDAO {
    pub id: i64,
    pub user_id: i64,
    pub token: String,
    pub expires_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
}

impl RefreshTokenDAO {
    pub fn is_expired(&self) -> bool {
        self.expires_at <= Utc::now()
    }
}

impl DbConn {
    /// Issues a new refresh token for `user_id`.
    pub async fn create_refresh_token(&self, user_id: i64) -> DbResult<RefreshTokenDAO> {
        sqlx::query_as(INSERT_TOKEN)
            .bind(user_id)
            .bind(random_hex())
            .bind(lifetime_modifier())
            .fetch_one(&self.pool)
            .await
            .map_err(|e| DbError::from(e).missing_reference("user"))
    }

    /// The token row, expired or not.
    pub async fn get_refresh_token(&self, token: &str) -> DbResult<Option<RefreshTokenDAO>> {
        Ok(sqlx::query_as(
            "SELECT id, user_id, token, expires_at, created_at FROM refresh_tokens WHERE token = ?",
        )
        .bind(token)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Redeems `old` and issues its replacement for the same user, in one transaction.
    /// Fails with `NotFound` if `old` does not exist or has expired (an expired token is
    /// deleted on the way).
    pub async fn rotate_refresh_token(&self, old: &str) -> DbResult<RefreshTokenDAO> {
        let mut tx = self.begin_write().await?;
        let redeemed: Option<(i64, bool)> = sqlx::query_as(
            "DELETE FROM refresh_tokens WHERE token = ?
             RETURNING user_id, expires_at > DATETIME('now')",
        )
        .bind(old)
        .fetch_optional(&mut *tx)
        .await?;
        let user_id = match redeemed {
            Some((user_id, true)) => user_id,
            Some((_, false)) => {
                tx.commit().await?;
                return Err(DbError::NotFound {
                    what: "refresh token",
                });
            }
            None => {
                return Err(DbError::NotFound {
                    what: "refresh token",
                });
            }
        };
        let new: RefreshTokenDAO = sqlx::query_as(INSERT_TOKEN)
            .bind(user_id)
            .bind(random_hex())
            .bind(lifetime_modifier())
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(new)
    }

    pub async fn delete_refresh_token(&self, token: &str) -> DbResult<()> {
        let result = sqlx::query("DELETE FROM refresh_tokens WHERE token = ?")
            .bind(token)
            .execute(&self.pool)
            .await?;
        expect_one(result.rows_affected(), "refresh token")
    }

    /// Removes expired tokens; returns how many.
    pub async fn delete_expired_refresh_tokens(&self) -> DbResult<u64> {
        let result = sqlx::query("DELETE FROM refresh_tokens WHERE expires_at <= DATETIME('now')")
            .execute(&self.pool)
            .await?;
        Ok(result.rows_affected())
    }

    /// Signs the user out everywhere; returns how many tokens were removed.
    pub async fn delete_refresh_tokens_of_user(&self, user_id: i64) -> DbResult<u64> {
        let result = sqlx::query("DELETE FROM refresh_tokens WHERE user_id = ?")
            .bind(user_id)
            .execute(&self.pool)
            .await?;
        Ok(result.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use crate::{DbConn, DbError};

    /// Moves a token's expiry into the past (the API never issues expired tokens).
    async fn expire(db: &DbConn, token: &str) {
        sqlx::query(
            "UPDATE refresh_tokens SET expires_at = DATETIME('now', '-1 second') WHERE token = ?",
        )
        .bind(token)
        .execute(&db.pool)
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn expired_tokens_cannot_rotate_and_are_swept() {
        let db = DbConn::new_in_memory().await.unwrap();
        let user = db
            .create_user("a@example.com", None, false, None)
            .await
            .unwrap();
        let stale = db.create_refresh_token(user).await.unwrap();
        let fresh = db.create_refresh_token(user).await.unwrap();
        expire(&db, &stale.token).await;

        let row = db.get_refresh_token(&stale.token).await.unwrap().unwrap();
        assert!(row.is_expired());
        assert!(matches!(
            db.rotate_refresh_token(&stale.token).await,
            Err(DbError::NotFound {
                what: "refresh token"
            })
        ));
        assert_eq!(
            db.get_refresh_token(&stale.token).await.unwrap(),
            None,
            "deleted on the way"
        );

        let other_stale = db.create_refresh_token(user).await.unwrap();
        expire(&db, &other_stale.token).await;
        assert_eq!(db.delete_expired_refresh_tokens().await.unwrap(), 1);
        assert!(db.get_refresh_token(&fresh.token).await.unwrap().is_some());
    }
}
