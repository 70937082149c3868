//! Change counters: a value per name that a process bumps after it changed something other
//! processes on the same database keep in memory, and that they read to know when to reload.

use crate::{DbConn, DbResult};

impl DbConn {
    /// Adds one to the counter `name` (created at 1); its new value.
    pub async fn bump_change_counter(&self, name: &str) -> DbResult<i64> {
        on_pool!(self, pool => {
            Ok(sqlx::query_scalar(
                "INSERT INTO change_counters (name, value) VALUES ($1, 1)
                 ON CONFLICT (name) DO UPDATE SET value = change_counters.value + 1
                 RETURNING value",
            )
            .bind(name)
            .fetch_one(pool)
            .await?)
        })
    }

    /// The counter `name`'s value (0 before its first bump).
    pub async fn change_counter(&self, name: &str) -> DbResult<i64> {
        on_pool!(self, pool => {
            let value: Option<i64> =
                sqlx::query_scalar("SELECT value FROM change_counters WHERE name = $1")
                    .bind(name)
                    .fetch_optional(pool)
                    .await?;
            Ok(value.unwrap_or(0))
        })
    }
}
