//! [`AccessPolicy`]: which sources one user may read.
//!
//! Semantics follow upstream Tabby: a source with no read-access rows is public; a source with
//! rows may be read only by members of one of the granted groups; admins read everything.
//! Threads and the answers in them follow the same policy, for every reader.

use std::collections::HashSet;

use tabby_common::api::code::AllowedCodeRepository;

use crate::{CoreError, Result};

/// A change to one membership of a group, as [`check_membership_change`] judges it.
#[derive(Clone, Copy, Debug)]
pub struct MembershipChange {
    pub caller_is_admin: bool,
    pub caller_is_group_admin: bool,
    /// Whether the member is a group admin of the group now.
    pub member_is_group_admin: bool,
    /// `Some(is_group_admin)` to add or update the membership, `None` to remove it.
    pub upsert: Option<bool>,
}

/// Admins change any membership; a group admin adds, updates and removes the group's
/// non-admin members and never makes anyone a group admin; nobody else changes memberships.
pub fn check_membership_change(change: MembershipChange) -> Result<()> {
    if change.caller_is_admin {
        return Ok(());
    }
    match change.upsert {
        _ if !change.caller_is_group_admin => Err(CoreError::Forbidden(
            "You must be admin or a group admin to change its members",
        )),
        Some(makes_group_admin) if makes_group_admin || change.member_is_group_admin => Err(
            CoreError::Forbidden("Only admins can grant or change group admin membership"),
        ),
        None if change.member_is_group_admin => Err(CoreError::Forbidden(
            "You must be admin or a group admin to remove non-admin members",
        )),
        _ => Ok(()),
    }
}

/// What [`AccessPolicy::can_read_answer`] needs to know about one Answer Engine message.
#[derive(Clone, Copy, Debug)]
pub struct AnswerSources<'a> {
    pub thread_owner: i64,
    pub code_source: Option<&'a str>,
    /// `None`: not recorded (rows written before sources were).
    pub recorded: Option<&'a [String]>,
    pub has_docs: bool,
}

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

    /// Admins read any thread; others read their own and shared (non-ephemeral) ones.
    pub fn can_read_thread(&self, owner: i64, is_ephemeral: bool) -> bool {
        self.is_admin || owner == self.user_id || !is_ephemeral
    }

    /// Only a thread's owner changes it (admins too).
    pub fn can_change_thread(&self, owner: i64) -> bool {
        self.is_admin || owner == self.user_id
    }

    /// Whether this reader may see an answer (its text and attachments) drawn from the
    /// recorded `sources` and the `code_source`: only when they may read every one of them,
    /// because the text may quote any. Rows from before sources were recorded name only their
    /// code source; their documents' sources are unknown, so only the thread's owner (who asked
    /// with their own access) and admins see an answer of such a row that holds documents.
    pub fn can_read_answer(&self, answer: &AnswerSources<'_>) -> bool {
        if self.is_admin {
            return true;
        }
        if answer.code_source.is_some_and(|s| !self.can_read(s)) {
            return false;
        }
        match answer.recorded {
            Some(sources) => sources.iter().all(|s| self.can_read(s)),
            None => !answer.has_docs || answer.thread_owner == self.user_id,
        }
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

    #[test]
    fn an_answer_is_read_only_with_access_to_every_source_it_drew_on() {
        let reader = AccessPolicy {
            user_id: 2,
            is_admin: false,
            restricted: ["private".to_string(), "team".to_string()].into(),
            granted: ["team".to_string()].into(),
        };
        fn sources<'a>(
            code: Option<&'a str>,
            recorded: Option<&'a [String]>,
            has_docs: bool,
        ) -> AnswerSources<'a> {
            AnswerSources {
                thread_owner: 1,
                code_source: code,
                recorded,
                has_docs,
            }
        }
        let team = &["team".to_string(), "public".to_string()][..];
        let private = &["public".to_string(), "private".to_string()][..];

        assert!(reader.can_read_answer(&sources(Some("team"), Some(team), true)));
        assert!(!reader.can_read_answer(&sources(Some("private"), None, false)));
        assert!(!reader.can_read_answer(&sources(None, Some(private), true)));
        // Unrecorded document sources: only the owner (and admins) see such an answer.
        assert!(reader.can_read_answer(&sources(Some("public"), None, false)));
        assert!(!reader.can_read_answer(&sources(Some("public"), None, true)));
        let owner = AccessPolicy {
            user_id: 1,
            ..reader.clone()
        };
        assert!(owner.can_read_answer(&sources(Some("public"), None, true)));
        assert!(!owner.can_read_answer(&sources(None, Some(private), true)));
        let admin = AccessPolicy {
            is_admin: true,
            ..reader.clone()
        };
        assert!(admin.can_read_answer(&sources(Some("private"), Some(private), true)));

        assert!(reader.can_read_thread(1, false));
        assert!(!reader.can_read_thread(1, true));
        assert!(reader.can_read_thread(2, true));
        assert!(!reader.can_change_thread(1));
        assert!(admin.can_change_thread(1));
    }

    #[test]
    fn who_changes_group_memberships() {
        let change = |caller_is_admin, caller_is_group_admin, member_is_group_admin, upsert| {
            check_membership_change(MembershipChange {
                caller_is_admin,
                caller_is_group_admin,
                member_is_group_admin,
                upsert,
            })
            .is_ok()
        };
        // Admins: anything.
        assert!(change(true, false, true, Some(true)));
        assert!(change(true, false, true, None));
        // Group admins: non-admin members only, never granting group admin.
        assert!(change(false, true, false, Some(false)));
        assert!(change(false, true, false, None));
        assert!(!change(false, true, false, Some(true)));
        assert!(!change(false, true, true, Some(false)));
        assert!(!change(false, true, true, None));
        // Members: nothing.
        assert!(!change(false, false, false, Some(false)));
        assert!(!change(false, false, false, None));
    }
}
