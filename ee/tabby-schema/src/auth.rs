//! Accounts, sessions and invitations: GraphQL types, input validation and the
//! [`AuthenticationService`] trait.

use std::net::IpAddr;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use juniper::{GraphQLInputObject, GraphQLObject, ID};

use crate::{CoreError, Result, ValidationError, connection, relay::RelayArgs};

/// Who a request acts for, established from a JWT or a user auth token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claims {
    pub user_id: i64,
    /// The credential was a user auth token (an editor's), not a session JWT. Such requests
    /// may only use the fields that allow it (`me`, `repositoryList`, the thread runs).
    pub generated_from_auth_token: bool,
}

/// Another user as others see them.
#[derive(Clone, Debug, GraphQLObject)]
pub struct User {
    pub id: ID,
    pub email: String,
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub is_admin: bool,
    pub is_owner: bool,
    pub active: bool,
    pub is_sso_user: bool,
}

/// The signed-in user, with their secrets.
#[derive(Clone, Debug, GraphQLObject)]
pub struct UserSecured {
    pub id: ID,
    pub email: String,
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub is_admin: bool,
    pub is_owner: bool,
    pub active: bool,
    pub is_sso_user: bool,
    /// The token editors send in `Authorization: Bearer auth_…`.
    pub auth_token: String,
    pub is_password_set: bool,
}

impl From<UserSecured> for User {
    fn from(u: UserSecured) -> Self {
        User {
            id: u.id,
            email: u.email,
            name: u.name,
            created_at: u.created_at,
            is_admin: u.is_admin,
            is_owner: u.is_owner,
            active: u.active,
            is_sso_user: u.is_sso_user,
        }
    }
}

connection!(UserConnection, UserEdge, User);

#[derive(Clone, Debug, GraphQLObject)]
pub struct Invitation {
    pub id: ID,
    pub email: String,
    pub code: String,
    pub created_at: DateTime<Utc>,
}

connection!(InvitationConnection, InvitationEdge, Invitation);

