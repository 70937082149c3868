//! [`AuthenticationService`] over SQLite: registration, sign-in, sessions, invitations and
//! account administration.

use std::{net::IpAddr, sync::Arc};

use async_trait::async_trait;
use tabby_db::{DbConn, InvitationDAO, OWNER_USER_ID, UserDAO};
use tabby_schema::{
    AsID, CoreError, Result,
    auth::{
        AuthenticationService, Claims, Invitation, InvitationConnection, PasswordResetInput,
        RefreshTokenResponse, RegisterInput, RegisterResponse, TokenAuthResponse, User,
        UserConnection, UserSecured,
    },
    relay::RelayArgs,
};
use tracing::warn;

use crate::{
    directory::{Directory, Snapshot},
    job::PASSWORD_RESET_LIFETIME_HOURS,
    jwt::JwtKeys,
    mail::{Mailer, templates},
    password,
    ratelimit::{BucketSpec, RateLimiter, SharedRateLimiter},
};

/// Failed sign-ins allowed per e-mail address: a burst of 10, then one every 30 s.
const LOGIN_PER_EMAIL: BucketSpec = BucketSpec {
    capacity: 10.0,
    initial: 10.0,
    per_second: 1.0 / 30.0,
};
/// Failed sign-ins allowed per client address: a burst of 50, then one every 6 s.
const LOGIN_PER_CLIENT: BucketSpec = BucketSpec {
    capacity: 50.0,
    initial: 50.0,
    per_second: 1.0 / 6.0,
};

/// Registrations per client address: a burst of 20, then one every 3 s.
const REGISTER_PER_CLIENT: BucketSpec = BucketSpec {
    capacity: 20.0,
    initial: 20.0,
    per_second: 1.0 / 3.0,
};
/// Registrations per e-mail address, from any client: a burst of 5, then one a minute. An
/// invitation is for one e-mail, so this bounds guessing its code from many addresses.
const REGISTER_PER_EMAIL: BucketSpec = BucketSpec {
    capacity: 5.0,
    initial: 5.0,
    per_second: 1.0 / 60.0,
};
/// Reset mails per e-mail address: a burst of 3, then one every 5 minutes (a mailbox is not
/// flooded through us).
const RESET_MAIL_PER_EMAIL: BucketSpec = BucketSpec {
    capacity: 3.0,
    initial: 3.0,
    per_second: 1.0 / 300.0,
};
/// Reset mails and reset attempts per client address: a burst of 20, then one every 10 s.
const RESET_PER_CLIENT: BucketSpec = BucketSpec {
    capacity: 20.0,
    initial: 20.0,
    per_second: 1.0 / 10.0,
};
/// Token refreshes per client address: a burst of 60, then one a second.
const REFRESH_PER_CLIENT: BucketSpec = BucketSpec {
    capacity: 60.0,
    initial: 60.0,
    per_second: 1.0,
};

pub struct AuthServiceImpl {
    db: DbConn,
    jwt: Arc<JwtKeys>,
    directory: Arc<Directory>,
    /// Failed sign-ins per account, counted through every replica on the database.
    per_email: SharedRateLimiter,
    per_client: RateLimiter<IpAddr>,
    register_per_client: RateLimiter<IpAddr>,
    register_per_email: RateLimiter<String>,
    refresh_per_client: RateLimiter<IpAddr>,
    reset_mail_per_email: RateLimiter<String>,
    reset_per_client: RateLimiter<IpAddr>,
    mailer: Arc<Mailer>,
    /// A hash to verify against when the e-mail is unknown, so both cases take as long.
    dummy_hash: tokio::sync::OnceCell<String>,
}

pub fn user_secured(user: UserDAO) -> UserSecured {
    UserSecured {
        id: user.id.as_id(),
        is_owner: user.is_owner(),
        name: user.name.unwrap_or_default(),
        email: user.email,
        created_at: user.created_at,
        is_admin: user.is_admin,
        active: user.active,
        // Accounts made by LDAP sign-in have no password.
        is_sso_user: user.password_encrypted.is_none(),
        is_password_set: user.password_encrypted.is_some(),
        auth_token: user.auth_token,
    }
}

