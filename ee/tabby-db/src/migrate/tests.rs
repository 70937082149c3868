//! Migrations against real SQLite: up from empty, every migration's down/up round trip on a
//! database holding data, and the backup taken before pending migrations; and their PostgreSQL
//! twins: one for each, and (with a server in `TABBY_TEST_POSTGRES_URL`) the same tables,
//! columns and indexes as SQLite after every step down and up.

use std::collections::BTreeMap;

use chrono::Utc;
use sqlx::{PgPool, SqlitePool, migrate::Migrator};

use super::{MIGRATOR, PG_MIGRATOR, pending_versions};
use crate::{CompletionCounter, DbConn, Pool, TEST_POSTGRES_URL_VAR};

const TABLES: &[&str] = &[
    "change_counters",
    "email_outbox",
    "email_setting",
    "ingested_documents",
    "integrations",
    "invitations",
    "job_runs",
    "ldap_credential",
    "leases",
    "notifications",
    "oauth_credential",
    "password_reset",
    "provided_repositories",
    "rate_buckets",
    "read_notifications",
    "refresh_tokens",
    "registration_token",
    "repositories",
    "server_secrets",
    "server_setting",
    "source_id_read_access_policies",
    "thread_messages",
    "threads",
    "user_completions",
    "user_events",
    "user_group_memberships",
    "user_groups",
    "users",
    "web_documents",
];

fn versions() -> Vec<i64> {
    MIGRATOR
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .map(|m| m.version)
        .collect()
}

