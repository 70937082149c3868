//! `tabby db migrate-sqlite-to-postgres`: every row of a SQLite database copied into a
//! PostgreSQL database at the same migration, in one transaction, ids kept.
//!
//! Columns are read by the PostgreSQL column's type (the twins have the same columns, a test
//! keeps them so): SQLite's 0/1 become booleans, its text timestamps `timestamptz`, its JSON
//! text `jsonb`. Tables are filled parents first (foreign keys), each in row order, in batches
//! of [`BATCH_ROWS`] read by row id, so memory stays bounded whatever a table's size; identity
//! sequences then continue after the highest id copied. The target must be empty apart from
//! the rows that opening a database seeds (they are replaced by the source's).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::{QueryBuilder, Row, sqlite::SqliteRow, types::Json};

use crate::{DbConn, DbError, DbResult, PG_WRITE_LOCK, Pool};

/// Rows read and written per statement (PostgreSQL takes up to 65,535 arguments).
const BATCH_ROWS: i64 = 500;

/// Tables that opening a database fills (one row each); a target holding only these is empty.
const SEEDED: &[&str] = &["registration_token", "server_setting"];

/// A column of the target: its name and PostgreSQL type (`udt_name`: int8, bool, timestamptz…).
struct Column {
    name: String,
    udt: String,
}

impl DbConn {
    /// Copies every row of this SQLite database into `target`, a PostgreSQL database migrated
    /// to the same version that holds no data yet; the rows copied per table, in copy order.
    pub async fn copy_into_postgres(&self, target: &DbConn) -> DbResult<Vec<(String, u64)>> {
        let Pool::Sqlite(source) = &self.pool else {
            return Err(DbError::Copy("the source must be a SQLite database".into()));
        };
        let Pool::Postgres(pg) = &target.pool else {
            return Err(DbError::Copy(
                "the target must be a PostgreSQL database".into(),
            ));
        };
        let lite_version: Option<i64> =
            sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations WHERE success")
                .fetch_one(source)
                .await?;
        let pg_version: Option<i64> =
            sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations WHERE success")
                .fetch_one(pg)
                .await?;
        if lite_version != pg_version {
            return Err(DbError::Copy(format!(
                "the databases are at different migrations ({lite_version:?} and {pg_version:?})"
            )));
        }

        let mut tx = pg.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(PG_WRITE_LOCK)
            .execute(&mut *tx)
            .await?;
        let rows: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT table_name::text, column_name::text, udt_name::text
             FROM information_schema.columns
             WHERE table_schema = 'public' AND table_name != '_sqlx_migrations'
             ORDER BY table_name, ordinal_position",
        )
        .fetch_all(&mut *tx)
        .await?;
        let mut columns: BTreeMap<String, Vec<Column>> = BTreeMap::new();
        for (table, name, udt) in rows {
            columns.entry(table).or_default().push(Column { name, udt });
        }
        let references: Vec<(String, String)> = sqlx::query_as(
            "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint
             WHERE contype = 'f' AND connamespace = 'public'::regnamespace",
        )
        .fetch_all(&mut *tx)
        .await?;
        let order = parents_first(columns.keys().cloned().collect(), &references)?;

        for table in &order {
            let count: i64 =
                sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
                    .fetch_one(&mut *tx)
                    .await?;
            let seeded = i64::from(SEEDED.contains(&table.as_str()));
            if count > seeded {
                return Err(DbError::Copy(format!(
                    "the PostgreSQL database already holds data ({count} rows in {table}): \
                     copy into a new, empty database"
                )));
            }
        }
        for table in order.iter().rev() {
            sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM {table}")))
                .execute(&mut *tx)
                .await?;
        }

        let mut copied = Vec::with_capacity(order.len());
        for table in &order {
            let table_columns = &columns[table];
            let names = table_columns
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            let mut after = i64::MIN;
            let mut count = 0_u64;
            loop {
                let batch: Vec<SqliteRow> = sqlx::query(sqlx::AssertSqlSafe(format!(
                    "SELECT rowid AS copy_rowid, {names} FROM {table}
                     WHERE rowid > $1 ORDER BY rowid LIMIT $2"
                )))
                .bind(after)
                .bind(BATCH_ROWS)
                .fetch_all(source)
                .await?;
                let Some(last) = batch.last() else { break };
                after = last.try_get("copy_rowid")?;
                let mut insert =
                    QueryBuilder::<sqlx::Postgres>::new(format!("INSERT INTO {table} ({names}) "));
                let mut failure = None;
                insert.push_values(&batch, |mut values, row| {
                    for column in table_columns {
                        if let Err(e) = bind_value(&mut values, row, table, column) {
                            failure.get_or_insert(e);
                        }
                    }
                });
                if let Some(e) = failure {
                    return Err(e);
                }
                insert.build().execute(&mut *tx).await?;
                count += batch.len() as u64;
            }
            if table_columns.iter().any(|c| c.name == "id") {
                // The next id after the copied ones (a no-op for tables whose id is no identity).
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "SELECT setval(seq, (SELECT COALESCE(MAX(id), 0) + 1 FROM {table}), false)
                     FROM pg_get_serial_sequence('{table}', 'id') AS seq WHERE seq IS NOT NULL"
                )))
                .execute(&mut *tx)
                .await?;
            }
            copied.push((table.clone(), count));
        }
        tx.commit().await?;
        Ok(copied)
    }
}

