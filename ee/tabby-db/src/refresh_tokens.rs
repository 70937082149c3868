//! Refresh tokens: long-lived, single-use secrets that buy a new access token.
//!
//! Each token is 32 random hex digits, expires [`REFRESH_TOKEN_LIFETIME_DAYS`] after it is
//! issued and is replaced by a new one on every refresh ([`DbConn::rotate_refresh_token`]),
//! atomically, so a token can be redeemed only once even under concurrent requests.
//! Only the SHA-256 digest of a token is stored (rows written before digests keep their plain
//! value until they expire). Tokens rotated from one sign-in form a family; a redeemed token
//! is kept (marked used) until it expires, and presenting it again revokes the family: one of
//! the two holders is a thief. Expiry times are computed by SQLite's clock, like every other
//! timestamp in the schema.

use chrono::{DateTime, Utc};

use crate::{DbConn, DbError, DbResult, error::expect_one, random_hex};

pub const REFRESH_TOKEN_LIFETIME_DAYS: i64 = 7;

/// A token presented again this soon after it was redeemed is a client refreshing twice at
/// once (two tabs), not theft: it is refused without revoking the family.
const REUSE_GRACE_SECONDS: i64 = 10;

const INSERT_TOKEN: &str = "INSERT INTO refresh_tokens (user_id, token, expires_at, hashed, family)
     VALUES ($1, $2, DATETIME('now', $3), TRUE, $4)
     RETURNING id, user_id, token, expires_at, created_at";

// A presented token's row is matched by its digest, or (older rows) its plain value:
// `(hashed AND token = <digest>) OR (NOT hashed AND token = <token>)`.

/// The row of a presented token: id, user, family, not expired, redeemed within the grace
/// period (`None`: not redeemed).
type PresentedToken = (i64, i64, Option<String>, bool, Option<bool>);

/// The SQLite date modifier for a new token's expiry.
fn lifetime_modifier() -> String {
    format!("+{REFRESH_TOKEN_LIFETIME_DAYS} days")
}

/// Tokens are hex: compared without regard to case, as the column always did.
fn normalize(token: &str) -> String {
    token.trim().to_ascii_lowercase()
}

fn digest(token: &str) -> String {
    crate::secret_digest(token)
}

/// A row of `refresh_tokens`; `token` is the secret itself when just issued (the table only
/// holds its digest).
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

/// Issues a token of `family` for `user_id` through `$executor` (a pool or a transaction);
/// evaluates to the new row, with the secret itself in `token`.
macro_rules! insert_token {
    ($executor:expr, $user_id:expr, $family:expr) => {
        async {
            let token = random_hex();
            let mut dao: RefreshTokenDAO = sqlx::query_as(INSERT_TOKEN)
                .bind($user_id)
                .bind(digest(&token))
                .bind(lifetime_modifier())
                .bind($family)
                .fetch_one($executor)
                .await
                .map_err(|e| DbError::from(e).missing_reference("user"))?;
            dao.token = token;
            DbResult::Ok(dao)
        }
    };
}

impl DbConn {
    /// Issues a new refresh token for `user_id` (a sign-in: a new family).
    pub async fn create_refresh_token(&self, user_id: i64) -> DbResult<RefreshTokenDAO> {
        on_pool!(self, pool => {
            insert_token!(pool, user_id, &random_hex()).await
        })
    }

    /// The live (not yet redeemed) row of a presented token, expired or not.
    pub async fn get_refresh_token(&self, token: &str) -> DbResult<Option<RefreshTokenDAO>> {
        on_pool!(self, pool => {
            let found: Option<RefreshTokenDAO> = sqlx::query_as(
                "SELECT id, user_id, token, expires_at, created_at FROM refresh_tokens
                 WHERE ((hashed AND token = $1) OR (NOT hashed AND token = $2)) AND used_at IS NULL",
            )
            .bind(digest(token))
            .bind(normalize(token))
            .fetch_optional(pool)
            .await?;
            Ok(found.map(|dao| RefreshTokenDAO {
                token: normalize(token),
                ..dao
            }))
        })
    }

