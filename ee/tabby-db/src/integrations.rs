//! Integrations with GitHub and GitLab (`integrations`, the token already sealed by the
//! caller) and the repositories their tokens can see (`provided_repositories`).

use chrono::{DateTime, Utc};
use sqlx::{QueryBuilder, types::Json};

use crate::{DbConn, DbResult, Pagination, error::expect_one};

#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct IntegrationDAO {
    pub id: i64,
    pub kind: String,
    pub display_name: String,
    /// Sealed.
    pub access_token: String,
    pub api_base: Option<String>,
    pub error: Option<String>,
    pub synced: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct ProvidedRepositoryDAO {
    pub id: i64,
    pub integration_id: i64,
    pub vendor_id: String,
    pub name: String,
    pub git_url: String,
    pub active: bool,
    /// Branch/tag names to index; empty: the default branch.
    #[sqlx(json)]
    pub refs: Vec<String>,
    /// When its issues and pull requests were last read (see the migration).
    pub docs_synced_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A repository as the vendor lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VendorRepository {
    pub vendor_id: String,
    pub name: String,
    pub git_url: String,
}

/// What a sync changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncCounts {
    pub added: usize,
    pub updated: usize,
    pub removed: usize,
}

impl DbConn {
    pub async fn create_integration(
        &self,
        kind: &str,
        display_name: &str,
        sealed_token: &str,
        api_base: Option<&str>,
    ) -> DbResult<i64> {
        on_pool!(self, pool => {
            Ok(sqlx::query_scalar(
                "INSERT INTO integrations (kind, display_name, access_token, api_base)
                 VALUES ($1, $2, $3, $4) RETURNING id",
            )
            .bind(kind)
            .bind(display_name)
            .bind(sealed_token)
            .bind(api_base)
            .fetch_one(pool)
            .await?)
        })
    }

    /// `sealed_token: None` keeps the stored token. A changed integration is synced anew:
    /// its error is cleared.
    pub async fn update_integration(
        &self,
        id: i64,
        kind: &str,
        display_name: &str,
        sealed_token: Option<&str>,
        api_base: Option<&str>,
    ) -> DbResult<()> {
        on_pool!(self, pool => {
            let result = sqlx::query(
                "UPDATE integrations SET kind = $1, display_name = $2,
                     access_token = COALESCE($3, access_token), api_base = $4, error = NULL,
                     updated_at = DATETIME('now')
                 WHERE id = $5",
            )
            .bind(kind)
            .bind(display_name)
            .bind(sealed_token)
            .bind(api_base)
            .bind(id)
            .execute(pool)
            .await?;
            expect_one(result.rows_affected(), "integration")
        })
    }

    pub async fn delete_integration(&self, id: i64) -> DbResult<()> {
        on_pool!(self, pool => {
            let result = sqlx::query("DELETE FROM integrations WHERE id = $1")
                .bind(id)
                .execute(pool)
                .await?;
            expect_one(result.rows_affected(), "integration")
        })
    }

    pub async fn get_integration(&self, id: i64) -> DbResult<Option<IntegrationDAO>> {
        on_pool!(self, pool => {
            Ok(sqlx::query_as(
                "SELECT id, kind, display_name, access_token, api_base, error, synced, created_at,
                        updated_at
                 FROM integrations WHERE id = $1",
            )
            .bind(id)
            .fetch_optional(pool)
            .await?)
        })
    }

    pub async fn list_integrations(
        &self,
        ids: &[i64],
        kind: Option<&str>,
        page: Pagination,
    ) -> DbResult<Vec<IntegrationDAO>> {
        on_pool!(self, pool => {
            let mut query = QueryBuilder::new(
                "SELECT id, kind, display_name, access_token, api_base, error, synced, created_at,
                        updated_at
                 FROM integrations WHERE 1 = 1",
            );
            if !ids.is_empty() {
                query.push(" AND id IN (");
                let mut list = query.separated(", ");
                for id in ids {
                    list.push_bind(*id);
                }
                query.push(")");
            }
            if let Some(kind) = kind {
                query.push(" AND kind = ").push_bind(kind);
            }
            page.push_to(&mut query, "id");
            let rows = query
                .build_query_as::<IntegrationDAO>()
                .fetch_all(pool)
                .await?;
            Ok(page.finish(rows))
        })
    }