pub fn user_public(user: UserDAO) -> User {
    user_secured(user).into()
}

fn invitation(dao: InvitationDAO) -> Invitation {
    Invitation {
        id: dao.id.as_id(),
        email: dao.email,
        code: dao.code,
        created_at: dao.created_at,
    }
}

impl AuthServiceImpl {
    /// Checks a session JWT or a user auth token against one snapshot of the directory, and
    /// returns that snapshot for the caller's other checks (the REST layer's hot path).
    pub async fn authenticate(&self, token: &str) -> Result<(Claims, Arc<Snapshot>)> {
        let snapshot = self.directory.snapshot().await?;
        let claims = match self.jwt.verify_with_epoch(token) {
            Some((user_id, epoch)) if snapshot.session_valid(user_id, epoch) => Claims {
                user_id,
                generated_from_auth_token: false,
            },
            Some(_) => {
                return Err(CoreError::Unauthorized(
                    "The session has ended, or the user is disabled or gone",
                ));
            }
            None => Claims {
                user_id: snapshot
                    .user_by_auth_token(token)
                    .ok_or(CoreError::Unauthorized("Invalid token"))?,
                generated_from_auth_token: true,
            },
        };
        Ok((claims, snapshot))
    }

    /// When a session JWT expires; `None` for auth tokens (and invalid tokens).
    pub fn session_expiry(&self, token: &str) -> Option<chrono::DateTime<chrono::Utc>> {
        self.jwt.expires_at(token)
    }

    pub fn new(
        db: DbConn,
        jwt: Arc<JwtKeys>,
        directory: Arc<Directory>,
        mailer: Arc<Mailer>,
    ) -> Self {
        let per_email_db = db.clone();
        Self {
            reset_mail_per_email: RateLimiter::new(RESET_MAIL_PER_EMAIL),
            reset_per_client: RateLimiter::new(RESET_PER_CLIENT),
            mailer,
            db,
            jwt,
            directory,
            per_email: SharedRateLimiter::new(per_email_db, "sign-in", LOGIN_PER_EMAIL),
            per_client: RateLimiter::new(LOGIN_PER_CLIENT),
            register_per_client: RateLimiter::new(REGISTER_PER_CLIENT),
            register_per_email: RateLimiter::new(REGISTER_PER_EMAIL),
            refresh_per_client: RateLimiter::new(REFRESH_PER_CLIENT),
            dummy_hash: tokio::sync::OnceCell::new(),
        }
    }

    /// Charges a sign-in attempt for `key` (an e-mail, or `ldap:<user id>`) and the client
    /// address: before the credential is checked, and refunded on success, so concurrent
    /// attempts cannot all pass the check before any failure is counted.
    pub(crate) async fn charge_sign_in(&self, key: &str, client: Option<IpAddr>) -> Result<()> {
        let too_many = || {
            CoreError::TooManyRequests("Too many failed sign-in attempts; try again later".into())
        };
        // The address first: a flood from one address with ever new keys is stopped before
        // it fills the per-key map.
        if let Some(ip) = client
            && !self.per_client.try_acquire(&ip)
        {
            return Err(too_many());
        }
        let allowed = self.per_email.try_acquire(key).await;
        if !matches!(allowed, Ok(true)) {
            if let Some(ip) = client {
                self.per_client.refund(&ip);
            }
            allowed?;
            return Err(too_many());
        }
        Ok(())
    }

    pub(crate) async fn refund_sign_in(&self, key: &str, client: Option<IpAddr>) -> Result<()> {
        if let Some(ip) = client {
            self.per_client.refund(&ip);
        }
        self.per_email.refund(key).await?;
        Ok(())
    }

