//! Web documents: sites the web crawler indexes into the structured-doc corpus
//! (source id `custom_web_document:<id>`).

use chrono::{DateTime, Utc};
use sqlx::{QueryBuilder, Sqlite};

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
        let result =
            sqlx::query("INSERT INTO web_documents (name, url, is_preset) VALUES (?, ?, ?)")
                .bind(name)
                .bind(url)
                .bind(is_preset)
                .execute(&self.pool)
                .await?;
        Ok(result.last_insert_rowid())
    }

    pub async fn get_web_document(&self, id: i64) -> DbResult<Option<WebDocumentDAO>> {
        Ok(sqlx::query_as(
            "SELECT id, name, url, is_preset, created_at, updated_at FROM web_documents
             WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?)
    }

    pub async fn list_web_documents(
        &self,
        ids: &[i64],
        is_preset: Option<bool>,
        page: Pagination,
    ) -> DbResult<Vec<WebDocumentDAO>> {
        let mut query = QueryBuilder::<Sqlite>::new(
            "SELECT id, name, url, is_preset, created_at, updated_at FROM web_documents WHERE 1",
        );
        push_in_filter(&mut query, "id", ids);
        if let Some(preset) = is_preset {
            query.push(" AND is_preset = ").push_bind(preset);
        }
        page.push_to(&mut query, "id");
        let rows = query
            .build_query_as::<WebDocumentDAO>()
            .fetch_all(&self.pool)
            .await?;
        Ok(page.finish(rows))
    }

    pub async fn delete_web_document(&self, id: i64) -> DbResult<()> {
        let result = sqlx::query("DELETE FROM web_documents WHERE id = ?")
            .bind(id)
            .execute(&self.pool)
            .await?;
        expect_one(result.rows_affected(), "web document")
    }
}
