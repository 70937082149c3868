//! Storage of the enterprise layer: SQLite (the embedded default) or PostgreSQL.
//!
//! [`DbConn`] owns an sqlx connection pool: over `$TABBY_ROOT/ee/db.sqlite` (WAL, foreign keys
//! on), over a PostgreSQL database (`[database] url`, for replicas on several machines), or
//! over a private database for tests. Opening it applies the migrations embedded from the
//! workspace's `migrations/` directory (`migrations/postgres/` holds their PostgreSQL twins,
//! kept in step by a test), backs a SQLite file up first when migrations are pending, and
//! makes sure the registration token exists.
//!
//! Each table has one module holding its row type (`*DAO`, plain data) and a few methods on
//! `DbConn`. A method's body is written once and compiled for each backend through
//! [`on_pool!`]; its SQL is the subset both engines read the same way: `$N` placeholders
//! (SQLite maps `$N` to the N-th argument too), `RETURNING`, `ON CONFLICT`, `TRUE`/`FALSE`, and
//! SQLite's `DATETIME('now', modifier)`, which the PostgreSQL schema defines as a function.
//! Where the engines differ ([`Backend`]: write transactions, skipping locked rows, how a
//! timestamp is bound), the backend says so. Queries are built at run time with
//! `sqlx::query`/`QueryBuilder`, so compiling needs no database. This crate knows nothing about
//! GraphQL, HTTP, hashids or password hashing: ids are row ids and secrets arrive already hashed.

/// Runs `$body` with `$pool` bound to the connection's pool (`&SqlitePool` or `&PgPool`): the
/// body is compiled once per backend, so one text serves both.
macro_rules! on_pool {
    ($conn:expr, $pool:ident => $body:expr) => {
        match &$conn.pool {
            $crate::Pool::Sqlite($pool) => {
                #[allow(unused_imports)]
                use $crate::Backend as _;
                $body
            }
            $crate::Pool::Postgres($pool) => {
                #[allow(unused_imports)]
                use $crate::Backend as _;
                $body
            }
        }
    };
}

mod access_policy;
mod change_counters;
mod copy;
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
mod rate_buckets;
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
use sqlx::{
    postgres::{PgConnectOptions, PgPool, PgPoolOptions},
    sqlite::{
        SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
    },
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
pub use rate_buckets::RateBucketSpec;
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

/// The environment variable that points the tests' private databases at a PostgreSQL server
/// (`postgres://user@host:port/db`): each [`DbConn::new_in_memory`] then creates a database of
/// its own there.
pub const TEST_POSTGRES_URL_VAR: &str = "TABBY_TEST_POSTGRES_URL";

/// Connections per PostgreSQL pool: enough for a replica's concurrency; a server's
/// `max_connections` (100 by default) bounds the replicas times this.
const PG_MAX_CONNECTIONS: u32 = 16;

/// A handle on the database; cheap to clone (it is a pool).
#[derive(Clone, Debug)]
pub struct DbConn {
    pool: Pool,
}

#[derive(Clone, Debug)]
pub(crate) enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// What differs between the two engines, for the bodies [`on_pool!`] compiles twice.
pub(crate) trait Backend {
    type Db: sqlx::Database;
    /// A timestamp as a query argument: SQLite's text form, or a `timestamptz`.
    type Time: for<'q> sqlx::Encode<'q, Self::Db> + sqlx::Type<Self::Db> + Send;

    /// A transaction that holds the database's write lock from its start, so that a
    /// read-then-write never races another writer: SQLite's `BEGIN IMMEDIATE`, and on
    /// PostgreSQL a transaction-scoped advisory lock that every write transaction takes.
    async fn begin_write(&self) -> DbResult<sqlx::Transaction<'static, Self::Db>>;

    fn time(&self, time: DateTime<Utc>) -> Self::Time;

    /// Appended to the subquery that picks a row to claim, so that concurrent claimers on
    /// PostgreSQL each take a different row (`FOR UPDATE SKIP LOCKED`) instead of queueing
    /// on the same one; SQLite has one writer at a time and needs nothing.
    fn skip_locked(&self) -> &'static str;
}

/// The advisory lock key of write transactions on PostgreSQL ("tabbywri").
const PG_WRITE_LOCK: i64 = 0x7461_6262_7977_7269;

impl Backend for SqlitePool {
    type Db = sqlx::Sqlite;
    type Time = String;

    async fn begin_write(&self) -> DbResult<sqlx::Transaction<'static, sqlx::Sqlite>> {
        Ok(self.begin_with("BEGIN IMMEDIATE").await?)
    }

    fn time(&self, time: DateTime<Utc>) -> String {
        sql_datetime(time)
    }

    fn skip_locked(&self) -> &'static str {
        ""
    }
}

impl Backend for PgPool {
    type Db = sqlx::Postgres;
    type Time = DateTime<Utc>;

