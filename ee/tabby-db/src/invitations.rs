//! Invitations: an e-mail address (unique, case-insensitive) and a random UUID code that lets
//! that address register once the server has an owner. Consumed by
//! [`DbConn::create_user_with_invitation`].

use chrono::{DateTime, Utc};
use sqlx::QueryBuilder;

use crate::{DbConn, DbResult, Pagination, error::expect_one};

/// A row of `invitations`.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct InvitationDAO {
    pub id: i64,
    pub email: String,
    pub code: String,
    pub created_at: DateTime<Utc>,
}

impl DbConn {
    /// Invites `email` with a fresh code. Fails with `AlreadyExists` if an invitation for that
    /// address is pending.
    pub async fn create_invitation(&self, email: &str) -> DbResult<InvitationDAO> {
        on_pool!(self, pool => {
            Ok(sqlx::query_as(
                "INSERT INTO invitations (email, code) VALUES ($1, $2)
                 RETURNING id, email, code, created_at",
            )
            .bind(email)
            .bind(uuid::Uuid::new_v4().to_string())
            .fetch_one(pool)
            .await?)
        })
    }

    pub async fn get_invitation_by_code(&self, code: &str) -> DbResult<Option<InvitationDAO>> {
        on_pool!(self, pool => {
            Ok(
                sqlx::query_as("SELECT id, email, code, created_at FROM invitations WHERE code = $1")
                    .bind(code)
                    .fetch_optional(pool)
                    .await?,
            )
        })
    }

    /// Case-insensitive.
    pub async fn get_invitation_by_email(&self, email: &str) -> DbResult<Option<InvitationDAO>> {
        on_pool!(self, pool => {
            Ok(
                sqlx::query_as("SELECT id, email, code, created_at FROM invitations WHERE email = CAST($1 AS CITEXT)")
                    .bind(email)
                    .fetch_optional(pool)
                    .await?,
            )
        })
    }

    pub async fn list_invitations(&self, page: Pagination) -> DbResult<Vec<InvitationDAO>> {
        on_pool!(self, pool => {
            let mut query = QueryBuilder::new(
                "SELECT id, email, code, created_at FROM invitations WHERE 1 = 1",
            );
            page.push_to(&mut query, "id");
            let rows = query
                .build_query_as::<InvitationDAO>()
                .fetch_all(pool)
                .await?;
            Ok(page.finish(rows))
        })
    }

    pub async fn delete_invitation(&self, id: i64) -> DbResult<()> {
        on_pool!(self, pool => {
            let result = sqlx::query("DELETE FROM invitations WHERE id = $1")
                .bind(id)
                .execute(pool)
                .await?;
            expect_one(result.rows_affected(), "invitation")
        })
    }
}
