//! [`UserGroupService`] and [`AccessPolicyService`] over SQLite.

use std::{collections::HashMap, sync::Arc};

use async_trait::async_trait;
use juniper::ID;
use tabby_db::{DbConn, DbError, Pagination, Revoked, UserGroupDAO};
use tabby_schema::{
    AccessPolicy, AsID, CoreError, Result,
    auth::User,
    user_group::{
        AccessPolicyService, CreateUserGroupInput, UserGroup, UserGroupMembership, UserGroupService,
    },
};

use super::auth::user_public;
use crate::directory::Directory;

pub struct UserGroupServiceImpl {
    db: DbConn,
    directory: Arc<Directory>,
}

impl UserGroupServiceImpl {
    pub fn new(db: DbConn, directory: Arc<Directory>) -> Self {
        Self { db, directory }
    }

    async fn group(&self, dao: UserGroupDAO, users: &HashMap<i64, User>) -> Result<UserGroup> {
        let members = self
            .db
            .list_user_group_memberships(dao.id)
            .await?
            .into_iter()
            .filter_map(|m| {
                Some(UserGroupMembership {
                    user: users.get(&m.user_id)?.clone(),
                    is_group_admin: m.is_group_admin,
                    created_at: m.created_at,
                    updated_at: m.updated_at,
                })
            })
            .collect();
        Ok(UserGroup {
            id: dao.id.as_id(),
            name: dao.name,
            created_at: dao.created_at,
            updated_at: dao.updated_at,
            members,
        })
    }

    async fn users_by_id(&self) -> Result<HashMap<i64, User>> {
        Ok(self
            .db
            .list_users(&[], Pagination::all())
            .await?
            .into_iter()
            .map(|u| (u.id, user_public(u)))
            .collect())
    }

    async fn groups(&self, daos: Vec<UserGroupDAO>) -> Result<Vec<UserGroup>> {
        let users = self.users_by_id().await?;
        let mut groups = Vec::with_capacity(daos.len());
        for dao in daos {
            groups.push(self.group(dao, &users).await?);
        }
        Ok(groups)
    }

    async fn require_group(&self, id: i64) -> Result<()> {
        self.db
            .get_user_group(id)
            .await?
            .map(|_| ())
            .ok_or(CoreError::NotFound("User group not found"))
    }
}

#[async_trait]
impl UserGroupService for UserGroupServiceImpl {
    async fn list(&self) -> Result<Vec<UserGroup>> {
        let daos = self.db.list_user_groups().await?;
        self.groups(daos).await
    }

    async fn create(&self, input: &CreateUserGroupInput) -> Result<ID> {
        let id = self
            .db
            .create_user_group(&input.name)
            .await
            .map_err(|e| match e {
                DbError::AlreadyExists { .. } => {
                    CoreError::invalid("name", "A user group with this name already exists")
                }
                other => other.into(),
            })?;
        Ok(id.as_id())
    }

    /// Refuses to delete the only group granted read access to a source: the grant rows would
    /// go with it and the source would silently become public (upstream fails open here).
    async fn delete(&self, id: i64) -> Result<()> {
        let mut grants: HashMap<String, Vec<i64>> = HashMap::new();
        for (source, group) in self.db.list_source_id_read_access_policies().await? {
            grants.entry(source).or_default().push(group);
        }
        let mut sole: Vec<String> = grants
            .into_iter()
            .filter(|(_, groups)| groups.as_slice() == [id])
            .map(|(source, _)| source)
            .collect();
        if !sole.is_empty() {
            sole.sort();
            return Err(CoreError::Rejected(format!(
                "This group is the only one with read access to {}; deleting it would make \
                 them readable by everyone. Revoke its access or grant another group first.",
                sole.join(", ")
            )));
        }
        self.db
            .delete_user_group(id)
            .await
            .map_err(CoreError::not_found_as("User group not found"))?;
        self.directory.invalidate();
        Ok(())
    }

    async fn is_group_admin(&self, user_id: i64, group_id: i64) -> Result<bool> {
        Ok(self
            .db
            .list_user_group_memberships_of_user(user_id)
            .await?
            .iter()
            .any(|m| m.user_group_id == group_id && m.is_group_admin))
    }

    async fn upsert_membership(
        &self,
        group_id: i64,
        user_id: i64,
        is_group_admin: bool,
    ) -> Result<()> {
        self.require_group(group_id).await?;
        if self.db.get_user(user_id).await?.is_none() {
            return Err(CoreError::NotFound("User not found"));
        }
        self.db
            .upsert_user_group_membership(user_id, group_id, is_group_admin)
            .await?;
        self.directory.invalidate();
        Ok(())
    }

    async fn delete_membership(&self, group_id: i64, user_id: i64) -> Result<()> {
        self.db
            .delete_user_group_membership(user_id, group_id)
            .await
            .map_err(CoreError::not_found_as("User group membership not found"))?;
        self.directory.invalidate();
        Ok(())
    }
}

#[async_trait]
impl AccessPolicyService for UserGroupServiceImpl {
    async fn list_read_access(&self, source_id: &str) -> Result<Vec<UserGroup>> {
        let daos = self
            .db
            .list_source_id_read_access_user_groups(source_id)
            .await?;
        self.groups(daos).await
    }

    async fn grant_read_access(&self, source_id: &str, group_id: i64) -> Result<()> {
        self.require_group(group_id).await?;
        self.db
            .grant_source_id_read_access(source_id, group_id)
            .await?;
        self.directory.invalidate();
        Ok(())
    }

    async fn revoke_read_access(
        &self,
        source_id: &str,
        group_id: i64,
        make_public: bool,
    ) -> Result<()> {
        self.require_group(group_id).await?;
        match self
            .db
            .revoke_source_id_read_access(source_id, group_id, make_public)
            .await?
        {
            Revoked::LastGrant => Err(CoreError::Rejected(format!(
                "This group is the only one with read access to {source_id}; revoking it would \
                 make the source readable by everyone. Grant another group first, or pass \
                 makePublic: true."
            ))),
            Revoked::Removed | Revoked::NotGranted => {
                self.directory.invalidate();
                Ok(())
            }
        }
    }

    async fn policy_for(&self, user_id: i64) -> Result<AccessPolicy> {
        Ok(self.directory.snapshot().await?.policy_for(user_id))
    }
}
