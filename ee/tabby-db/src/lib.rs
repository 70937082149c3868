//! SQLite storage of the enterprise layer.
//!
//! [`DbConn`] owns an sqlx connection pool (WAL, foreign keys on) over `$TABBY_ROOT/ee/db.sqlite`
//! or an in-memory database for tests. Opening it backs the file up when migrations are pending,
//! applies the migrations embedded from the workspace's top-level `migrations/` directory and
//! makes sure the registration token exists.
//!
//! Each table has one module holding its row type (`*DAO`, plain data) and a few methods on
//! `DbConn`. Queries are built at run time with `sqlx::query`/`QueryBuilder`, so compiling needs
//! no database. This crate knows nothing about GraphQL, HTTP, hashids or password hashing:
//! ids are SQLite row ids and secrets arrive already hashed.

mod access_policy;
mod change_counters;
mod email;
mod error;
mod ingested_documents;
mod integrations;
mod invitations;
mod job_runs;
mod ldap_credential;
mod leases;
mod migrate;
mod notifications;
mod oauth_credential;
mod pagination;
mod password_reset;
mod refresh_tokens;
mod registration_token;
mod repositories;
mod server_setting;
mod threads;
mod user_completions;
mod user_events;
mod user_groups;
mod users;
mod web_documents;

use std::{path::Path, str::FromStr, time::Duration};

use chrono::{DateTime, Utc};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

pub use access_policy::Revoked;
pub use email::{EmailOutboxDAO, EmailOutboxStatsDAO, EmailSettingDAO};
pub use error::{DbError, DbResult};
pub use ingested_documents::{IngestedDocumentDAO, IngestionStatsDAO};
pub use integrations::{IntegrationDAO, ProvidedRepositoryDAO, SyncCounts, VendorRepository};
pub use invitations::InvitationDAO;
pub use job_runs::{JobRunDAO, JobStatsDAO};
pub use ldap_credential::LdapCredentialDAO;
pub use notifications::NotificationDAO;
pub use oauth_credential::OAuthCredentialDAO;
pub use pagination::Pagination;
pub use password_reset::PasswordResetDAO;
pub use refresh_tokens::{REFRESH_TOKEN_LIFETIME_DAYS, RefreshTokenDAO};
pub use repositories::RepositoryDAO;
pub use server_setting::ServerSettingDAO;
pub use threads::{
    Attachment, AttachmentClientCode, AttachmentCode, AttachmentCodeFileList, AttachmentCommitDoc,
    AttachmentDoc, AttachmentIngestedDoc, AttachmentIssueDoc, AttachmentPullDoc, AttachmentWebDoc,
    ThreadDAO, ThreadMessageDAO,
};
pub use user_completions::{CompletionCounter, DailyStatsDAO, DailyStatsQuery};
pub use user_events::UserEventDAO;
pub use user_groups::{UserGroupDAO, UserGroupMembershipDAO};
pub use users::{OWNER_USER_ID, UserDAO};
pub use web_documents::WebDocumentDAO;

/// How long a connection waits for another writer before failing with "database is locked".
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// SQLite has one writer at a time; readers run in parallel under WAL. A handful of
/// connections covers the server's concurrency without piling up idle file handles.
const MAX_CONNECTIONS: u32 = 16;

/// A handle on the database; cheap to clone (it is a pool).
#[derive(Clone, Debug)]
pub struct DbConn {
    pool: SqlitePool,
}

impl DbConn {
    /// Opens (creating it and its parent directories if needed) the database file at `path`,
    /// backs it up if migrations are pending, migrates it and seeds required rows.
    pub async fn open(path: &Path) -> DbResult<Self> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|source| DbError::Io {
                path: parent.to_owned(),
                source,
            })?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT);
        let pool = SqlitePoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .connect_with(options)
            .await?;
        migrate::backup_if_pending(&pool, path).await?;
        Self::init(pool).await
    }

    /// A fresh, private, migrated database that lives as long as this handle (for tests).
    pub async fn new_in_memory() -> DbResult<Self> {
        let options = SqliteConnectOptions::from_str("sqlite::memory:")?.foreign_keys(true);
        // Every connection to ":memory:" is a different database: keep exactly one, forever.
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options)
            .await?;
        Self::init(pool).await
    }

    async fn init(pool: SqlitePool) -> DbResult<Self> {
        migrate::MIGRATOR.run(&pool).await?;
        let conn = Self { pool };
        conn.ensure_registration_token().await?;
        Ok(conn)
    }

    /// Whether the database answers a query (a replica's readiness).
    pub async fn ping(&self) -> DbResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Waits for queries in flight and closes every connection (checkpointing the WAL).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// A transaction that takes the write lock at once, so that it never fails half-way
    /// because another connection started writing first.
    async fn begin_write(&self) -> DbResult<sqlx::Transaction<'static, sqlx::Sqlite>> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }
}

/// The lowercase hex SHA-256 of a secret as stored (refresh tokens, reset codes): trimmed and
/// lowercased first, since the secrets are hex.
fn secret_digest(secret: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(secret.trim().to_ascii_lowercase().as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A new random token of 32 lowercase hex digits (122 random bits).
fn random_hex() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// A timestamp in the text form the schema stores (`DATETIME('now')` plus milliseconds),
/// so that comparisons in SQL are plain string comparisons in time order.
fn sql_datetime(time: DateTime<Utc>) -> String {
    time.format("%Y-%m-%d %H:%M:%S%.3f").to_string()
}
