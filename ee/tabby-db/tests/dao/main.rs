//! Every DAO of tabby-db against a real database, through the public API only: SQLite (in
//! memory or a temp file), or, when `TABBY_TEST_POSTGRES_URL` names a PostgreSQL server, a
//! fresh PostgreSQL database per test (`scripts/test.sh` runs this suite both ways).

mod access_policy;
mod auth;
mod jobs;
mod postgres;
mod settings;
mod usage;
mod users;

use sqlx::{
    PgPool, SqlitePool,
    postgres::PgPoolOptions,
    sqlite::{SqliteConnectOptions, SqlitePoolOptions},
};
use tabby_db::{DbConn, TEST_POSTGRES_URL_VAR};

/// One database reached two ways: through the DAO, and through a raw pool for what the DAO
/// has no way to do (aging rows). On disk (a SQLite file, or a PostgreSQL database), so that
/// a second `DbConn` on it is another process's view.
pub(crate) struct SharedDb {
    pub db: DbConn,
    raw: Raw,
    /// A SQLite file path, or a PostgreSQL URL.
    location: String,
    _dir: Option<tempfile::TempDir>,
}

enum Raw {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

pub(crate) async fn shared_db() -> SharedDb {
    if let Ok(server) = std::env::var(TEST_POSTGRES_URL_VAR) {
        let location = tabby_db::create_test_postgres_database(&server)
            .await
            .unwrap();
        let db = DbConn::connect_postgres(&location).await.unwrap();
        let raw = PgPoolOptions::new()
            .max_connections(1)
            .connect(&location)
            .await
            .unwrap();
        return SharedDb {
            db,
            raw: Raw::Postgres(raw),
            location,
            _dir: None,
        };
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let db = DbConn::open(&path).await.unwrap();
    let raw = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            SqliteConnectOptions::new()
                .filename(&path)
                .busy_timeout(std::time::Duration::from_secs(10)),
        )
        .await
        .unwrap();
    SharedDb {
        db,
        raw: Raw::Sqlite(raw),
        location: path.to_str().unwrap().to_owned(),
        _dir: Some(dir),
    }
}

impl SharedDb {
    /// Runs `sql` (no arguments; SQL both engines read the same way); rows it changed.
    pub async fn exec(&self, sql: &str) -> u64 {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        match &self.raw {
            Raw::Sqlite(pool) => sqlx::query(sql)
                .execute(pool)
                .await
                .unwrap()
                .rows_affected(),
            Raw::Postgres(pool) => sqlx::query(sql)
                .execute(pool)
                .await
                .unwrap()
                .rows_affected(),
        }
    }

    /// The SQLite file's path or the PostgreSQL URL.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Another connection pool on the same database, as another process would open it.
    pub async fn open_again(&self) -> DbConn {
        DbConn::connect(&self.location).await.unwrap()
    }
}

async fn db() -> DbConn {
    DbConn::new_in_memory().await.unwrap()
}

async fn user(db: &DbConn, email: &str) -> i64 {
    db.create_user(email, Some("$argon2id$hash"), false, None)
        .await
        .unwrap()
}
mod threads;