async fn tables(pool: &SqlitePool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table'
         AND name NOT LIKE 'sqlite_%' AND name != '_sqlx_migrations' ORDER BY name",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Every table, index and trigger definition, by name.
async fn schema(pool: &SqlitePool) -> BTreeMap<String, Option<String>> {
    sqlx::query_as::<_, (String, Option<String>)>(
        "SELECT name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'
         AND name != '_sqlx_migrations'",
    )
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .collect()
}

/// Rows per table, on either engine.
async fn row_counts(db: &DbConn) -> BTreeMap<String, i64> {
    let names = match &db.pool {
        Pool::Sqlite(pool) => tables(pool).await,
        Pool::Postgres(pool) => postgres_shape(pool).await.columns.into_keys().collect(),
    };
    let mut counts = BTreeMap::new();
    for table in names {
        let sql = format!("SELECT COUNT(*) FROM {table}");
        let count: i64 = on_pool!(db, pool => {
            sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                .fetch_one(pool)
                .await
                .unwrap()
        });
        counts.insert(table, count);
    }
    counts
}

/// At least one row in every table, written through the DAOs.
async fn fill(db: &DbConn) {
    let user = db
        .create_user("a@example.com", Some("hash"), true, Some("A"))
        .await
        .unwrap();
    let other = db
        .create_user("b@example.com", None, false, None)
        .await
        .unwrap();
    db.create_invitation("c@example.com").await.unwrap();
    let bucket = crate::RateBucketSpec {
        capacity: 10.0,
        initial: 10.0,
        per_second: 0.1,
    };
    assert!(
        db.take_rate_token("sign-in:a@example.com", bucket, 1_000)
            .await
            .unwrap()
    );
    db.create_refresh_token(user).await.unwrap();
    db.create_password_reset(other).await.unwrap();
    db.update_network_setting("https://tabby.example.com")
        .await
        .unwrap();
    db.get_or_create_jwt_secret().await.unwrap();
    db.get_or_create_encryption_secret().await.unwrap();
    db.update_email_setting(&crate::EmailSettingDAO {
        smtp_username: "u".into(),
        smtp_password: Some("sealed".into()),
        smtp_server: "smtp.example.com".into(),
        smtp_port: 25,
        from_address: "tabby@example.com".into(),
        encryption: "none".into(),
        auth_method: "none".into(),
    })
    .await
    .unwrap();
    db.enqueue_email("test", "a@example.com", "s", "b", 1)
        .await
        .unwrap();
    db.update_ldap_credential(&crate::LdapCredentialDAO {
        host: "ldap.example.com".into(),
        port: 389,
        bind_dn: "cn=tabby".into(),
        bind_password: Some("sealed".into()),
        base_dn: "dc=example,dc=com".into(),
        user_filter: "(uid=%s)".into(),
        encryption: "none".into(),
        skip_tls_verify: false,
        email_attribute: "mail".into(),
        name_attribute: None,
        created_at: Utc::now(),
        updated_at: Utc::now(),
    })
    .await
    .unwrap();
    db.record_external_sign_in(user, "ldap").await.unwrap();
    db.update_oauth_credential(
        "oidc",
        "client",
        Some("sealed"),
        Some("https://idp.example"),
    )
    .await
    .unwrap();
    let integration = db
        .create_integration("github", "GitHub", "sealed", None)
        .await
        .unwrap();
    db.sync_provided_repositories(
        integration,
        &[crate::VendorRepository {
            vendor_id: "1".into(),
            name: "o/r".into(),
            git_url: "https://github.com/o/r.git".into(),
        }],
    )
    .await
    .unwrap();
    db.create_repository("tabby", "https://example.com/tabby.git", &["main".into()])
        .await
        .unwrap();
    db.create_user_event(user, "view", Utc::now(), "{}")
        .await
        .unwrap();
    db.create_user_completion(user, "cmpl-1", "rust", Utc::now())
        .await
        .unwrap();
    db.increment_user_completion("cmpl-1", CompletionCounter::Select)
        .await
        .unwrap();
    let group = db.create_user_group("team").await.unwrap();
    db.upsert_user_group_membership(other, group, false)
        .await
        .unwrap();
    db.grant_source_id_read_access("git:1", group)
        .await
        .unwrap();
    db.create_job_run("hourly", "\"Hourly\"").await.unwrap();
    assert!(db.take_lease("worker", "process-1", 15).await.unwrap());
    assert_eq!(db.bump_change_counter("directory").await.unwrap(), 1);
    db.end_user_sessions(other).await.unwrap();
    let notification = db.create_notification("admin", "failed").await.unwrap();
    db.mark_notifications_read(user, true, Some(notification))
        .await
        .unwrap();
    db.create_web_document("docs", "https://example.com/docs", false)
        .await
        .unwrap();
    db.upsert_ingested_document("wiki", "1", None, "T", "B", 0)
        .await
        .unwrap();
    let thread = db.create_thread(user, true).await.unwrap();
    let message = db
        .create_thread_message(thread, "user", "hi", &crate::Attachment::default(), None)
        .await
        .unwrap();
    db.update_thread_message_attachment(message, |a| {
        a.client_code = Some(vec![crate::AttachmentClientCode {
            filepath: Some("a.rs".into()),
            start_line: Some(1),
            content: "fn a() {}".into(),
        }])
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn migrations_create_every_table_from_empty() {
    let db = DbConn::new_sqlite_in_memory().await.unwrap();
    assert_eq!(tables(db.sqlite_pool()).await, TABLES);
    assert!(pending_versions(db.sqlite_pool()).await.unwrap().is_empty());
    let counts = row_counts(&db).await;
    assert_eq!(counts["registration_token"], 1, "seeded at init");
    assert_eq!(counts["server_setting"], 1, "seeded by its migration");
}

#[tokio::test]
async fn migrations_are_numbered_pairs() {
    let ups = versions();
    let downs: Vec<i64> = MIGRATOR
        .iter()
        .filter(|m| m.migration_type.is_down_migration())
        .map(|m| m.version)
        .collect();
    assert_eq!(ups, downs, "every up migration has a down migration");
    assert_eq!(ups, (1..=ups.len() as i64).collect::<Vec<_>>());
}

#[tokio::test]
async fn every_migration_reverts_and_reapplies_on_a_database_with_data() {
    let db = DbConn::new_sqlite_in_memory().await.unwrap();
    let pool = db.sqlite_pool();
    let full_schema = schema(pool).await;
    fill(&db).await;
    let full_counts = row_counts(&db).await;
    assert!(full_counts.values().all(|&n| n > 0), "{full_counts:?}");

    // Which tables each migration owns, learned by reverting them one at a time.
    let versions = versions();
    let mut owned_by_later: Vec<String> = Vec::new();
    for &version in versions.iter().rev() {
        let before = tables(pool).await;
        let schema_before = schema(pool).await;
        MIGRATOR.undo(pool, version - 1).await.unwrap();
        let after = tables(pool).await;
        let dropped: Vec<&String> = before.iter().filter(|t| !after.contains(t)).collect();
        assert!(
            !dropped.is_empty() || schema(pool).await != schema_before,
            "reverting migration {version} changed nothing"
        );
        owned_by_later.extend(dropped.into_iter().cloned());

        // Tables of earlier migrations keep their rows.
        let counts = row_counts(&db).await;
        for (table, count) in &counts {
            assert_eq!(
                full_counts[table], *count,
                "reverting {version} changed rows of {table}"
            );
        }
        assert_eq!(counts.len() + owned_by_later.len(), full_counts.len());

        // Re-applying everything from here restores the exact schema, data untouched.
        MIGRATOR.run(pool).await.unwrap();
        assert_eq!(
            schema(pool).await,
            full_schema,
            "after re-applying {version}"
        );
        for (table, count) in row_counts(&db).await {
            if !owned_by_later.contains(&table) {
                assert_eq!(full_counts[&table], count, "{table} after re-applying");
            }
        }
        // Put the removed migrations back into the reverted state for the next step.
        MIGRATOR.undo(pool, version - 1).await.unwrap();
    }
    assert!(tables(pool).await.is_empty(), "all downs leave no table");
    MIGRATOR.run(pool).await.unwrap();
    assert_eq!(schema(pool).await, full_schema);
}

fn backups(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".backup-"))
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn backup_is_taken_only_when_migrations_are_pending_on_an_existing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ee").join("db.sqlite");

    // A new file: created with its directory, nothing to back up.
    let db = DbConn::open(&path).await.unwrap();
    let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(db.sqlite_pool())
        .await
        .unwrap();
    assert_eq!(journal, "wal");
    let foreign_keys: bool = sqlx::query_scalar("PRAGMA foreign_keys")
        .fetch_one(db.sqlite_pool())
        .await
        .unwrap();
    assert!(foreign_keys);
    db.create_user("a@example.com", None, true, None)
        .await
        .unwrap();
    let token = db.read_registration_token().await.unwrap();
    db.close().await;
    let ee = path.parent().unwrap();
    assert!(backups(ee).is_empty());

    // Reopened with nothing pending: still no backup, data and token kept.
    let db = DbConn::open(&path).await.unwrap();
    assert_eq!(db.read_registration_token().await.unwrap(), token);
    assert!(backups(ee).is_empty());

    // An older schema (last migration reverted) is backed up before it is upgraded.
    let last = *versions().last().unwrap();
    MIGRATOR.undo(db.sqlite_pool(), last - 1).await.unwrap();
    db.close().await;
    let db = DbConn::open(&path).await.unwrap();
    let date = Utc::now().format("%Y%m%d");
    let first = format!("db.backup-{date}.sqlite");
    assert_eq!(backups(ee), [first.as_str()]);
    assert!(pending_versions(db.sqlite_pool()).await.unwrap().is_empty());

    // The backup is a standalone database in the pre-upgrade state, with the data.
    let backup = SqlitePool::connect_with(
        sqlx::sqlite::SqliteConnectOptions::new().filename(ee.join(&first)),
    )
    .await
    .unwrap();
    assert_eq!(pending_versions(&backup).await.unwrap(), [last]);
    let emails: Vec<String> = sqlx::query_scalar("SELECT email FROM users")
        .fetch_all(&backup)
        .await
        .unwrap();
    assert_eq!(emails, ["a@example.com"]);
    backup.close().await;

    // A second upgrade on the same day keeps the first backup and adds another.
    MIGRATOR.undo(db.sqlite_pool(), last - 1).await.unwrap();
    db.close().await;
    let db = DbConn::open(&path).await.unwrap();
    assert_eq!(
        backups(ee),
        [format!("db.backup-{date}-2.sqlite"), first.clone()]
    );
    db.close().await;
}

#[tokio::test]
async fn unrelated_existing_empty_file_is_not_backed_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    std::fs::write(&path, b"").unwrap();
    let db = DbConn::open(&path).await.unwrap();
    assert_eq!(tables(db.sqlite_pool()).await, TABLES);
    assert!(backups(dir.path()).is_empty());
}

/// (version, name, down?) of every migration.
fn listing(migrator: &Migrator) -> Vec<(i64, String, bool)> {
    migrator
        .iter()
        .map(|m| {
            (
                m.version,
                m.description.to_string(),
                m.migration_type.is_down_migration(),
            )
        })
        .collect()
}

#[tokio::test]
async fn every_migration_has_a_postgres_twin() {
    assert_eq!(listing(&MIGRATOR), listing(&PG_MIGRATOR));
}

/// Tables with their columns in order, and the explicitly created indexes (not those behind
/// primary keys and UNIQUE constraints).
#[derive(Debug, PartialEq)]
struct Shape {
    columns: BTreeMap<String, Vec<String>>,
    indexes: Vec<String>,
}

async fn sqlite_shape(pool: &SqlitePool) -> Shape {
    let mut columns = BTreeMap::new();
    for table in tables(pool).await {
        let names: Vec<String> =
            sqlx::query_scalar("SELECT name FROM pragma_table_info($1) ORDER BY cid")
                .bind(&table)
                .fetch_all(pool)
                .await
                .unwrap();
        columns.insert(table, names);
    }
    let indexes = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL ORDER BY name",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    Shape { columns, indexes }
}

async fn postgres_shape(pool: &PgPool) -> Shape {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text FROM information_schema.columns
         WHERE table_schema = 'public' AND table_name != '_sqlx_migrations'
         ORDER BY table_name, ordinal_position",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let mut columns: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (table, column) in rows {
        columns.entry(table).or_default().push(column);
    }
    let indexes = sqlx::query_scalar(
        "SELECT indexname::text FROM pg_indexes
         WHERE schemaname = 'public'
           AND indexname NOT IN (SELECT conname FROM pg_constraint)
           AND indexname != '_sqlx_migrations_pkey'
         ORDER BY indexname",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    Shape { columns, indexes }
}

/// Both schemas step by step: from the full schema down to empty, one migration at a time,
/// and back up, on databases that hold data written through the DAOs (which also runs every
/// DAO write on PostgreSQL). Needs a server: without `TABBY_TEST_POSTGRES_URL` it says so and
/// passes; `scripts/test.sh` always sets it.
#[tokio::test]
async fn postgres_schema_matches_sqlite_after_every_migration_down_and_up() {
    let Ok(server) = std::env::var(TEST_POSTGRES_URL_VAR) else {
        eprintln!("{TEST_POSTGRES_URL_VAR} is not set: PostgreSQL schema not compared");
        return;
    };
    let lite = DbConn::new_sqlite_in_memory().await.unwrap();
    let pg = DbConn::new_test_postgres(&server).await.unwrap();
    let Pool::Postgres(pg_pool) = &pg.pool else {
        unreachable!()
    };
    let lite_pool = lite.sqlite_pool();
    fill(&lite).await;
    fill(&pg).await;
    let full = sqlite_shape(lite_pool).await;
    assert_eq!(postgres_shape(pg_pool).await, full);
    assert_eq!(full.columns.len(), TABLES.len());
    let full_counts = row_counts(&pg).await;
    assert!(full_counts.values().all(|&n| n > 0), "{full_counts:?}");
    assert_eq!(full_counts, row_counts(&lite).await);

    for &version in versions().iter().rev() {
        MIGRATOR.undo(lite_pool, version - 1).await.unwrap();
        PG_MIGRATOR.undo(pg_pool, version - 1).await.unwrap();
        let shape = sqlite_shape(lite_pool).await;
        assert_eq!(
            postgres_shape(pg_pool).await,
            shape,
            "after reverting {version}"
        );
        for (table, count) in row_counts(&pg).await {
            assert_eq!(
                full_counts[&table], count,
                "{table} after reverting {version}"
            );
        }
    }
    assert!(postgres_shape(pg_pool).await.columns.is_empty());
    MIGRATOR.run(lite_pool).await.unwrap();
    PG_MIGRATOR.run(pg_pool).await.unwrap();
    assert_eq!(postgres_shape(pg_pool).await, full);
    assert_eq!(sqlite_shape(lite_pool).await, full);
}

/// `copy_into_postgres` on a database with a row in every table: PostgreSQL ends with the same
/// rows (counts per table, and what the DAOs read back), new ids continue after the copied
/// ones, and a second copy into the now filled database is refused. Needs a server, like the
/// test above.
#[tokio::test]
async fn a_sqlite_database_copies_into_postgres_row_for_row() {
    let Ok(server) = std::env::var(TEST_POSTGRES_URL_VAR) else {
        eprintln!("{TEST_POSTGRES_URL_VAR} is not set: the copy into PostgreSQL is not tested");
        return;
    };
    let lite = DbConn::new_sqlite_in_memory().await.unwrap();
    fill(&lite).await;
    let pg = DbConn::new_test_postgres(&server).await.unwrap();
    let copied = lite.copy_into_postgres(&pg).await.unwrap();
    let lite_counts = row_counts(&lite).await;
    assert_eq!(row_counts(&pg).await, lite_counts);
    assert_eq!(
        copied.iter().cloned().collect::<BTreeMap<_, _>>(),
        lite_counts
            .iter()
            .map(|(table, n)| (table.clone(), *n as u64))
            .collect::<BTreeMap<_, _>>()
    );
    let all = crate::Pagination::all();
    assert_eq!(
        pg.list_users(&[], all).await.unwrap(),
        lite.list_users(&[], all).await.unwrap()
    );
    assert_eq!(
        pg.list_repositories(all).await.unwrap(),
        lite.list_repositories(all).await.unwrap()
    );
    assert_eq!(
        pg.read_server_setting().await.unwrap(),
        lite.read_server_setting().await.unwrap()
    );
    let next = pg
        .create_user("new@example.com", None, false, None)
        .await
        .unwrap();
    let highest = lite
        .list_users(&[], all)
        .await
        .unwrap()
        .iter()
        .map(|u| u.id)
        .max()
        .unwrap();
    assert_eq!(next, highest + 1);
    assert!(matches!(
        lite.copy_into_postgres(&pg).await,
        Err(crate::DbError::Copy(message)) if message.contains("already holds data")
    ));
    assert!(matches!(
        lite.copy_into_postgres(&lite).await,
        Err(crate::DbError::Copy(_))
    ));
}
