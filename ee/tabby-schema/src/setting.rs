//! Server-wide facts the sign-in page needs before anyone is signed in.

use async_trait::async_trait;
use juniper::GraphQLObject;

use crate::Result;

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

#[async_trait]
pub trait SettingService: Send + Sync {
    async fn server_info(&self) -> Result<ServerInfo>;
}
