//! Git repositories added through the API (`repositories`). Repositories from `config.toml`
//! are not stored; the webserver merges both lists. `refs` are the branch/tag names to index,
//! stored as a JSON array; empty means the remote's default branch.

use sqlx::{QueryBuilder, types::Json};

use crate::{DbConn, DbError, DbResult, Pagination, error::expect_one};

/// A row of `repositories`.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct RepositoryDAO {
    pub id: i64,
    pub name: String,
    pub git_url: String,
    #[sqlx(json)]
    pub refs: Vec<String>,
}

impl DbConn {
    /// Fails with `AlreadyExists` if the name or the git URL is taken.
    pub async fn create_repository(
        &self,
        name: &str,
        git_url: &str,
        refs: &[String],
    ) -> DbResult<i64> {
        self.create_repository_readable_by(name, git_url, refs, &[], |_| String::new())
            .await
    }

    /// Creates the repository and, in the same transaction, grants read access to each of
    /// `user_group_ids` on the source id `source_id(rowid)` names, so a private repository is
    /// never public for a moment. A missing group fails the whole creation with `NotFound`.
    pub async fn create_repository_readable_by(
        &self,
        name: &str,
        git_url: &str,
        refs: &[String],
        user_group_ids: &[i64],
        source_id: impl Fn(i64) -> String,
    ) -> DbResult<i64> {
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            let id = sqlx::query_scalar::<_, i64>("INSERT INTO repositories (name, git_url, refs) VALUES ($1, $2, $3) RETURNING id")
                .bind(name)
                .bind(git_url)
                .bind(Json(refs))
                .fetch_one(&mut *tx)
                .await?
                ;
            for group in user_group_ids {
                sqlx::query(
                    "INSERT INTO source_id_read_access_policies (source_id, user_group_id)
                     VALUES ($1, $2) ON CONFLICT (source_id, user_group_id) DO NOTHING",
                )
                .bind(source_id(id))
                .bind(group)
                .execute(&mut *tx)
                .await
                .map_err(|e| DbError::from(e).missing_reference("user group"))?;
            }
            tx.commit().await?;
            Ok(id)
        })
    }

    pub async fn get_repository(&self, id: i64) -> DbResult<Option<RepositoryDAO>> {
        on_pool!(self, pool => {
            Ok(
                sqlx::query_as("SELECT id, name, git_url, refs FROM repositories WHERE id = $1")
                    .bind(id)
                    .fetch_optional(pool)
                    .await?,
            )
        })
    }

    pub async fn get_repository_by_git_url(
        &self,
        git_url: &str,
    ) -> DbResult<Option<RepositoryDAO>> {
        on_pool!(self, pool => {
            Ok(
                sqlx::query_as("SELECT id, name, git_url, refs FROM repositories WHERE git_url = $1")
                    .bind(git_url)
                    .fetch_optional(pool)
                    .await?,
            )
        })
    }

    pub async fn list_repositories(&self, page: Pagination) -> DbResult<Vec<RepositoryDAO>> {
        on_pool!(self, pool => {
            let mut query = QueryBuilder::new(
                "SELECT id, name, git_url, refs FROM repositories WHERE 1 = 1",
            );
            page.push_to(&mut query, "id");
            let rows = query
                .build_query_as::<RepositoryDAO>()
                .fetch_all(pool)
                .await?;
            Ok(page.finish(rows))
        })
    }

    pub async fn update_repository_refs(&self, id: i64, refs: &[String]) -> DbResult<()> {
        on_pool!(self, pool => {
            let result = sqlx::query("UPDATE repositories SET refs = $1 WHERE id = $2")
                .bind(Json(refs))
                .bind(id)
                .execute(pool)
                .await?;
            expect_one(result.rows_affected(), "repository")
        })
    }

    /// Fails with `AlreadyExists` if another repository has the new name or git URL.
    pub async fn update_repository(&self, id: i64, name: &str, git_url: &str) -> DbResult<()> {
        on_pool!(self, pool => {
            let result = sqlx::query("UPDATE repositories SET name = $1, git_url = $2 WHERE id = $3")
                .bind(name)
                .bind(git_url)
                .bind(id)
                .execute(pool)
                .await?;
            expect_one(result.rows_affected(), "repository")
        })
    }

    pub async fn delete_repository(&self, id: i64) -> DbResult<()> {
        on_pool!(self, pool => {
            let result = sqlx::query("DELETE FROM repositories WHERE id = $1")
                .bind(id)
                .execute(pool)
                .await?;
            expect_one(result.rows_affected(), "repository")
        })
    }
}