    pub(crate) async fn issue_tokens(
        &self,
        user_id: i64,
    ) -> Result<(String, tabby_db::RefreshTokenDAO)> {
        let epoch = self.db.get_session_epoch(user_id).await?;
        let (access, _) = self.jwt.issue(user_id, epoch)?;
        let refresh = self.db.create_refresh_token(user_id).await?;
        Ok((access, refresh))
    }

    async fn user_dao(&self, id: i64) -> Result<UserDAO> {
        self.db
            .get_user(id)
            .await?
            .ok_or(CoreError::NotFound("User not found"))
    }

    /// Refuses a new active account once `[security] max_users` accounts are active.
    pub(crate) async fn check_seat(&self) -> Result<()> {
        if let Some(max) = self.directory.security().max_users
            && self.db.count_active_users().await? >= max as usize
        {
            return Err(CoreError::Rejected(format!(
                "This server has reached its limit of {max} active users \
                 ([security] max_users); an admin can deactivate an account or raise the limit"
            )));
        }
        Ok(())
    }

    /// Refuses a new active admin once `[security] max_admins` admins are active.
    async fn check_admin_seat(&self) -> Result<()> {
        if let Some(max) = self.directory.security().max_admins
            && self.db.count_active_admins().await? >= max as usize
        {
            return Err(CoreError::Rejected(format!(
                "This server has reached its limit of {max} active admins ([security] max_admins)"
            )));
        }
        Ok(())
    }

    fn client_limited(&self, limiter: &RateLimiter<IpAddr>, client: Option<IpAddr>) -> Result<()> {
        if client.is_some_and(|ip| !limiter.try_acquire(&ip)) {
            return Err(CoreError::TooManyRequests(
                "Too many requests from this address; try again later".into(),
            ));
        }
        Ok(())
    }

    /// Queues the invitation mail when mail is set up; whether it was queued.
    async fn mail_invitation(&self, invitation: &InvitationDAO) -> Result<bool> {
        if !self.mailer.is_configured().await? {
            return Ok(false);
        }
        let text = templates::invitation(
            &self.mailer.external_url().await?,
            &invitation.code,
            self.directory.security().invitation_expiry_days,
        );
        self.mailer
            .enqueue(templates::INVITATION, &invitation.email, text)
            .await?;
        Ok(true)
    }

    pub(crate) fn invitation_expired(&self, invitation: &InvitationDAO) -> bool {
        let days = self.directory.security().invitation_expiry_days;
        invitation.created_at + chrono::Duration::days(i64::from(days)) <= chrono::Utc::now()
    }

    async fn reset_url(&self, user_id: i64) -> Result<String> {
        let reset = self.db.create_password_reset(user_id).await?;
        let base = self.mailer.external_url().await?;
        Ok(format!(
            "{}/auth/reset-password?code={}",
            base.trim_end_matches('/'),
            reset.code
        ))
    }

    /// The reset mail for `email`, if an active account with that address exists.
    async fn queue_reset_mail(&self, email: &str) -> Result<()> {
        let Some(user) = self.db.get_user_by_email(email).await? else {
            return Ok(());
        };
        // Accounts without a password (made by LDAP sign-in) sign in through the directory.
        if !user.active || user.password_encrypted.is_none() {
            return Ok(());
        }
        let reset = self.db.create_password_reset(user.id).await?;
        let text = templates::password_reset(
            &self.mailer.external_url().await?,
            &reset.code,
            PASSWORD_RESET_LIFETIME_HOURS,
        );
        self.mailer
            .enqueue(templates::PASSWORD_RESET, &user.email, text)
            .await?;
        Ok(())
    }

    pub(crate) fn db(&self) -> &DbConn {
        &self.db
    }

    pub(crate) fn invalidate_directory(&self) {
        self.directory.invalidate();
    }

    async fn password_login_disabled(&self) -> Result<bool> {
        Ok(self
            .db
            .read_server_setting()
            .await?
            .security_disable_password_login)
    }

