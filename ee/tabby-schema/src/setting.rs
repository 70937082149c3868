//! Server-wide settings: the facts the sign-in page needs before anyone is signed in, and the
//! security setting admins edit.

use async_trait::async_trait;
use juniper::{GraphQLInputObject, GraphQLObject};

use crate::{CoreError, Result, ValidationError};

#[derive(Clone, Debug, GraphQLObject)]
pub struct ServerInfo {
    /// Whether the first user (the owner) has registered.
    pub is_admin_initialized: bool,
    pub is_chat_enabled: bool,
    pub is_email_configured: bool,
    pub allow_self_signup: bool,
    pub disable_password_login: bool,
    pub is_demo_mode: bool,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct SecuritySetting {
    /// E-mail domains whose addresses may sign up without an invitation (an invitation is
    /// mailed to them first, so the address is proven). Empty: invitations only.
    pub allowed_register_domain_list: Vec<String>,
    pub disable_client_side_telemetry: bool,
    pub disable_password_login: bool,
}

#[derive(Clone, Debug, GraphQLInputObject)]
pub struct SecuritySettingInput {
    pub allowed_register_domain_list: Vec<String>,
    pub disable_client_side_telemetry: bool,
    pub disable_password_login: bool,
}

/// Where users reach this server: the start of every link in a mail.
#[derive(Clone, Debug, GraphQLObject)]
pub struct NetworkSetting {
    pub external_url: String,
}

#[derive(Clone, Debug, GraphQLInputObject)]
pub struct NetworkSettingInput {
    pub external_url: String,
}

impl NetworkSettingInput {
    /// An `http(s)` URL without credentials, query or fragment, returned without a trailing
    /// slash.
    pub fn validated_url(&self) -> Result<String> {
        let invalid = |message: &str| CoreError::invalid("externalUrl", message);
        let text = self.external_url.trim();
        if text.len() > 2048 {
            return Err(invalid("The URL is longer than 2048 characters"));
        }
        let url = url::Url::parse(text)
            .map_err(|_| invalid("Not a URL like https://tabby.example.com"))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(invalid(
                "The URL must start with http:// or https:// and name a host",
            ));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid("The URL must not carry credentials"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(invalid("The URL must not have a query or a fragment"));
        }
        Ok(url.as_str().trim_end_matches('/').to_owned())
    }
}

const MAX_DOMAINS: usize = 100;

/// A DNS name of at least two labels (`example.com`), letters, digits and hyphens.
pub fn is_valid_domain(domain: &str) -> bool {
    domain.len() <= 253
        && domain.split('.').count() >= 2
        && domain.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

impl SecuritySettingInput {
    /// Checks the domains and returns them trimmed, lowercased and without duplicates.
    pub fn validated_domains(&self) -> Result<Vec<String>> {
        let mut errors = Vec::new();
        if self.allowed_register_domain_list.len() > MAX_DOMAINS {
            errors.push(ValidationError {
                path: "allowedRegisterDomainList".into(),
                message: format!("At most {MAX_DOMAINS} domains"),
            });
        }
        let mut domains: Vec<String> = Vec::new();
        for domain in &self.allowed_register_domain_list {
            let domain = domain.trim().trim_start_matches('@').to_ascii_lowercase();
            if !is_valid_domain(&domain) {
                let shown: String = domain.chars().take(64).collect();
                errors.push(ValidationError {
                    path: "allowedRegisterDomainList".into(),
                    message: format!("{shown:?} is not a domain name like example.com"),
                });
            } else if !domains.contains(&domain) {
                domains.push(domain);
            }
        }
        CoreError::check(errors)?;
        Ok(domains)
    }
}

#[async_trait]
pub trait SettingService: Send + Sync {
    async fn server_info(&self) -> Result<ServerInfo>;
    async fn security_setting(&self) -> Result<SecuritySetting>;
    /// Password sign-in can only be turned off while another sign-in method works for an
    /// admin, so nobody locks everyone out.
    async fn update_security_setting(&self, input: SecuritySettingInput) -> Result<()>;
    async fn network_setting(&self) -> Result<NetworkSetting>;
    async fn update_network_setting(&self, external_url: &str) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_urls_are_checked() {
        let url = |u: &str| {
            NetworkSettingInput {
                external_url: u.into(),
            }
            .validated_url()
        };
        assert_eq!(
            url(" https://tabby.example.com/ ").unwrap(),
            "https://tabby.example.com"
        );
        assert_eq!(
            url("http://10.0.0.5:8080/tabby/").unwrap(),
            "http://10.0.0.5:8080/tabby"
        );
        for bad in [
            "",
            "tabby.example.com",
            "javascript:alert(1)",
            "ftp://x.example.com",
            "https://user:pw@x.example.com",
            "https://x.example.com/?next=evil",
            "https://x.example.com/#x",
        ] {
            assert!(url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn domains_are_checked_and_normalized() {
        let input = |domains: &[&str]| SecuritySettingInput {
            allowed_register_domain_list: domains.iter().map(|d| d.to_string()).collect(),
            disable_client_side_telemetry: false,
            disable_password_login: false,
        };
        assert_eq!(
            input(&[" Example.COM ", "@corp.example.org", "example.com"])
                .validated_domains()
                .unwrap(),
            ["example.com", "corp.example.org"]
        );
        for bad in [
            "",
            "localhost",
            "a,b.com",
            "*.example.com",
            "ex ample.com",
            "-a.com",
            "a..com",
        ] {
            assert!(input(&[bad]).validated_domains().is_err(), "{bad:?}");
        }
        let many: Vec<String> = (0..101).map(|i| format!("d{i}.example.com")).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(input(&refs).validated_domains().is_err());
    }
}
