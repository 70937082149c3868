//! The embedded migrations and the backup taken before they change an existing file.
//!
//! Migrations are reversible pairs in the workspace's top-level `migrations/` directory
//! (`NNNN_name.up.sql` / `NNNN_name.down.sql`), compiled into the binary. A later schema change
//! is always a new pair; applied files are checksummed by sqlx and must never be edited.

use std::path::{Path, PathBuf};

use chrono::Utc;
use sqlx::{SqlitePool, migrate::Migrator};
use tracing::info;

use crate::{DbError, DbResult};

pub(crate) static MIGRATOR: Migrator = sqlx::migrate!("../../migrations");
/// The PostgreSQL twins of [`MIGRATOR`]'s migrations, one for one.
pub(crate) static PG_MIGRATOR: Migrator = sqlx::migrate!("../../migrations/postgres");

/// Versions of the up-migrations not yet applied to the database behind `pool`.
pub(crate) async fn pending_versions(pool: &SqlitePool) -> DbResult<Vec<i64>> {
    let has_history: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?)",
    )
    .bind(MIGRATOR.table_name.as_ref())
    .fetch_one(pool)
    .await?;
    let applied: Vec<i64> = if has_history {
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success = 1")
            .fetch_all(pool)
            .await?
    } else {
        Vec::new()
    };
    Ok(MIGRATOR
        .iter()
        .filter(|m| !m.migration_type.is_down_migration() && !applied.contains(&m.version))
        .map(|m| m.version)
        .collect())
}

/// Copies the database to `<stem>.backup-YYYYMMDD.sqlite` beside `path` when it already holds
/// tables and migrations are about to change it. Returns the backup's path if one was made.
///
/// The copy is made with `VACUUM INTO`, which reads through SQLite, so pages still in the WAL
/// are included and the copy is a consistent, standalone database file.
pub(crate) async fn backup_if_pending(pool: &SqlitePool, path: &Path) -> DbResult<Option<PathBuf>> {
    let tables: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'")
        .fetch_one(pool)
        .await?;
    if tables == 0 {
        return Ok(None);
    }
    let pending = pending_versions(pool).await?;
    if pending.is_empty() {
        return Ok(None);
    }
    let backup = free_backup_path(path);
    let target = backup.to_str().ok_or_else(|| DbError::Io {
        path: backup.clone(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "path is not UTF-8"),
    })?;
    sqlx::query("VACUUM INTO ?")
        .bind(target)
        .execute(pool)
        .await?;
    info!(
        backup = %backup.display(),
        ?pending,
        "backed up the database before applying migrations"
    );
    Ok(Some(backup))
}

/// `db.backup-20250131.sqlite`, or `db.backup-20250131-2.sqlite` etc. when that one exists
/// (several upgrades in a day each keep their own starting point).
fn free_backup_path(path: &Path) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "db".to_owned());
    let date = Utc::now().format("%Y%m%d");
    let dir = path.parent().unwrap_or(Path::new(""));
    let first = dir.join(format!("{stem}.backup-{date}.sqlite"));
    if !first.exists() {
        return first;
    }
    (2..)
        .map(|n| dir.join(format!("{stem}.backup-{date}-{n}.sqlite")))
        .find(|candidate| !candidate.exists())
        .expect("an unused backup name exists")
}

#[cfg(test)]
mod tests;