#[derive(Clone, Debug, GraphQLObject)]
pub struct RegisterResponse {
    pub access_token: String,
    pub refresh_token: String,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct TokenAuthResponse {
    pub access_token: String,
    pub refresh_token: String,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct RefreshTokenResponse {
    pub access_token: String,
    pub refresh_token: String,
    /// When the NEW refresh token expires (upstream returns the old token's expiry).
    pub refresh_expires_at: DateTime<Utc>,
}

/// Arguments of `register`.
#[derive(Clone, Debug)]
pub struct RegisterInput {
    pub email: String,
    pub password1: String,
    pub password2: String,
    pub invitation_code: Option<String>,
    pub name: String,
}

pub const MAX_EMAIL_LENGTH: usize = 128;
pub const PASSWORD_LENGTH: std::ops::RangeInclusive<usize> = 8..=20;
pub const MAX_NAME_LENGTH: usize = 64;

/// Whether `email` looks like an address: one `@`, a non-empty local part, a dotted domain,
/// no whitespace.
pub fn is_valid_email(email: &str) -> bool {
    let Some((local, domain)) = email.split_once('@') else {
        return false;
    };
    !local.is_empty()
        && !domain.contains('@')
        && !email.chars().any(|c| c.is_whitespace() || c.is_control())
        && domain.split('.').count() >= 2
        && domain.split('.').all(|label| !label.is_empty())
}

pub fn validate_email(path: &str, email: &str, errors: &mut Vec<ValidationError>) {
    let message = if email.len() > MAX_EMAIL_LENGTH {
        Some(format!(
            "Email must be at most {MAX_EMAIL_LENGTH} characters"
        ))
    } else if !is_valid_email(email) {
        Some("Invalid email address".to_string())
    } else {
        None
    };
    if let Some(message) = message {
        errors.push(ValidationError {
            path: path.into(),
            message,
        });
    }
}

/// Length 8–20 with a lowercase letter, an uppercase letter, a digit and another character.
pub fn validate_password(path: &str, password: &str, errors: &mut Vec<ValidationError>) {
    let length = password.chars().count();
    let message = if !PASSWORD_LENGTH.contains(&length) {
        Some(format!(
            "Password must be {} to {} characters long",
            PASSWORD_LENGTH.start(),
            PASSWORD_LENGTH.end()
        ))
    } else if !(password.chars().any(|c| c.is_lowercase())
        && password.chars().any(|c| c.is_uppercase())
        && password.chars().any(|c| c.is_ascii_digit())
        && password.chars().any(|c| !c.is_alphanumeric()))
    {
        Some(
            "Password must contain a lowercase letter, an uppercase letter, a digit and a \
             special character"
                .to_string(),
        )
    } else {
        None
    };
    if let Some(message) = message {
        errors.push(ValidationError {
            path: path.into(),
            message,
        });
    }
}

pub fn validate_name(path: &str, name: &str, errors: &mut Vec<ValidationError>) {
    let trimmed = name.trim();
    let message = if trimmed.is_empty() {
        Some("Name must not be empty".to_string())
    } else if trimmed.chars().count() > MAX_NAME_LENGTH {
        Some(format!("Name must be at most {MAX_NAME_LENGTH} characters"))
    } else if trimmed.chars().any(char::is_control) {
        Some("Name must not contain control characters".to_string())
    } else {
        None
    };
    if let Some(message) = message {
        errors.push(ValidationError {
            path: path.into(),
            message,
        });
    }
}

impl RegisterInput {
    pub fn validate(&self) -> Result<()> {
        let mut errors = Vec::new();
        validate_email("email", &self.email, &mut errors);
        validate_password("password1", &self.password1, &mut errors);
        if self.password1 != self.password2 {
            errors.push(ValidationError {
                path: "password2".into(),
                message: "Passwords do not match".into(),
            });
        }
        validate_name("name", &self.name, &mut errors);
        CoreError::check(errors)
    }
}

/// Self sign-up: an invitation mailed to an address of an allowed domain.
#[derive(Clone, Debug, GraphQLInputObject)]
pub struct RequestInvitationInput {
    pub email: String,
}

#[derive(Clone, Debug, GraphQLInputObject)]
pub struct RequestPasswordResetEmailInput {
    pub email: String,
}

/// A new password for the account a reset code (from a mail or an admin) belongs to.
#[derive(Clone, Debug, GraphQLInputObject)]
pub struct PasswordResetInput {
    pub code: String,
    pub password1: String,
    pub password2: String,
}

impl PasswordResetInput {
    pub fn validate(&self) -> Result<()> {
        let mut errors = Vec::new();
        if self.code.trim().is_empty() || self.code.len() > 64 {
            errors.push(ValidationError {
                path: "code".into(),
                message: "The reset code is missing or malformed".into(),
            });
        }
        validate_password("password1", &self.password1, &mut errors);
        if self.password1 != self.password2 {
            errors.push(ValidationError {
                path: "password2".into(),
                message: "Passwords do not match".into(),
            });
        }
        CoreError::check(errors)
    }
}

#[async_trait]
pub trait AuthenticationService: Send + Sync {
    /// Creates an account. The first account needs no invitation and becomes the admin and
    /// owner; later ones need the invitation code sent to their e-mail address.
    /// Rate-limited per client address; an invitation expires after
    /// `[security] invitation_expiry_days`.
    async fn register(
        &self,
        input: RegisterInput,
        client: Option<IpAddr>,
    ) -> Result<RegisterResponse>;
    /// Signs in with e-mail and password (rate-limited per e-mail and per client address).
    async fn token_auth(
        &self,
        email: &str,
        password: &str,
        client: Option<IpAddr>,
    ) -> Result<TokenAuthResponse>;
    /// Exchanges a refresh token for a new access token and a NEW refresh token; the old one
    /// stops working.
    /// Rate-limited per client address.
    async fn refresh_token(
        &self,
        refresh_token: &str,
        client: Option<IpAddr>,
    ) -> Result<RefreshTokenResponse>;
    /// Ends the session `refresh_token` belongs to: that token and every token rotated from
    /// the same sign-in stop working. Unknown tokens are ignored (signing out twice is fine).
    async fn sign_out(&self, refresh_token: &str) -> Result<()>;
    /// Checks a JWT access token (signature, expiry, active user).
    async fn verify_access_token(&self, token: &str) -> Result<Claims>;
    /// Checks a JWT access token or a user auth token.
    async fn verify_any_token(&self, token: &str) -> Result<Claims>;
    async fn is_admin_initialized(&self) -> Result<bool>;
    async fn get_user(&self, id: i64) -> Result<UserSecured>;
    async fn list_users(&self, ids: Vec<i64>, page: RelayArgs) -> Result<UserConnection>;
    async fn reset_user_auth_token(&self, id: i64) -> Result<()>;
    /// Changes a password; `old_password` must match when one is set.
    async fn update_user_password(
        &self,
        id: i64,
        old_password: Option<&str>,
        new_password: &str,
    ) -> Result<()>;
    /// Ends every session of the user (their refresh tokens stop working).
    async fn logout_all_sessions(&self, id: i64) -> Result<()>;
    async fn create_invitation(&self, email: &str) -> Result<Invitation>;
    async fn delete_invitation(&self, id: i64) -> Result<()>;
    async fn list_invitations(&self, page: RelayArgs) -> Result<InvitationConnection>;
    /// `actor` is the admin making the change (admins cannot change themselves).
    async fn update_user_active(&self, actor: i64, id: i64, active: bool) -> Result<()>;
    async fn update_user_role(&self, actor: i64, id: i64, is_admin: bool) -> Result<()>;
    async fn update_user_name(&self, id: i64, name: &str) -> Result<()>;
    async fn registration_token(&self) -> Result<String>;
    async fn reset_registration_token(&self) -> Result<String>;
    /// Self sign-up: mails an invitation to an address whose domain the security setting
    /// allows. The code goes to the mailbox only: the returned invitation's `code` is empty.
    async fn request_invitation_email(
        &self,
        email: &str,
        client: Option<IpAddr>,
    ) -> Result<Invitation>;
    /// Mails a reset link if an active account with a password has this e-mail. The answer is
    /// the same whether it exists or not; rate-limited per e-mail and per client.
    async fn request_password_reset_email(&self, email: &str, client: Option<IpAddr>)
    -> Result<()>;
    /// Sets the password of the code's account: the code works once, within
    /// its lifetime, and every session of the account ends.
    async fn password_reset(
        &self,
        input: &PasswordResetInput,
        client: Option<IpAddr>,
    ) -> Result<()>;
    /// A reset link for `user_id`, made by the admin `actor` (only the owner may reset an
    /// admin's password; nobody but the owner the owner's).
    async fn generate_reset_password_url(&self, actor: i64, user_id: i64) -> Result<String>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(email: &str, p1: &str, p2: &str, name: &str) -> RegisterInput {
        RegisterInput {
            email: email.into(),
            password1: p1.into(),
            password2: p2.into(),
            invitation_code: None,
            name: name.into(),
        }
    }

    fn paths(result: Result<()>) -> Vec<String> {
        match result {
            Ok(()) => vec![],
            Err(CoreError::InvalidInput(errors)) => errors.into_iter().map(|e| e.path).collect(),
            Err(e) => panic!("unexpected {e}"),
        }
    }

    #[test]
    fn register_input_validation_names_each_field() {
        assert!(paths(input("a@b.co", "Passw0rd!", "Passw0rd!", "A").validate()).is_empty());
        assert_eq!(
            paths(input("not-an-email", "short", "other", " ").validate()),
            ["email", "password1", "password2", "name"]
        );
        assert_eq!(
            paths(input("a@b.co", "password123", "password123", "A").validate()),
            ["password1"],
            "weak password"
        );
        assert_eq!(
            paths(
                input(
                    &format!("{}@b.co", "a".repeat(130)),
                    "Passw0rd!",
                    "Passw0rd!",
                    "A"
                )
                .validate()
            ),
            ["email"]
        );
        assert_eq!(
            paths(
                input(
                    "a@b.co",
                    "Passw0rd!Passw0rd!xyz",
                    "Passw0rd!Passw0rd!xyz",
                    "A"
                )
                .validate()
            ),
            ["password1"],
            "21 characters"
        );
    }

    #[test]
    fn email_shapes() {
        for ok in ["a@b.co", "first.last+tag@sub.example.org"] {
            assert!(is_valid_email(ok), "{ok}");
        }
        for bad in [
            "", "a", "@b.co", "a@b", "a@@b.co", "a b@c.de", "a@b..co", "a@.co",
        ] {
            assert!(!is_valid_email(bad), "{bad}");
        }
    }
}
