//! The implementations of `tabby-schema`'s service traits, and the locator that hands them to
//! the GraphQL resolvers.

pub mod answer;
pub mod auth;
pub mod ingestion;
pub mod repository;
pub mod thread;
pub mod usage;
pub mod user_group;

use std::sync::Arc;

use async_trait::async_trait;
use tabby_db::DbConn;
use tabby_schema::{
    Result, ServiceLocator,
    auth::AuthenticationService,
    repository::RepositoryService,
    setting::{ServerInfo, SettingService},
    thread::ThreadService,
    usage::UsageService,
    user_group::{AccessPolicyService, UserGroupService},
};

pub struct Services {
    pub auth: Arc<auth::AuthServiceImpl>,
    pub user_group: Arc<user_group::UserGroupServiceImpl>,
    pub repository: Arc<repository::RepositoryServiceImpl>,
    pub usage: Arc<usage::UsageServiceImpl>,
    pub setting: Arc<SettingServiceImpl>,
    pub thread: Arc<thread::ThreadServiceImpl>,
    pub job: Arc<crate::job::JobService>,
    pub ingestion: ingestion::IngestionService,
}

impl ServiceLocator for Services {
    fn auth(&self) -> Arc<dyn AuthenticationService> {
        self.auth.clone()
    }
    fn user_group(&self) -> Arc<dyn UserGroupService> {
        self.user_group.clone()
    }
    fn access_policy(&self) -> Arc<dyn AccessPolicyService> {
        self.user_group.clone()
    }
    fn repository(&self) -> Arc<dyn RepositoryService> {
        self.repository.clone()
    }
    fn usage(&self) -> Arc<dyn UsageService> {
        self.usage.clone()
    }
    fn setting(&self) -> Arc<dyn SettingService> {
        self.setting.clone()
    }
    fn thread(&self) -> Arc<dyn ThreadService> {
        self.thread.clone()
    }
    fn job(&self) -> Arc<dyn tabby_schema::job::JobService> {
        self.job.clone()
    }
}

pub struct SettingServiceImpl {
    pub db: DbConn,
    /// Set when a chat model is available (the Answer Engine is on).
    pub is_chat_enabled: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl SettingService for SettingServiceImpl {
    async fn server_info(&self) -> Result<ServerInfo> {
        let setting = self.db.read_server_setting().await?;
        Ok(ServerInfo {
            is_admin_initialized: self.db.get_user(tabby_db::OWNER_USER_ID).await?.is_some(),
            is_chat_enabled: self
                .is_chat_enabled
                .load(std::sync::atomic::Ordering::Relaxed),
            is_email_configured: false,
            allow_self_signup: !setting.allowed_register_domains().is_empty(),
            disable_password_login: setting.security_disable_password_login,
            is_demo_mode: false,
        })
    }
}