    /// Whether the e-mail's domain is one of the self-signup domains of the security setting.
    pub(crate) async fn may_self_signup(&self, email: &str) -> Result<bool> {
        let setting = self.db.read_server_setting().await?;
        let domain = email.rsplit_once('@').map(|(_, d)| d.to_lowercase());
        Ok(domain.is_some_and(|domain| {
            setting
                .allowed_register_domains()
                .iter()
                .any(|allowed| allowed.eq_ignore_ascii_case(&domain))
        }))
    }
}

#[async_trait]
impl AuthenticationService for AuthServiceImpl {
    async fn register(
        &self,
        input: RegisterInput,
        client: Option<IpAddr>,
    ) -> Result<RegisterResponse> {
        if client.is_some_and(|ip| !self.register_per_client.try_acquire(&ip)) {
            return Err(CoreError::TooManyRequests(
                "Too many registrations from this address; try again later".into(),
            ));
        }
        // After the address check, so one address cannot fill the map with new e-mails.
        if !self
            .register_per_email
            .try_acquire(&input.email.trim().to_lowercase())
        {
            return Err(CoreError::TooManyRequests(
                "Too many registrations for this e-mail; try again later".into(),
            ));
        }
        // Decide whether the account may exist before spending a password hash on it.
        // Without a code only the owner registers. Self sign-up goes through a mailed
        // invitation (`requestInvitationEmail`), so the address is proven before the account
        // exists (upstream creates accounts for allowed domains unverified).
        let code_required = || async {
            Ok::<_, CoreError>(CoreError::invalid(
                "invitationCode",
                if self.may_self_signup(&input.email).await? {
                    "An invitation code is required to register: ask for one to be mailed to \
                     this address"
                } else {
                    "An invitation code is required to register"
                },
            ))
        };
        let invitation_id = match input.invitation_code.as_deref().filter(|c| !c.is_empty()) {
            Some(code) => {
                let invitation = self
                    .db
                    .get_invitation_by_code(code)
                    .await?
                    .filter(|i| i.email.eq_ignore_ascii_case(&input.email))
                    .ok_or_else(|| {
                        CoreError::invalid("invitationCode", "Invitation code is not valid")
                    })?;
                let days = self.directory.security().invitation_expiry_days;
                if self.invitation_expired(&invitation) {
                    return Err(CoreError::invalid(
                        "invitationCode",
                        format!(
                            "Invitation code has expired (invitations are valid for {days} days); \
                             ask an admin for a new one"
                        ),
                    ));
                }
                if self.password_login_disabled().await? {
                    return Err(CoreError::Rejected(
                        "Password sign-in is turned off on this server: create your account by \
                         signing in with single sign-on or LDAP"
                            .into(),
                    ));
                }
                self.check_seat().await?;
                Some(invitation.id)
            }
            None if self.db.get_user(OWNER_USER_ID).await?.is_some() => {
                return Err(code_required().await?);
            }
            None => None,
        };
        let hash = password::hash(&input.password1).await?;
        let name = Some(input.name.trim());
        let user_id = match invitation_id {
            Some(invitation_id) => {
                self.db
                    .create_user_with_invitation(
                        &input.email,
                        Some(&hash),
                        false,
                        name,
                        invitation_id,
                    )
                    .await?
            }
            None => match self
                .db
                .create_owner(&input.email, Some(&hash), name)
                .await?
            {
                Some(id) => id,
                // Another registration made the owner in the meantime.
                None => return Err(code_required().await?),
            },
        };
        self.directory.invalidate();
        let (access_token, refresh) = self.issue_tokens(user_id).await?;
        Ok(RegisterResponse {
            access_token,
            refresh_token: refresh.token,
        })
    }

