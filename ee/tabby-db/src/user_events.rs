//! The per-user copy of editor events (`user_events`): each event from `/v1/events` or a
//! completion, kept with its kind and the event as JSON, for the admin's `userEvents` view.

use chrono::{DateTime, Utc};
use sqlx::QueryBuilder;

use crate::{DbConn, DbError, DbResult, Pagination, pagination::push_in_filter};

/// A row of `user_events`.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct UserEventDAO {
    pub id: i64,
    pub user_id: i64,
    /// `completion`, `chat_completion`, `select`, `view` or `dismiss`.
    pub kind: String,
    pub created_at: DateTime<Utc>,
    /// The event as (pretty-printed) JSON.
    pub payload: String,
}

impl DbConn {
    pub async fn create_user_event(
        &self,
        user_id: i64,
        kind: &str,
        created_at: DateTime<Utc>,
        payload: &str,
    ) -> DbResult<i64> {
        on_pool!(self, pool => {
            let result = sqlx::query_scalar::<_, i64>(
                "INSERT INTO user_events (user_id, kind, created_at, payload) VALUES ($1, $2, $3, $4) RETURNING id",
            )
            .bind(user_id)
            .bind(kind)
            .bind(pool.time(created_at))
            .bind(payload)
            .fetch_one(pool)
            .await
            .map_err(|e| DbError::from(e).missing_reference("user"))?;
            Ok(result)
        })
    }

    /// Events with `start <= created_at < end` of the given users (all when `user_ids` is
    /// empty), a page at a time in id order.
    pub async fn list_user_events(
        &self,
        user_ids: &[i64],
        start: DateTime<Utc>,
        end: DateTime<Utc>,
        page: Pagination,
    ) -> DbResult<Vec<UserEventDAO>> {
        on_pool!(self, pool => {
            let mut query = QueryBuilder::new(
                "SELECT id, user_id, kind, created_at, payload FROM user_events WHERE created_at >= ",
            );
            query
                .push_bind(pool.time(start))
                .push(" AND created_at < ")
                .push_bind(pool.time(end));
            push_in_filter(&mut query, "user_id", user_ids);
            page.push_to(&mut query, "id");
            let rows = query
                .build_query_as::<UserEventDAO>()
                .fetch_all(pool)
                .await?;
            Ok(page.finish(rows))
        })
    }
}
