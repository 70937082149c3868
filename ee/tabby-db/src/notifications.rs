//! Notifications for users (e.g. a failed background job, for admins) and who has read them.

use chrono::{DateTime, Utc};

use crate::{DbConn, DbError, DbResult, error::expect_one};

#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct NotificationDAO {
    pub id: i64,
    /// `admin` or `all_user`.
    pub recipient: String,
    pub content: String,
    pub read: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl DbConn {
    pub async fn create_notification(&self, recipient: &str, content: &str) -> DbResult<i64> {
        on_pool!(self, pool => {
            let result = sqlx::query_scalar::<_, i64>("INSERT INTO notifications (recipient, content) VALUES ($1, $2) RETURNING id")
                .bind(recipient)
                .bind(content)
                .fetch_one(pool)
                .await?;
            Ok(result)
        })
    }

    /// The notifications a user receives (admins also get `admin` ones), newest first, with
    /// their read flag.
    pub async fn list_notifications_for(
        &self,
        user_id: i64,
        is_admin: bool,
    ) -> DbResult<Vec<NotificationDAO>> {
        on_pool!(self, pool => {
            Ok(sqlx::query_as(
                "SELECT n.id, n.recipient, n.content, r.id IS NOT NULL AS read,
                        n.created_at, n.updated_at
                 FROM notifications n
                 LEFT JOIN read_notifications r ON r.notification_id = n.id AND r.user_id = $1
                 WHERE n.recipient = 'all_user' OR (n.recipient = 'admin' AND $2)
                 ORDER BY n.id DESC",
            )
            .bind(user_id)
            .bind(is_admin)
            .fetch_all(pool)
            .await?)
        })
    }

    /// Marks one notification (or, with `None`, every one the user receives) as read.
    pub async fn mark_notifications_read(
        &self,
        user_id: i64,
        is_admin: bool,
        notification_id: Option<i64>,
    ) -> DbResult<()> {
        on_pool!(self, pool => {
            match notification_id {
                Some(id) => {
                    let visible = self
                        .list_notifications_for(user_id, is_admin)
                        .await?
                        .iter()
                        .any(|n| n.id == id);
                    if !visible {
                        return Err(DbError::NotFound {
                            what: "notification",
                        });
                    }
                    sqlx::query(
                        "INSERT INTO read_notifications (user_id, notification_id)
                         VALUES ($1, $2) ON CONFLICT DO NOTHING",
                    )
                    .bind(user_id)
                    .bind(id)
                    .execute(pool)
                    .await?;
                }
                None => {
                    sqlx::query(
                        "INSERT INTO read_notifications (user_id, notification_id)
                         SELECT $1, id FROM notifications
                         WHERE recipient = 'all_user' OR (recipient = 'admin' AND $2) ON CONFLICT DO NOTHING",
                    )
                    .bind(user_id)
                    .bind(is_admin)
                    .execute(pool)
                    .await?;
                }
            }
            Ok(())
        })
    }

    pub async fn delete_notification(&self, id: i64) -> DbResult<()> {
        on_pool!(self, pool => {
            let result = sqlx::query("DELETE FROM notifications WHERE id = $1")
                .bind(id)
                .execute(pool)
                .await?;
            expect_one(result.rows_affected(), "notification")
        })
    }
}