    async fn token_auth(
        &self,
        email: &str,
        password: &str,
        client: Option<IpAddr>,
    ) -> Result<TokenAuthResponse> {
        if self.password_login_disabled().await? {
            return Err(CoreError::Rejected(
                "Password sign-in is turned off on this server; use another sign-in method".into(),
            ));
        }
        let email_key = email.trim().to_lowercase();
        self.charge_sign_in(&email_key, client).await?;
        let user = self.db.get_user_by_email(email.trim()).await?;
        let hash = match user.as_ref().and_then(|u| u.password_encrypted.clone()) {
            Some(hash) => hash,
            None => self
                .dummy_hash
                .get_or_try_init(|| password::hash("not-a-password-Aa1!"))
                .await?
                .clone(),
        };
        let matches = password::verify(password, &hash).await;
        let Some(user) = user.filter(|u| matches && u.password_encrypted.is_some()) else {
            return Err(CoreError::Rejected(
                "Invalid email address or password".into(),
            ));
        };
        self.refund_sign_in(&email_key, client).await?;
        if !user.active {
            return Err(CoreError::Rejected("User is disabled".into()));
        }
        let (access_token, refresh) = self.issue_tokens(user.id).await?;
        Ok(TokenAuthResponse {
            access_token,
            refresh_token: refresh.token,
        })
    }

    async fn refresh_token(
        &self,
        refresh_token: &str,
        client: Option<IpAddr>,
    ) -> Result<RefreshTokenResponse> {
        if client.is_some_and(|ip| !self.refresh_per_client.try_acquire(&ip)) {
            return Err(CoreError::TooManyRequests(
                "Too many token refreshes from this address; try again later".into(),
            ));
        }
        let new = self
            .db
            .rotate_refresh_token(refresh_token)
            .await
            .map_err(|e| match e {
                tabby_db::DbError::NotFound { .. } => {
                    CoreError::Unauthorized("Invalid or expired refresh token")
                }
                tabby_db::DbError::Reused { .. } => CoreError::Unauthorized(
                    "This refresh token was already used; the sessions it belongs to are \
                     signed out: sign in again",
                ),
                other => other.into(),
            })?;
        let user = self.user_dao(new.user_id).await?;
        if !user.active {
            self.db.delete_refresh_tokens_of_user(user.id).await?;
            return Err(CoreError::Unauthorized("User is disabled"));
        }
        let epoch = self.db.get_session_epoch(user.id).await?;
        let (access_token, _) = self.jwt.issue(user.id, epoch)?;
        Ok(RefreshTokenResponse {
            access_token,
            refresh_token: new.token,
            refresh_expires_at: new.expires_at,
        })
    }

    async fn sign_out(&self, refresh_token: &str) -> Result<()> {
        match self.db.delete_refresh_token(refresh_token).await {
            Ok(()) | Err(tabby_db::DbError::NotFound { .. }) => Ok(()),
            Err(other) => Err(other.into()),
        }
    }

    async fn verify_access_token(&self, token: &str) -> Result<Claims> {
        let (user_id, epoch) = self
            .jwt
            .verify_with_epoch(token)
            .ok_or(CoreError::Unauthorized("Invalid or expired token"))?;
        let snapshot = self.directory.snapshot().await?;
        if !snapshot.session_valid(user_id, epoch) {
            return Err(CoreError::Unauthorized(
                "The session has ended, or the user is disabled or gone",
            ));
        }
        Ok(Claims {
            user_id,
            generated_from_auth_token: false,
        })
    }

    async fn verify_any_token(&self, token: &str) -> Result<Claims> {
        Ok(self.authenticate(token).await?.0)
    }

    async fn is_admin_initialized(&self) -> Result<bool> {
        Ok(self.db.get_user(OWNER_USER_ID).await?.is_some())
    }

    async fn get_user(&self, id: i64) -> Result<UserSecured> {
        Ok(user_secured(self.user_dao(id).await?))
    }

    async fn list_users(&self, ids: Vec<i64>, page: RelayArgs) -> Result<UserConnection> {
        let page = page
            .paginate(
                |u: &User| u.id.to_string(),
                |p| async move {
                    Ok(self
                        .db
                        .list_users(&ids, p)
                        .await?
                        .into_iter()
                        .map(user_public)
                        .collect())
                },
            )
            .await?;
        Ok(page.into())
    }

    async fn reset_user_auth_token(&self, id: i64) -> Result<()> {
        self.db.reset_user_auth_token(id).await?;
        self.directory.invalidate();
        Ok(())
    }

