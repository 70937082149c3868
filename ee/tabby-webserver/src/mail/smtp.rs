//! One delivery attempt over SMTP with lettre: the connection secured as the settings say
//! (STARTTLS required, TLS from the start, or none), authenticated with PLAIN or LOGIN when a
//! method is set, bounded by a timeout.
//!
//! Server certificates are checked against the system's roots, plus the PEM certificate
//! `TABBY_WEBSERVER_EMAIL_CERT` names (a path, or the PEM text itself) for a relay with a
//! private CA, as upstream reads that variable.

use std::time::Duration;

use anyhow::Context as _;
use lettre::{
    AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor,
    message::{Mailbox, header::ContentType},
    transport::smtp::{
        authentication::{Credentials, Mechanism},
        client::{Certificate, Tls, TlsParameters},
    },
};
use tabby_schema::email::{AuthMethod, Encryption};

pub const EMAIL_CERT_ENV: &str = "TABBY_WEBSERVER_EMAIL_CERT";
/// Connecting, the SMTP dialogue and each answer: a server that hangs costs at most this.
const SMTP_TIMEOUT: Duration = Duration::from_secs(20);

/// The settings of one attempt, the password already opened.
pub struct SmtpSettings {
    pub server: String,
    pub port: u16,
    pub username: String,
    pub password: String,
    pub from_address: String,
    pub encryption: Encryption,
    pub auth_method: AuthMethod,
}

/// A plain-text mail.
pub struct Mail<'a> {
    pub to: &'a str,
    pub subject: &'a str,
    pub body: &'a str,
}

fn extra_root_certificate() -> anyhow::Result<Option<Certificate>> {
    let Some(value) = std::env::var_os(EMAIL_CERT_ENV) else {
        return Ok(None);
    };
    let value = value.to_string_lossy();
    let pem = if value.trim_start().starts_with("-----BEGIN") {
        value.as_bytes().to_vec()
    } else {
        std::fs::read(value.trim())
            .with_context(|| format!("cannot read {EMAIL_CERT_ENV} ({})", value.trim()))?
    };
    Certificate::from_pem(&pem)
        .map(Some)
        .with_context(|| format!("{EMAIL_CERT_ENV} is not a PEM certificate"))
}

pub async fn send(settings: &SmtpSettings, mail: &Mail<'_>) -> anyhow::Result<()> {
    let from: Mailbox = format!("Tabby <{}>", settings.from_address)
        .parse()
        .context("the sender address is not valid")?;
    let to: Mailbox = mail
        .to
        .parse()
        .context("the recipient address is not valid")?;
    let message = Message::builder()
        .from(from)
        .to(to)
        .subject(mail.subject)
        .header(ContentType::TEXT_PLAIN)
        .body(mail.body.to_owned())
        .context("cannot build the mail")?;
    // `[::1]` is how an IPv6 address is entered; the transport takes the bare address.
    let host = settings
        .server
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let tls = || -> anyhow::Result<TlsParameters> {
        let mut builder = TlsParameters::builder(host.to_owned());
        if let Some(cert) = extra_root_certificate()? {
            builder = builder.add_root_certificate(cert);
        }
        builder.build_rustls().context("cannot set up TLS")
    };
    let tls = match settings.encryption {
        Encryption::None => Tls::None,
        Encryption::StartTls => Tls::Required(tls()?),
        Encryption::SslTls => Tls::Wrapper(tls()?),
    };
    let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host)
        .port(settings.port)
        .tls(tls)
        .timeout(Some(SMTP_TIMEOUT));
    let mechanism = match settings.auth_method {
        AuthMethod::None => None,
        AuthMethod::Plain => Some(Mechanism::Plain),
        AuthMethod::Login => Some(Mechanism::Login),
    };
    if let Some(mechanism) = mechanism {
        builder = builder
            .credentials(Credentials::new(
                settings.username.clone(),
                settings.password.clone(),
            ))
            .authentication(vec![mechanism]);
    }
    let transport = builder.build();
    // The transport's own timeout covers each step; this bounds the whole dialogue.
    tokio::time::timeout(SMTP_TIMEOUT * 3, transport.send(message))
        .await
        .with_context(|| {
            format!(
                "the SMTP server {host}:{} did not finish in {} s",
                settings.port,
                (SMTP_TIMEOUT * 3).as_secs()
            )
        })?
        .with_context(|| format!("the SMTP server {host}:{} refused the mail", settings.port))?;
    Ok(())
}