    /// Records a failed sync; the provided repositories stay as they were.
    pub async fn set_integration_error(&self, id: i64, error: &str) -> DbResult<()> {
        on_pool!(self, pool => {
            sqlx::query("UPDATE integrations SET error = $1 WHERE id = $2")
                .bind(error)
                .bind(id)
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    /// Replaces what integration `id` provides with `repositories` in one transaction: new
    /// ones added (inactive), renamed or moved ones updated, vanished ones removed; the
    /// integration marked synced without error.
    pub async fn sync_provided_repositories(
        &self,
        id: i64,
        repositories: &[VendorRepository],
    ) -> DbResult<SyncCounts> {
        on_pool!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let existing: Vec<(String, String, String)> = sqlx::query_as(
                "SELECT vendor_id, name, git_url FROM provided_repositories WHERE integration_id = $1",
            )
            .bind(id)
            .fetch_all(&mut *tx)
            .await?;
            let mut counts = SyncCounts::default();
            for repo in repositories {
                match existing.iter().find(|(v, _, _)| *v == repo.vendor_id) {
                    Some((_, name, url)) if *name == repo.name && *url == repo.git_url => {}
                    Some(_) => {
                        sqlx::query(
                            "UPDATE provided_repositories SET name = $1, git_url = $2,
                                 updated_at = DATETIME('now')
                             WHERE integration_id = $3 AND vendor_id = $4",
                        )
                        .bind(&repo.name)
                        .bind(&repo.git_url)
                        .bind(id)
                        .bind(&repo.vendor_id)
                        .execute(&mut *tx)
                        .await?;
                        counts.updated += 1;
                    }
                    None => {
                        sqlx::query(
                            "INSERT INTO provided_repositories (integration_id, vendor_id, name, git_url)
                             VALUES ($1, $2, $3, $4)",
                        )
                        .bind(id)
                        .bind(&repo.vendor_id)
                        .bind(&repo.name)
                        .bind(&repo.git_url)
                        .execute(&mut *tx)
                        .await?;
                        counts.added += 1;
                    }
                }
            }
            for (vendor_id, _, _) in &existing {
                if !repositories.iter().any(|r| r.vendor_id == *vendor_id) {
                    sqlx::query(
                        "DELETE FROM provided_repositories WHERE integration_id = $1 AND vendor_id = $2",
                    )
                    .bind(id)
                    .bind(vendor_id)
                    .execute(&mut *tx)
                    .await?;
                    counts.removed += 1;
                }
            }
            sqlx::query("UPDATE integrations SET error = NULL, synced = TRUE WHERE id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(counts)
        })
    }

    pub async fn list_provided_repositories(
        &self,
        integration_ids: &[i64],
        kind: Option<&str>,
        active: Option<bool>,
        page: Pagination,
    ) -> DbResult<Vec<ProvidedRepositoryDAO>> {
        on_pool!(self, pool => {
            let mut query = QueryBuilder::new(
                "SELECT p.id, p.integration_id, p.vendor_id, p.name, p.git_url, p.active, p.refs,
                        p.docs_synced_at, p.created_at, p.updated_at
                 FROM provided_repositories p JOIN integrations i ON i.id = p.integration_id
                 WHERE 1 = 1",
            );
            if !integration_ids.is_empty() {
                query.push(" AND p.integration_id IN (");
                let mut list = query.separated(", ");
                for id in integration_ids {
                    list.push_bind(*id);
                }
                query.push(")");
            }
            if let Some(kind) = kind {
                query.push(" AND i.kind = ").push_bind(kind);
            }
            if let Some(active) = active {
                query.push(" AND p.active = ").push_bind(active);
            }
            page.push_to(&mut query, "p.id");
            let rows = query
                .build_query_as::<ProvidedRepositoryDAO>()
                .fetch_all(pool)
                .await?;
            Ok(page.finish(rows))
        })
    }

    /// A provided repository and the integration it belongs to.
    pub async fn get_provided_repository(
        &self,
        id: i64,
    ) -> DbResult<Option<(ProvidedRepositoryDAO, IntegrationDAO)>> {
        on_pool!(self, pool => {
            let Some(repo) = sqlx::query_as::<_, ProvidedRepositoryDAO>(
                "SELECT p.id, p.integration_id, p.vendor_id, p.name, p.git_url, p.active, p.refs,
                        p.docs_synced_at, p.created_at, p.updated_at
                 FROM provided_repositories p WHERE p.id = $1",
            )
            .bind(id)
            .fetch_optional(pool)
            .await?
            else {
                return Ok(None);
            };
            Ok(self
                .get_integration(repo.integration_id)
                .await?
                .map(|integration| (repo, integration)))
        })
    }

    /// Every active provided repository with its integration's kind, oldest first.
    pub async fn list_active_provided_repositories(
        &self,
    ) -> DbResult<Vec<(ProvidedRepositoryDAO, String)>> {
        on_pool!(self, pool => {
            #[derive(sqlx::FromRow)]
            struct Row {
                #[sqlx(flatten)]
                repo: ProvidedRepositoryDAO,
                kind: String,
            }
            let rows: Vec<Row> = sqlx::query_as(
                "SELECT p.id, p.integration_id, p.vendor_id, p.name, p.git_url, p.active, p.refs,
                        p.docs_synced_at, p.created_at, p.updated_at, i.kind
                 FROM provided_repositories p JOIN integrations i ON i.id = p.integration_id
                 WHERE p.active ORDER BY p.id",
            )
            .fetch_all(pool)
            .await?;
            Ok(rows.into_iter().map(|r| (r.repo, r.kind)).collect())
        })
    }

    /// Turns indexing of a provided repository on or off; `refs: None` keeps them.
    /// Deactivating forgets when its documents were read: they leave the index, and a later
    /// activation reads them all again.
    pub async fn update_provided_repository_active(
        &self,
        id: i64,
        active: bool,
        refs: Option<&[String]>,
    ) -> DbResult<()> {
        on_pool!(self, pool => {
            let result = sqlx::query(
                "UPDATE provided_repositories SET active = $1, refs = COALESCE($2, refs),
                     docs_synced_at = CASE WHEN $3 THEN docs_synced_at END,
                     updated_at = DATETIME('now')
                 WHERE id = $4",
            )
            .bind(active)
            .bind(refs.map(Json))
            .bind(active)
            .bind(id)
            .execute(pool)
            .await?;
            expect_one(result.rows_affected(), "provided repository")
        })
    }

    pub async fn update_provided_repository_refs(&self, id: i64, refs: &[String]) -> DbResult<()> {
        on_pool!(self, pool => {
            let result = sqlx::query(
                "UPDATE provided_repositories SET refs = $1, updated_at = DATETIME('now') WHERE id = $2",
            )
            .bind(Json(refs))
            .bind(id)
            .execute(pool)
            .await?;
            expect_one(result.rows_affected(), "provided repository")
        })
    }

    /// Records that the documents changed since `at` were read (kept only while the
    /// repository is active).
    pub async fn set_provided_repository_docs_synced(
        &self,
        id: i64,
        at: DateTime<Utc>,
    ) -> DbResult<()> {
        on_pool!(self, pool => {
            sqlx::query("UPDATE provided_repositories SET docs_synced_at = $1 WHERE id = $2 AND active")
                .bind(at)
                .bind(id)
                .execute(pool)
                .await?;
            Ok(())
        })
    }
}