    /// Redeems `old` and issues its replacement in the same family, in one transaction.
    /// Fails with `NotFound` if `old` does not exist or has expired (an expired token is
    /// deleted on the way), and with `Reused` if `old` was redeemed before: then every token
    /// of its family is deleted (unless it was redeemed within the last few seconds, a client
    /// refreshing twice at once).
    pub async fn rotate_refresh_token(&self, old: &str) -> DbResult<RefreshTokenDAO> {
        on_pool!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let found: Option<PresentedToken> = sqlx::query_as(
                "SELECT id, user_id, family, expires_at > DATETIME('now'),
                            used_at > DATETIME('now', $1)
                     FROM refresh_tokens
                     WHERE (hashed AND token = $2) OR (NOT hashed AND token = $3)",
            )
            .bind(format!("-{REUSE_GRACE_SECONDS} seconds"))
            .bind(digest(old))
            .bind(normalize(old))
            .fetch_optional(&mut *tx)
            .await?;
            let not_found = DbError::NotFound {
                what: "refresh token",
            };
            let Some((id, user_id, family, live, recently_used)) = found else {
                return Err(not_found);
            };
            match recently_used {
                // Redeemed a moment ago: a double refresh, refused without revoking.
                Some(true) => {
                    return Err(DbError::Reused {
                        what: "refresh token",
                    });
                }
                Some(false) => {
                    match &family {
                        Some(family) => {
                            sqlx::query("DELETE FROM refresh_tokens WHERE family = $1")
                                .bind(family)
                                .execute(&mut *tx)
                                .await?
                        }
                        None => {
                            sqlx::query("DELETE FROM refresh_tokens WHERE id = $1")
                                .bind(id)
                                .execute(&mut *tx)
                                .await?
                        }
                    };
                    tx.commit().await?;
                    return Err(DbError::Reused {
                        what: "refresh token",
                    });
                }
                None => {}
            }
            if !live {
                sqlx::query("DELETE FROM refresh_tokens WHERE id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                return Err(not_found);
            }
            sqlx::query("UPDATE refresh_tokens SET used_at = DATETIME('now') WHERE id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            let family = family.unwrap_or_else(random_hex);
            let new = insert_token!(&mut *tx, user_id, &family).await?;
            tx.commit().await?;
            Ok(new)
        })
    }

    /// Signs one session out: deletes the token's whole family (its rotated ancestors too).
    pub async fn delete_refresh_token(&self, token: &str) -> DbResult<()> {
        on_pool!(self, pool => {
            let family: Option<(i64, Option<String>)> = sqlx::query_as(
                "SELECT id, family FROM refresh_tokens
                 WHERE ((hashed AND token = $1) OR (NOT hashed AND token = $2)) AND used_at IS NULL",
            )
            .bind(digest(token))
            .bind(normalize(token))
            .fetch_optional(pool)
            .await?;
            let result = match family {
                Some((_, Some(family))) => {
                    sqlx::query("DELETE FROM refresh_tokens WHERE family = $1")
                        .bind(family)
                        .execute(pool)
                        .await?
                }
                Some((id, None)) => {
                    sqlx::query("DELETE FROM refresh_tokens WHERE id = $1")
                        .bind(id)
                        .execute(pool)
                        .await?
                }
                None => return expect_one(0, "refresh token"),
            };
            expect_one(result.rows_affected().min(1), "refresh token")
        })
    }

    /// Removes expired tokens; returns how many.
    pub async fn delete_expired_refresh_tokens(&self) -> DbResult<u64> {
        on_pool!(self, pool => {
            let result = sqlx::query("DELETE FROM refresh_tokens WHERE expires_at <= DATETIME('now')")
                .execute(pool)
                .await?;
            Ok(result.rows_affected())
        })
    }

    /// Signs the user out everywhere; returns how many tokens were removed.
    pub async fn delete_refresh_tokens_of_user(&self, user_id: i64) -> DbResult<u64> {
        on_pool!(self, pool => {
            let result = sqlx::query("DELETE FROM refresh_tokens WHERE user_id = $1")
                .bind(user_id)
                .execute(pool)
                .await?;
            Ok(result.rows_affected())
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::{DbConn, DbError};

    /// Moves a token's expiry into the past (the API never issues expired tokens).
    async fn expire(db: &DbConn, token: &str) {
        let updated: Result<_, crate::DbError> = on_pool!(db, pool => {
            sqlx::query(
                "UPDATE refresh_tokens SET expires_at = DATETIME('now', '-1 second') WHERE token = $1",
            )
            .bind(super::digest(token))
            .execute(pool)
            .await
            .map(|_| ())
            .map_err(Into::into)
        });
        updated.unwrap();
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
