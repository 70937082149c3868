//! Read-only access to the files of a configured repository, for tools that show code to a
//! caller (the MCP server): the file list and the bytes of one file, at a ref of a git
//! repository (read from its local copy with git2, never the CLI) or in a plain directory
//! (the files indexing sees: `.gitignore` and hidden files honoured).
//!
//! Paths are repository-relative and checked before use: no absolute path, no `..`, no empty
//! or `.` component, no backslash or NUL. A git path is looked up in the ref's tree, so it
//! cannot leave the repository; a directory path must be one of the listed files, so a
//! symbolic link, an ignored file or a hidden one is never read.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::Mutex,
    time::{Duration, Instant},
};

use tabby_common::git_url::local_path;

use crate::git;

/// The largest file returned (the indexer's own limit).
pub const MAX_READ_BYTES: u64 = crate::code::filter::MAX_FILE_BYTES;
/// How long a plain directory's listing is reused.
const DIRECTORY_LISTING_TTL: Duration = Duration::from_secs(30);
/// Listings kept (each a repository's file list).
const CACHED_LISTINGS: usize = 16;

/// Why a file cannot be given.
#[derive(Debug, thiserror::Error)]
pub enum RepoFileError {
    /// The path is not a clean repository-relative path.
    #[error("invalid path {0:?}: {1}")]
    BadPath(String, &'static str),
    /// No such file, ref or local copy.
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    TooLarge(String),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// Checks a repository-relative path and returns it `/`-separated without a leading `./`.
pub fn clean_path(path: &str) -> Result<String, RepoFileError> {
    let bad = |why| Err(RepoFileError::BadPath(path.to_string(), why));
    let trimmed = path.strip_prefix("./").unwrap_or(path);
    if trimmed.is_empty() {
        return bad("empty");
    }
    if trimmed.len() > 4096 {
        return bad("longer than 4096 bytes");
    }
    if trimmed.contains(['\\', '\0']) {
        return bad("backslashes and NUL are not allowed");
    }
    if trimmed.starts_with('/') {
        return bad("must be relative to the repository root");
    }
    for part in trimmed.split('/') {
        match part {
            "" | "." => return bad("empty or `.` path component"),
            ".." => return bad("`..` is not allowed"),
            _ => {}
        }
    }
    Ok(trimmed.to_string())
}

/// The files of a repository at one ref (or of a plain directory now).
pub struct Snapshot {
    /// The commit read (git), or `None` for a plain directory.
    pub commit: Option<String>,
    /// The ref it was read at, as asked, or the default branch's name (`None` for a plain
    /// directory, or a detached default).
    pub reference: Option<String>,
    /// Sorted repository-relative paths.
    pub files: Vec<String>,
    source: Source,
}

enum Source {
    Git {
        dir: PathBuf,
        blobs: HashMap<String, git2::Oid>,
    },
    Directory {
        root: PathBuf,
    },
}

impl Snapshot {
    /// The bytes of `path` (a path from [`clean_path`]).
    pub fn read(&self, path: &str) -> Result<Vec<u8>, RepoFileError> {
        let not_found = || RepoFileError::NotFound(format!("no file {path:?} in the repository"));
        match &self.source {
            Source::Git { dir, blobs } => {
                let blob = *blobs.get(path).ok_or_else(not_found)?;
                let repo = git2::Repository::open(dir).map_err(anyhow::Error::from)?;
                git::read_blob(&repo, blob, MAX_READ_BYTES)?.ok_or_else(|| too_large(path))
            }
            Source::Directory { root } => {
                if self
                    .files
                    .binary_search_by(|f| f.as_str().cmp(path))
                    .is_err()
                {
                    return Err(not_found());
                }
                let abs = root.join(path);
                let meta = std::fs::symlink_metadata(&abs).map_err(|_| not_found())?;
                if !meta.is_file() {
                    return Err(not_found());
                }
                if meta.len() > MAX_READ_BYTES {
                    return Err(too_large(path));
                }
                std::fs::read(&abs).map_err(|_| not_found())
            }
        }
    }
}

fn too_large(path: &str) -> RepoFileError {
    RepoFileError::TooLarge(format!(
        "{path:?} is larger than {} MiB",
        MAX_READ_BYTES / (1024 * 1024)
    ))
}

/// Opens repositories' snapshots, reusing recent listings.
pub struct RepoFiles {
    repositories_dir: PathBuf,
    cache: Mutex<Vec<(CacheKey, Instant, std::sync::Arc<Snapshot>)>>,
}

#[derive(PartialEq, Eq, Clone)]
enum CacheKey {
    Commit(PathBuf, String),
    Directory(PathBuf),
}

impl RepoFiles {
    pub fn new(repositories_dir: PathBuf) -> RepoFiles {
        RepoFiles {
            repositories_dir,
            cache: Mutex::new(Vec::new()),
        }
    }

    /// The files of the repository whose (canonical) git URL is `git_url`, at `reference`
    /// (a branch, tag, full ref or commit; default: the default branch). A plain directory
    /// has no refs.
    pub fn snapshot(
        &self,
        git_url: &str,
        reference: Option<&str>,
    ) -> Result<std::sync::Arc<Snapshot>, RepoFileError> {
        let dir = git::local_copy(&self.repositories_dir, git_url);
        let is_local = local_path(git_url).is_some();
        match git2::Repository::open(&dir) {
            Ok(repo) => {
                let name = reference.unwrap_or("HEAD");
                if name.is_empty() || name.len() > 256 || name.contains(['\0', '\n']) {
                    return Err(RepoFileError::NotFound(format!("no ref {name:?}")));
                }
                let commit = git::resolve_commit(&repo, name)
                    .map_err(|_| RepoFileError::NotFound(format!("no ref {name:?}")))?
                    .to_string();
                let key = CacheKey::Commit(dir.clone(), commit.clone());
                if let Some(hit) = self.cached(&key, None) {
                    return Ok(hit);
                }
                let mut snapshots = git::snapshots(&dir, std::slice::from_ref(&commit))?;
                let snapshot = snapshots
                    .pop()
                    .ok_or_else(|| anyhow::anyhow!("no snapshot"))?;
                let mut files: Vec<String> =
                    snapshot.files.iter().map(|f| f.path.clone()).collect();
                files.sort();
                let blobs = snapshot
                    .files
                    .into_iter()
                    .map(|f| (f.path, f.blob))
                    .collect();
                Ok(self.store(
                    key,
                    Snapshot {
                        commit: Some(snapshot.commit),
                        reference: match reference {
                            Some(r) => Some(r.to_string()),
                            None => repo
                                .head()
                                .ok()
                                .filter(|h| h.is_branch())
                                .and_then(|h| h.shorthand().ok().map(str::to_string)),
                        },
                        files,
                        source: Source::Git { dir, blobs },
                    },
                ))
            }
            Err(_) if is_local && dir.is_dir() => {
                if let Some(name) = reference {
                    return Err(RepoFileError::NotFound(format!(
                        "no ref {name:?}: the repository is a plain directory"
                    )));
                }
                let key = CacheKey::Directory(dir.clone());
                if let Some(hit) = self.cached(&key, Some(DIRECTORY_LISTING_TTL)) {
                    return Ok(hit);
                }
                let files = git::walk_directory(&dir)
                    .into_iter()
                    .map(|(rel, _)| rel)
                    .collect();
                Ok(self.store(
                    key,
                    Snapshot {
                        commit: None,
                        reference: None,
                        files,
                        source: Source::Directory { root: dir },
                    },
                ))
            }
            Err(_) => Err(RepoFileError::NotFound(
                "the repository has no local copy yet (it has not been synced)".into(),
            )),
        }
    }

    /// The commit the default branch of a git repository's local copy points at (`None` for a
    /// plain directory or a repository not synced yet). Cheap: no tree is read.
    pub fn commit(&self, git_url: &str) -> Option<String> {
        let dir = git::local_copy(&self.repositories_dir, git_url);
        let repo = git2::Repository::open(&dir).ok()?;
        git::resolve_commit(&repo, "HEAD")
            .ok()
            .map(|c| c.to_string())
    }

    fn cached(&self, key: &CacheKey, ttl: Option<Duration>) -> Option<std::sync::Arc<Snapshot>> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let at = cache.iter().position(|(k, _, _)| k == key)?;
        let (_, made, snapshot) = &cache[at];
        if ttl.is_some_and(|ttl| made.elapsed() > ttl) {
            cache.remove(at);
            return None;
        }
        let snapshot = snapshot.clone();
        let entry = cache.remove(at);
        cache.push(entry);
        Some(snapshot)
    }

    fn store(&self, key: CacheKey, snapshot: Snapshot) -> std::sync::Arc<Snapshot> {
        let snapshot = std::sync::Arc::new(snapshot);
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.retain(|(k, _, _)| k != &key);
        if cache.len() >= CACHED_LISTINGS {
            cache.remove(0);
        }
        cache.push((key, Instant::now(), snapshot.clone()));
        snapshot
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn only_clean_relative_paths_pass() {
        for good in [
            "a.rs",
            "src/a.rs",
            "./src/a.rs",
            "a b/ü.py",
            "..a/b..",
            ".github/x.yml",
        ] {
            assert!(clean_path(good).is_ok(), "{good}");
        }
        assert_eq!(clean_path("./src/a.rs").unwrap(), "src/a.rs");
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a/./b",
            "a//b",
            "a/",
            ".",
            "./",
            "a\\b",
            "a\0b",
            "..",
        ] {
            assert!(
                matches!(clean_path(bad), Err(RepoFileError::BadPath(..))),
                "{bad:?}"
            );
        }
        assert!(clean_path(&"a/".repeat(3000)).is_err());
    }

    fn sh(dir: &Path, args: &[&str]) {
        let status = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .status()
            .unwrap();
        assert!(status.success());
    }

    #[test]
    fn git_files_are_read_from_the_ref_and_plain_directories_from_their_listing() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir_all(repo.join("src")).unwrap();
        std::fs::write(repo.join("src/a.py"), "v1\n").unwrap();
        sh(&repo, &["init", "-q", "-b", "main"]);
        sh(&repo, &["add", "-A"]);
        sh(&repo, &["commit", "-q", "-m", "one"]);
        sh(&repo, &["tag", "v1"]);
        std::fs::write(repo.join("src/a.py"), "v2\n").unwrap();
        std::fs::write(repo.join("untracked.py"), "secret\n").unwrap();
        sh(&repo, &["commit", "-q", "-am", "two"]);
        let files = RepoFiles::new(tmp.path().join("repositories"));
        let url = format!("file://{}", repo.display());
        let head = files.snapshot(&url, None).unwrap();
        assert_eq!(head.files, vec!["src/a.py"]);
        assert_eq!(head.read("src/a.py").unwrap(), b"v2\n");
        assert!(matches!(
            head.read("untracked.py"),
            Err(RepoFileError::NotFound(_))
        ));
        let v1 = files.snapshot(&url, Some("v1")).unwrap();
        assert_eq!(v1.read("src/a.py").unwrap(), b"v1\n");
        assert_ne!(v1.commit, head.commit);
        assert!(matches!(
            files.snapshot(&url, Some("no-such-branch")),
            Err(RepoFileError::NotFound(_))
        ));

        let plain = tmp.path().join("plain");
        std::fs::create_dir_all(&plain).unwrap();
        std::fs::write(plain.join("a.py"), "x = 1\n").unwrap();
        std::fs::write(plain.join(".env"), "TOKEN=1\n").unwrap();
        std::fs::write(plain.join(".gitignore"), "ignored.py\n").unwrap();
        std::fs::write(plain.join("ignored.py"), "y\n").unwrap();
        std::fs::write(tmp.path().join("outside.py"), "z\n").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(tmp.path().join("outside.py"), plain.join("link.py")).unwrap();
        let url = format!("file://{}", plain.display());
        let snap = files.snapshot(&url, None).unwrap();
        assert_eq!(snap.commit, None);
        assert_eq!(snap.read("a.py").unwrap(), b"x = 1\n");
        for hidden in [".env", "ignored.py", "link.py", "../outside.py"] {
            assert!(snap.read(hidden).is_err(), "{hidden}");
        }
        assert!(files.snapshot(&url, Some("main")).is_err());
        assert!(matches!(
            files.snapshot("https://example.com/not-synced.git", None),
            Err(RepoFileError::NotFound(_))
        ));
    }
}
