//! Query, Mutation and Subscription roots. Each resolver first checks who may call it:
//! [`check_user`] (a signed-in session), [`check_user_allow_auth_token`] (a session or an
//! editor's auth token), [`check_admin`], or nothing (sign-in and server info).

use std::{net::IpAddr, pin::Pin, sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use futures::Stream;
use juniper::{FieldError, GraphQLInputObject, ID, RootNode, graphql_object, graphql_subscription};

use crate::{
    AccessPolicy, AsRowid, CoreError, Result,
    auth::{
        AuthenticationService, Claims, Invitation, InvitationConnection, PasswordResetInput,
        RefreshTokenResponse, RegisterInput, RegisterResponse, RequestInvitationInput,
        RequestPasswordResetEmailInput, TokenAuthResponse, UserConnection, UserSecured,
        validate_email, validate_name, validate_password,
    },
    email::{EmailService, EmailSetting, EmailSettingInput},
    integration::{
        CreateIntegrationInput, IntegrationConnection, IntegrationKind, IntegrationService,
        ProvidedRepositoryConnection, UpdateIntegrationInput, validate_integration,
    },
    job::{
        CreateCustomDocumentInput, CustomDocumentConnection, IngestionStats, JobRunConnection,
        JobService, JobStats, Notification,
    },
    ldap::{
        AuthProvider, AuthProviderKind, LdapCredential, LdapService, UpdateLdapCredentialInput,
    },
    oauth::{OAuthCredential, OAuthProvider, OAuthService, UpdateOAuthCredentialInput},
    policy::{MembershipChange, check_membership_change},
    relay::{Page, RelayArgs},
    repository::{
        FileEntrySearchResult, GitRepositoryConnection, Repository, RepositoryGrepOutput,
        RepositoryKind, RepositoryService, validate_git_url, validate_repository_name,
    },
    setting::{
        NetworkSetting, NetworkSettingInput, SecuritySetting, SecuritySettingInput, ServerInfo,
        SettingService,
    },
    thread::{
        CreateThreadAndRunInput, CreateThreadRunInput, MessageConnection, ThreadConnection,
        ThreadRunStream, ThreadService, UpdateMessageInput,
    },
    usage::{CompletionStats, Language, UsageService, UserEventConnection},
    user_group::{
        AccessPolicyService, CreateUserGroupInput, SourceIdAccessPolicy,
        UpsertUserGroupMembershipInput, UserGroup, UserGroupService,
    },
};

/// The implementations behind the schema.
pub trait ServiceLocator: Send + Sync {
    fn auth(&self) -> Arc<dyn AuthenticationService>;
    fn user_group(&self) -> Arc<dyn UserGroupService>;
    fn access_policy(&self) -> Arc<dyn AccessPolicyService>;
    fn repository(&self) -> Arc<dyn RepositoryService>;
    fn usage(&self) -> Arc<dyn UsageService>;
    fn setting(&self) -> Arc<dyn SettingService>;
    fn thread(&self) -> Arc<dyn ThreadService>;
    fn job(&self) -> Arc<dyn JobService>;
    fn email(&self) -> Arc<dyn EmailService>;
    fn ldap(&self) -> Arc<dyn LdapService>;
    fn oauth(&self) -> Arc<dyn OAuthService>;
    fn integration(&self) -> Arc<dyn IntegrationService>;
}

/// Per request (or per WebSocket connection): who is calling, and the services.
#[derive(Clone)]
pub struct Context {
    pub claims: Option<Claims>,
    /// The token `claims` came from. A WebSocket's context lives as long as the connection, so
    /// every check verifies it again: an expired token, ended sessions (sign out everywhere, a
    /// password change) or a deactivated user stop the next operation on an open socket.
    pub token: Option<String>,
    pub locator: Arc<dyn ServiceLocator>,
    /// The client's address, for sign-in rate limits.
    pub client: Option<IpAddr>,
}

impl juniper::Context for Context {}

async fn active_user(ctx: &Context, claims: &Claims) -> Result<UserSecured> {
    if let Some(token) = &ctx.token {
        let fresh = ctx
            .locator
            .auth()
            .verify_any_token(token)
            .await
            .map_err(|_| {
                CoreError::Unauthorized("Your session has expired or ended; sign in again")
            })?;
        if fresh.user_id != claims.user_id {
            return Err(CoreError::Unauthorized(
                "Your session has expired or ended; sign in again",
            ));
        }
    }
    let user = ctx
        .locator
        .auth()
        .get_user(claims.user_id)
        .await
        .map_err(|_| CoreError::Unauthorized("The user of this token no longer exists"))?;
    if !user.active {
        return Err(CoreError::Unauthorized("User is disabled"));
    }
    Ok(user)
}

/// A signed-in session (JWT); an auth token is not enough.
pub async fn check_user(ctx: &Context) -> Result<UserSecured> {
    let claims = ctx
        .claims
        .as_ref()
        .ok_or(CoreError::Unauthorized("You're not logged in"))?;
    if claims.generated_from_auth_token {
        return Err(CoreError::Forbidden(
            "This operation needs a signed-in session, not a user auth token",
        ));
    }
    active_user(ctx, claims).await
}

/// A session or a user auth token.
pub async fn check_user_allow_auth_token(ctx: &Context) -> Result<UserSecured> {
    let claims = ctx
        .claims
        .as_ref()
        .ok_or(CoreError::Unauthorized("You're not logged in"))?;
    active_user(ctx, claims).await
}

pub async fn check_admin(ctx: &Context) -> Result<UserSecured> {
    let user = check_user(ctx).await?;
    if !user.is_admin {
        return Err(CoreError::Forbidden("You must be admin to proceed"));
    }
    Ok(user)
}

/// The read policy of the signed-in session's user.
async fn session_policy(ctx: &Context) -> Result<AccessPolicy> {
    let user = check_user(ctx).await?;
    ctx.locator
        .access_policy()
        .policy_for(user.id.as_rowid()?)
        .await
}

fn rowids(ids: Option<Vec<ID>>) -> Result<Vec<i64>> {
    ids.unwrap_or_default()
        .iter()
        .map(AsRowid::as_rowid)
        .collect()
}

/// Non-admins may only see their own usage.
fn usage_users(user: &UserSecured, users: Option<Vec<ID>>) -> Result<Vec<i64>> {
    let own = user.id.as_rowid()?;
    let users = rowids(users)?;
    if user.is_admin {
        return Ok(users);
    }
    if users.iter().any(|id| *id != own) {
        return Err(CoreError::Forbidden("You can only see your own usage"));
    }
    Ok(vec![own])
}

/// The reader's policy, once they may read the thread ([`AccessPolicy::can_read_thread`]).
async fn check_thread_readable(
    ctx: &Context,
    user: &UserSecured,
    thread_id: i64,
) -> Result<AccessPolicy> {
    let thread = ctx
        .locator
        .thread()
        .get(thread_id)
        .await?
        .ok_or(CoreError::NotFound("Thread not found"))?;
    let policy = ctx
        .locator
        .access_policy()
        .policy_for(user.id.as_rowid()?)
        .await?;
    if policy.can_read_thread(thread.user_id.as_rowid()?, thread.is_ephemeral) {
        Ok(policy)
    } else {
        Err(CoreError::Forbidden("You cannot read this thread"))
    }
}

/// Only the owner changes a thread (admins too, [`AccessPolicy::can_change_thread`]).
async fn check_thread_owner(ctx: &Context, user: &UserSecured, thread_id: i64) -> Result<()> {
    let thread = ctx
        .locator
        .thread()
        .get(thread_id)
        .await?
        .ok_or(CoreError::NotFound("Thread not found"))?;
    let policy = ctx
        .locator
        .access_policy()
        .policy_for(user.id.as_rowid()?)
        .await?;
    if policy.can_change_thread(thread.user_id.as_rowid()?) {
        Ok(())
    } else {
        Err(CoreError::Forbidden("You can only change your own threads"))
    }
}

pub struct Query;

#[graphql_object(context = Context)]
impl Query {
    /// The token that registers agents and ingestion clients with this server (admin).
    async fn registration_token(ctx: &Context) -> Result<String> {
        check_admin(ctx).await?;
        ctx.locator.auth().registration_token().await
    }

    async fn me(ctx: &Context) -> Result<UserSecured> {
        check_user_allow_auth_token(ctx).await
    }

    async fn users(
        ctx: &Context,
        ids: Option<Vec<ID>>,
        after: Option<String>,
        before: Option<String>,
        first: Option<i32>,
        last: Option<i32>,
    ) -> Result<UserConnection> {
        let user = check_user(ctx).await?;
        let page = RelayArgs::new(after, before, first, last);
        let ids = rowids(ids)?;
        // Admins, and group admins who pick new members by e-mail, list everyone; other users
        // see only themselves.
        let me = user.id.as_rowid()?;
        let lists_everyone = user.is_admin
            || ctx
                .locator
                .user_group()
                .list()
                .await?
                .iter()
                .flat_map(|g| &g.members)
                .any(|m| m.is_group_admin && m.user.id == user.id);
        if lists_everyone {
            return ctx.locator.auth().list_users(ids, page).await;
        }
        if !ids.is_empty() && !ids.contains(&me) {
            return Ok(Page::default().into());
        }
        ctx.locator.auth().list_users(vec![me], page).await
    }

    async fn invitations(
        ctx: &Context,
        after: Option<String>,
        before: Option<String>,
        first: Option<i32>,
        last: Option<i32>,
    ) -> Result<InvitationConnection> {
        check_admin(ctx).await?;
        ctx.locator
            .auth()
            .list_invitations(RelayArgs::new(after, before, first, last))
            .await
    }

    /// GitHub and GitLab integrations (admin).
    #[allow(clippy::too_many_arguments)]
    async fn integrations(
        ctx: &Context,
        ids: Option<Vec<ID>>,
        kind: Option<IntegrationKind>,
        after: Option<String>,
        before: Option<String>,
        first: Option<i32>,
        last: Option<i32>,
    ) -> Result<IntegrationConnection> {
        check_admin(ctx).await?;
        ctx.locator
            .integration()
            .list(
                rowids(ids)?,
                kind,
                RelayArgs::new(after, before, first, last),
            )
            .await
    }

    /// The repositories the integrations' tokens can see, as of their last sync (admin).
    #[allow(clippy::too_many_arguments)]
    async fn integrated_repositories(
        ctx: &Context,
        ids: Option<Vec<ID>>,
        kind: Option<IntegrationKind>,
        active: Option<bool>,
        after: Option<String>,
        before: Option<String>,
        first: Option<i32>,
        last: Option<i32>,
    ) -> Result<ProvidedRepositoryConnection> {
        check_admin(ctx).await?;
        ctx.locator
            .integration()
            .list_repositories(
                rowids(ids)?,
                kind,
                active,
                RelayArgs::new(after, before, first, last),
            )
            .await
    }

    async fn server_info(ctx: &Context) -> Result<ServerInfo> {
        ctx.locator.setting().server_info().await
    }

    /// The SMTP settings (never the password), or null when mail is not set up (admin).
    async fn email_setting(ctx: &Context) -> Result<Option<EmailSetting>> {
        check_admin(ctx).await?;
        ctx.locator.email().read_setting().await
    }

    async fn security_setting(ctx: &Context) -> Result<SecuritySetting> {
        check_admin(ctx).await?;
        ctx.locator.setting().security_setting().await
    }

    /// The sign-in methods besides the password (no auth: the sign-in page shows them).
    async fn auth_providers(ctx: &Context) -> Result<Vec<AuthProvider>> {
        let mut providers: Vec<AuthProvider> = ctx
            .locator
            .oauth()
            .providers()
            .await?
            .into_iter()
            .map(|p| AuthProvider { kind: p.into() })
            .collect();
        if ctx.locator.ldap().read_credential().await?.is_some() {
            providers.push(AuthProvider {
                kind: AuthProviderKind::Ldap,
            });
        }
        Ok(providers)
    }

    /// A provider's OAuth settings (never the client secret), or null (admin).
    async fn oauth_credential(
        ctx: &Context,
        provider: OAuthProvider,
    ) -> Result<Option<OAuthCredential>> {
        check_admin(ctx).await?;
        ctx.locator.oauth().read_credential(provider).await
    }

    /// The redirect URI to register with the provider (admin).
    async fn oauth_callback_url(ctx: &Context, provider: OAuthProvider) -> Result<String> {
        check_admin(ctx).await?;
        ctx.locator.oauth().callback_url(provider).await
    }

    /// The LDAP settings (never the bind password), or null when LDAP is not set up (admin).
    async fn ldap_credential(ctx: &Context) -> Result<Option<LdapCredential>> {
        check_admin(ctx).await?;
        ctx.locator.ldap().read_credential().await
    }

    async fn network_setting(ctx: &Context) -> Result<NetworkSetting> {
        check_admin(ctx).await?;
        ctx.locator.setting().network_setting().await
    }

    async fn git_repositories(
        ctx: &Context,
        after: Option<String>,
        before: Option<String>,
        first: Option<i32>,
        last: Option<i32>,
    ) -> Result<GitRepositoryConnection> {
        check_admin(ctx).await?;
        ctx.locator
            .repository()
            .list_git(RelayArgs::new(after, before, first, last))
            .await
    }

    /// Every repository (config and GraphQL) the caller may read.
    async fn repository_list(ctx: &Context) -> Result<Vec<Repository>> {
        let user = check_user_allow_auth_token(ctx).await?;
        let policy = ctx
            .locator
            .access_policy()
            .policy_for(user.id.as_rowid()?)
            .await?;
        ctx.locator.repository().repository_list(&policy).await
    }

    /// Greps a repository the caller may read (code browser).
    async fn repository_grep(
        ctx: &Context,
        kind: RepositoryKind,
        id: ID,
        rev: Option<String>,
        query: String,
    ) -> Result<RepositoryGrepOutput> {
        let policy = session_policy(ctx).await?;
        ctx.locator
            .repository()
            .grep(&policy, kind, &id, rev.as_deref(), &query)
            .await
    }

    /// File paths of a repository the caller may read, by fuzzy match (code browser).
    async fn repository_search(
        ctx: &Context,
        kind: RepositoryKind,
        id: ID,
        rev: Option<String>,
        pattern: String,
    ) -> Result<Vec<FileEntrySearchResult>> {
        let policy = session_policy(ctx).await?;
        ctx.locator
            .repository()
            .search_files(&policy, kind, &id, rev.as_deref(), &pattern)
            .await
    }

    async fn daily_stats_in_past_year(
        ctx: &Context,
        users: Option<Vec<ID>>,
    ) -> Result<Vec<CompletionStats>> {
        let user = check_user(ctx).await?;
        let users = usage_users(&user, users)?;
        let end = Utc::now();
        let start = end - chrono::Duration::days(365);
        ctx.locator
            .usage()
            .daily_stats(start, end, users, vec![])
            .await
    }

    async fn daily_stats(
        ctx: &Context,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
        users: Option<Vec<ID>>,
        languages: Option<Vec<Language>>,
    ) -> Result<Vec<CompletionStats>> {
        let user = check_user(ctx).await?;
        if end < start {
            return Err(CoreError::invalid("end", "end must not be before start"));
        }
        let users = usage_users(&user, users)?;
        ctx.locator
            .usage()
            .daily_stats(start, end, users, languages.unwrap_or_default())
            .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn user_events(
        ctx: &Context,
        after: Option<String>,
        before: Option<String>,
        first: Option<i32>,
        last: Option<i32>,
        users: Option<Vec<ID>>,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> Result<UserEventConnection> {
        check_admin(ctx).await?;
        ctx.locator
            .usage()
            .user_events(
                RelayArgs::new(after, before, first, last),
                rowids(users)?,
                start,
                end,
            )
            .await
    }

    /// Every group for admins; the groups the caller belongs to for others.
    async fn user_groups(ctx: &Context) -> Result<Vec<UserGroup>> {
        let user = check_user(ctx).await?;
        let mut groups = ctx.locator.user_group().list().await?;
        if !user.is_admin {
            groups.retain(|g| g.members.iter().any(|m| m.user.id == user.id));
        }
        Ok(groups)
    }

    /// Threads the caller may read (all for admins; others: their own and shared ones).
    #[allow(clippy::too_many_arguments)]
    async fn threads(
        ctx: &Context,
        ids: Option<Vec<ID>>,
        is_ephemeral: Option<bool>,
        after: Option<String>,
        before: Option<String>,
        first: Option<i32>,
        last: Option<i32>,
    ) -> Result<ThreadConnection> {
        let user = check_user_allow_auth_token(ctx).await?;
        let viewer = (!user.is_admin).then(|| user.id.as_rowid()).transpose()?;
        ctx.locator
            .thread()
            .list(
                rowids(ids)?,
                is_ephemeral,
                None,
                viewer,
                RelayArgs::new(after, before, first, last),
            )
            .await
    }

    async fn my_threads(
        ctx: &Context,
        after: Option<String>,
        before: Option<String>,
        first: Option<i32>,
        last: Option<i32>,
    ) -> Result<ThreadConnection> {
        let user = check_user(ctx).await?;
        ctx.locator
            .thread()
            .list(
                vec![],
                None,
                Some(user.id.as_rowid()?),
                None,
                RelayArgs::new(after, before, first, last),
            )
            .await
    }

    async fn thread_messages(
        ctx: &Context,
        thread_id: ID,
        after: Option<String>,
        before: Option<String>,
        first: Option<i32>,
        last: Option<i32>,
    ) -> Result<MessageConnection> {
        let user = check_user_allow_auth_token(ctx).await?;
        let thread_id = thread_id.as_rowid()?;
        let reader = check_thread_readable(ctx, &user, thread_id).await?;
        ctx.locator
            .thread()
            .list_messages(
                thread_id,
                &reader,
                RelayArgs::new(after, before, first, last),
            )
            .await
    }

    /// The background jobs this server runs (signed-in users).
    async fn jobs(ctx: &Context) -> Result<Vec<String>> {
        check_user(ctx).await?;
        Ok(crate::job_names().iter().map(|s| s.to_string()).collect())
    }

    #[allow(clippy::too_many_arguments)]
    async fn job_runs(
        ctx: &Context,
        ids: Option<Vec<ID>>,
        jobs: Option<Vec<String>>,
        after: Option<String>,
        before: Option<String>,
        first: Option<i32>,
        last: Option<i32>,
    ) -> Result<JobRunConnection> {
        check_admin(ctx).await?;
        ctx.locator
            .job()
            .list(
                rowids(ids)?,
                jobs.unwrap_or_default(),
                RelayArgs::new(after, before, first, last),
            )
            .await
    }

    /// Runs of the last 7 days (upstream answers anyone; we ask for a signed-in user).
    async fn job_run_stats(ctx: &Context, jobs: Option<Vec<String>>) -> Result<JobStats> {
        check_user(ctx).await?;
        ctx.locator.job().stats(jobs.unwrap_or_default()).await
    }

    async fn custom_web_documents(
        ctx: &Context,
        ids: Option<Vec<ID>>,
        after: Option<String>,
        before: Option<String>,
        first: Option<i32>,
        last: Option<i32>,
    ) -> Result<CustomDocumentConnection> {
        let user = check_user(ctx).await?;
        let policy = ctx
            .locator
            .access_policy()
            .policy_for(user.id.as_rowid()?)
            .await?;
        ctx.locator
            .job()
            .web_documents(
                rowids(ids)?,
                &policy,
                RelayArgs::new(after, before, first, last),
            )
            .await
    }

    async fn ingestion_status(
        ctx: &Context,
        sources: Option<Vec<String>>,
    ) -> Result<Vec<IngestionStats>> {
        check_admin(ctx).await?;
        ctx.locator
            .job()
            .ingestion_status(sources.unwrap_or_default())
            .await
    }

    async fn notifications(ctx: &Context) -> Result<Vec<Notification>> {
        let user = check_user(ctx).await?;
        ctx.locator
            .job()
            .notifications(user.id.as_rowid()?, user.is_admin)
            .await
    }

    async fn source_id_access_policies(
        ctx: &Context,
        source_id: String,
    ) -> Result<SourceIdAccessPolicy> {
        check_admin(ctx).await?;
        let read = ctx
            .locator
            .access_policy()
            .list_read_access(&source_id)
            .await?;
        Ok(SourceIdAccessPolicy { source_id, read })
    }
}

#[derive(GraphQLInputObject)]
pub struct PasswordChangeInput {
    /// Required when the account has a password.
    pub old_password: Option<String>,
    pub new_password1: String,
    pub new_password2: String,
}

pub struct Mutation;

#[graphql_object(context = Context)]
impl Mutation {
    async fn register(
        ctx: &Context,
        email: String,
        password1: String,
        password2: String,
        invitation_code: Option<String>,
        name: String,
    ) -> Result<RegisterResponse> {
        let input = RegisterInput {
            email,
            password1,
            password2,
            invitation_code,
            name,
        };
        input.validate()?;
        ctx.locator.auth().register(input, ctx.client).await
    }

    async fn token_auth(
        ctx: &Context,
        email: String,
        password: String,
    ) -> Result<TokenAuthResponse> {
        ctx.locator
            .auth()
            .token_auth(&email, &password, ctx.client)
            .await
    }

    async fn refresh_token(ctx: &Context, refresh_token: String) -> Result<RefreshTokenResponse> {
        ctx.locator
            .auth()
            .refresh_token(&refresh_token, ctx.client)
            .await
    }

    /// Signs this session out on the server: its refresh token (and every one rotated from
    /// the same sign-in) is revoked. The refresh token is the credential; no other is needed.
    async fn sign_out(ctx: &Context, refresh_token: String) -> Result<bool> {
        ctx.locator.auth().sign_out(&refresh_token).await?;
        Ok(true)
    }

    async fn verify_token(ctx: &Context, token: String) -> Result<bool> {
        ctx.locator.auth().verify_access_token(&token).await?;
        Ok(true)
    }

    async fn reset_user_auth_token(ctx: &Context) -> Result<bool> {
        let user = check_user(ctx).await?;
        ctx.locator
            .auth()
            .reset_user_auth_token(user.id.as_rowid()?)
            .await?;
        Ok(true)
    }

    async fn password_change(ctx: &Context, input: PasswordChangeInput) -> Result<bool> {
        let user = check_user(ctx).await?;
        let mut errors = Vec::new();
        validate_password("newPassword1", &input.new_password1, &mut errors);
        if input.new_password1 != input.new_password2 {
            errors.push(crate::ValidationError {
                path: "newPassword2".into(),
                message: "Passwords do not match".into(),
            });
        }
        CoreError::check(errors)?;
        ctx.locator
            .auth()
            .update_user_password(
                user.id.as_rowid()?,
                input.old_password.as_deref(),
                &input.new_password1,
            )
            .await?;
        Ok(true)
    }

    async fn logout_all_sessions(ctx: &Context) -> Result<bool> {
        let user = check_user(ctx).await?;
        ctx.locator
            .auth()
            .logout_all_sessions(user.id.as_rowid()?)
            .await?;
        Ok(true)
    }

    async fn create_invitation(ctx: &Context, email: String) -> Result<ID> {
        check_admin(ctx).await?;
        let mut errors = Vec::new();
        validate_email("email", &email, &mut errors);
        CoreError::check(errors)?;
        let invitation: Invitation = ctx.locator.auth().create_invitation(&email).await?;
        Ok(invitation.id)
    }

    async fn delete_invitation(ctx: &Context, id: ID) -> Result<ID> {
        check_admin(ctx).await?;
        ctx.locator.auth().delete_invitation(id.as_rowid()?).await?;
        Ok(id)
    }

    async fn update_user_active(ctx: &Context, id: ID, active: bool) -> Result<bool> {
        let admin = check_admin(ctx).await?;
        ctx.locator
            .auth()
            .update_user_active(admin.id.as_rowid()?, id.as_rowid()?, active)
            .await?;
        Ok(true)
    }

    async fn update_user_role(ctx: &Context, id: ID, is_admin: bool) -> Result<bool> {
        let admin = check_admin(ctx).await?;
        ctx.locator
            .auth()
            .update_user_role(admin.id.as_rowid()?, id.as_rowid()?, is_admin)
            .await?;
        Ok(true)
    }

    /// Users rename themselves; admins may rename anyone.
    async fn update_user_name(ctx: &Context, id: ID, name: String) -> Result<bool> {
        let user = check_user(ctx).await?;
        if user.id != id && !user.is_admin {
            return Err(CoreError::Forbidden("You can only change your own name"));
        }
        let mut errors = Vec::new();
        validate_name("name", &name, &mut errors);
        CoreError::check(errors)?;
        ctx.locator
            .auth()
            .update_user_name(id.as_rowid()?, name.trim())
            .await?;
        Ok(true)
    }

    async fn reset_registration_token(ctx: &Context) -> Result<String> {
        check_admin(ctx).await?;
        ctx.locator.auth().reset_registration_token().await
    }

    /// Self sign-up for an address of an allowed domain: the invitation is mailed (its code
    /// is not in the answer).
    async fn request_invitation_email(
        ctx: &Context,
        input: RequestInvitationInput,
    ) -> Result<Invitation> {
        let mut errors = Vec::new();
        validate_email("email", input.email.trim(), &mut errors);
        CoreError::check(errors)?;
        ctx.locator
            .auth()
            .request_invitation_email(input.email.trim(), ctx.client)
            .await
    }

    /// Mails a reset link when the account exists; `true` either way.
    async fn request_password_reset_email(
        ctx: &Context,
        input: RequestPasswordResetEmailInput,
    ) -> Result<bool> {
        let mut errors = Vec::new();
        validate_email("email", input.email.trim(), &mut errors);
        CoreError::check(errors)?;
        ctx.locator
            .auth()
            .request_password_reset_email(input.email.trim(), ctx.client)
            .await?;
        Ok(true)
    }

    async fn password_reset(ctx: &Context, input: PasswordResetInput) -> Result<bool> {
        input.validate()?;
        ctx.locator
            .auth()
            .password_reset(&input, ctx.client)
            .await?;
        Ok(true)
    }

    /// A reset link for another user, to hand over when mail is not set up (admin).
    async fn generate_reset_password_url(ctx: &Context, user_id: ID) -> Result<String> {
        let admin = check_admin(ctx).await?;
        ctx.locator
            .auth()
            .generate_reset_password_url(admin.id.as_rowid()?, user_id.as_rowid()?)
            .await
    }

    /// Signs in through the LDAP directory; `userId` is what the user filter's `%s` matches.
    async fn token_auth_ldap(
        ctx: &Context,
        user_id: String,
        password: String,
    ) -> Result<TokenAuthResponse> {
        ctx.locator
            .ldap()
            .token_auth_ldap(&user_id, &password, ctx.client)
            .await
    }

    async fn update_oauth_credential(
        ctx: &Context,
        input: UpdateOAuthCredentialInput,
    ) -> Result<bool> {
        check_admin(ctx).await?;
        let url = input.validate()?;
        ctx.locator
            .oauth()
            .update_credential(&input, url.as_deref())
            .await?;
        Ok(true)
    }

    async fn delete_oauth_credential(ctx: &Context, provider: OAuthProvider) -> Result<bool> {
        check_admin(ctx).await?;
        ctx.locator.oauth().delete_credential(provider).await?;
        Ok(true)
    }

    /// Connects a GitHub or GitLab account or organisation by token; its repositories are
    /// listed by a background sync.
    async fn create_integration(ctx: &Context, input: CreateIntegrationInput) -> Result<ID> {
        check_admin(ctx).await?;
        let base = validate_integration(
            input.kind,
            &input.display_name,
            Some(&input.access_token),
            input.api_base.as_deref(),
        )?;
        ctx.locator
            .integration()
            .create(&input, base.as_deref())
            .await
    }

    async fn update_integration(ctx: &Context, input: UpdateIntegrationInput) -> Result<bool> {
        check_admin(ctx).await?;
        let base = validate_integration(
            input.kind,
            &input.display_name,
            input.access_token.as_deref(),
            input.api_base.as_deref(),
        )?;
        ctx.locator
            .integration()
            .update(&input, base.as_deref())
            .await?;
        Ok(true)
    }

    async fn delete_integration(ctx: &Context, id: ID, kind: IntegrationKind) -> Result<bool> {
        check_admin(ctx).await?;
        ctx.locator.integration().delete(&id, kind).await?;
        Ok(true)
    }

    /// Indexes a provided repository's code, issues and pull requests (`active: true`, at once
    /// and hourly), or stops and removes them from the index (`false`).
    async fn update_integrated_repository_active(
        ctx: &Context,
        id: ID,
        active: bool,
        refs: Option<Vec<String>>,
    ) -> Result<bool> {
        check_admin(ctx).await?;
        ctx.locator
            .integration()
            .update_repository_active(&id, active, refs)
            .await?;
        Ok(true)
    }

    async fn update_integrated_repository_refs(
        ctx: &Context,
        id: ID,
        refs: Vec<String>,
    ) -> Result<bool> {
        check_admin(ctx).await?;
        ctx.locator
            .integration()
            .update_repository_refs(&id, refs)
            .await?;
        Ok(true)
    }

    async fn update_ldap_credential(
        ctx: &Context,
        input: UpdateLdapCredentialInput,
    ) -> Result<bool> {
        check_admin(ctx).await?;
        input.validate()?;
        ctx.locator.ldap().update_credential(&input).await?;
        Ok(true)
    }

    async fn test_ldap_connection(ctx: &Context, input: UpdateLdapCredentialInput) -> Result<bool> {
        check_admin(ctx).await?;
        input.validate()?;
        ctx.locator.ldap().test_connection(&input).await?;
        Ok(true)
    }

    async fn delete_ldap_credential(ctx: &Context) -> Result<bool> {
        check_admin(ctx).await?;
        ctx.locator.ldap().delete_credential().await?;
        Ok(true)
    }

    async fn update_email_setting(ctx: &Context, input: EmailSettingInput) -> Result<bool> {
        check_admin(ctx).await?;
        input.validate()?;
        ctx.locator.email().update_setting(input).await?;
        Ok(true)
    }

    async fn delete_email_setting(ctx: &Context) -> Result<bool> {
        check_admin(ctx).await?;
        ctx.locator.email().delete_setting().await?;
        Ok(true)
    }

    /// Sends a test mail with the stored settings and waits for the SMTP server's answer.
    async fn send_test_email(ctx: &Context, to: String) -> Result<bool> {
        check_admin(ctx).await?;
        let mut errors = Vec::new();
        validate_email("to", to.trim(), &mut errors);
        CoreError::check(errors)?;
        ctx.locator.email().send_test_email(to.trim()).await?;
        Ok(true)
    }

    async fn update_security_setting(ctx: &Context, input: SecuritySettingInput) -> Result<bool> {
        check_admin(ctx).await?;
        ctx.locator.setting().update_security_setting(input).await?;
        Ok(true)
    }

    /// The external URL mails link to.
    async fn update_network_setting(ctx: &Context, input: NetworkSettingInput) -> Result<bool> {
        check_admin(ctx).await?;
        let url = input.validated_url()?;
        ctx.locator.setting().update_network_setting(&url).await?;
        Ok(true)
    }

    async fn create_user_group(ctx: &Context, input: CreateUserGroupInput) -> Result<ID> {
        check_admin(ctx).await?;
        input.validate()?;
        ctx.locator.user_group().create(&input).await
    }

    async fn delete_user_group(ctx: &Context, id: ID) -> Result<bool> {
        check_admin(ctx).await?;
        ctx.locator.user_group().delete(id.as_rowid()?).await?;
        Ok(true)
    }

    /// Admins may change any membership; a group admin may add or change non-admin members
    /// of their group but not grant group admin.
    async fn upsert_user_group_membership(
        ctx: &Context,
        input: UpsertUserGroupMembershipInput,
    ) -> Result<bool> {
        let user = check_user(ctx).await?;
        let group = input.user_group_id.as_rowid()?;
        let member = input.user_id.as_rowid()?;
        let groups = ctx.locator.user_group();
        if !user.is_admin {
            check_membership_change(MembershipChange {
                caller_is_admin: false,
                caller_is_group_admin: groups.is_group_admin(user.id.as_rowid()?, group).await?,
                member_is_group_admin: groups.is_group_admin(member, group).await?,
                upsert: Some(input.is_group_admin),
            })?;
        }
        groups
            .upsert_membership(group, member, input.is_group_admin)
            .await?;
        Ok(true)
    }

    async fn delete_user_group_membership(
        ctx: &Context,
        user_group_id: ID,
        user_id: ID,
    ) -> Result<bool> {
        let user = check_user(ctx).await?;
        let group = user_group_id.as_rowid()?;
        let member = user_id.as_rowid()?;
        let groups = ctx.locator.user_group();
        if !user.is_admin {
            check_membership_change(MembershipChange {
                caller_is_admin: false,
                caller_is_group_admin: groups.is_group_admin(user.id.as_rowid()?, group).await?,
                member_is_group_admin: groups.is_group_admin(member, group).await?,
                upsert: None,
            })?;
        }
        groups.delete_membership(group, member).await?;
        Ok(true)
    }

    async fn grant_source_id_read_access(
        ctx: &Context,
        source_id: String,
        user_group_id: ID,
    ) -> Result<bool> {
        check_admin(ctx).await?;
        if source_id.trim().is_empty() {
            return Err(CoreError::invalid("sourceId", "sourceId must not be empty"));
        }
        ctx.locator
            .access_policy()
            .grant_read_access(&source_id, user_group_id.as_rowid()?)
            .await?;
        Ok(true)
    }

    /// Revokes a group's read access. A source's last grant is revoked only with
    /// `makePublic: true`, since a source without grants is readable by every user.
    async fn revoke_source_id_read_access(
        ctx: &Context,
        source_id: String,
        user_group_id: ID,
        make_public: Option<bool>,
    ) -> Result<bool> {
        check_admin(ctx).await?;
        ctx.locator
            .access_policy()
            .revoke_read_access(
                &source_id,
                user_group_id.as_rowid()?,
                make_public.unwrap_or(false),
            )
            .await?;
        Ok(true)
    }

    /// Adds a repository. With `userGroupIds`, only those groups' members (and admins) may
    /// read it, from the moment it exists.
    async fn create_git_repository(
        ctx: &Context,
        name: String,
        git_url: String,
        refs: Option<Vec<String>>,
        user_group_ids: Option<Vec<ID>>,
    ) -> Result<ID> {
        check_admin(ctx).await?;
        validate_repository_name(&name)?;
        validate_git_url(&git_url)?;
        let groups = rowids(user_group_ids)?;
        ctx.locator
            .repository()
            .create_git(&name, git_url.trim(), refs.unwrap_or_default(), groups)
            .await
    }

    async fn update_git_repository(
        ctx: &Context,
        id: ID,
        refs: Option<Vec<String>>,
    ) -> Result<bool> {
        check_admin(ctx).await?;
        ctx.locator
            .repository()
            .update_git(id.as_rowid()?, refs.unwrap_or_default())
            .await?;
        Ok(true)
    }

    /// Keeps a thread (ephemeral threads are removed after 7 idle days).
    async fn set_thread_persisted(ctx: &Context, thread_id: ID) -> Result<bool> {
        let id = Mutation::thread_user(ctx, &thread_id).await?;
        ctx.locator.thread().set_persisted(id).await?;
        Ok(true)
    }

    async fn delete_thread(ctx: &Context, id: ID) -> Result<bool> {
        let id = Mutation::thread_user(ctx, &id).await?;
        ctx.locator.thread().delete(id).await?;
        Ok(true)
    }

    async fn delete_thread_message_pair(
        ctx: &Context,
        thread_id: ID,
        user_message_id: ID,
        assistant_message_id: ID,
    ) -> Result<bool> {
        let id = Mutation::thread_user(ctx, &thread_id).await?;
        ctx.locator
            .thread()
            .delete_message_pair(
                id,
                user_message_id.as_rowid()?,
                assistant_message_id.as_rowid()?,
            )
            .await?;
        Ok(true)
    }

    async fn update_thread_message(ctx: &Context, input: UpdateMessageInput) -> Result<bool> {
        let id = Mutation::thread_user(ctx, &input.thread_id).await?;
        if input.content.trim().is_empty() {
            return Err(CoreError::invalid(
                "content",
                "Message content must not be empty",
            ));
        }
        ctx.locator
            .thread()
            .update_message(id, input.id.as_rowid()?, &input.content)
            .await?;
        Ok(true)
    }

    /// Enqueues a job; `command` is a serialized job event (e.g. `"Hourly"`). An identical
    /// pending run is reused. Returns the run's id.
    async fn trigger_job_run(ctx: &Context, command: String) -> Result<ID> {
        check_admin(ctx).await?;
        ctx.locator.job().trigger(&command).await
    }

    /// Adds a site to crawl into the doc corpus (crawled right away, then daily).
    async fn create_custom_document(ctx: &Context, input: CreateCustomDocumentInput) -> Result<ID> {
        check_admin(ctx).await?;
        input.validate()?;
        ctx.locator.job().create_web_document(&input).await
    }

    async fn delete_custom_document(ctx: &Context, id: ID) -> Result<bool> {
        check_admin(ctx).await?;
        ctx.locator
            .job()
            .delete_web_document(id.as_rowid()?)
            .await?;
        Ok(true)
    }

    /// Marks one notification, or all of them, as read.
    async fn mark_notifications_read(ctx: &Context, notification_id: Option<ID>) -> Result<bool> {
        let user = check_user(ctx).await?;
        let id = notification_id.map(|id| id.as_rowid()).transpose()?;
        ctx.locator
            .job()
            .mark_notifications_read(user.id.as_rowid()?, user.is_admin, id)
            .await?;
        Ok(true)
    }

    async fn delete_git_repository(ctx: &Context, id: ID) -> Result<bool> {
        check_admin(ctx).await?;
        ctx.locator.repository().delete_git(id.as_rowid()?).await?;
        Ok(true)
    }
}

impl Mutation {
    async fn thread_user(ctx: &Context, thread_id: &ID) -> Result<i64> {
        let user = check_user(ctx).await?;
        let thread_id = thread_id.as_rowid()?;
        check_thread_owner(ctx, &user, thread_id).await?;
        Ok(thread_id)
    }
}

type PingStream = Pin<Box<dyn Stream<Item = Result<i32, FieldError>> + Send>>;

pub struct Subscription;

#[graphql_subscription(context = Context)]
impl Subscription {
    /// Counts from 1 to `count` (at most 100), one number every 100 ms: a liveness check of
    /// the subscription transport and its authentication. The Answer Engine's thread runs
    /// will stream here too.
    async fn ping(ctx: &Context, #[graphql(default = 3)] count: i32) -> Result<PingStream> {
        check_user_allow_auth_token(ctx).await?;
        if !(1..=100).contains(&count) {
            return Err(CoreError::invalid(
                "count",
                "count must be between 1 and 100",
            ));
        }
        let stream = futures::stream::unfold(0, move |n| async move {
            if n >= count {
                return None;
            }
            if n > 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Some((Ok(n + 1), n + 1))
        });
        Ok(Box::pin(stream))
    }

    /// Creates a thread from its first message and streams the answer.
    async fn create_thread_and_run(
        ctx: &Context,
        input: CreateThreadAndRunInput,
    ) -> Result<ThreadRunStream> {
        let user = check_user_allow_auth_token(ctx).await?;
        let user_id = user.id.as_rowid()?;
        let policy = ctx.locator.access_policy().policy_for(user_id).await?;
        ctx.locator
            .thread()
            .create_thread_and_run(user_id, policy, input)
            .await
    }

    /// Adds a message to one of the caller's threads and streams the answer.
    async fn create_thread_run(
        ctx: &Context,
        input: CreateThreadRunInput,
    ) -> Result<ThreadRunStream> {
        let user = check_user_allow_auth_token(ctx).await?;
        let user_id = user.id.as_rowid()?;
        let policy = ctx.locator.access_policy().policy_for(user_id).await?;
        ctx.locator
            .thread()
            .create_thread_run(user_id, policy, input)
            .await
    }
}

pub type Schema = RootNode<Query, Mutation, Subscription>;

pub fn create_schema() -> Schema {
    Schema::new(Query, Mutation, Subscription)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The schema's SDL keeps upstream's names for the fields this layer serves.
    #[test]
    fn schema_names_match_upstream() {
        let sdl = create_schema().as_sdl();
        for name in [
            "registrationToken: String!",
            "me: UserSecured!",
            "serverInfo: ServerInfo!",
            "repositoryList: [Repository!]!",
            "userGroups: [UserGroup!]!",
            "sourceIdAccessPolicies(sourceId: String!): SourceIdAccessPolicy!",
            "refreshExpiresAt: DateTime!",
            "isAdminInitialized: Boolean!",
            // Upstream's arguments come first; ours after them are optional.
            "createGitRepository(name: String!, gitUrl: String!, refs: [String!], userGroupIds: [ID!]): ID!",
            "revokeSourceIdReadAccess(sourceId: String!, userGroupId: ID!, makePublic: Boolean): Boolean!",
            "grantSourceIdReadAccess(sourceId: String!, userGroupId: ID!): Boolean!",
            "hasPreviousPage: Boolean!",
            "dailyStats(start: DateTime!, end: DateTime!, users: [ID!], languages: [Language!]): [CompletionStats!]!",
            "emailSetting: EmailSetting",
            "securitySetting: SecuritySetting!",
            "updateEmailSetting(input: EmailSettingInput!): Boolean!",
            "deleteEmailSetting: Boolean!",
            "sendTestEmail(to: String!): Boolean!",
            "updateSecuritySetting(input: SecuritySettingInput!): Boolean!",
            "requestInvitationEmail(input: RequestInvitationInput!): Invitation!",
            "requestPasswordResetEmail(input: RequestPasswordResetEmailInput!): Boolean!",
            "passwordReset(input: PasswordResetInput!): Boolean!",
            "generateResetPasswordUrl(userId: ID!): String!",
            "START_TLS",
            "SSL_TLS",
            "allowedRegisterDomainList: [String!]!",
            "networkSetting: NetworkSetting!",
            "authProviders: [AuthProvider!]!",
            "ldapCredential: LdapCredential",
            "tokenAuthLdap(userId: String!, password: String!): TokenAuthResponse!",
            "testLdapConnection(input: UpdateLdapCredentialInput!): Boolean!",
            "updateLdapCredential(input: UpdateLdapCredentialInput!): Boolean!",
            "deleteLdapCredential: Boolean!",
            "oauthCredential(provider: OAuthProvider!): OAuthCredential",
            "oauthCallbackUrl(provider: OAuthProvider!): String!",
            "updateOauthCredential(input: UpdateOAuthCredentialInput!): Boolean!",
            "deleteOauthCredential(provider: OAuthProvider!): Boolean!",
            "createIntegration(input: CreateIntegrationInput!): ID!",
            "updateIntegration(input: UpdateIntegrationInput!): Boolean!",
            "deleteIntegration(id: ID!, kind: IntegrationKind!): Boolean!",
            "GITHUB_SELF_HOSTED",
            "repositoryGrep(kind: RepositoryKind!, id: ID!, rev: String, query: String!): RepositoryGrepOutput!",
            "repositorySearch(kind: RepositoryKind!, id: ID!, rev: String, pattern: String!): [FileEntrySearchResult!]!",
            "OAUTH_GITHUB",
            "updateNetworkSetting(input: NetworkSettingInput!): Boolean!",
        ] {
            assert!(sdl.contains(name), "schema lacks `{name}`:\n{sdl}");
        }
    }
}
