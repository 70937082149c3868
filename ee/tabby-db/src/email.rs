//! E-mail: the SMTP settings (the single row of `email_setting`, its password already sealed
//! by the caller) and the outbox the background sender drains (`email_outbox`).
//!
//! The sender claims a due mail by moving its `next_attempt_at` past a lease in the same
//! statement that counts the attempt, so a mail is never sent twice at once, and a sender
//! that dies mid-send leaves the mail due again when the lease ends.

use chrono::{DateTime, Utc};

use crate::{DbConn, DbResult};

/// The row of `email_setting`; `smtp_password` is sealed.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct EmailSettingDAO {
    pub smtp_username: String,
    pub smtp_password: Option<String>,
    pub smtp_server: String,
    pub smtp_port: i64,
    pub from_address: String,
    /// `ssltls`, `starttls` or `none`.
    pub encryption: String,
    /// `plain`, `login` or `none`.
    pub auth_method: String,
}

/// A row of `email_outbox`.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct EmailOutboxDAO {
    pub id: i64,
    pub kind: String,
    pub recipient: String,
    pub subject: String,
    /// `None` once sent or given up.
    pub body: Option<String>,
    pub attempts: i64,
    pub max_attempts: i64,
    pub next_attempt_at: DateTime<Utc>,
    pub last_error: Option<String>,
    pub sent_at: Option<DateTime<Utc>>,
    pub failed_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// What the admin sees of the outbox.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EmailOutboxStatsDAO {
    /// Mails not sent yet and not given up.
    pub pending: i64,
    /// Mails given up in the last 7 days (test mails, whose sender saw the error, aside).
    pub failed_recently: i64,
    /// The error of the latest failed attempt of a mail sent or given up in the last 7 days,
    /// or still pending.
    pub last_error: Option<String>,
}

macro_rules! outbox_columns {
    () => {
        "id, kind, recipient, subject, body, attempts, max_attempts,
         next_attempt_at, last_error, sent_at, failed_at, created_at"
    };
}

impl DbConn {
    pub async fn read_email_setting(&self) -> DbResult<Option<EmailSettingDAO>> {
        on_pool!(self, pool => {
            Ok(sqlx::query_as(
                "SELECT smtp_username, smtp_password, smtp_server, smtp_port, from_address,
                        encryption, auth_method
                 FROM email_setting WHERE id = 1",
            )
            .fetch_optional(pool)
            .await?)
        })
    }

