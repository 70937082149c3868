//! An in-memory snapshot of what per-request authorization needs: users (active, admin),
//! auth tokens, group memberships, read-access grants and the repositories (config, added
//! through GraphQL, and the active ones provided by integrations).
//!
//! The REST layer consults it on every editor request, so a completion pays for a hash-map
//! lookup instead of several SQLite queries. Every service method that changes one of these
//! tables calls [`Directory::invalidate`]; the next request reloads the snapshot. A load that
//! raced with an invalidation is used once but not kept. Other processes on the same database
//! (replicas, the worker) learn of it through the `directory` change counter, which
//! `invalidate` bumps and [`Directory::follow_other_processes`] reads every second: a change
//! made through one process holds in every other within 2 s (a read of the counter, and the
//! counter bumped just after the change).

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc, RwLock, Weak,
        atomic::{AtomicI64, AtomicU64, Ordering},
    },
    time::Duration,
};

use sha2::{Digest, Sha256};
use tabby_common::{
    api::code::{AllowedCodeRepository, CodeRepository},
    config::SecurityConfig,
};
use tabby_db::{DbConn, Pagination, ProvidedRepositoryDAO, RepositoryDAO};
use tabby_schema::AccessPolicy;
use tracing::warn;

use crate::password::constant_time_eq;

/// A repository from `config.toml`.
#[derive(Clone, Debug)]
pub struct ConfigRepository {
    pub source_id: String,
    /// As written in the config (credentials and all); used to index.
    pub git_url: String,
    /// Canonical form, what clients match against.
    pub canonical_git_url: String,
    pub name: String,
    pub refs: Vec<String>,
}

/// The source id of a repository added through GraphQL.
pub fn git_source_id(rowid: i64) -> String {
    format!("git:{}", tabby_schema::encode_id(rowid))
}

/// The source id of a repository provided by a GitHub/GitLab integration (upstream's form).
pub fn provided_source_id(rowid: i64) -> String {
    format!("provided_repository:{}", tabby_schema::encode_id(rowid))
}

/// An active provided repository and its integration's kind.
#[derive(Clone, Debug)]
pub struct ProvidedEntry {
    pub repo: ProvidedRepositoryDAO,
    pub kind: tabby_schema::integration::IntegrationKind,
}

#[derive(Clone, Copy, Debug)]
pub struct UserEntry {
    pub active: bool,
    pub is_admin: bool,
}

pub struct Snapshot {
    pub users: HashMap<i64, UserEntry>,
    /// User → current session generation (absent: 0).
    session_epochs: HashMap<i64, i64>,
    tokens: HashMap<[u8; 32], (i64, String)>,
    /// Restricted source → groups granted read access.
    grants: HashMap<String, HashSet<i64>>,
    memberships: HashMap<i64, HashSet<i64>>,
    pub db_repositories: Vec<RepositoryDAO>,
    /// Active provided repositories (inactive ones are not context).
    pub provided_repositories: Vec<ProvidedEntry>,
    pub all_repositories: AllowedCodeRepository,
}

impl Snapshot {
    /// Whether an access token of `user_id` from session generation `epoch` is honoured.
    pub fn session_valid(&self, user_id: i64, epoch: i64) -> bool {
        self.users.get(&user_id).is_some_and(|u| u.active)
            && self.session_epochs.get(&user_id).copied().unwrap_or(0) == epoch
    }

    /// The active user owning `token`.
    pub fn user_by_auth_token(&self, token: &str) -> Option<i64> {
        let (user_id, stored) = self.tokens.get(&token_digest(token))?;
        (constant_time_eq(stored.as_bytes(), token.as_bytes())
            && self.users.get(user_id).is_some_and(|u| u.active))
        .then_some(*user_id)
    }

    pub fn policy_for(&self, user_id: i64) -> AccessPolicy {
        let is_admin = self.users.get(&user_id).is_some_and(|u| u.is_admin);
        let groups = self.memberships.get(&user_id);
        let granted = self
            .grants
            .iter()
            .filter(|(_, granted)| groups.is_some_and(|g| !g.is_disjoint(granted)))
            .map(|(source, _)| source.clone())
            .collect();
        AccessPolicy {
            user_id,
            is_admin,
            restricted: self.grants.keys().cloned().collect(),
            granted,
        }
    }
}

fn token_digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The change counter of what the snapshot holds.
const CHANGE_COUNTER: &str = "directory";
/// How often each process reads the counter.
const FOLLOW_INTERVAL: Duration = Duration::from_secs(1);
/// The counter not read yet.
const UNREAD: i64 = i64::MIN;

pub struct Directory {
    db: DbConn,
    config_repositories: Vec<ConfigRepository>,
    security: SecurityConfig,
    snapshot: RwLock<Option<Arc<Snapshot>>>,
    generation: AtomicU64,
    /// Bumped by every invalidation, so open WebSockets re-check their session at once.
    changes: tokio::sync::watch::Sender<u64>,
    /// One load at a time: after an invalidation every open WebSocket asks at once.
    load: tokio::sync::Mutex<()>,
    /// The change counter as this process last read it.
    counter: AtomicI64,
}

