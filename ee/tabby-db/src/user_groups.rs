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
        let result = sqlx::query("INSERT INTO user_groups (name) VALUES (?)")
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(result.last_insert_rowid())
    }

    pub async fn get_user_group(&self, id: i64) -> DbResult<Option<UserGroupDAO>> {
        Ok(
            sqlx::query_as("SELECT id, name, created_at, updated_at FROM user_groups WHERE id = ?")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// Every group, by name.
    pub async fn list_user_groups(&self) -> DbResult<Vec<UserGroupDAO>> {
        Ok(
            sqlx::query_as(
                "SELECT id, name, created_at, updated_at FROM user_groups ORDER BY name",
            )
            .fetch_all(&self.pool)
            .await?,
        )
    }

    /// Deletes the group with its memberships and read access grants.
    pub async fn delete_user_group(&self, id: i64) -> DbResult<()> {
        let result = sqlx::query("DELETE FROM user_groups WHERE id = ?")
            .bind(id)
            .execute(&self.pool)
            .await?;
        expect_one(result.rows_affected(), "user group")
    }

    /// Adds the user to the group, or updates `is_group_admin` if they are a member already.
    pub async fn upsert_user_group_membership(
        &self,
        user_id: i64,
        user_group_id: i64,
        is_group_admin: bool,
    ) -> DbResult<()> {
        sqlx::query(
            "INSERT INTO user_group_memberships (user_id, user_group_id, is_group_admin)
             VALUES (?, ?, ?)
             ON CONFLICT (user_id, user_group_id) DO UPDATE
                 SET is_group_admin = excluded.is_group_admin, updated_at = DATETIME('now')",
        )
        .bind(user_id)
        .bind(user_group_id)
        .bind(is_group_admin)
        .execute(&self.pool)
        .await
        .map_err(|e| DbError::from(e).missing_reference("user or user group"))?;
        Ok(())
    }

    pub async fn delete_user_group_membership(
        &self,
        user_id: i64,
        user_group_id: i64,
    ) -> DbResult<()> {
        let result = sqlx::query(
            "DELETE FROM user_group_memberships WHERE user_id = ? AND user_group_id = ?",
        )
        .bind(user_id)
        .bind(user_group_id)
        .execute(&self.pool)
        .await?;
        expect_one(result.rows_affected(), "user group membership")
    }

    /// Members of one group, in the order they joined.
    pub async fn list_user_group_memberships(
        &self,
        user_group_id: i64,
    ) -> DbResult<Vec<UserGroupMembershipDAO>> {
        Ok(sqlx::query_as(
            "SELECT id, user_id, user_group_id, is_group_admin, created_at, updated_at
             FROM user_group_memberships WHERE user_group_id = ? ORDER BY id",
        )
        .bind(user_group_id)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The groups one user belongs to, in the order they joined.
    /// Every membership of every group.
    pub async fn list_all_user_group_memberships(&self) -> DbResult<Vec<UserGroupMembershipDAO>> {
        Ok(sqlx::query_as(
            "SELECT id, user_id, user_group_id, is_group_admin, created_at, updated_at
             FROM user_group_memberships ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    pub async fn list_user_group_memberships_of_user(
        &self,
        user_id: i64,
    ) -> DbResult<Vec<UserGroupMembershipDAO>> {
        Ok(sqlx::query_as(
            "SELECT id, user_id, user_group_id, is_group_admin, created_at, updated_at
             FROM user_group_memberships WHERE user_id = ? ORDER BY id",
        )
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?)
    }
}
