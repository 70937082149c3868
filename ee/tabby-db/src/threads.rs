//! Answer Engine conversations: `threads` and their `thread_messages`.
//!
//! A message's `attachment` column holds [`Attachment`] as JSON (upstream's keys: `code`,
//! `client_code`, `doc`, `code_file_list`). Streaming appends to an assistant message's content
//! with one `UPDATE … SET content = content || ?` per delta, so whatever was streamed before a
//! disconnect or a crash is in the row.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::QueryBuilder;

use crate::{DbConn, DbError, DbResult, Pagination, error::expect_one, pagination::push_in_filter};

#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct ThreadDAO {
    pub id: i64,
    pub is_ephemeral: bool,
    pub user_id: i64,
    /// JSON array of strings.
    pub relevant_questions: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl ThreadDAO {
    pub fn relevant_questions(&self) -> Vec<String> {
        self.relevant_questions
            .as_deref()
            .and_then(|q| serde_json::from_str(q).ok())
            .unwrap_or_default()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct ThreadMessageDAO {
    pub id: i64,
    pub thread_id: i64,
    /// `user` or `assistant`.
    pub role: String,
    pub content: String,
    pub code_source_id: Option<String>,
    /// JSON of [`Attachment`].
    pub attachment: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl ThreadMessageDAO {
    /// The attachment; an unreadable value reads as empty rather than failing the thread.
    pub fn attachment(&self) -> Attachment {
        serde_json::from_str(&self.attachment).unwrap_or_default()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Attachment {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<Vec<AttachmentCode>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_code: Option<Vec<AttachmentClientCode>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doc: Option<Vec<AttachmentDoc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_file_list: Option<AttachmentCodeFileList>,
    /// The sources (repository, document sources) an answer drew on, recorded before any of
    /// their content is: a reader who may not read one of them is not shown the answer.
    /// `None` in rows written before sources were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_ids: Option<Vec<String>>,
}

impl Attachment {
    /// Records that the answer draws on `ids` (each once).
    pub fn add_sources<'a>(&mut self, ids: impl IntoIterator<Item = &'a String>) {
        let recorded = self.source_ids.get_or_insert_with(Vec::new);
        for id in ids {
            if !recorded.contains(id) {
                recorded.push(id.clone());
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttachmentCode {
    pub git_url: String,
    pub commit: Option<String>,
    pub language: String,
    pub filepath: String,
    pub content: String,
    /// 1-based; `None` for a whole file.
    pub start_line: Option<i64>,
    /// Why it was retrieved (evidence packs); absent in attachments stored before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttachmentClientCode {
    pub filepath: Option<String>,
    pub start_line: Option<i64>,
    pub content: String,
}

/// One document hit; which variant is told by its fields (upstream's untagged union).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AttachmentDoc {
    Commit(AttachmentCommitDoc),
    // Before `Issue`: a pull has every field of an issue but `closed`, and more.
    Pull(AttachmentPullDoc),
    Issue(AttachmentIssueDoc),
    Ingested(AttachmentIngestedDoc),
    Web(AttachmentWebDoc),
}

/// An issue of a provided repository; `author` is the vendor's login.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttachmentIssueDoc {
    pub title: String,
    pub link: String,
    pub author: Option<String>,
    pub body: String,
    pub closed: bool,
}

/// A pull or merge request; `diff` is its patch summary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttachmentPullDoc {
    pub title: String,
    pub link: String,
    pub author: Option<String>,
    pub body: String,
    pub diff: String,
    pub merged: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttachmentWebDoc {
    pub title: String,
    pub link: String,
    pub content: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttachmentCommitDoc {
    pub sha: String,
    pub message: String,
    pub author_email: Option<String>,
    pub author_at: DateTime<Utc>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttachmentIngestedDoc {
    pub id: String,
    pub title: String,
    pub body: String,
    pub link: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttachmentCodeFileList {
    pub file_list: Vec<String>,
    pub truncated: bool,
}

const THREAD: &str = "thread";
const MESSAGE: &str = "thread message";

impl DbConn {
    pub async fn create_thread(&self, user_id: i64, is_ephemeral: bool) -> DbResult<i64> {
        on_pool!(self, pool => {
            let result = sqlx::query_scalar::<_, i64>("INSERT INTO threads (user_id, is_ephemeral) VALUES ($1, $2) RETURNING id")
                .bind(user_id)
                .bind(is_ephemeral)
                .fetch_one(pool)
                .await
                .map_err(|e| DbError::from(e).missing_reference("user"))?;
            Ok(result)
        })
    }

    pub async fn get_thread(&self, id: i64) -> DbResult<Option<ThreadDAO>> {
        on_pool!(self, pool => {
            Ok(sqlx::query_as(
                "SELECT id, is_ephemeral, user_id, relevant_questions, created_at, updated_at
                 FROM threads WHERE id = $1",
            )
            .bind(id)
            .fetch_optional(pool)
            .await?)
        })
    }

    /// Threads by id (empty: all), owner, ephemerality and visibility (`visible_to`: that
    /// user's own threads and every non-ephemeral one), in id order.
    pub async fn list_threads(
        &self,
        ids: &[i64],
        user_id: Option<i64>,
        visible_to: Option<i64>,
        is_ephemeral: Option<bool>,
        page: Pagination,
    ) -> DbResult<Vec<ThreadDAO>> {
        on_pool!(self, pool => {
            let mut query = QueryBuilder::new(
                "SELECT id, is_ephemeral, user_id, relevant_questions, created_at, updated_at
                 FROM threads WHERE TRUE",
            );
            push_in_filter(&mut query, "id", ids);
            if let Some(user_id) = user_id {
                query.push(" AND user_id = ").push_bind(user_id);
            }
            if let Some(viewer) = visible_to {
                query
                    .push(" AND (user_id = ")
                    .push_bind(viewer)
                    .push(" OR is_ephemeral = FALSE)");
            }
            if let Some(is_ephemeral) = is_ephemeral {
                query.push(" AND is_ephemeral = ").push_bind(is_ephemeral);
            }
            page.push_to(&mut query, "id");
            let rows = query
                .build_query_as::<ThreadDAO>()
                .fetch_all(pool)
                .await?;
            Ok(page.finish(rows))
        })
    }

    pub async fn set_thread_persisted(&self, id: i64) -> DbResult<()> {
        on_pool!(self, pool => {
            let result = sqlx::query(
                "UPDATE threads SET is_ephemeral = FALSE, updated_at = DATETIME('now') WHERE id = $1",
            )
            .bind(id)
            .execute(pool)
            .await?;
            expect_one(result.rows_affected(), THREAD)
        })
    }

    pub async fn update_thread_relevant_questions(
        &self,
        id: i64,
        questions: &[String],
    ) -> DbResult<()> {
        on_pool!(self, pool => {
            let json = serde_json::to_string(questions).unwrap_or_else(|_| "[]".into());
            let result = sqlx::query(
                "UPDATE threads SET relevant_questions = $1, updated_at = DATETIME('now') WHERE id = $2",
            )
            .bind(json)
            .bind(id)
            .execute(pool)
            .await?;
            expect_one(result.rows_affected(), THREAD)
        })
    }

    pub async fn delete_thread(&self, id: i64) -> DbResult<()> {
        on_pool!(self, pool => {
            let result = sqlx::query("DELETE FROM threads WHERE id = $1")
                .bind(id)
                .execute(pool)
                .await?;
            expect_one(result.rows_affected(), THREAD)
        })
    }

    /// Removes ephemeral threads not updated for `idle_days`; returns how many.
    pub async fn delete_idle_ephemeral_threads(&self, idle_days: u32) -> DbResult<u64> {
        on_pool!(self, pool => {
            let result = sqlx::query(
                "DELETE FROM threads WHERE is_ephemeral = TRUE AND updated_at < DATETIME('now', $1)",
            )
            .bind(format!("-{idle_days} days"))
            .execute(pool)
            .await?;
            Ok(result.rows_affected())
        })
    }

    /// Moves a thread's last update `days` into the past (tests of the idle-thread cleanup).
    #[doc(hidden)]
    pub async fn backdate_thread_for_tests(&self, id: i64, days: u32) -> DbResult<()> {
        on_pool!(self, pool => {
            let result = sqlx::query("UPDATE threads SET updated_at = DATETIME('now', $1) WHERE id = $2")
                .bind(format!("-{days} days"))
                .bind(id)
                .execute(pool)
                .await?;
            expect_one(result.rows_affected(), THREAD)
        })
    }

    /// Adds a message and marks the thread as updated, in one transaction.
    pub async fn create_thread_message(
        &self,
        thread_id: i64,
        role: &str,
        content: &str,
        attachment: &Attachment,
        code_source_id: Option<&str>,
    ) -> DbResult<i64> {
        on_pool!(self, pool => {
            let attachment = serde_json::to_string(attachment).unwrap_or_else(|_| "{}".into());
            let mut tx = pool.begin_write().await?;
            let touched = sqlx::query("UPDATE threads SET updated_at = DATETIME('now') WHERE id = $1")
                .bind(thread_id)
                .execute(&mut *tx)
                .await?;
            expect_one(touched.rows_affected(), THREAD)?;
            let result = sqlx::query_scalar::<_, i64>(
                "INSERT INTO thread_messages (thread_id, role, content, attachment, code_source_id)
                 VALUES ($1, $2, $3, $4, $5) RETURNING id",
            )
            .bind(thread_id)
            .bind(role)
            .bind(content)
            .bind(attachment)
            .bind(code_source_id)
            .fetch_one(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(result)
        })
    }

    pub async fn get_thread_message(&self, id: i64) -> DbResult<Option<ThreadMessageDAO>> {
        on_pool!(self, pool => {
            Ok(sqlx::query_as(
                "SELECT id, thread_id, role, content, code_source_id, attachment, created_at,
                        updated_at
                 FROM thread_messages WHERE id = $1",
            )
            .bind(id)
            .fetch_optional(pool)
            .await?)
        })
    }

    pub async fn list_thread_messages(
        &self,
        thread_id: i64,
        page: Pagination,
    ) -> DbResult<Vec<ThreadMessageDAO>> {
        on_pool!(self, pool => {
            let mut query = QueryBuilder::new(
                "SELECT id, thread_id, role, content, code_source_id, attachment, created_at,
                        updated_at
                 FROM thread_messages WHERE thread_id = ",
            );
            query.push_bind(thread_id);
            page.push_to(&mut query, "id");
            let rows = query
                .build_query_as::<ThreadMessageDAO>()
                .fetch_all(pool)
                .await?;
            Ok(page.finish(rows))
        })
    }

    /// Appends streamed text to a message.
    pub async fn append_thread_message_content(&self, id: i64, delta: &str) -> DbResult<()> {
        on_pool!(self, pool => {
            let result = sqlx::query(
                "UPDATE thread_messages SET content = content || $1, updated_at = DATETIME('now')
                 WHERE id = $2",
            )
            .bind(delta)
            .bind(id)
            .execute(pool)
            .await?;
            expect_one(result.rows_affected(), MESSAGE)
        })
    }

    pub async fn update_thread_message_content(
        &self,
        thread_id: i64,
        id: i64,
        content: &str,
    ) -> DbResult<()> {
        on_pool!(self, pool => {
            let result = sqlx::query(
                "UPDATE thread_messages SET content = $1, updated_at = DATETIME('now')
                 WHERE id = $2 AND thread_id = $3",
            )
            .bind(content)
            .bind(id)
            .bind(thread_id)
            .execute(pool)
            .await?;
            expect_one(result.rows_affected(), MESSAGE)
        })
    }

    /// Reads, changes and writes back a message's attachment in one write transaction.
    pub async fn update_thread_message_attachment(
        &self,
        id: i64,
        change: impl FnOnce(&mut Attachment),
    ) -> DbResult<()> {
        on_pool!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let current: Option<(String,)> =
                sqlx::query_as("SELECT attachment FROM thread_messages WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?;
            let Some((current,)) = current else {
                return Err(DbError::NotFound { what: MESSAGE });
            };
            let mut attachment: Attachment = serde_json::from_str(&current).unwrap_or_default();
            change(&mut attachment);
            let json = serde_json::to_string(&attachment).unwrap_or_else(|_| "{}".into());
            sqlx::query(
                "UPDATE thread_messages SET attachment = $1, updated_at = DATETIME('now') WHERE id = $2",
            )
            .bind(json)
            .bind(id)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    pub async fn update_thread_message_code_source_id(
        &self,
        id: i64,
        code_source_id: &str,
    ) -> DbResult<()> {
        on_pool!(self, pool => {
            let result = sqlx::query("UPDATE thread_messages SET code_source_id = $1 WHERE id = $2")
                .bind(code_source_id)
                .bind(id)
                .execute(pool)
                .await?;
            expect_one(result.rows_affected(), MESSAGE)
        })
    }

    /// Deletes a user message and the assistant answer right after it, both of `thread_id`.
    /// Fails with `NotFound` unless they are exactly such a pair.
    pub async fn delete_thread_message_pair(
        &self,
        thread_id: i64,
        user_message_id: i64,
        assistant_message_id: i64,
    ) -> DbResult<()> {
        on_pool!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let roles: Vec<(i64, String)> = sqlx::query_as(
                "SELECT id, role FROM thread_messages
                 WHERE thread_id = $1 AND id >= $2 AND id <= $3 ORDER BY id",
            )
            .bind(thread_id)
            .bind(user_message_id)
            .bind(assistant_message_id)
            .fetch_all(&mut *tx)
            .await?;
            let is_pair = matches!(
                roles.as_slice(),
                [(u, ur), (a, ar)] if *u == user_message_id && ur == "user"
                    && *a == assistant_message_id && ar == "assistant"
            );
            if !is_pair {
                return Err(DbError::NotFound {
                    what: "user and assistant message pair",
                });
            }
            sqlx::query("DELETE FROM thread_messages WHERE id IN ($1, $2)")
                .bind(user_message_id)
                .bind(assistant_message_id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(())
        })
    }
}