    async fn update_user_password(
        &self,
        id: i64,
        old_password: Option<&str>,
        new_password: &str,
    ) -> Result<()> {
        let user = self.user_dao(id).await?;
        if let Some(current) = &user.password_encrypted {
            let old = old_password.unwrap_or_default();
            if !password::verify(old, current).await {
                return Err(CoreError::invalid(
                    "oldPassword",
                    "Old password is incorrect",
                ));
            }
        }
        let hash = password::hash(new_password).await?;
        self.db.update_user_password(id, Some(&hash)).await?;
        // Every session ends with the old password (access tokens too, unlike upstream).
        self.db.end_user_sessions(id).await?;
        self.directory.invalidate();
        Ok(())
    }

    /// Refresh tokens are deleted and access tokens issued until now stop working at once
    /// (upstream leaves access tokens valid until they expire).
    async fn logout_all_sessions(&self, id: i64) -> Result<()> {
        self.db.end_user_sessions(id).await?;
        self.directory.invalidate();
        Ok(())
    }

    async fn create_invitation(&self, email: &str) -> Result<Invitation> {
        if self.db.get_user_by_email(email).await?.is_some() {
            return Err(CoreError::invalid(
                "email",
                "A user with this email already exists",
            ));
        }
        let created = self.db.create_invitation(email).await?;
        self.mail_invitation(&created).await?;
        Ok(invitation(created))
    }

    async fn delete_invitation(&self, id: i64) -> Result<()> {
        self.db
            .delete_invitation(id)
            .await
            .map_err(CoreError::not_found_as("Invitation not found"))
    }

    async fn list_invitations(&self, page: RelayArgs) -> Result<InvitationConnection> {
        let page = page
            .paginate(
                |i: &Invitation| i.id.to_string(),
                |p| async move {
                    Ok(self
                        .db
                        .list_invitations(p)
                        .await?
                        .into_iter()
                        .map(invitation)
                        .collect())
                },
            )
            .await?;
        Ok(page.into())
    }

    async fn update_user_active(&self, actor: i64, id: i64, active: bool) -> Result<()> {
        if id == OWNER_USER_ID {
            return Err(CoreError::Rejected(
                "The owner's status cannot be changed".into(),
            ));
        }
        if id == actor {
            return Err(CoreError::Rejected(
                "You cannot change your own status".into(),
            ));
        }
        let user = self.user_dao(id).await?;
        if active && !user.active {
            self.check_seat().await?;
            if user.is_admin {
                self.check_admin_seat().await?;
            }
        }
        self.db.update_user_active(id, active).await?;
        if !active {
            self.db.end_user_sessions(id).await?;
        }
        self.directory.invalidate();
        Ok(())
    }

    async fn update_user_role(&self, actor: i64, id: i64, is_admin: bool) -> Result<()> {
        if id == OWNER_USER_ID {
            return Err(CoreError::Rejected(
                "The owner's role cannot be changed".into(),
            ));
        }
        if id == actor {
            return Err(CoreError::Rejected(
                "You cannot change your own role".into(),
            ));
        }
        let user = self.user_dao(id).await?;
        if is_admin && !user.is_admin && user.active {
            self.check_admin_seat().await?;
        }
        self.db.update_user_role(id, is_admin).await?;
        self.directory.invalidate();
        Ok(())
    }

    async fn update_user_name(&self, id: i64, name: &str) -> Result<()> {
        self.user_dao(id).await?;
        self.db.update_user_name(id, name).await?;
        Ok(())
    }

    async fn registration_token(&self) -> Result<String> {
        Ok(self.db.read_registration_token().await?)
    }

    async fn reset_registration_token(&self) -> Result<String> {
        Ok(self.db.reset_registration_token().await?)
    }

