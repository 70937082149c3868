//! Outgoing mail. Requests only queue mail in `email_outbox`; one background sender delivers
//! it over SMTP ([`smtp`]), retrying a failed attempt after `[email] retry_initial_secs`, four
//! times longer each time, up to `[email] max_attempts`; a mail it gives up on notifies the
//! admins in the web UI. Admins see what is pending and the latest error in `emailSetting`.
//! The SMTP password is stored sealed ([`crate::secret_box`]) and never returned.
//!
//! The sender runs apart from the job worker, so a mail never waits behind an indexing run.

mod smtp;
pub mod templates;

use std::{sync::Arc, time::Duration};

use anyhow::Context as _;
use async_trait::async_trait;
use tabby_common::config::EmailConfig;
use tabby_db::{DbConn, EmailOutboxDAO, EmailSettingDAO};
use tabby_schema::{
    CoreError, Result,
    email::{AuthMethod, EmailService, EmailSetting, EmailSettingInput, Encryption},
};
use tokio::sync::Notify;
use tracing::{info, warn};

pub use self::smtp::EMAIL_CERT_ENV;
use crate::secret_box::SecretBox;

/// What the sealed password is bound to.
const PASSWORD_PURPOSE: &str = "email_setting.smtp_password";
/// An attempt holds its mail this long; a sender that died mid-send leaves it due after.
const LEASE_SECS: u32 = 180;
/// The sender looks at the outbox at least this often (a new mail wakes it at once).
const IDLE_POLL: Duration = Duration::from_secs(30);
/// How long `sendTestEmail` waits for the SMTP server's answer.
const TEST_WAIT: Duration = Duration::from_secs(70);
/// Sent and given-up mails are kept (without their bodies) this long.
pub const OUTBOX_RETENTION_DAYS: u32 = 30;

pub struct Mailer {
    db: DbConn,
    secrets: Arc<SecretBox>,
    config: EmailConfig,
    wake: Notify,
}

impl Mailer {
    pub fn new(db: DbConn, secrets: Arc<SecretBox>, config: EmailConfig) -> Self {
        Self {
            db,
            secrets,
            config,
            wake: Notify::new(),
        }
    }

    pub async fn is_configured(&self) -> Result<bool> {
        Ok(self.db.read_email_setting().await?.is_some())
    }

    /// The external URL links in mails start with (the network setting).
    pub async fn external_url(&self) -> Result<String> {
        Ok(self.db.read_server_setting().await?.network_external_url)
    }

    /// Queues a mail with the configured number of attempts and wakes the sender.
    pub async fn enqueue(&self, kind: &str, to: &str, text: templates::Text) -> Result<i64> {
        self.enqueue_with_attempts(kind, to, text, self.config.max_attempts)
            .await
    }

    async fn enqueue_with_attempts(
        &self,
        kind: &str,
        to: &str,
        text: templates::Text,
        attempts: u32,
    ) -> Result<i64> {
        let id = self
            .db
            .enqueue_email(kind, to, &text.subject, &text.body, attempts)
            .await?;
        self.wake.notify_one();
        Ok(id)
    }

    /// Mails every active admin, when mail is set up (job failures).
    pub async fn notify_admins(&self, kind: &str, text: impl Fn() -> templates::Text) {
        let outcome: Result<()> = async {
            if !self.is_configured().await? {
                return Ok(());
            }
            for admin in self.db.list_active_admin_emails().await? {
                self.enqueue(kind, &admin, text()).await?;
            }
            Ok(())
        }
        .await;
        if let Err(e) = outcome {
            warn!("cannot queue mail to the admins: {e}");
        }
    }

    /// Starts the background sender.
    pub fn start(self: &Arc<Self>) {
        let mailer = self.clone();
        tokio::spawn(async move { mailer.run().await });
    }

    async fn run(&self) {
        loop {
            match self.db.claim_due_email(LEASE_SECS).await {
                Ok(Some(mail)) => self.deliver(mail).await,
                Ok(None) => {
                    let wait = match self.db.seconds_to_next_email().await {
                        Ok(Some(secs)) => Duration::from_secs_f64(secs.max(0.05)).min(IDLE_POLL),
                        Ok(None) => IDLE_POLL,
                        Err(e) => {
                            warn!("cannot read the mail outbox: {e}");
                            IDLE_POLL
                        }
                    };
                    let _ = tokio::time::timeout(wait, self.wake.notified()).await;
                }
                Err(e) => {
                    warn!("cannot read the mail outbox: {e}");
                    tokio::time::sleep(IDLE_POLL).await;
                }
            }
        }
    }

    /// Seconds before retry `attempt + 1`: the initial delay, four times longer each time,
    /// at most a day.
    fn backoff_secs(&self, attempt: i64) -> u64 {
        let exponent = u32::try_from(attempt.saturating_sub(1))
            .unwrap_or(u32::MAX)
            .min(16);
        self.config
            .retry_initial_secs
            .saturating_mul(4u64.saturating_pow(exponent))
            .min(86_400)
    }

