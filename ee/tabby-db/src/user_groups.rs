//! User groups and their members. Groups are what source read access is granted to (see
//! `access_policy`); a member may be a group admin, who can manage the group's other members.
//! Deleting a group or a user removes the memberships (and a group's grants) with it.

use chrono::{DateTime, Utc};

use crate::{DbConn, DbError, DbResult, error::expect_one};

/// A row of `user_groups`.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct UserGroupDAO {
    pub id: i64,
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A row of `user_group_memberships`.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct UserGroupMembershipDAO {
    pub id: i64,
    pub user_id: i64,
    pub user_group_id: i64,
    pub is_group_admin: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl DbConn {
    /// Fails with `AlreadyExists` if the name is taken.
    pub async fn create_user_group(&self, name: &str) -> DbResult<i64> {
        on_pool!(self, pool => {
            let result = sqlx::query_scalar::<_, i64>("INSERT INTO user_groups (name) VALUES ($1) RETURNING id")
                .bind(name)
                .fetch_one(pool)
                .await?;
            Ok(result)
        })
    }

    pub async fn get_user_group(&self, id: i64) -> DbResult<Option<UserGroupDAO>> {
        on_pool!(self, pool => {
            Ok(
                sqlx::query_as("SELECT id, name, created_at, updated_at FROM user_groups WHERE id = $1")
                    .bind(id)
                    .fetch_optional(pool)
                    .await?,
            )
        })
    }

    /// Every group, by name.
    pub async fn list_user_groups(&self) -> DbResult<Vec<UserGroupDAO>> {
        on_pool!(self, pool => {
            Ok(
                sqlx::query_as(
                    "SELECT id, name, created_at, updated_at FROM user_groups ORDER BY name",
                )
                .fetch_all(pool)
                .await?,
            )
        })
    }

    /// Deletes the group with its memberships and read access grants.
    pub async fn delete_user_group(&self, id: i64) -> DbResult<()> {
        on_pool!(self, pool => {
            let result = sqlx::query("DELETE FROM user_groups WHERE id = $1")
                .bind(id)
                .execute(pool)
                .await?;
            expect_one(result.rows_affected(), "user group")
        })
    }

    /// Adds the user to the group, or updates `is_group_admin` if they are a member already.
    pub async fn upsert_user_group_membership(
        &self,
        user_id: i64,
        user_group_id: i64,
        is_group_admin: bool,
    ) -> DbResult<()> {
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO user_group_memberships (user_id, user_group_id, is_group_admin)
                 VALUES ($1, $2, $3)
                 ON CONFLICT (user_id, user_group_id) DO UPDATE
                     SET is_group_admin = excluded.is_group_admin, updated_at = DATETIME('now')",
            )
            .bind(user_id)
            .bind(user_group_id)
            .bind(is_group_admin)
            .execute(pool)
            .await
            .map_err(|e| DbError::from(e).missing_reference("user or user group"))?;
            Ok(())
        })
    }

    pub async fn delete_user_group_membership(
        &self,
        user_id: i64,
        user_group_id: i64,
    ) -> DbResult<()> {
        on_pool!(self, pool => {
            let result = sqlx::query(
                "DELETE FROM user_group_memberships WHERE user_id = $1 AND user_group_id = $2",
            )
            .bind(user_id)
            .bind(user_group_id)
            .execute(pool)
            .await?;
            expect_one(result.rows_affected(), "user group membership")
        })
    }

    /// Members of one group, in the order they joined.
    pub async fn list_user_group_memberships(
        &self,
        user_group_id: i64,
    ) -> DbResult<Vec<UserGroupMembershipDAO>> {
        on_pool!(self, pool => {
            Ok(sqlx::query_as(
                "SELECT id, user_id, user_group_id, is_group_admin, created_at, updated_at
                 FROM user_group_memberships WHERE user_group_id = $1 ORDER BY id",
            )
            .bind(user_group_id)
            .fetch_all(pool)
            .await?)
        })
    }

    /// The groups one user belongs to, in the order they joined.
    /// Every membership of every group.
    pub async fn list_all_user_group_memberships(&self) -> DbResult<Vec<UserGroupMembershipDAO>> {
        on_pool!(self, pool => {
            Ok(sqlx::query_as(
                "SELECT id, user_id, user_group_id, is_group_admin, created_at, updated_at
                 FROM user_group_memberships ORDER BY id",
            )
            .fetch_all(pool)
            .await?)
        })
    }

    pub async fn list_user_group_memberships_of_user(
        &self,
        user_id: i64,
    ) -> DbResult<Vec<UserGroupMembershipDAO>> {
        on_pool!(self, pool => {
            Ok(sqlx::query_as(
                "SELECT id, user_id, user_group_id, is_group_admin, created_at, updated_at
                 FROM user_group_memberships WHERE user_id = $1 ORDER BY id",
            )
            .bind(user_id)
            .fetch_all(pool)
            .await?)
        })
    }
}