    /// Creates or replaces the settings. `smtp_password`: `Some` stores it (sealed), `None`
    /// keeps the stored one.
    pub async fn update_email_setting(&self, setting: &EmailSettingDAO) -> DbResult<()> {
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO email_setting (id, smtp_username, smtp_password, smtp_server, smtp_port,
                     from_address, encryption, auth_method)
                 VALUES (1, $1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (id) DO UPDATE SET
                     smtp_username = excluded.smtp_username,
                     smtp_password = COALESCE(excluded.smtp_password, email_setting.smtp_password),
                     smtp_server = excluded.smtp_server,
                     smtp_port = excluded.smtp_port,
                     from_address = excluded.from_address,
                     encryption = excluded.encryption,
                     auth_method = excluded.auth_method,
                     updated_at = DATETIME('now')",
            )
            .bind(&setting.smtp_username)
            .bind(&setting.smtp_password)
            .bind(&setting.smtp_server)
            .bind(setting.smtp_port)
            .bind(&setting.from_address)
            .bind(&setting.encryption)
            .bind(&setting.auth_method)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    /// Removes the settings; returns whether there were any.
    pub async fn delete_email_setting(&self) -> DbResult<bool> {
        on_pool!(self, pool => {
            let result = sqlx::query("DELETE FROM email_setting WHERE id = 1")
                .execute(pool)
                .await?;
            Ok(result.rows_affected() > 0)
        })
    }

    /// Queues a mail, due now; returns its id.
    pub async fn enqueue_email(
        &self,
        kind: &str,
        recipient: &str,
        subject: &str,
        body: &str,
        max_attempts: u32,
    ) -> DbResult<i64> {
        on_pool!(self, pool => {
            Ok(sqlx::query_scalar(
                "INSERT INTO email_outbox (kind, recipient, subject, body, max_attempts)
                 VALUES ($1, $2, $3, $4, $5) RETURNING id",
            )
            .bind(kind)
            .bind(recipient)
            .bind(subject)
            .bind(body)
            .bind(i64::from(max_attempts.max(1)))
            .fetch_one(pool)
            .await?)
        })
    }

    /// Claims the oldest due mail for one attempt: counts the attempt and leases the mail for
    /// `lease_secs` (it is due again after that unless marked sent or failed).
    pub async fn claim_due_email(&self, lease_secs: u32) -> DbResult<Option<EmailOutboxDAO>> {
        on_pool!(self, pool => {
            let skip_locked = pool.skip_locked();
            let columns = outbox_columns!();
            Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "UPDATE email_outbox
                 SET attempts = attempts + 1, next_attempt_at = DATETIME('now', $1)
                 WHERE id = (
                     SELECT id FROM email_outbox
                     WHERE sent_at IS NULL AND failed_at IS NULL
                       AND next_attempt_at <= DATETIME('now')
                     ORDER BY next_attempt_at, id LIMIT 1{skip_locked})
                 RETURNING {columns}"
            )))
            .bind(format!("+{lease_secs} seconds"))
            .fetch_optional(pool)
            .await?)
        })
    }

    /// Seconds until the next mail is due (0 if one is due now), `None` if none is pending.
    pub async fn seconds_to_next_email(&self) -> DbResult<Option<f64>> {
        on_pool!(self, pool => {
            // Both times by the database's clock, like every timestamp in the schema.
            let (next, now): (Option<DateTime<Utc>>, DateTime<Utc>) = sqlx::query_as(
                "SELECT MIN(next_attempt_at), DATETIME('now')
                 FROM email_outbox WHERE sent_at IS NULL AND failed_at IS NULL",
            )
            .fetch_one(pool)
            .await?;
            Ok(next.map(|next| ((next - now).num_milliseconds().max(0) as f64) / 1000.0))
        })
    }

    pub async fn mark_email_sent(&self, id: i64) -> DbResult<()> {
        on_pool!(self, pool => {
            sqlx::query("UPDATE email_outbox SET sent_at = DATETIME('now'), body = NULL WHERE id = $1")
                .bind(id)
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    /// Records a failed attempt: the mail is due again in `retry_in_secs`, or, with `None`,
    /// given up (its body cleared).
    pub async fn mark_email_attempt_failed(
        &self,
        id: i64,
        error: &str,
        retry_in_secs: Option<u64>,
    ) -> DbResult<()> {
        on_pool!(self, pool => {
            match retry_in_secs {
                Some(secs) => {
                    sqlx::query(
                        "UPDATE email_outbox SET last_error = $1, next_attempt_at = DATETIME('now', $2)
                         WHERE id = $3",
                    )
                    .bind(error)
                    .bind(format!("+{secs} seconds"))
                    .bind(id)
                    .execute(pool)
                    .await?
                }
                None => {
                    sqlx::query(
                        "UPDATE email_outbox
                         SET last_error = $1, failed_at = DATETIME('now'), body = NULL WHERE id = $2",
                    )
                    .bind(error)
                    .bind(id)
                    .execute(pool)
                    .await?
                }
            };
            Ok(())
        })
    }

    pub async fn get_email(&self, id: i64) -> DbResult<Option<EmailOutboxDAO>> {
        on_pool!(self, pool => {
            Ok(sqlx::query_as(concat!(
                "SELECT ",
                outbox_columns!(),
                " FROM email_outbox WHERE id = $1"
            ))
            .bind(id)
            .fetch_optional(pool)
            .await?)
        })
    }

    pub async fn email_outbox_stats(&self) -> DbResult<EmailOutboxStatsDAO> {
        on_pool!(self, pool => {
            let (pending, failed_recently): (i64, i64) = sqlx::query_as(
                "SELECT
                     COUNT(*) FILTER (WHERE sent_at IS NULL AND failed_at IS NULL),
                     COUNT(*) FILTER (WHERE failed_at > DATETIME('now', '-7 days') AND kind != 'test')
                 FROM email_outbox",
            )
            .fetch_one(pool)
            .await?;
            let last_error = sqlx::query_scalar(
                "SELECT last_error FROM email_outbox
                 WHERE last_error IS NOT NULL
                   AND ((sent_at IS NULL AND failed_at IS NULL)
                        OR COALESCE(failed_at, sent_at) > DATETIME('now', '-7 days'))
                 ORDER BY id DESC LIMIT 1",
            )
            .fetch_optional(pool)
            .await?;
            Ok(EmailOutboxStatsDAO {
                pending,
                failed_recently,
                last_error,
            })
        })
    }

    /// Removes sent and given-up mails older than `days`; returns how many.
    pub async fn delete_emails_older_than(&self, days: u32) -> DbResult<u64> {
        on_pool!(self, pool => {
            let result = sqlx::query(
                "DELETE FROM email_outbox
                 WHERE (sent_at IS NOT NULL OR failed_at IS NOT NULL)
                   AND created_at < DATETIME('now', $1)",
            )
            .bind(format!("-{days} days"))
            .execute(pool)
            .await?;
            Ok(result.rows_affected())
        })
    }
}