    async fn deliver(&self, mail: EmailOutboxDAO) {
        let outcome = self.attempt(&mail).await;
        let recorded = match &outcome {
            Ok(()) => {
                info!("mail {} ({}) sent", mail.id, mail.kind);
                self.db.mark_email_sent(mail.id).await
            }
            Err(e) => {
                let error = format!("{e:#}");
                let retry =
                    (mail.attempts < mail.max_attempts).then(|| self.backoff_secs(mail.attempts));
                match retry {
                    Some(secs) => warn!(
                        "mail {} ({}) attempt {} of {} failed, retrying in {secs} s: {error}",
                        mail.id, mail.kind, mail.attempts, mail.max_attempts
                    ),
                    None => warn!(
                        "mail {} ({}) given up after {} attempts: {error}",
                        mail.id, mail.kind, mail.attempts
                    ),
                }
                let recorded = self
                    .db
                    .mark_email_attempt_failed(mail.id, &error, retry)
                    .await;
                // A test mail's failure is the admin's answer already; others are told.
                if retry.is_none() && mail.kind != templates::TEST {
                    let content = format!(
                        "A mail to {} (\"{}\") was not sent after {} attempts: {error}\n\n\
                         Check the mail settings (Settings → Mail).",
                        mail.recipient, mail.subject, mail.attempts
                    );
                    if let Err(e) = self.db.create_notification("admin", &content).await {
                        warn!("cannot notify admins: {e}");
                    }
                }
                recorded
            }
        };
        if let Err(e) = recorded {
            warn!("cannot record the outcome of mail {}: {e}", mail.id);
        }
    }

    async fn attempt(&self, mail: &EmailOutboxDAO) -> anyhow::Result<()> {
        let body = mail.body.as_deref().context("the mail has no body left")?;
        let setting = self
            .db
            .read_email_setting()
            .await?
            .context("mail is not set up (Settings → Mail)")?;
        let settings = self.smtp_settings(&setting)?;
        smtp::send(
            &settings,
            &smtp::Mail {
                to: &mail.recipient,
                subject: &mail.subject,
                body,
            },
        )
        .await
    }

    fn smtp_settings(&self, setting: &EmailSettingDAO) -> anyhow::Result<smtp::SmtpSettings> {
        let password = match &setting.smtp_password {
            Some(sealed) => self
                .secrets
                .open(PASSWORD_PURPOSE, sealed)
                .context("the SMTP password")?,
            None => String::new(),
        };
        Ok(smtp::SmtpSettings {
            server: setting.smtp_server.clone(),
            port: u16::try_from(setting.smtp_port).context("the stored SMTP port")?,
            username: setting.smtp_username.clone(),
            password,
            from_address: setting.from_address.clone(),
            encryption: Encryption::from_db(&setting.encryption)
                .context("the stored encryption")?,
            auth_method: AuthMethod::from_db(&setting.auth_method)
                .context("the stored authentication method")?,
        })
    }
}

#[async_trait]
impl EmailService for Mailer {
    async fn read_setting(&self) -> Result<Option<EmailSetting>> {
        let Some(setting) = self.db.read_email_setting().await? else {
            return Ok(None);
        };
        let stats = self.db.email_outbox_stats().await?;
        let stored = |what: &str| CoreError::Other(anyhow::anyhow!("the stored {what} is invalid"));
        Ok(Some(EmailSetting {
            smtp_username: setting.smtp_username,
            smtp_server: setting.smtp_server,
            smtp_port: i32::try_from(setting.smtp_port).map_err(|_| stored("port"))?,
            from_address: setting.from_address,
            encryption: Encryption::from_db(&setting.encryption)
                .ok_or_else(|| stored("encryption"))?,
            auth_method: AuthMethod::from_db(&setting.auth_method)
                .ok_or_else(|| stored("authentication method"))?,
            pending_deliveries: i32::try_from(stats.pending).unwrap_or(i32::MAX),
            failed_deliveries: i32::try_from(stats.failed_recently).unwrap_or(i32::MAX),
            last_delivery_error: stats.last_error,
        }))
    }

    async fn update_setting(&self, input: EmailSettingInput) -> Result<()> {
        let sealed = input
            .smtp_password
            .as_deref()
            .map(|password| self.secrets.seal(PASSWORD_PURPOSE, password));
        self.db
            .update_email_setting(&EmailSettingDAO {
                smtp_username: input.smtp_username.trim().to_owned(),
                smtp_password: sealed,
                smtp_server: input.smtp_server.trim().to_owned(),
                smtp_port: i64::from(input.smtp_port),
                from_address: input.from_address.trim().to_owned(),
                encryption: input.encryption.as_db().to_owned(),
                auth_method: input.auth_method.as_db().to_owned(),
            })
            .await?;
        // Mail waiting for a retry is tried again with the new settings right away.
        self.wake.notify_one();
        Ok(())
    }

    async fn delete_setting(&self) -> Result<()> {
        if !self.db.delete_email_setting().await? {
            return Err(CoreError::NotFound("Mail is not set up"));
        }
        Ok(())
    }

    async fn send_test_email(&self, to: &str) -> Result<()> {
        if !self.is_configured().await? {
            return Err(CoreError::Rejected(
                "Mail is not set up: save the SMTP settings first".into(),
            ));
        }
        let id = self
            .enqueue_with_attempts(templates::TEST, to, templates::test(), 1)
            .await?;
        let deadline = tokio::time::Instant::now() + TEST_WAIT;
        loop {
            let mail = self
                .db
                .get_email(id)
                .await?
                .ok_or(CoreError::NotFound("The test mail is gone"))?;
            if mail.sent_at.is_some() {
                return Ok(());
            }
            if mail.failed_at.is_some() {
                return Err(CoreError::Rejected(format!(
                    "The test mail was not sent: {}",
                    mail.last_error.unwrap_or_default()
                )));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(CoreError::Rejected(format!(
                    "The test mail was not sent within {} s; other mail may be ahead of it",
                    TEST_WAIT.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
