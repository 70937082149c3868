//! LDAP sign-in: the settings admins edit (never the bind password), their validation, and
//! the [`LdapService`] trait.

use std::net::IpAddr;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use juniper::{GraphQLEnum, GraphQLInputObject, GraphQLObject};

use crate::{
    CoreError, Result, ValidationError,
    auth::TokenAuthResponse,
    validate::{is_host, is_plain, is_port},
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, GraphQLEnum)]
pub enum LdapEncryption {
    None,
    StartTls,
    Ldaps,
}

impl LdapEncryption {
    pub fn as_db(self) -> &'static str {
        match self {
            LdapEncryption::None => "none",
            LdapEncryption::StartTls => "starttls",
            LdapEncryption::Ldaps => "ldaps",
        }
    }

    pub fn from_db(value: &str) -> Option<Self> {
        Some(match value {
            "none" => LdapEncryption::None,
            "starttls" => LdapEncryption::StartTls,
            "ldaps" => LdapEncryption::Ldaps,
            _ => return None,
        })
    }
}

/// A sign-in method besides the password, for the sign-in page (upstream's `authProviders`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, GraphQLEnum)]
pub enum AuthProviderKind {
    OauthGithub,
    OauthGoogle,
    OauthGitlab,
    OauthOidc,
    Ldap,
}

impl From<crate::oauth::OAuthProvider> for AuthProviderKind {
    fn from(provider: crate::oauth::OAuthProvider) -> Self {
        use crate::oauth::OAuthProvider;
        match provider {
            OAuthProvider::Github => AuthProviderKind::OauthGithub,
            OAuthProvider::Google => AuthProviderKind::OauthGoogle,
            OAuthProvider::Gitlab => AuthProviderKind::OauthGitlab,
            OAuthProvider::Oidc => AuthProviderKind::OauthOidc,
        }
    }
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct AuthProvider {
    pub kind: AuthProviderKind,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct LdapCredential {
    pub host: String,
    pub port: i32,
    pub bind_dn: String,
    pub base_dn: String,
    pub user_filter: String,
    pub encryption: LdapEncryption,
    pub skip_tls_verify: bool,
    pub email_attribute: String,
    pub name_attribute: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Clone, Debug, GraphQLInputObject)]
pub struct UpdateLdapCredentialInput {
    pub host: String,
    pub port: i32,
    /// The service account that searches for users; empty: search anonymously.
    pub bind_dn: String,
    /// `null` keeps the stored password.
    pub bind_password: Option<String>,
    /// Users are searched in this subtree (every OU below it).
    pub base_dn: String,
    /// An LDAP filter with `%s` where the user id goes, e.g. `(uid=%s)` or
    /// `(&(objectClass=person)(|(uid=%s)(mail=%s)))`; the id is escaped (RFC 4515).
    pub user_filter: String,
    pub encryption: LdapEncryption,
    pub skip_tls_verify: bool,
    pub email_attribute: String,
    pub name_attribute: Option<String>,
}

const MAX_LEN: usize = 1024;

/// An attribute description: a name or an OID, with options (`cn;lang-en`).
fn is_attribute(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | ';'))
}

/// Parentheses balance and the filter is one parenthesized expression.
fn is_balanced_filter(filter: &str) -> bool {
    let mut depth = 0i32;
    for (i, c) in filter.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 || (depth == 0 && i + 1 != filter.len()) {
                    return false;
                }
            }
            _ if depth == 0 => return false,
            _ => {}
        }
    }
    depth == 0 && filter.starts_with('(')
}

