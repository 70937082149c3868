//! Per-completion usage counters (`user_completions`): one row per completion served to a
//! user, then views, selects and dismisses counted as the editor reports them. Daily
//! statistics for the dashboard are aggregated from these rows.

use chrono::{DateTime, NaiveDate, Utc};
use sqlx::{Database, QueryBuilder};

use crate::{DbConn, DbError, DbResult, pagination::push_in_filter};

/// Which counter of a completion an editor event bumps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionCounter {
    View,
    Select,
    Dismiss,
}

impl CompletionCounter {
    fn column(self) -> &'static str {
        match self {
            CompletionCounter::View => "views",
            CompletionCounter::Select => "selects",
            CompletionCounter::Dismiss => "dismisses",
        }
    }
}

/// What [`DbConn::compute_daily_stats`] counts.
#[derive(Clone, Copy, Debug)]
pub struct DailyStatsQuery<'a> {
    /// Completions created at or after this time...
    pub start: DateTime<Utc>,
    /// ...and before this one.
    pub end: DateTime<Utc>,
    /// Only these users; empty means everyone.
    pub user_ids: &'a [i64],
    /// Only these languages; empty means every language (and then `other_than` is ignored).
    pub languages: &'a [String],
    /// Also count every language *not* in this list (the dashboard's "other" bucket).
    pub other_than: Option<&'a [String]>,
}

/// Completions of one language on one UTC day.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DailyStatsDAO {
    /// Midnight UTC of the day.
    pub start: DateTime<Utc>,
    pub language: String,
    pub completions: i64,
    pub views: i64,
    pub selects: i64,
    pub dismisses: i64,
}

#[derive(sqlx::FromRow)]
struct DailyStatsRow {
    day: NaiveDate,
    language: String,
    completions: i64,
    views: i64,
    selects: i64,
    dismisses: i64,
}

impl DbConn {
    /// Records a completion served to `user_id`; returns the row id.
    pub async fn create_user_completion(
        &self,
        user_id: i64,
        completion_id: &str,
        language: &str,
        created_at: DateTime<Utc>,
    ) -> DbResult<i64> {
        on_pool!(self, pool => {
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO user_completions (user_id, completion_id, language, created_at, updated_at)
                 VALUES ($1, $2, $3, $4, $5) RETURNING id",
            )
            .bind(user_id)
            .bind(completion_id)
            .bind(language)
            .bind(pool.time(created_at))
            .bind(pool.time(created_at))
            .fetch_one(pool)
            .await
            .map_err(|e| DbError::from(e).missing_reference("user"))?;
            Ok(id)
        })
    }

    /// Adds one to `counter` of the completion `completion_id`. Returns false when no such
    /// completion was recorded (e.g. it was served while the webserver was off).
    pub async fn increment_user_completion(
        &self,
        completion_id: &str,
        counter: CompletionCounter,
    ) -> DbResult<bool> {
        on_pool!(self, pool => {
            let column = counter.column();
            let result = sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE user_completions SET {column} = {column} + 1, updated_at = DATETIME('now')
                 WHERE completion_id = $1"
            )))
            .bind(completion_id)
            .execute(pool)
            .await?;
            Ok(result.rows_affected() > 0)
        })
    }

    /// Completions, views, selects and dismisses per UTC day and language, in day then
    /// language order. Days without completions are absent.
    pub async fn compute_daily_stats(
        &self,
        filter: DailyStatsQuery<'_>,
    ) -> DbResult<Vec<DailyStatsDAO>> {
        on_pool!(self, pool => {
            let mut query = QueryBuilder::new(
                "SELECT DATE(created_at) AS day, language, COUNT(*) AS completions,
                        CAST(SUM(views) AS BIGINT) AS views, CAST(SUM(selects) AS BIGINT) AS selects,
                        CAST(SUM(dismisses) AS BIGINT) AS dismisses
                 FROM user_completions WHERE created_at >= ",
            );
            query
                .push_bind(pool.time(filter.start))
                .push(" AND created_at < ")
                .push_bind(pool.time(filter.end));
            push_in_filter(&mut query, "user_id", filter.user_ids);
            if !filter.languages.is_empty() {
                query.push(" AND (FALSE");
                push_or_in(&mut query, "language IN", filter.languages);
                if let Some(known) = filter.other_than {
                    push_or_in(&mut query, "language NOT IN", known);
                }
                query.push(")");
            }
            query.push(" GROUP BY day, language ORDER BY day, language");
            let rows = query
                .build_query_as::<DailyStatsRow>()
                .fetch_all(pool)
                .await?;
            Ok(rows
                .into_iter()
                .map(|row| DailyStatsDAO {
                    start: row.day.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc(),
                    language: row.language,
                    completions: row.completions,
                    views: row.views,
                    selects: row.selects,
                    dismisses: row.dismisses,
                })
                .collect())
        })
    }
}

/// Appends ` OR {test} ($1, ...)`. An empty list (which PostgreSQL does not parse) holds for
/// no row after `IN` and for every row after `NOT IN`.
fn push_or_in<DB: Database>(query: &mut QueryBuilder<DB>, test: &str, values: &[String])
where
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    if values.is_empty() {
        let holds = test.contains("NOT");
        query.push(if holds { " OR TRUE" } else { " OR FALSE" });
        return;
    }
    query.push(format_args!(" OR {test} ("));
    let mut list = query.separated(", ");
    for value in values {
        list.push_bind(value.clone());
    }
    list.push_unseparated(")");
}