    async fn begin_write(&self) -> DbResult<sqlx::Transaction<'static, sqlx::Postgres>> {
        let mut tx = self.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(PG_WRITE_LOCK)
            .execute(&mut *tx)
            .await?;
        Ok(tx)
    }

    fn time(&self, time: DateTime<Utc>) -> DateTime<Utc> {
        time
    }

    fn skip_locked(&self) -> &'static str {
        " FOR UPDATE SKIP LOCKED"
    }
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
        Self::init(Pool::Sqlite(pool)).await
    }

    /// Connects to the PostgreSQL database at `url` (`postgres://user:password@host:port/db`),
    /// migrates it and seeds required rows. Replicas share it; migrations take PostgreSQL's
    /// advisory lock, so replicas starting together apply each migration once.
    pub async fn connect_postgres(url: &str) -> DbResult<Self> {
        Self::connect_postgres_with(url, PG_MAX_CONNECTIONS).await
    }

    async fn connect_postgres_with(url: &str, max_connections: u32) -> DbResult<Self> {
        let options = pg_options(url)?;
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(BUSY_TIMEOUT)
            .connect_with(options)
            .await?;
        Self::init(Pool::Postgres(pool)).await
    }

    /// Opens the database a `[database] url` names: `sqlite://PATH` (or a plain path) or
    /// `postgres://…` / `postgresql://…`.
    pub async fn connect(url: &str) -> DbResult<Self> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Self::connect_postgres(url).await
        } else {
            let path = url.strip_prefix("sqlite://").unwrap_or(url);
            Self::open(Path::new(path)).await
        }
    }

    /// Which engine this is: `"sqlite"` or `"postgres"`.
    pub fn backend(&self) -> &'static str {
        match self.pool {
            Pool::Sqlite(_) => "sqlite",
            Pool::Postgres(_) => "postgres",
        }
    }

    /// A fresh, private, migrated database that lives as long as this handle (for tests): in
    /// memory, or, when [`TEST_POSTGRES_URL_VAR`] names a PostgreSQL server, a new database of
    /// its own there (left for the server's owner to drop).
    pub async fn new_in_memory() -> DbResult<Self> {
        if let Ok(url) = std::env::var(TEST_POSTGRES_URL_VAR) {
            return Self::new_test_postgres(&url).await;
        }
        Self::new_sqlite_in_memory().await
    }

    /// A fresh, private, migrated SQLite database in memory, whatever the environment says.
    pub(crate) async fn new_sqlite_in_memory() -> DbResult<Self> {
        let options = SqliteConnectOptions::from_str("sqlite::memory:")?.foreign_keys(true);
        // Every connection to ":memory:" is a different database: keep exactly one, forever.
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options)
            .await?;
        Self::init(Pool::Sqlite(pool)).await
    }

    async fn new_test_postgres(server: &str) -> DbResult<Self> {
        let url = create_test_postgres_database(server).await?;
        Self::connect_postgres_with(&url, 4).await
    }

    async fn init(pool: Pool) -> DbResult<Self> {
        match &pool {
            Pool::Sqlite(pool) => migrate::MIGRATOR.run(pool).await?,
            Pool::Postgres(pool) => migrate::PG_MIGRATOR.run(pool).await?,
        }
        let conn = Self { pool };
        conn.ensure_registration_token().await?;
        Ok(conn)
    }

    /// The SQLite pool (tests of SQLite-only behaviour).
    #[cfg(test)]
    pub(crate) fn sqlite_pool(&self) -> &SqlitePool {
        match &self.pool {
            Pool::Sqlite(pool) => pool,
            Pool::Postgres(_) => panic!("not a SQLite database"),
        }
    }

    /// Whether the database answers a query (a replica's readiness).
    pub async fn ping(&self) -> DbResult<()> {
        on_pool!(self, pool => {
            sqlx::query("SELECT 1").execute(pool).await?;
        });
        Ok(())
    }

    /// Whether this connection to the database is encrypted (TLS to PostgreSQL; a SQLite file
    /// is local: `false`).
    pub async fn connection_is_encrypted(&self) -> DbResult<bool> {
        match &self.pool {
            Pool::Sqlite(_) => Ok(false),
            Pool::Postgres(pool) => Ok(sqlx::query_scalar(
                "SELECT COALESCE((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), FALSE)",
            )
            .fetch_one(pool)
            .await?),
        }
    }

    /// Waits for queries in flight and closes every connection (checkpointing the WAL).
    pub async fn close(&self) {
        on_pool!(self, pool => pool.close().await)
    }
}

/// Creates an empty database on the PostgreSQL server `server` (a URL ending in `/DATABASE`,
/// the one to connect to for `CREATE DATABASE`) and returns its URL (for tests: each gets a
/// database of its own, left for the server's owner to drop).
pub async fn create_test_postgres_database(server: &str) -> DbResult<String> {
    let name = format!("tabby_test_{}", random_hex());
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(PgConnectOptions::from_str(server)?)
        .await?;
    // The name is ours (hex digits), never user input.
    let created = sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&admin)
        .await;
    admin.close().await;
    created?;
    let (path, query) = match server.split_once('?') {
        Some((path, query)) => (path, format!("?{query}")),
        None => (server, String::new()),
    };
    let base = path.rsplit_once('/').map_or(path, |(base, _)| base);
    Ok(format!("{base}/{name}{query}"))
}

/// Connection options for `url`, with the session in UTC (so that `DATE(created_at)` is the
/// UTC day on either engine).
fn pg_options(url: &str) -> DbResult<PgConnectOptions> {
    Ok(PgConnectOptions::from_str(url)?.options([("timezone", "UTC")]))
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
