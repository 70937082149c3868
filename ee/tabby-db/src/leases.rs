//! Named leases: a row per name, held by one holder until `expires_at` unless renewed. What
//! lets several processes on one database agree on which of them does a thing.

use crate::{DbConn, DbResult};

impl DbConn {
    /// Takes or renews the lease `name` for `holder` for `secs` seconds from now: true when
    /// `holder` holds it now (it was free, had run out, or was `holder`'s already), false
    /// while another holder's lease runs. Atomic: of holders racing for a free lease, one gets
    /// it.
    pub async fn take_lease(&self, name: &str, holder: &str, secs: u32) -> DbResult<bool> {
        on_pool!(self, pool => {
            let result = sqlx::query(
                "INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, DATETIME('now', $3))
                 ON CONFLICT (name) DO UPDATE
                 SET holder = excluded.holder, expires_at = excluded.expires_at
                 WHERE leases.holder = excluded.holder OR leases.expires_at < DATETIME('now')",
            )
            .bind(name)
            .bind(holder)
            .bind(format!("+{secs} seconds"))
            .execute(pool)
            .await?;
            Ok(result.rows_affected() == 1)
        })
    }
}