/// Binds `row`'s value of `column` as the type the PostgreSQL column has.
fn bind_value(
    values: &mut sqlx::query_builder::Separated<'_, sqlx::Postgres, &'static str>,
    row: &SqliteRow,
    table: &str,
    column: &Column,
) -> DbResult<()> {
    let name = column.name.as_str();
    match column.udt.as_str() {
        "int8" => {
            values.push_bind(row.try_get::<Option<i64>, _>(name)?);
        }
        "bool" => {
            values.push_bind(row.try_get::<Option<bool>, _>(name)?);
        }
        "float8" => {
            values.push_bind(row.try_get::<Option<f64>, _>(name)?);
        }
        "text" | "citext" => {
            values.push_bind(row.try_get::<Option<String>, _>(name)?);
        }
        "bytea" => {
            values.push_bind(row.try_get::<Option<Vec<u8>>, _>(name)?);
        }
        "jsonb" => {
            let text: Option<String> = row.try_get(name)?;
            let json = text
                .map(|text| {
                    serde_json::from_str::<serde_json::Value>(&text).map_err(|e| {
                        DbError::Copy(format!("{table}.{name} holds no JSON ({e}): {text:?}"))
                    })
                })
                .transpose()?;
            values.push_bind(json.map(Json));
        }
        "timestamptz" => {
            let text: Option<String> = row.try_get(name)?;
            let time = text
                .map(|text| {
                    parse_sqlite_time(&text).ok_or_else(|| {
                        DbError::Copy(format!("{table}.{name} holds no timestamp: {text:?}"))
                    })
                })
                .transpose()?;
            values.push_bind(time);
        }
        other => {
            return Err(DbError::Copy(format!(
                "{table}.{name} has a type the copy does not know: {other}"
            )));
        }
    }
    Ok(())
}

/// SQLite's `DATETIME('now')` text (`YYYY-MM-DD HH:MM:SS[.fff]`, UTC), or RFC 3339.
fn parse_sqlite_time(text: &str) -> Option<DateTime<Utc>> {
    NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f")
        .map(|t| t.and_utc())
        .ok()
        .or_else(|| {
            DateTime::parse_from_rfc3339(text)
                .ok()
                .map(|t| t.with_timezone(&Utc))
        })
}

/// `tables` ordered so that each comes after the tables it references.
fn parents_first(tables: Vec<String>, references: &[(String, String)]) -> DbResult<Vec<String>> {
    let mut left: BTreeSet<String> = tables.into_iter().collect();
    let mut order = Vec::with_capacity(left.len());
    while !left.is_empty() {
        let ready: Vec<String> = left
            .iter()
            .filter(|table| {
                !references.iter().any(|(child, parent)| {
                    child == *table && parent != *table && left.contains(parent)
                })
            })
            .cloned()
            .collect();
        if ready.is_empty() {
            return Err(DbError::Copy(format!(
                "the tables reference each other in a cycle: {left:?}"
            )));
        }
        for table in ready {
            left.remove(&table);
            order.push(table);
        }
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_come_first() {
        let tables = ["refresh_tokens", "users", "thread_messages", "threads"]
            .map(String::from)
            .to_vec();
        let refs = [
            ("refresh_tokens", "users"),
            ("threads", "users"),
            ("thread_messages", "threads"),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()));
        let order = parents_first(tables, &refs).unwrap();
        let at = |t: &str| order.iter().position(|o| o == t).unwrap();
        assert!(at("users") < at("refresh_tokens"));
        assert!(at("users") < at("threads") && at("threads") < at("thread_messages"));
        let cycle = [("a", "b"), ("b", "a")].map(|(a, b)| (a.to_string(), b.to_string()));
        assert!(parents_first(vec!["a".into(), "b".into()], &cycle).is_err());
    }

    #[test]
    fn sqlite_times_parse_as_utc() {
        let t = parse_sqlite_time("2024-01-02 03:04:05").unwrap();
        assert_eq!(t.to_rfc3339(), "2024-01-02T03:04:05+00:00");
        let t = parse_sqlite_time("2024-01-02 03:04:05.250").unwrap();
        assert_eq!(t.timestamp_subsec_millis(), 250);
        assert!(parse_sqlite_time("2024-01-02T03:04:05+02:00").is_some());
        assert!(parse_sqlite_time("yesterday").is_none());
    }
}
