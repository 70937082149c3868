//! Web documents: sites the web crawler indexes into the structured-doc corpus
//! (source id `custom_web_document:<id>`).

use chrono::{DateTime, Utc};
use sqlx::QueryBuilder;

use crate::{DbConn, DbResult, Pagination, error::expect_one, pagination::push_in_filter};

#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct WebDocumentDAO {
    pub id: i64,
    pub name: String,
    pub url: String,
    pub is_preset: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl DbConn {
    pub async fn create_web_document(
        &self,
        name: &str,
        url: &str,
        is_preset: bool,
    ) -> DbResult<i64> {
        on_pool!(self, pool => {
            let result =
                sqlx::query_scalar::<_, i64>("INSERT INTO web_documents (name, url, is_preset) VALUES ($1, $2, $3) RETURNING id")
                    .bind(name)
                    .bind(url)
                    .bind(is_preset)
                    .fetch_one(pool)
                    .await?;
            Ok(result)
        })
    }

    pub async fn get_web_document(&self, id: i64) -> DbResult<Option<WebDocumentDAO>> {
        on_pool!(self, pool => {
            Ok(sqlx::query_as(
                "SELECT id, name, url, is_preset, created_at, updated_at FROM web_documents
                 WHERE id = $1",
            )
            .bind(id)
            .fetch_optional(pool)
            .await?)
        })
    }

    pub async fn list_web_documents(
        &self,
        ids: &[i64],
        is_preset: Option<bool>,
        page: Pagination,
    ) -> DbResult<Vec<WebDocumentDAO>> {
        on_pool!(self, pool => {
            let mut query = QueryBuilder::new(
                "SELECT id, name, url, is_preset, created_at, updated_at FROM web_documents WHERE TRUE",
            );
            push_in_filter(&mut query, "id", ids);
            if let Some(preset) = is_preset {
                query.push(" AND is_preset = ").push_bind(preset);
            }
            page.push_to(&mut query, "id");
            let rows = query
                .build_query_as::<WebDocumentDAO>()
                .fetch_all(pool)
                .await?;
            Ok(page.finish(rows))
        })
    }

    pub async fn delete_web_document(&self, id: i64) -> DbResult<()> {
        on_pool!(self, pool => {
            let result = sqlx::query("DELETE FROM web_documents WHERE id = $1")
                .bind(id)
                .execute(pool)
                .await?;
            expect_one(result.rows_affected(), "web document")
        })
    }
}
