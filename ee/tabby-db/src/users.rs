//! Accounts: e-mail (unique, case-insensitive), optional argon2 password hash, role, active
//! flag, the per-user API auth token and profile fields.
//!
//! Auth tokens are `auth_` followed by 32 lowercase hex digits and are generated here, so
//! every path that creates or rotates one produces the same format. Comparing a presented
//! token in constant time is the caller's job; [`DbConn::get_user_by_auth_token`] only finds
//! the row.

use chrono::{DateTime, Utc};
use sqlx::QueryBuilder;

use crate::{
    DbConn, DbError, DbResult, Pagination, error::expect_one, pagination::push_in_filter,
    random_hex,
};

/// The first registered user owns the server; ids are never reused, so this stays true.
pub const OWNER_USER_ID: i64 = 1;

const USER: &str = "user";

/// `SELECT <every column but the avatar> FROM users WHERE <condition>`, as a literal.
macro_rules! select_user {
    ($condition:literal) => {
        concat!(
            "SELECT id, email, name, password_encrypted, is_admin, auth_token, active, ",
            "created_at, updated_at FROM users WHERE ",
            $condition
        )
    };
}

/// A row of `users`, without the avatar (see [`DbConn::get_user_avatar`]).
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct UserDAO {
    pub id: i64,
    pub email: String,
    pub name: Option<String>,
    /// argon2 PHC string; `None` for accounts that only sign in through SSO.
    pub password_encrypted: Option<String>,
    pub is_admin: bool,
    pub auth_token: String,
    pub active: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl UserDAO {
    pub fn is_owner(&self) -> bool {
        self.id == OWNER_USER_ID
    }
}

fn new_auth_token() -> String {
    format!("auth_{}", random_hex())
}

/// Inserts a user through `$executor` (a transaction); evaluates to its id.
macro_rules! insert_user {
    ($executor:expr, $email:expr, $password_encrypted:expr, $is_admin:expr, $name:expr) => {
        sqlx::query_scalar::<_, i64>(
            "INSERT INTO users (email, password_encrypted, is_admin, auth_token, name)
             VALUES ($1, $2, $3, $4, $5) RETURNING id",
        )
        .bind($email)
        .bind($password_encrypted)
        .bind($is_admin)
        .bind(new_auth_token())
        .bind($name)
        .fetch_one($executor)
    };
}

/// The user a `select_user!` query with one argument finds.
macro_rules! get_user_where {
    ($conn:expr, $sql:expr, $value:expr) => {
        on_pool!($conn, pool => {
            let user: Option<UserDAO> = sqlx::query_as($sql)
                .bind($value)
                .fetch_optional(pool)
                .await?;
            Ok(user)
        })
    };
}

impl DbConn {
    /// Creates a user with a fresh auth token and returns its id.
    /// Fails with `AlreadyExists` if the e-mail is taken (case-insensitively).
    pub async fn create_user(
        &self,
        email: &str,
        password_encrypted: Option<&str>,
        is_admin: bool,
        name: Option<&str>,
    ) -> DbResult<i64> {
        on_pool!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let id = insert_user!(&mut *tx, email, password_encrypted, is_admin, name).await?;
            tx.commit().await?;
            Ok(id)
        })
    }

    /// Creates a user and consumes the invitation `invitation_id` in one transaction, so an
    /// invitation is used at most once. Fails with `NotFound` if the invitation is gone.
    pub async fn create_user_with_invitation(
        &self,
        email: &str,
        password_encrypted: Option<&str>,
        is_admin: bool,
        name: Option<&str>,
        invitation_id: i64,
    ) -> DbResult<i64> {
        on_pool!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let deleted = sqlx::query("DELETE FROM invitations WHERE id = $1")
                .bind(invitation_id)
                .execute(&mut *tx)
                .await?;
            expect_one(deleted.rows_affected(), "invitation")?;
            let id = insert_user!(&mut *tx, email, password_encrypted, is_admin, name).await?;
            tx.commit().await?;
            Ok(id)
        })
    }

    /// Creates the first account (admin and owner) in one write transaction, unless any user
    /// exists; `None` then. Two concurrent first registrations cannot both become owner.
    pub async fn create_owner(
        &self,
        email: &str,
        password_encrypted: Option<&str>,
        name: Option<&str>,
    ) -> DbResult<Option<i64>> {
        on_pool!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let (count,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM users")
                .fetch_one(&mut *tx)
                .await?;
            if count > 0 {
                return Ok(None);
            }
            let id = insert_user!(&mut *tx, email, password_encrypted, true, name).await?;
            tx.commit().await?;
            Ok(Some(id))
        })
    }

    pub async fn get_user(&self, id: i64) -> DbResult<Option<UserDAO>> {
        get_user_where!(self, select_user!("id = $1"), id)
    }

    /// Case-insensitive.
    pub async fn get_user_by_email(&self, email: &str) -> DbResult<Option<UserDAO>> {
        get_user_where!(self, select_user!("email = CAST($1 AS CITEXT)"), email)
    }

    /// The user owning `auth_token`, active or not (the caller decides what inactive means).
    pub async fn get_user_by_auth_token(&self, auth_token: &str) -> DbResult<Option<UserDAO>> {
        get_user_where!(self, select_user!("auth_token = $1"), auth_token)
    }

    /// Users by id (all when `ids` is empty), a page at a time.
    pub async fn list_users(&self, ids: &[i64], page: Pagination) -> DbResult<Vec<UserDAO>> {
        on_pool!(self, pool => {
            let mut query = QueryBuilder::new(select_user!("1 = 1"));
            push_in_filter(&mut query, "id", ids);
            page.push_to(&mut query, "id");
            let rows = query
                .build_query_as::<UserDAO>()
                .fetch_all(pool)
                .await?;
            Ok(page.finish(rows))
        })
    }

    pub async fn count_users(&self) -> DbResult<usize> {
        on_pool!(self, pool => {
            let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM users")
                .fetch_one(pool)
                .await?;
            Ok(count as usize)
        })
    }

    pub async fn count_active_users(&self) -> DbResult<usize> {
        on_pool!(self, pool => {
            let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM users WHERE active")
                .fetch_one(pool)
                .await?;
            Ok(count as usize)
        })
    }

    pub async fn count_active_admins(&self) -> DbResult<usize> {
        on_pool!(self, pool => {
            let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM users WHERE active AND is_admin")
                .fetch_one(pool)
                .await?;
            Ok(count as usize)
        })
    }

    /// The e-mail addresses of the active admins (for mailed notifications).
    pub async fn list_active_admin_emails(&self) -> DbResult<Vec<String>> {
        on_pool!(self, pool => {
            Ok(
                sqlx::query_scalar("SELECT email FROM users WHERE active AND is_admin ORDER BY id")
                    .fetch_all(pool)
                    .await?,
            )
        })
    }

    pub async fn update_user_active(&self, id: i64, active: bool) -> DbResult<()> {
        on_pool!(self, pool => {
            let result =
                sqlx::query("UPDATE users SET active = $1, updated_at = DATETIME('now') WHERE id = $2")
                    .bind(active)
                    .bind(id)
                    .execute(pool)
                    .await?;
            expect_one(result.rows_affected(), USER)
        })
    }

    pub async fn update_user_role(&self, id: i64, is_admin: bool) -> DbResult<()> {
        on_pool!(self, pool => {
            let result =
                sqlx::query("UPDATE users SET is_admin = $1, updated_at = DATETIME('now') WHERE id = $2")
                    .bind(is_admin)
                    .bind(id)
                    .execute(pool)
                    .await?;
            expect_one(result.rows_affected(), USER)
        })
    }

    pub async fn update_user_name(&self, id: i64, name: &str) -> DbResult<()> {
        on_pool!(self, pool => {
            let result =
                sqlx::query("UPDATE users SET name = $1, updated_at = DATETIME('now') WHERE id = $2")
                    .bind(name)
                    .bind(id)
                    .execute(pool)
                    .await?;
            expect_one(result.rows_affected(), USER)
        })
    }

    /// Sets (or, with `None`, removes) the password hash.
    pub async fn update_user_password(
        &self,
        id: i64,
        password_encrypted: Option<&str>,
    ) -> DbResult<()> {
        on_pool!(self, pool => {
            let result = sqlx::query(
                "UPDATE users SET password_encrypted = $1, updated_at = DATETIME('now') WHERE id = $2",
            )
            .bind(password_encrypted)
            .bind(id)
            .execute(pool)
            .await?;
            expect_one(result.rows_affected(), USER)
        })
    }

    /// Gives the user a new auth token (the old one stops working) and returns it.
    pub async fn reset_user_auth_token(&self, id: i64) -> DbResult<String> {
        on_pool!(self, pool => {
            let token = new_auth_token();
            let result = sqlx::query(
                "UPDATE users SET auth_token = $1, updated_at = DATETIME('now') WHERE id = $2",
            )
            .bind(&token)
            .bind(id)
            .execute(pool)
            .await?;
            expect_one(result.rows_affected(), USER)?;
            Ok(token)
        })
    }

    pub async fn get_user_avatar(&self, id: i64) -> DbResult<Option<Vec<u8>>> {
        on_pool!(self, pool => {
            let avatar: Option<Option<Vec<u8>>> =
                sqlx::query_scalar("SELECT avatar FROM users WHERE id = $1")
                    .bind(id)
                    .fetch_optional(pool)
                    .await?;
            match avatar {
                Some(avatar) => Ok(avatar),
                None => Err(DbError::NotFound { what: USER }),
            }
        })
    }

    /// Sets (or, with `None`, removes) the avatar image bytes.
    pub async fn update_user_avatar(&self, id: i64, avatar: Option<&[u8]>) -> DbResult<()> {
        on_pool!(self, pool => {
            let result =
                sqlx::query("UPDATE users SET avatar = $1, updated_at = DATETIME('now') WHERE id = $2")
                    .bind(avatar)
                    .bind(id)
                    .execute(pool)
                    .await?;
            expect_one(result.rows_affected(), USER)
        })
    }

    /// Deletes the user and, by cascade, their refresh tokens, password reset, usage rows and
    /// group memberships.
    /// Ends every session of a user: refresh tokens are deleted and the session generation
    /// moves on, so access tokens of the old generation are refused. Returns the new one.
    pub async fn end_user_sessions(&self, id: i64) -> DbResult<i64> {
        on_pool!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let epoch: Option<(i64,)> = sqlx::query_as(
                "UPDATE users SET session_epoch = session_epoch + 1 WHERE id = $1 RETURNING session_epoch",
            )
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
            let Some((epoch,)) = epoch else {
                return Err(DbError::NotFound { what: USER });
            };
            sqlx::query("DELETE FROM refresh_tokens WHERE user_id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(epoch)
        })
    }

    /// The current session generation of a user (0 until sessions were first ended).
    pub async fn get_session_epoch(&self, id: i64) -> DbResult<i64> {
        on_pool!(self, pool => {
            let epoch: Option<(i64,)> = sqlx::query_as("SELECT session_epoch FROM users WHERE id = $1")
                .bind(id)
                .fetch_optional(pool)
                .await?;
            epoch.map(|(e,)| e).ok_or(DbError::NotFound { what: USER })
        })
    }

    /// `(user id, session generation)` of users whose sessions were ever ended.
    pub async fn list_session_epochs(&self) -> DbResult<Vec<(i64, i64)>> {
        on_pool!(self, pool => {
            Ok(
                sqlx::query_as("SELECT id, session_epoch FROM users WHERE session_epoch > 0")
                    .fetch_all(pool)
                    .await?,
            )
        })
    }

    pub async fn delete_user(&self, id: i64) -> DbResult<()> {
        on_pool!(self, pool => {
            let result = sqlx::query("DELETE FROM users WHERE id = $1")
                .bind(id)
                .execute(pool)
                .await?;
            expect_one(result.rows_affected(), USER)
        })
    }
}
