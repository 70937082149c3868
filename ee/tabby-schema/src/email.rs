//! Outgoing mail: the SMTP settings admins edit, what they see of delivery, and the
//! [`EmailService`] trait.

use async_trait::async_trait;
use juniper::{GraphQLEnum, GraphQLInputObject, GraphQLObject};

use crate::{
    CoreError, Result, ValidationError,
    auth::validate_email,
    validate::{is_host, is_plain, is_port},
};

/// How the connection to the SMTP server is secured (upstream's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, GraphQLEnum)]
pub enum Encryption {
    /// Plain SMTP, upgraded with STARTTLS (typically port 587); fails if the server cannot.
    StartTls,
    /// TLS from the first byte (SMTPS, typically port 465).
    SslTls,
    /// No TLS: only for a relay on the same host or network.
    None,
}

impl Encryption {
    pub fn as_db(self) -> &'static str {
        match self {
            Encryption::StartTls => "starttls",
            Encryption::SslTls => "ssltls",
            Encryption::None => "none",
        }
    }

    pub fn from_db(value: &str) -> Option<Self> {
        Some(match value {
            "starttls" => Encryption::StartTls,
            "ssltls" => Encryption::SslTls,
            "none" => Encryption::None,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, GraphQLEnum)]
pub enum AuthMethod {
    None,
    Plain,
    Login,
}

impl AuthMethod {
    pub fn as_db(self) -> &'static str {
        match self {
            AuthMethod::None => "none",
            AuthMethod::Plain => "plain",
            AuthMethod::Login => "login",
        }
    }

    pub fn from_db(value: &str) -> Option<Self> {
        Some(match value {
            "none" => AuthMethod::None,
            "plain" => AuthMethod::Plain,
            "login" => AuthMethod::Login,
            _ => return None,
        })
    }
}

/// The SMTP settings as admins see them: never the password. The delivery fields are ours
/// (upstream has none): what the background sender has not delivered yet, and why.
#[derive(Clone, Debug, GraphQLObject)]
pub struct EmailSetting {
    pub smtp_username: String,
    pub smtp_server: String,
    pub smtp_port: i32,
    pub from_address: String,
    pub encryption: Encryption,
    pub auth_method: AuthMethod,
    /// Mails queued or being retried.
    pub pending_deliveries: i32,
    /// Mails given up after their last retry, in the last 7 days (test mails aside: their
    /// error is the answer to `sendTestEmail`).
    pub failed_deliveries: i32,
    /// The latest delivery error of a mail still pending or finished in the last 7 days.
    pub last_delivery_error: Option<String>,
}

#[derive(Clone, Debug, GraphQLInputObject)]
pub struct EmailSettingInput {
    pub smtp_username: String,
    pub from_address: String,
    pub smtp_server: String,
    pub smtp_port: i32,
    pub encryption: Encryption,
    pub auth_method: AuthMethod,
    /// `null` keeps the stored password.
    pub smtp_password: Option<String>,
}

const MAX_CREDENTIAL_LEN: usize = 256;

impl EmailSettingInput {
    pub fn validate(&self) -> Result<()> {
        let mut errors = Vec::new();
        let mut push = |path: &str, message: &str| {
            errors.push(ValidationError {
                path: path.into(),
                message: message.into(),
            })
        };
        let host = self.smtp_server.trim();
        if host.is_empty() {
            push("smtpServer", "The SMTP server is required");
        } else if !is_host(host) {
            push(
                "smtpServer",
                "The SMTP server must be a host name or an IP address, without scheme or port",
            );
        }
        if !is_port(self.smtp_port) {
            push("smtpPort", "The port must be between 1 and 65535");
        }
        if !is_plain(&self.smtp_username, MAX_CREDENTIAL_LEN) {
            push(
                "smtpUsername",
                "The user name must be at most 256 characters, without control characters",
            );
        }
        if let Some(password) = &self.smtp_password
            && !is_plain(password, MAX_CREDENTIAL_LEN)
        {
            push(
                "smtpPassword",
                "The password must be at most 256 characters, without control characters",
            );
        }
        if self.auth_method != AuthMethod::None && self.smtp_username.trim().is_empty() {
            push(
                "smtpUsername",
                "A user name is required unless the authentication method is NONE",
            );
        }
        validate_email("fromAddress", self.from_address.trim(), &mut errors);
        CoreError::check(errors)
    }
}

#[async_trait]
pub trait EmailService: Send + Sync {
    async fn read_setting(&self) -> Result<Option<EmailSetting>>;
    /// Validated settings; a new password is sealed before it is stored.
    async fn update_setting(&self, input: EmailSettingInput) -> Result<()>;
    async fn delete_setting(&self) -> Result<()>;
    /// Sends a test mail through the background sender and waits for its one attempt; the
    /// SMTP server's error if it fails.
    async fn send_test_email(&self, to: &str) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> EmailSettingInput {
        EmailSettingInput {
            smtp_username: "tabby".into(),
            from_address: "tabby@example.com".into(),
            smtp_server: "smtp.example.com".into(),
            smtp_port: 587,
            encryption: Encryption::StartTls,
            auth_method: AuthMethod::Plain,
            smtp_password: Some("secret".into()),
        }
    }

    use crate::error::invalid_paths as paths;

    #[test]
    fn email_setting_validation_names_each_field() {
        assert!(paths(input().validate()).is_empty());
        let mut ipv6 = input();
        ipv6.smtp_server = "[::1]".into();
        assert!(paths(ipv6.validate()).is_empty());
        for server in [
            "",
            "smtp://mail.example.com",
            "mail.example.com\r\nRCPT TO:<x@y>",
            "a b",
            "-oProxyCommand=x",
        ] {
            let mut bad = input();
            bad.smtp_server = server.into();
            assert_eq!(paths(bad.validate()), ["smtpServer"], "{server:?}");
        }
        let mut bad = input();
        bad.smtp_port = 0;
        bad.from_address = "not an address".into();
        bad.smtp_password = Some("line\nbreak".into());
        assert_eq!(
            paths(bad.validate()),
            ["smtpPort", "smtpPassword", "fromAddress"]
        );
        let mut anonymous = input();
        anonymous.smtp_username = String::new();
        assert_eq!(paths(anonymous.clone().validate()), ["smtpUsername"]);
        anonymous.auth_method = AuthMethod::None;
        assert!(paths(anonymous.validate()).is_empty());
        for db in ["starttls", "ssltls", "none"] {
            assert_eq!(Encryption::from_db(db).unwrap().as_db(), db);
        }
        for db in ["plain", "login", "none"] {
            assert_eq!(AuthMethod::from_db(db).unwrap().as_db(), db);
        }
    }
}
