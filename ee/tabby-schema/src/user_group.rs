//! Groups of users, and which groups may read which source.

use std::sync::LazyLock;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use juniper::{GraphQLInputObject, GraphQLObject, ID};
use regex::Regex;

use crate::{CoreError, Result, auth::User, policy::AccessPolicy};

#[derive(Clone, Debug, GraphQLObject)]
pub struct UserGroupMembership {
    pub user: User,
    pub is_group_admin: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct UserGroup {
    pub id: ID,
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub members: Vec<UserGroupMembership>,
}

#[derive(Clone, Debug, GraphQLInputObject)]
pub struct CreateUserGroupInput {
    pub name: String,
}

static GROUP_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z][a-z0-9_-]*$").expect("valid regex"));

impl CreateUserGroupInput {
    pub fn validate(&self) -> Result<()> {
        if self.name.len() > 64 {
            return Err(CoreError::invalid(
                "name",
                "Name must be at most 64 characters",
            ));
        }
        if !GROUP_NAME.is_match(&self.name) {
            return Err(CoreError::invalid(
                "name",
                "Name must start with a lowercase letter and contain only lowercase letters, \
                 digits, '_' and '-'",
            ));
        }
        Ok(())
    }
}

#[derive(Clone, Debug, GraphQLInputObject)]
pub struct UpsertUserGroupMembershipInput {
    pub user_group_id: ID,
    pub user_id: ID,
    pub is_group_admin: bool,
}

/// `{sourceId, read}`: the groups allowed to read a source (empty: everyone may).
#[derive(Clone, Debug, GraphQLObject)]
pub struct SourceIdAccessPolicy {
    pub source_id: String,
    pub read: Vec<UserGroup>,
}

#[async_trait]
pub trait UserGroupService: Send + Sync {
    async fn list(&self) -> Result<Vec<UserGroup>>;
    async fn create(&self, input: &CreateUserGroupInput) -> Result<ID>;
    async fn delete(&self, id: i64) -> Result<()>;
    /// Whether `user_id` administers the group `group_id`.
    async fn is_group_admin(&self, user_id: i64, group_id: i64) -> Result<bool>;
    async fn upsert_membership(
        &self,
        group_id: i64,
        user_id: i64,
        is_group_admin: bool,
    ) -> Result<()>;
    async fn delete_membership(&self, group_id: i64, user_id: i64) -> Result<()>;
}

#[async_trait]
pub trait AccessPolicyService: Send + Sync {
    /// The groups granted read access to `source_id`.
    async fn list_read_access(&self, source_id: &str) -> Result<Vec<UserGroup>>;
    async fn grant_read_access(&self, source_id: &str, group_id: i64) -> Result<()>;
    /// Refuses to revoke the source's last grant unless `make_public`.
    async fn revoke_read_access(
        &self,
        source_id: &str,
        group_id: i64,
        make_public: bool,
    ) -> Result<()>;
    /// What the user may read, resolved once per request.
    async fn policy_for(&self, user_id: i64) -> Result<AccessPolicy>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_names_follow_upstream_rule() {
        for ok in ["eng", "team-a", "a_1"] {
            assert!(
                CreateUserGroupInput { name: ok.into() }.validate().is_ok(),
                "{ok}"
            );
        }
        for bad in ["", "Eng", "1team", "team a", "-x", &"a".repeat(65)] {
            assert!(
                CreateUserGroupInput { name: bad.into() }
                    .validate()
                    .is_err(),
                "{bad}"
            );
        }
    }
}
