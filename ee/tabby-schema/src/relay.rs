//! Relay-style connections: arguments `after`/`before` (cursors) and `first`/`last` (counts),
//! answers `{edges: [{node, cursor}], pageInfo}`.
//!
//! Cursors are the nodes' ids (hashids of row ids), so a cursor stays valid while rows are
//! added or removed. A page is fetched with one row more than asked for, which tells whether
//! another page exists in the direction of travel.

use std::future::Future;

use juniper::GraphQLObject;
use tabby_db::Pagination;

use crate::{CoreError, Result, id::decode_id};

#[derive(Clone, Debug, Default, GraphQLObject)]
pub struct PageInfo {
    pub has_previous_page: bool,
    pub has_next_page: bool,
    pub start_cursor: Option<String>,
    pub end_cursor: Option<String>,
}

/// One page of nodes with their cursors.
pub struct Page<T> {
    pub nodes: Vec<(String, T)>,
    pub page_info: PageInfo,
}

impl<T> Default for Page<T> {
    /// No nodes (a filter left none).
    fn default() -> Self {
        Page {
            nodes: Vec::new(),
            page_info: PageInfo::default(),
        }
    }
}

/// Relay arguments as GraphQL delivers them.
#[derive(Clone, Debug, Default)]
pub struct RelayArgs {
    pub after: Option<String>,
    pub before: Option<String>,
    pub first: Option<i32>,
    pub last: Option<i32>,
}

fn cursor_to_rowid(path: &str, cursor: Option<&str>) -> Result<Option<i64>> {
    cursor
        .map(|c| decode_id(c).ok_or_else(|| CoreError::invalid(path, "not a valid cursor")))
        .transpose()
}

fn count(path: &str, value: Option<i32>) -> Result<Option<usize>> {
    value
        .map(|v| usize::try_from(v).map_err(|_| CoreError::invalid(path, "must not be negative")))
        .transpose()
}

impl RelayArgs {
    pub fn new(
        after: Option<String>,
        before: Option<String>,
        first: Option<i32>,
        last: Option<i32>,
    ) -> Self {
        Self {
            after,
            before,
            first,
            last,
        }
    }

    /// The storage layer's page, asking for one more row than requested.
    fn to_pagination(&self) -> Result<(Pagination, Option<usize>)> {
        if self.first.is_some() && self.last.is_some() {
            return Err(CoreError::invalid(
                "first",
                "`first` and `last` cannot be used together",
            ));
        }
        let first = count("first", self.first)?;
        let last = count("last", self.last)?;
        let wanted = first.or(last);
        let page = Pagination::relay(
            cursor_to_rowid("after", self.after.as_deref())?,
            cursor_to_rowid("before", self.before.as_deref())?,
            first.map(|n| n + 1),
            last.map(|n| n + 1),
        )?;
        Ok((page, wanted))
    }

    /// Fetches one page through `fetch` (rows in ascending id order) and builds the page info.
    pub async fn paginate<T, F, Fut>(
        &self,
        id_of: impl Fn(&T) -> String,
        fetch: F,
    ) -> Result<Page<T>>
    where
        F: FnOnce(Pagination) -> Fut,
        Fut: Future<Output = Result<Vec<T>>>,
    {
        let (page, wanted) = self.to_pagination()?;
        let mut rows = fetch(page).await?;
        let mut info = PageInfo {
            has_previous_page: !page.backwards && self.after.is_some(),
            has_next_page: page.backwards && self.before.is_some(),
            ..PageInfo::default()
        };
        if let Some(wanted) = wanted
            && rows.len() > wanted
        {
            if page.backwards {
                rows.drain(..rows.len() - wanted);
                info.has_previous_page = true;
            } else {
                rows.truncate(wanted);
                info.has_next_page = true;
            }
        }
        let nodes: Vec<(String, T)> = rows.into_iter().map(|r| (id_of(&r), r)).collect();
        info.start_cursor = nodes.first().map(|(c, _)| c.clone());
        info.end_cursor = nodes.last().map(|(c, _)| c.clone());
        Ok(Page {
            nodes,
            page_info: info,
        })
    }
}

