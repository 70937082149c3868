//! [`AccessPolicy`]: which sources one user may read.
//!
//! Semantics follow upstream Tabby: a source with no read-access rows is public; a source with
//! rows may be read only by members of one of the granted groups; admins read everything.

use std::collections::HashSet;

use tabby_common::api::code::AllowedCodeRepository;

#[derive(Clone, Debug, Default)]
pub struct AccessPolicy {
    pub user_id: i64,
    pub is_admin: bool,
    /// Sources that have at least one read-access row.
    pub restricted: HashSet<String>,
    /// Restricted sources this user may read through a group.
    pub granted: HashSet<String>,
}

impl AccessPolicy {
    pub fn can_read(&self, source_id: &str) -> bool {
        self.is_admin || !self.restricted.contains(source_id) || self.granted.contains(source_id)
    }

    /// The repositories of `all` this user may read.
    pub fn filter_repositories(&self, all: &AllowedCodeRepository) -> AllowedCodeRepository {
        AllowedCodeRepository {
            list: all
                .list
                .iter()
                .filter(|repo| self.can_read(&repo.source_id))
                .cloned()
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use tabby_common::api::code::CodeRepository;

    use super::*;

    #[test]
    fn public_restricted_granted_and_admin() {
        let policy = AccessPolicy {
            user_id: 2,
            is_admin: false,
            restricted: ["private".to_string(), "team".to_string()].into(),
            granted: ["team".to_string()].into(),
        };
        assert!(policy.can_read("public"));
        assert!(policy.can_read("team"));
        assert!(!policy.can_read("private"));
        let admin = AccessPolicy {
            is_admin: true,
            ..policy.clone()
        };
        assert!(admin.can_read("private"));

        let all = AllowedCodeRepository {
            list: ["public", "private", "team"]
                .map(|id| CodeRepository {
                    git_url: format!("https://example.com/{id}"),
                    source_id: id.to_string(),
                })
                .to_vec(),
        };
        let visible: Vec<_> = policy
            .filter_repositories(&all)
            .list
            .into_iter()
            .map(|r| r.source_id)
            .collect();
        assert_eq!(visible, ["public", "team"]);
    }
}
