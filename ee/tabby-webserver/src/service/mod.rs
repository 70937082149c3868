//! The implementations of `tabby-schema`'s service traits, and the locator that hands them to
//! the GraphQL resolvers.

pub mod answer;
mod answer_docs;
pub mod auth;
pub mod ingestion;
pub mod repository;
pub mod setting;
pub mod thread;
pub mod usage;
pub mod user_group;

use std::sync::Arc;

use tabby_schema::{
    ServiceLocator,
    auth::AuthenticationService,
    email::EmailService,
    integration::IntegrationService,
    ldap::LdapService,
    oauth::OAuthService,
    repository::RepositoryService,
    setting::SettingService,
    thread::ThreadService,
    usage::UsageService,
    user_group::{AccessPolicyService, UserGroupService},
};

pub struct Services {
    pub auth: Arc<auth::AuthServiceImpl>,
    pub user_group: Arc<user_group::UserGroupServiceImpl>,
    pub repository: Arc<repository::RepositoryServiceImpl>,
    pub usage: Arc<usage::UsageServiceImpl>,
    pub setting: Arc<setting::SettingServiceImpl>,
    pub mailer: Arc<crate::mail::Mailer>,
    pub ldap: Arc<crate::ldap::LdapServiceImpl>,
    pub oauth: Arc<crate::oauth::OAuthServiceImpl>,
    pub integration: Arc<crate::integration::IntegrationServiceImpl>,
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
    fn email(&self) -> Arc<dyn EmailService> {
        self.mailer.clone()
    }
    fn ldap(&self) -> Arc<dyn LdapService> {
        self.ldap.clone()
    }
    fn oauth(&self) -> Arc<dyn OAuthService> {
        self.oauth.clone()
    }
    fn integration(&self) -> Arc<dyn IntegrationService> {
        self.integration.clone()
    }
}
