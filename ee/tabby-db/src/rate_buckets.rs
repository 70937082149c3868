//! Token buckets shared by every process on the database (`rate_buckets`): a limit that must
//! hold across replicas (failed sign-ins per account) is counted here rather than in one
//! process's memory. Each operation is one write transaction: read the bucket, refill it for
//! the time since its last update, take or give a token, write it back.

use crate::{DbConn, DbResult};

/// A bucket: at most `capacity` tokens, `initial` for a new key, refilled at `per_second`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateBucketSpec {
    pub capacity: f64,
    pub initial: f64,
    pub per_second: f64,
}

impl RateBucketSpec {
    /// The bucket's tokens at `now_ms` after holding `tokens` at `updated_ms` (a clock that
    /// went backwards refills nothing).
    fn refilled(&self, tokens: f64, updated_ms: i64, now_ms: i64) -> f64 {
        let elapsed = (now_ms.saturating_sub(updated_ms)).max(0) as f64 / 1000.0;
        (tokens + elapsed * self.per_second).min(self.capacity)
    }
}

impl DbConn {
    /// Takes a token from the bucket `key`; `false` (nothing taken) when it has less than one.
    pub async fn take_rate_token(
        &self,
        key: &str,
        spec: RateBucketSpec,
        now_ms: i64,
    ) -> DbResult<bool> {
        self.update_rate_bucket(key, spec, now_ms, |tokens| {
            (tokens >= 1.0).then_some(tokens - 1.0)
        })
        .await
    }

    /// Gives a token back to the bucket `key` (a sign-in that succeeded), up to its capacity.
    pub async fn give_rate_token(
        &self,
        key: &str,
        spec: RateBucketSpec,
        now_ms: i64,
    ) -> DbResult<()> {
        self.update_rate_bucket(key, spec, now_ms, |tokens| {
            Some((tokens + 1.0).min(spec.capacity))
        })
        .await
        .map(|_| ())
    }

    /// Removes buckets not touched since `before_ms` (they would be full again anyway when
    /// their refill time has passed); how many.
    pub async fn delete_idle_rate_buckets(&self, before_ms: i64) -> DbResult<u64> {
        on_pool!(self, pool => {
            let result = sqlx::query("DELETE FROM rate_buckets WHERE updated_ms < $1")
                .bind(before_ms)
                .execute(pool)
                .await?;
            Ok(result.rows_affected())
        })
    }

    /// Refills the bucket to `now_ms` and applies `change` to its tokens: `None` leaves it as
    /// it was and returns `false`.
    async fn update_rate_bucket(
        &self,
        key: &str,
        spec: RateBucketSpec,
        now_ms: i64,
        change: impl FnOnce(f64) -> Option<f64>,
    ) -> DbResult<bool> {
        on_pool!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let row: Option<(f64, i64)> =
                sqlx::query_as("SELECT tokens, updated_ms FROM rate_buckets WHERE key = $1")
                    .bind(key)
                    .fetch_optional(&mut *tx)
                    .await?;
            let tokens = match row {
                Some((tokens, updated_ms)) => spec.refilled(tokens, updated_ms, now_ms),
                None => spec.initial.min(spec.capacity),
            };
            let Some(tokens) = change(tokens) else {
                return Ok(false);
            };
            sqlx::query(
                "INSERT INTO rate_buckets (key, tokens, updated_ms) VALUES ($1, $2, $3)
                 ON CONFLICT (key) DO UPDATE SET tokens = excluded.tokens,
                     updated_ms = excluded.updated_ms",
            )
            .bind(key)
            .bind(tokens)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(true)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refill_is_capped_and_ignores_a_clock_going_back() {
        let spec = RateBucketSpec {
            capacity: 10.0,
            initial: 10.0,
            per_second: 0.5,
        };
        assert_eq!(spec.refilled(2.0, 1_000, 5_000), 4.0);
        assert_eq!(spec.refilled(9.0, 0, 60_000), 10.0);
        assert_eq!(spec.refilled(3.0, 5_000, 1_000), 3.0);
    }
}
