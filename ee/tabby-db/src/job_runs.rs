//! Background job runs: one row per run, its command (the serialized job event), and its
//! outcome. Cron and users only enqueue rows; one worker claims pending rows in order.

use chrono::{DateTime, Utc};
use sqlx::QueryBuilder;

use crate::{DbConn, DbResult, Pagination, error::expect_one, pagination::push_in_filter};

#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct JobRunDAO {
    pub id: i64,
    pub job: String,
    pub start_ts: DateTime<Utc>,
    pub end_ts: Option<DateTime<Utc>>,
    pub exit_code: Option<i64>,
    pub stdout: String,
    pub command: String,
    pub started_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl JobRunDAO {
    pub fn is_pending(&self) -> bool {
        self.exit_code.is_none() && self.started_at.is_none()
    }
    pub fn is_running(&self) -> bool {
        self.exit_code.is_none() && self.started_at.is_some()
    }
}

/// Success, failure and pending counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JobStatsDAO {
    pub success: i64,
    pub failed: i64,
    pub pending: i64,
}

const COLUMNS: &str = "id, job, start_ts, end_ts, exit_code, stdout, command, started_at, \
                       created_at, updated_at";
const RUN: &str = "job run";

impl DbConn {
    /// Enqueues `command` unless an identical command is still pending; returns the run's id
    /// and whether it was newly created.
    pub async fn create_job_run(&self, job: &str, command: &str) -> DbResult<(i64, bool)> {
        on_pool!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let pending: Option<(i64,)> = sqlx::query_as(
                "SELECT id FROM job_runs
                 WHERE command = $1 AND exit_code IS NULL AND started_at IS NULL
                 ORDER BY id DESC LIMIT 1",
            )
            .bind(command)
            .fetch_optional(&mut *tx)
            .await?;
            if let Some((id,)) = pending {
                return Ok((id, false));
            }
            let result = sqlx::query_scalar::<_, i64>("INSERT INTO job_runs (job, command) VALUES ($1, $2) RETURNING id")
                .bind(job)
                .bind(command)
                .fetch_one(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok((result, true))
        })
    }

    pub async fn get_job_run(&self, id: i64) -> DbResult<Option<JobRunDAO>> {
        on_pool!(self, pool => {
            Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {COLUMNS} FROM job_runs WHERE id = $1"
            )))
            .bind(id)
            .fetch_optional(pool)
            .await?)
        })
    }

    /// Runs by id and job name (empty: all), in id order.
    pub async fn list_job_runs(
        &self,
        ids: &[i64],
        jobs: &[String],
        page: Pagination,
    ) -> DbResult<Vec<JobRunDAO>> {
        on_pool!(self, pool => {
            let mut query =
                QueryBuilder::new(format!("SELECT {COLUMNS} FROM job_runs WHERE TRUE"));
            push_in_filter(&mut query, "id", ids);
            push_in_filter(&mut query, "job", jobs);
            page.push_to(&mut query, "id");
            let rows = query
                .build_query_as::<JobRunDAO>()
                .fetch_all(pool)
                .await?;
            Ok(page.finish(rows))
        })
    }

    /// The latest run of `command`, if any.
    pub async fn latest_job_run(&self, command: &str) -> DbResult<Option<JobRunDAO>> {
        on_pool!(self, pool => {
            Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {COLUMNS} FROM job_runs WHERE command = $1 ORDER BY id DESC LIMIT 1"
            )))
            .bind(command)
            .fetch_optional(pool)
            .await?)
        })
    }

    /// Claims the oldest pending run (sets `started_at`), atomically: two workers never get
    /// the same run.
    pub async fn claim_next_job_run(&self) -> DbResult<Option<JobRunDAO>> {
        on_pool!(self, pool => {
            let skip_locked = pool.skip_locked();
            Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "UPDATE job_runs SET started_at = DATETIME('now'), updated_at = DATETIME('now')
                 WHERE id = (SELECT id FROM job_runs
                             WHERE exit_code IS NULL AND started_at IS NULL
                             ORDER BY id LIMIT 1{skip_locked})
                   AND started_at IS NULL
                 RETURNING {COLUMNS}"
            )))
            .fetch_optional(pool)
            .await?)
        })
    }

    pub async fn finish_job_run(&self, id: i64, exit_code: i64) -> DbResult<()> {
        on_pool!(self, pool => {
            let result = sqlx::query(
                "UPDATE job_runs SET exit_code = $1, end_ts = DATETIME('now'),
                        updated_at = DATETIME('now')
                 WHERE id = $2 AND exit_code IS NULL",
            )
            .bind(exit_code)
            .bind(id)
            .execute(pool)
            .await?;
            expect_one(result.rows_affected(), RUN)
        })
    }

    /// Marks runs that were running when the server stopped as failed (-1) and returns them,
    /// so their commands can be enqueued again.
    pub async fn finalize_stale_job_runs(&self) -> DbResult<Vec<JobRunDAO>> {
        on_pool!(self, pool => {
            Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "UPDATE job_runs SET exit_code = -1, end_ts = DATETIME('now'),
                        updated_at = DATETIME('now')
                 WHERE exit_code IS NULL AND started_at IS NOT NULL
                 RETURNING {COLUMNS}"
            )))
            .fetch_all(pool)
            .await?)
        })
    }

    /// Counts of finished-ok, failed and pending runs created in the last `days` days.
    pub async fn job_run_stats(&self, jobs: &[String], days: u32) -> DbResult<JobStatsDAO> {
        on_pool!(self, pool => {
            let mut query = QueryBuilder::new(
                "SELECT
                    COUNT(CASE WHEN exit_code = 0 THEN 1 END),
                    COUNT(CASE WHEN exit_code != 0 THEN 1 END),
                    COUNT(CASE WHEN exit_code IS NULL THEN 1 END)
                 FROM job_runs WHERE created_at >= DATETIME('now', ",
            );
            query.push_bind(format!("-{days} days")).push(")");
            push_in_filter(&mut query, "job", jobs);
            let (success, failed, pending): (i64, i64, i64) =
                query.build_query_as().fetch_one(pool).await?;
            Ok(JobStatsDAO {
                success,
                failed,
                pending,
            })
        })
    }

    /// Deletes finished runs older than `days`; returns how many.
    pub async fn delete_old_job_runs(&self, days: u32) -> DbResult<u64> {
        on_pool!(self, pool => {
            let result = sqlx::query(
                "DELETE FROM job_runs WHERE exit_code IS NOT NULL AND created_at < DATETIME('now', $1)",
            )
            .bind(format!("-{days} days"))
            .execute(pool)
            .await?;
            Ok(result.rows_affected())
        })
    }
}