impl Directory {
    pub fn new(
        db: DbConn,
        config_repositories: Vec<ConfigRepository>,
        security: SecurityConfig,
    ) -> Self {
        Self {
            db,
            config_repositories,
            security,
            snapshot: RwLock::new(None),
            generation: AtomicU64::new(0),
            changes: tokio::sync::watch::Sender::new(0),
            load: tokio::sync::Mutex::new(()),
            counter: AtomicI64::new(UNREAD),
        }
    }

    /// Reads the change counter every second while the directory lives, and drops the
    /// snapshot when another process moved it.
    pub fn follow_other_processes(self: &Arc<Self>) {
        let directory: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            // The first read at once: before the server loads a snapshot to serve with.
            let mut first = true;
            loop {
                if !std::mem::take(&mut first) {
                    tokio::time::sleep(FOLLOW_INTERVAL).await;
                }
                let Some(directory) = directory.upgrade() else {
                    return;
                };
                match directory.db.change_counter(CHANGE_COUNTER).await {
                    Ok(value) => {
                        let last = directory.counter.swap(value, Ordering::SeqCst);
                        if last != UNREAD && last != value {
                            directory.drop_snapshot();
                        }
                    }
                    Err(e) => warn!("cannot read the directory's change counter: {e}"),
                }
            }
        });
    }

    pub fn config_repositories(&self) -> &[ConfigRepository] {
        &self.config_repositories
    }

    /// `[security]` of config.toml: the allow-lists for local repositories and fetches.
    pub fn security(&self) -> &SecurityConfig {
        &self.security
    }

    /// After a change to what the snapshot holds: the next request here reloads it, and the
    /// other processes on the database learn of it through the change counter.
    pub fn invalidate(&self) {
        self.drop_snapshot();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let db = self.db.clone();
            runtime.spawn(async move {
                if let Err(e) = db.bump_change_counter(CHANGE_COUNTER).await {
                    warn!("cannot tell other processes of a directory change: {e}");
                }
            });
        }
    }

    fn drop_snapshot(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        *self.snapshot.write().unwrap_or_else(|e| e.into_inner()) = None;
        self.changes.send_modify(|n| *n += 1);
    }

    /// Wakes on every invalidation (sessions ended, users deactivated, grants changed, …).
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn cached(&self) -> Option<Arc<Snapshot>> {
        self.snapshot
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub async fn snapshot(&self) -> anyhow::Result<Arc<Snapshot>> {
        if let Some(snapshot) = self.cached() {
            return Ok(snapshot);
        }
        let _loading = self.load.lock().await;
        if let Some(snapshot) = self.cached() {
            return Ok(snapshot);
        }
        let generation = self.generation.load(Ordering::SeqCst);
        let snapshot = Arc::new(self.load().await?);
        if self.generation.load(Ordering::SeqCst) == generation {
            *self.snapshot.write().unwrap_or_else(|e| e.into_inner()) = Some(snapshot.clone());
        }
        Ok(snapshot)
    }

    async fn load(&self) -> anyhow::Result<Snapshot> {
        let users = self.db.list_users(&[], Pagination::all()).await?;
        let mut grants: HashMap<String, HashSet<i64>> = HashMap::new();
        for (source, group) in self.db.list_source_id_read_access_policies().await? {
            grants.entry(source).or_default().insert(group);
        }
        let mut memberships: HashMap<i64, HashSet<i64>> = HashMap::new();
        for m in self.db.list_all_user_group_memberships().await? {
            memberships
                .entry(m.user_id)
                .or_default()
                .insert(m.user_group_id);
        }
        let db_repositories = self.db.list_repositories(Pagination::all()).await?;
        let session_epochs = self.db.list_session_epochs().await?.into_iter().collect();
        let mut list: Vec<CodeRepository> = self
            .config_repositories
            .iter()
            .map(|r| CodeRepository {
                git_url: r.canonical_git_url.clone(),
                source_id: r.source_id.clone(),
            })
            .collect();
        list.extend(db_repositories.iter().map(|r| CodeRepository {
            git_url: tabby_common::git_url::canonicalize_git_url(&r.git_url),
            source_id: git_source_id(r.id),
        }));
        let provided_repositories: Vec<ProvidedEntry> = self
            .db
            .list_active_provided_repositories()
            .await?
            .into_iter()
            .filter_map(|(repo, kind)| {
                tabby_schema::integration::IntegrationKind::from_db(&kind)
                    .map(|kind| ProvidedEntry { repo, kind })
            })
            .collect();
        list.extend(provided_repositories.iter().map(|p| CodeRepository {
            git_url: tabby_common::git_url::canonicalize_git_url(&p.repo.git_url),
            source_id: provided_source_id(p.repo.id),
        }));
        Ok(Snapshot {
            session_epochs,
            tokens: users
                .iter()
                .map(|u| (token_digest(&u.auth_token), (u.id, u.auth_token.clone())))
                .collect(),
            users: users
                .iter()
                .map(|u| {
                    (
                        u.id,
                        UserEntry {
                            active: u.active,
                            is_admin: u.is_admin,
                        },
                    )
                })
                .collect(),
            grants,
            memberships,
            db_repositories,
            provided_repositories,
            all_repositories: AllowedCodeRepository { list },
        })
    }
}
