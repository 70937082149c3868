//! Every DAO of tabby-db against a real (in-memory or temp-file) SQLite database, through the
//! public API only.

mod access_policy;
mod auth;
mod jobs;
mod settings;
mod usage;
mod users;

use tabby_db::DbConn;

async fn db() -> DbConn {
    DbConn::new_in_memory().await.unwrap()
}

async fn user(db: &DbConn, email: &str) -> i64 {
    db.create_user(email, Some("$argon2id$hash"), false, None)
        .await
        .unwrap()
}
mod threads;