/// Declares `$connection { edges: [$edge], pageInfo }` and `$edge { node: $node, cursor }`.
#[macro_export]
macro_rules! connection {
    ($connection:ident, $edge:ident, $node:ty) => {
        $crate::connection!($connection, $edge, $node, ());
    };
    // Nodes whose fields check the caller need the request's context.
    ($connection:ident, $edge:ident, $node:ty, $context:ty) => {
        #[derive(Clone, Debug, juniper::GraphQLObject)]
        #[graphql(context = $context)]
        pub struct $edge {
            pub node: $node,
            pub cursor: String,
        }

        #[derive(Clone, Debug, juniper::GraphQLObject)]
        #[graphql(context = $context)]
        pub struct $connection {
            pub edges: Vec<$edge>,
            pub page_info: $crate::relay::PageInfo,
        }

        impl From<$crate::relay::Page<$node>> for $connection {
            fn from(page: $crate::relay::Page<$node>) -> Self {
                Self {
                    edges: page
                        .nodes
                        .into_iter()
                        .map(|(cursor, node)| $edge { node, cursor })
                        .collect(),
                    page_info: page.page_info,
                }
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::encode_id;

    async fn page(args: RelayArgs, total: i64) -> Result<Page<i64>> {
        args.paginate(
            |id| encode_id(*id),
            |p: Pagination| async move {
                let mut ids: Vec<i64> = (1..=total)
                    .filter(|id| p.after.is_none_or(|a| *id > a))
                    .filter(|id| p.before.is_none_or(|b| *id < b))
                    .collect();
                if let Some(limit) = p.limit {
                    if p.backwards {
                        ids = ids[ids.len().saturating_sub(limit)..].to_vec();
                    } else {
                        ids.truncate(limit);
                    }
                }
                Ok(ids)
            },
        )
        .await
    }

    fn ids(page: &Page<i64>) -> Vec<i64> {
        page.nodes.iter().map(|(_, id)| *id).collect()
    }

    #[tokio::test]
    async fn forward_and_backward_pages() {
        let first = page(RelayArgs::new(None, None, Some(2), None), 5)
            .await
            .unwrap();
        assert_eq!(ids(&first), [1, 2]);
        assert!(first.page_info.has_next_page && !first.page_info.has_previous_page);
        let after = first.page_info.end_cursor.clone();
        let second = page(RelayArgs::new(after, None, Some(3), None), 5)
            .await
            .unwrap();
        assert_eq!(ids(&second), [3, 4, 5]);
        assert!(!second.page_info.has_next_page && second.page_info.has_previous_page);

        let last = page(RelayArgs::new(None, None, None, Some(2)), 5)
            .await
            .unwrap();
        assert_eq!(ids(&last), [4, 5]);
        assert!(last.page_info.has_previous_page);
        let before = last.page_info.start_cursor.clone();
        let earlier = page(RelayArgs::new(None, before, None, Some(5)), 5)
            .await
            .unwrap();
        assert_eq!(ids(&earlier), [1, 2, 3]);
        assert!(!earlier.page_info.has_previous_page && earlier.page_info.has_next_page);
    }

    #[tokio::test]
    async fn bad_arguments_are_validation_errors() {
        for args in [
            RelayArgs::new(None, None, Some(1), Some(1)),
            RelayArgs::new(None, None, Some(-1), None),
            RelayArgs::new(Some("???".into()), None, None, None),
        ] {
            match page(args, 3).await {
                Err(CoreError::InvalidInput(errors)) => assert_eq!(errors.len(), 1),
                other => panic!(
                    "expected a validation error, got {:?}",
                    other.map(|p| ids(&p))
                ),
            }
        }
    }
}