impl UpdateLdapCredentialInput {
    pub fn validate(&self) -> Result<()> {
        let mut errors = Vec::new();
        let mut push = |path: &str, message: &str| {
            errors.push(ValidationError {
                path: path.into(),
                message: message.into(),
            })
        };
        if !is_host(self.host.trim()) {
            push(
                "host",
                "The host must be a host name or an IP address, without scheme or port",
            );
        }
        if !is_port(self.port) {
            push("port", "The port must be between 1 and 65535");
        }
        for (path, value) in [
            ("bindDn", self.bind_dn.as_str()),
            ("baseDn", self.base_dn.as_str()),
            ("userFilter", self.user_filter.as_str()),
        ] {
            if !is_plain(value, MAX_LEN) {
                push(path, "At most 1024 characters, without control characters");
            }
        }
        if let Some(password) = &self.bind_password
            && !is_plain(password, MAX_LEN)
        {
            push(
                "bindPassword",
                "At most 1024 characters, without control characters",
            );
        }
        if self.base_dn.trim().is_empty() || !self.base_dn.contains('=') {
            push("baseDn", "The base DN is required, e.g. dc=example,dc=com");
        }
        let filter = self.user_filter.trim();
        if !filter.contains("%s") || !is_balanced_filter(filter) {
            push(
                "userFilter",
                "The filter must be one parenthesized LDAP filter with %s where the user id \
                 goes, e.g. (uid=%s)",
            );
        }
        if !is_attribute(self.email_attribute.trim()) {
            push("emailAttribute", "Not an attribute name, e.g. mail");
        }
        if let Some(name) = &self.name_attribute
            && !name.trim().is_empty()
            && !is_attribute(name.trim())
        {
            push("nameAttribute", "Not an attribute name, e.g. cn");
        }
        CoreError::check(errors)
    }
}

#[async_trait]
pub trait LdapService: Send + Sync {
    async fn read_credential(&self) -> Result<Option<LdapCredential>>;
    async fn update_credential(&self, input: &UpdateLdapCredentialInput) -> Result<()>;
    async fn delete_credential(&self) -> Result<()>;
    /// Binds with the input's service account (or the stored password when the input has
    /// none) and reads the base DN; the directory's error if either fails.
    async fn test_connection(&self, input: &UpdateLdapCredentialInput) -> Result<()>;
    /// Signs in by LDAP: the user is found by the filter under the base DN, the password is
    /// checked by binding as them, and the account is the one with their e-mail (created on
    /// first sign-in, within the seat limit). Rate-limited like `tokenAuth`.
    async fn token_auth_ldap(
        &self,
        user_id: &str,
        password: &str,
        client: Option<IpAddr>,
    ) -> Result<TokenAuthResponse>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> UpdateLdapCredentialInput {
        UpdateLdapCredentialInput {
            host: "ldap.example.com".into(),
            port: 389,
            bind_dn: "cn=tabby,dc=example,dc=com".into(),
            bind_password: Some("secret".into()),
            base_dn: "dc=example,dc=com".into(),
            user_filter: "(uid=%s)".into(),
            encryption: LdapEncryption::StartTls,
            skip_tls_verify: false,
            email_attribute: "mail".into(),
            name_attribute: Some("cn".into()),
        }
    }

    use crate::error::invalid_paths as paths;

    #[test]
    fn ldap_input_validation_names_each_field() {
        assert!(paths(input().validate()).is_empty());
        let mut nested = input();
        nested.user_filter = "(&(objectClass=inetOrgPerson)(|(uid=%s)(mail=%s)))".into();
        assert!(paths(nested.validate()).is_empty());
        for filter in [
            "uid=%s",
            "(uid=alice)",
            "(uid=%s))(",
            "(uid=%s)(cn=x)",
            "((uid=%s)",
        ] {
            let mut bad = input();
            bad.user_filter = filter.into();
            assert_eq!(paths(bad.validate()), ["userFilter"], "{filter}");
        }
        let mut bad = input();
        bad.host = "ldap://ldap.example.com".into();
        bad.port = 70000;
        bad.base_dn = String::new();
        bad.email_attribute = "mail)(x".into();
        bad.bind_password = Some("a\nb".into());
        assert_eq!(
            paths(bad.validate()),
            ["host", "port", "bindPassword", "baseDn", "emailAttribute"]
        );
        for db in ["none", "starttls", "ldaps"] {
            assert_eq!(LdapEncryption::from_db(db).unwrap().as_db(), db);
        }
    }
}