    async fn request_invitation_email(
        &self,
        email: &str,
        client: Option<IpAddr>,
    ) -> Result<Invitation> {
        if client.is_some_and(|ip| !self.register_per_client.try_acquire(&ip))
            || !self.register_per_email.try_acquire(&email.to_lowercase())
        {
            return Err(CoreError::TooManyRequests(
                "Too many sign-up requests; try again later".into(),
            ));
        }
        if !self.may_self_signup(email).await? {
            return Err(CoreError::Rejected(
                "Self sign-up is not open to this e-mail domain; ask an admin for an invitation"
                    .into(),
            ));
        }
        if !self.mailer.is_configured().await? {
            return Err(CoreError::Rejected(
                "Self sign-up needs mail, which is not set up on this server; ask an admin for \
                 an invitation"
                    .into(),
            ));
        }
        let answer = |id: juniper::ID, created_at| Invitation {
            id,
            email: email.to_owned(),
            code: String::new(),
            created_at,
        };
        // The answer is the same whether the address has an account or not: the mailbox
        // learns which.
        if self.db.get_user_by_email(email).await?.is_some() {
            let text = templates::account_exists(&self.mailer.external_url().await?);
            self.mailer
                .enqueue(templates::ACCOUNT_EXISTS, email, text)
                .await?;
            return Ok(answer(juniper::ID::new(""), chrono::Utc::now()));
        }
        let current = match self.db.get_invitation_by_email(email).await? {
            Some(existing) if !self.invitation_expired(&existing) => existing,
            Some(expired) => {
                self.db.delete_invitation(expired.id).await?;
                self.db.create_invitation(email).await?
            }
            None => self.db.create_invitation(email).await?,
        };
        self.mail_invitation(&current).await?;
        Ok(answer(juniper::ID::new(""), current.created_at))
    }

    async fn request_password_reset_email(
        &self,
        email: &str,
        client: Option<IpAddr>,
    ) -> Result<()> {
        self.client_limited(&self.reset_per_client, client)?;
        if !self.mailer.is_configured().await? {
            return Err(CoreError::Rejected(
                "Password reset by mail is not available: mail is not set up on this server; \
                 ask an admin for a reset link"
                    .into(),
            ));
        }
        if self.password_login_disabled().await? {
            return Err(CoreError::Rejected(
                "Password sign-in is turned off on this server".into(),
            ));
        }
        // Over the limit for this address: answered like any other request, nothing sent.
        if !self.reset_mail_per_email.try_acquire(&email.to_lowercase()) {
            return Ok(());
        }
        if let Err(e) = self.queue_reset_mail(email).await {
            warn!("cannot queue a password reset mail: {e}");
            return Err(e);
        }
        Ok(())
    }

    async fn password_reset(
        &self,
        input: &PasswordResetInput,
        client: Option<IpAddr>,
    ) -> Result<()> {
        self.client_limited(&self.reset_per_client, client)?;
        if self.password_login_disabled().await? {
            return Err(CoreError::Rejected(
                "Password sign-in is turned off on this server".into(),
            ));
        }
        let invalid = || {
            CoreError::invalid(
                "code",
                "This reset link is not valid: it was used, replaced by a newer one, or is \
                 older than an hour. Ask for a new one.",
            )
        };
        let user_id = self
            .db
            .redeem_password_reset(&input.code, PASSWORD_RESET_LIFETIME_HOURS)
            .await?
            .ok_or_else(invalid)?;
        let user = self.user_dao(user_id).await?;
        if !user.active {
            return Err(CoreError::Rejected("User is disabled".into()));
        }
        let hash = password::hash(&input.password1).await?;
        self.db.update_user_password(user_id, Some(&hash)).await?;
        self.db.end_user_sessions(user_id).await?;
        self.directory.invalidate();
        Ok(())
    }

    async fn generate_reset_password_url(&self, actor: i64, user_id: i64) -> Result<String> {
        let user = self.user_dao(user_id).await?;
        if actor != OWNER_USER_ID && (user.is_owner() || user.is_admin) && actor != user_id {
            return Err(CoreError::Forbidden(
                "Only the owner can reset the password of an admin",
            ));
        }
        self.reset_url(user_id).await
    }
}
