//! The LDAP protocol side of sign-in, with ldap3: connect (plain, StartTLS required, or
//! LDAPS), bind as the service account, find the user under the base DN by the filter with
//! the user id escaped (RFC 4515), and check the password by binding as the entry found.
//! Every step is bounded by [`STEP_TIMEOUT`].

use std::time::Duration;

use anyhow::{Context as _, bail};
use ldap3::{LdapConnAsync, LdapConnSettings, Scope, SearchEntry, SearchOptions, ldap_escape};
use tabby_schema::ldap::LdapEncryption;

/// Connecting and each request: an unreachable or hanging directory costs at most this.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// LDAP result codes.
const INVALID_CREDENTIALS: u32 = 49;
const SIZE_LIMIT_EXCEEDED: u32 = 4;

/// The settings of one conversation, the bind password already opened.
pub struct Settings {
    pub host: String,
    pub port: u16,
    pub encryption: LdapEncryption,
    pub skip_tls_verify: bool,
    pub bind_dn: String,
    pub bind_password: String,
    pub base_dn: String,
    pub user_filter: String,
    pub email_attribute: String,
    pub name_attribute: Option<String>,
}

/// A user the directory vouched for.
#[derive(Debug)]
pub struct Person {
    pub dn: String,
    pub email: Option<String>,
    pub name: Option<String>,
}

/// What checking a user id and password found.
#[derive(Debug)]
pub enum Verdict {
    Verified(Person),
    /// No such user, or the wrong password (the caller says neither which).
    Rejected,
}

async fn step<T>(
    what: &str,
    future: impl std::future::Future<Output = Result<T, ldap3::LdapError>>,
) -> anyhow::Result<T> {
    tokio::time::timeout(STEP_TIMEOUT, future)
        .await
        .with_context(|| format!("{what}: no answer within {} s", STEP_TIMEOUT.as_secs()))?
        .with_context(|| what.to_owned())
}

/// Connects and binds as the service account (anonymously when it has no DN).
async fn connect(settings: &Settings) -> anyhow::Result<ldap3::Ldap> {
    let scheme = match settings.encryption {
        LdapEncryption::Ldaps => "ldaps",
        _ => "ldap",
    };
    let host = settings.host.trim();
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    let url = format!("{scheme}://{host}:{}", settings.port);
    let conn_settings = LdapConnSettings::new()
        .set_conn_timeout(STEP_TIMEOUT)
        .set_starttls(settings.encryption == LdapEncryption::StartTls)
        .set_no_tls_verify(settings.skip_tls_verify);
    let (conn, mut ldap) = step(
        &format!("cannot connect to {url}"),
        LdapConnAsync::with_settings(conn_settings, &url),
    )
    .await?;
    ldap3::drive!(conn);
    if !settings.bind_dn.trim().is_empty() {
        let result = step(
            "the service account's bind failed",
            ldap.simple_bind(settings.bind_dn.trim(), &settings.bind_password),
        )
        .await?;
        if result.rc != 0 {
            bail!(
                "the directory refused the service account {} (result {}: {})",
                settings.bind_dn.trim(),
                result.rc,
                result.text
            );
        }
    }
    Ok(ldap)
}

/// Binds as the service account and reads the base DN.
pub async fn test(settings: &Settings) -> anyhow::Result<()> {
    let mut ldap = connect(settings).await?;
    let (entries, result) = step(
        "cannot read the base DN",
        ldap.search(
            settings.base_dn.trim(),
            Scope::Base,
            "(objectClass=*)",
            vec!["1.1"],
        ),
    )
    .await?
    .success()
    .with_context(|| format!("cannot read the base DN {}", settings.base_dn.trim()))?;
    let _ = ldap.unbind().await;
    if entries.is_empty() {
        bail!(
            "the base DN {} is not visible to the service account ({})",
            settings.base_dn.trim(),
            result.text
        );
    }
    Ok(())
}

/// The filter for `user_id`: every `%s` replaced by the escaped id.
pub fn user_filter(template: &str, user_id: &str) -> String {
    template.trim().replace("%s", &ldap_escape(user_id))
}

pub async fn verify(settings: &Settings, user_id: &str, password: &str) -> anyhow::Result<Verdict> {
    // An empty password is an unauthenticated bind, which directories accept: never a
    // sign-in.
    if password.is_empty() || user_id.trim().is_empty() {
        return Ok(Verdict::Rejected);
    }
    let filter = user_filter(&settings.user_filter, user_id.trim());
    ldap3::parse_filter(&filter)
        .map_err(|_| anyhow::anyhow!("the user filter is not a valid LDAP filter: {filter}"))?;
    let mut ldap = connect(settings).await?;
    let mut attributes = vec![settings.email_attribute.trim().to_owned()];
    if let Some(name) = settings
        .name_attribute
        .as_deref()
        .filter(|n| !n.trim().is_empty())
    {
        attributes.push(name.trim().to_owned());
    }
    let search = step(
        "the user search failed",
        ldap.with_search_options(SearchOptions::new().sizelimit(2))
            .search(settings.base_dn.trim(), Scope::Subtree, &filter, attributes),
    )
    .await?;
    let (entries, result) = (search.0, search.1);
    if result.rc != 0 && result.rc != SIZE_LIMIT_EXCEEDED {
        bail!(
            "the user search failed (result {}: {})",
            result.rc,
            result.text
        );
    }
    if entries.len() > 1 || result.rc == SIZE_LIMIT_EXCEEDED {
        bail!("the user filter matches more than one entry for this user id; make it stricter");
    }
    let Some(entry) = entries.into_iter().next() else {
        let _ = ldap.unbind().await;
        return Ok(Verdict::Rejected);
    };
    let entry = SearchEntry::construct(entry);
    let first = |attribute: &str| {
        entry
            .attrs
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(attribute))
            .and_then(|(_, values)| values.first().cloned())
    };
    let person = Person {
        email: first(settings.email_attribute.trim()),
        name: settings
            .name_attribute
            .as_deref()
            .and_then(|n| first(n.trim())),
        dn: entry.dn.clone(),
    };
    let bind = step(
        "the user's bind failed",
        ldap.simple_bind(&entry.dn, password),
    )
    .await?;
    let _ = ldap.unbind().await;
    match bind.rc {
        0 => Ok(Verdict::Verified(person)),
        INVALID_CREDENTIALS => Ok(Verdict::Rejected),
        rc => bail!(
            "the directory answered the user's bind with result {rc}: {}",
            bind.text
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4515: a user id cannot change the filter's structure.
    #[test]
    fn user_ids_are_escaped_in_the_filter() {
        assert_eq!(user_filter("(uid=%s)", "alice"), "(uid=alice)");
        let attack = user_filter("(uid=%s)", "*)(uid=*))(|(uid=*");
        assert_eq!(attack, r"(uid=\2a\29\28uid=\2a\29\29\28|\28uid=\2a)");
        assert!(ldap3::parse_filter(&attack).is_ok());
        assert_eq!(
            user_filter("(|(uid=%s)(mail=%s))", r"a\b"),
            r"(|(uid=a\5cb)(mail=a\5cb))"
        );
    }
}
