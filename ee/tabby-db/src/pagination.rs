//! Relay-style pages over rows ordered by their integer id.
//!
//! The API layer turns its opaque cursors back into row ids and hands them over as a
//! [`Pagination`]; every `list_*` DAO appends the same `id` range, order and limit through
//! [`Pagination::push_to`] and returns rows in ascending id order whichever direction was
//! asked for. To learn whether another page exists, ask for one row more than you show.

use sqlx::{Database, QueryBuilder};

use crate::{DbError, DbResult};

/// Which rows of a list to return, by id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pagination {
    /// Only rows whose id is greater than this (Relay `after`).
    pub after: Option<i64>,
    /// Only rows whose id is smaller than this (Relay `before`).
    pub before: Option<i64>,
    /// At most this many rows.
    pub limit: Option<usize>,
    /// Take the `limit` rows closest to `before` (Relay `last`) instead of those right after
    /// `after` (Relay `first`).
    pub backwards: bool,
}

impl Pagination {
    /// Every row.
    pub fn all() -> Self {
        Self::default()
    }

    /// Relay arguments: `after`/`before` are row ids, `first`/`last` row counts; giving both
    /// `first` and `last` is an error.
    pub fn relay(
        after: Option<i64>,
        before: Option<i64>,
        first: Option<usize>,
        last: Option<usize>,
    ) -> DbResult<Self> {
        match (first, last) {
            (Some(_), Some(_)) => Err(DbError::InvalidPagination(
                "`first` and `last` cannot be used together",
            )),
            (first, None) => Ok(Self {
                after,
                before,
                limit: first,
                backwards: false,
            }),
            (None, last) => Ok(Self {
                after,
                before,
                limit: last,
                backwards: true,
            }),
        }
    }

    /// Appends ` AND id > ? AND id < ? ORDER BY id LIMIT ?` (the parts that apply) to a query
    /// whose WHERE clause is already open.
    pub(crate) fn push_to<DB: Database>(&self, query: &mut QueryBuilder<DB>, id_column: &str)
    where
        i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    {
        if let Some(after) = self.after {
            query
                .push(format_args!(" AND {id_column} > "))
                .push_bind(after);
        }
        if let Some(before) = self.before {
            query
                .push(format_args!(" AND {id_column} < "))
                .push_bind(before);
        }
        let order = if self.backwards { "DESC" } else { "ASC" };
        query.push(format_args!(" ORDER BY {id_column} {order}"));
        if let Some(limit) = self.limit {
            query
                .push(" LIMIT ")
                .push_bind(i64::try_from(limit).unwrap_or(i64::MAX));
        }
    }

    /// Puts rows fetched by a query built with [`Self::push_to`] back into ascending id order.
    pub(crate) fn finish<T>(&self, mut rows: Vec<T>) -> Vec<T> {
        if self.backwards {
            rows.reverse();
        }
        rows
    }
}

/// Appends ` AND {column} IN (?, ...)` unless `values` is empty (which means "no filter").
pub(crate) fn push_in_filter<DB: Database, T>(
    query: &mut QueryBuilder<DB>,
    column: &str,
    values: &[T],
) where
    T: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB> + Clone,
{
    if values.is_empty() {
        return;
    }
    query.push(format_args!(" AND {column} IN ("));
    let mut list = query.separated(", ");
    for value in values {
        list.push_bind(value.clone());
    }
    list.push_unseparated(")");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relay_arguments() {
        let forward = Pagination::relay(Some(3), None, Some(10), None).unwrap();
        assert_eq!(
            forward,
            Pagination {
                after: Some(3),
                before: None,
                limit: Some(10),
                backwards: false
            }
        );
        let backward = Pagination::relay(None, Some(9), None, Some(2)).unwrap();
        assert!(backward.backwards);
        assert_eq!(backward.limit, Some(2));
        assert!(matches!(
            Pagination::relay(None, None, Some(1), Some(1)),
            Err(DbError::InvalidPagination(_))
        ));
    }

    #[test]
    fn sql_of_a_backward_page() {
        let mut query = QueryBuilder::<sqlx::Sqlite>::new("SELECT id FROM t WHERE 1 = 1");
        push_in_filter(&mut query, "user_id", &[1_i64, 2]);
        Pagination::relay(Some(1), Some(9), None, Some(2))
            .unwrap()
            .push_to(&mut query, "id");
        assert_eq!(
            query.into_string(),
            "SELECT id FROM t WHERE 1 = 1 AND user_id IN (?, ?) AND id > ? AND id < ? \
             ORDER BY id DESC LIMIT ?"
        );
    }
}
