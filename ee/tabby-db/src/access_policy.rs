//! Who may read which source (`source_id_read_access_policies`).
//!
//! The rule, as in upstream Tabby: a source id with no policy rows is public; once any group
//! is granted read access, only members of a granted group may read it; admins read
//! everything. Source ids are opaque strings here (`git:<id>`, `config:<...>`, web corpora).

use std::collections::HashMap;

use crate::{DbConn, DbError, DbResult, UserGroupDAO};

/// What [`DbConn::revoke_source_id_read_access`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revoked {
    Removed,
    /// The group had no grant on the source; nothing changed.
    NotGranted,
    /// It is the source's only grant and `make_public` was not given; nothing changed.
    LastGrant,
}

impl DbConn {
    /// Grants the group read access to the source; granting twice is harmless.
    pub async fn grant_source_id_read_access(
        &self,
        source_id: &str,
        user_group_id: i64,
    ) -> DbResult<()> {
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO source_id_read_access_policies (source_id, user_group_id) VALUES ($1, $2)
                 ON CONFLICT (source_id, user_group_id) DO UPDATE SET updated_at = DATETIME('now')",
            )
            .bind(source_id)
            .bind(user_group_id)
            .execute(pool)
            .await
            .map_err(|e| DbError::from(e).missing_reference("user group"))?;
            Ok(())
        })
    }

    /// Revokes the grant. The last grant of a source is revoked only with `make_public`, since
    /// a source without grants is readable by everyone; the check and the delete are one
    /// statement, so two concurrent revocations cannot both pass it.
    pub async fn revoke_source_id_read_access(
        &self,
        source_id: &str,
        user_group_id: i64,
        make_public: bool,
    ) -> DbResult<Revoked> {
        on_pool!(self, pool => {
            let deleted = sqlx::query(
                "DELETE FROM source_id_read_access_policies
                 WHERE source_id = $1 AND user_group_id = $2
                   AND ($3 OR EXISTS (SELECT 1 FROM source_id_read_access_policies
                                      WHERE source_id = $1 AND user_group_id != $2))",
            )
            .bind(source_id)
            .bind(user_group_id)
            .bind(make_public)
            .execute(pool)
            .await?
            .rows_affected();
            if deleted > 0 {
                return Ok(Revoked::Removed);
            }
            let granted: Option<i64> = sqlx::query_scalar(
                "SELECT user_group_id FROM source_id_read_access_policies
                 WHERE source_id = $1 AND user_group_id = $2",
            )
            .bind(source_id)
            .bind(user_group_id)
            .fetch_optional(pool)
            .await?;
            Ok(if granted.is_some() {
                Revoked::LastGrant
            } else {
                Revoked::NotGranted
            })
        })
    }

    /// The groups granted read access to the source, by name (empty: the source is public).
    pub async fn list_source_id_read_access_user_groups(
        &self,
        source_id: &str,
    ) -> DbResult<Vec<UserGroupDAO>> {
        on_pool!(self, pool => {
            Ok(sqlx::query_as(
                "SELECT g.id, g.name, g.created_at, g.updated_at
                 FROM source_id_read_access_policies p JOIN user_groups g ON g.id = p.user_group_id
                 WHERE p.source_id = $1 ORDER BY g.name",
            )
            .bind(source_id)
            .fetch_all(pool)
            .await?)
        })
    }

    /// Every `(source_id, user_group_id)` grant.
    pub async fn list_source_id_read_access_policies(&self) -> DbResult<Vec<(String, i64)>> {
        on_pool!(self, pool => {
            Ok(sqlx::query_as(
                "SELECT source_id, user_group_id FROM source_id_read_access_policies
                 ORDER BY source_id, user_group_id",
            )
            .fetch_all(pool)
            .await?)
        })
    }

    /// The subset of `source_ids` the user may read, in the given order.
    pub async fn allowed_source_ids(
        &self,
        user_id: i64,
        is_admin: bool,
        source_ids: &[String],
    ) -> DbResult<Vec<String>> {
        on_pool!(self, pool => {
            if is_admin {
                return Ok(source_ids.to_vec());
            }
            // One row per restricted source: whether any of its granted groups has this user.
            // The table holds a few rows per private source, so reading it whole is cheap and
            // avoids binding an unbounded list.
            let restricted: HashMap<String, bool> = sqlx::query_as::<_, (String, bool)>(
                "SELECT p.source_id, COUNT(m.user_id) > 0
                 FROM source_id_read_access_policies p
                 LEFT JOIN user_group_memberships m
                     ON m.user_group_id = p.user_group_id AND m.user_id = $1
                 GROUP BY p.source_id",
            )
            .bind(user_id)
            .fetch_all(pool)
            .await?
            .into_iter()
            .collect();
            Ok(source_ids
                .iter()
                .filter(|id| restricted.get(id.as_str()).copied().unwrap_or(true))
                .cloned()
                .collect())
        })
    }
}
