//! Repositories: clone or fetch remotes with the `git` CLI into a bare mirror (no working tree is
//! ever checked out or touched), read refs, trees and blobs with git2, and walk plain
//! directories with the `ignore` crate.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, anyhow, bail};
use tabby_common::git_url::{redact_credentials, sanitize_git_url_to_dir_name};

/// Where a repository's files come from.
pub enum RepositorySource {
    /// A git repository (a local one in place, or our bare mirror of a remote).
    Git(PathBuf),
    /// A plain directory, indexed in place.
    Directory(PathBuf),
}

/// Makes the repository's files available locally: a `file://` path is used in place; a remote
/// is mirrored (cloned once, fetched afterwards) under `repositories_dir`.
pub fn sync(git_url: &str, repositories_dir: &Path) -> anyhow::Result<RepositorySource> {
    if let Some(path) = git_url.strip_prefix("file://") {
        let path = PathBuf::from(path);
        if !path.is_dir() {
            bail!("{git_url} is not a directory");
        }
        return Ok(match git2::Repository::open(&path) {
            Ok(_) => RepositorySource::Git(path),
            Err(_) => RepositorySource::Directory(path),
        });
    }
    let dir = repositories_dir.join(sanitize_git_url_to_dir_name(git_url));
    let redacted = redact_credentials(git_url);
    if dir.join("HEAD").exists() {
        run_git(
            Command::new("git")
                .arg("-C")
                .arg(&dir)
                .args(["fetch", "--prune", "--force", git_url])
                .arg("+refs/heads/*:refs/heads/*"),
            &redacted,
        )
        .with_context(|| format!("cannot fetch {redacted}"))?;
    } else {
        std::fs::create_dir_all(repositories_dir)
            .with_context(|| format!("cannot create {}", repositories_dir.display()))?;
        let partial = dir.with_extension("partial");
        let _ = std::fs::remove_dir_all(&partial);
        run_git(
            Command::new("git")
                .args(["clone", "--mirror", "--quiet", git_url])
                .arg(&partial),
            &redacted,
        )
        .with_context(|| format!("cannot clone {redacted}"))?;
        std::fs::rename(&partial, &dir)
            .with_context(|| format!("cannot move clone into {}", dir.display()))?;
    }
    Ok(RepositorySource::Git(dir))
}

fn run_git(command: &mut Command, redacted_url: &str) -> anyhow::Result<()> {
    let output = command
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "true")
        .output()
        .context("cannot run `git` (is it installed?)")?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Never let a credential-bearing URL reach a log or an error message.
    let cleaned: String = stderr
        .split_whitespace()
        .map(redact_credentials)
        .collect::<Vec<_>>()
        .join(" ");
    Err(anyhow!("git failed for {redacted_url}: {cleaned}"))
}

/// One file of a ref's tree.
pub struct TreeFile {
    /// Path relative to the repository root, `/`-separated.
    pub path: String,
    pub blob: git2::Oid,
}

/// The commit a ref points to and its files.
pub struct RefSnapshot {
    pub commit: String,
    pub files: Vec<TreeFile>,
}

/// Resolves `name` (a branch, a full ref, or `HEAD`) to a commit.
fn resolve<'r>(repo: &'r git2::Repository, name: &str) -> anyhow::Result<git2::Commit<'r>> {
    let candidates = [
        name.to_string(),
        format!("refs/heads/{name}"),
        format!("refs/remotes/origin/{name}"),
        format!("refs/tags/{name}"),
    ];
    for candidate in &candidates {
        if let Ok(object) = repo.revparse_single(candidate)
            && let Ok(commit) = object.peel_to_commit()
        {
            return Ok(commit);
        }
    }
    bail!("ref {name:?} not found")
}

/// The commit `name` resolves to.
pub(crate) fn resolve_commit(repo: &git2::Repository, name: &str) -> anyhow::Result<git2::Oid> {
    Ok(resolve(repo, name)?.id())
}

/// The files of each ref (`HEAD` when `refs` is empty).
pub fn snapshots(repo_dir: &Path, refs: &[String]) -> anyhow::Result<Vec<RefSnapshot>> {
    let repo = git2::Repository::open(repo_dir)
        .with_context(|| format!("cannot open git repository {}", repo_dir.display()))?;
    let names: Vec<String> = if refs.is_empty() {
        vec!["HEAD".into()]
    } else {
        refs.to_vec()
    };
    let mut snapshots = Vec::new();
    for name in names {
        let commit = resolve(&repo, &name).with_context(|| format!("in {}", repo_dir.display()))?;
        let tree = commit.tree()?;
        let mut files = Vec::new();
        tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
            if entry.kind() == Some(git2::ObjectType::Blob)
                && entry.filemode() != 0o120000
                && let Ok(name) = entry.name()
            {
                files.push(TreeFile {
                    path: format!("{dir}{name}"),
                    blob: entry.id(),
                });
            }
            git2::TreeWalkResult::Ok
        })?;
        snapshots.push(RefSnapshot {
            commit: commit.id().to_string(),
            files,
        });
    }
    Ok(snapshots)
}

/// Reads a blob's bytes, or `None` when it is larger than `max_bytes` (without loading it).
pub fn read_blob(
    repo: &git2::Repository,
    oid: git2::Oid,
    max_bytes: u64,
) -> anyhow::Result<Option<Vec<u8>>> {
    let odb = repo.odb()?;
    let (size, _) = odb.read_header(oid)?;
    if size as u64 > max_bytes {
        return Ok(None);
    }
    Ok(Some(repo.find_blob(oid)?.content().to_vec()))
}

/// Files under a plain directory, `.gitignore` and hidden files honoured, with relative paths.
pub fn walk_directory(root: &Path) -> Vec<(String, PathBuf)> {
    let mut files = Vec::new();
    for entry in ignore::WalkBuilder::new(root)
        .require_git(false)
        .follow_links(false)
        .build()
        .flatten()
    {
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.into_path();
        if let Ok(rel) = path.strip_prefix(root) {
            let rel = rel.to_string_lossy().replace('\\', "/");
            files.push((rel, path.clone()));
        }
    }
    files.sort();
    files
}

/// The git blob hash of `bytes` (what `git hash-object` prints).
pub fn blob_hash(bytes: &[u8]) -> anyhow::Result<git2::Oid> {
    Ok(git2::Oid::hash_object(git2::ObjectType::Blob, bytes)?)
}

/// The commit each ref of a repository points at now, from the local copy (`file://` path or
/// our mirror under `repositories_dir`); an empty `refs` means the default branch. Refs that do
/// not resolve (or a repository not cloned yet) are left out.
pub fn ref_commits(
    git_url: &str,
    repositories_dir: &Path,
    refs: &[String],
) -> Vec<(String, String)> {
    let dir = match git_url.strip_prefix("file://") {
        Some(path) => PathBuf::from(path),
        None => repositories_dir.join(sanitize_git_url_to_dir_name(git_url)),
    };
    let Ok(repo) = git2::Repository::open(&dir) else {
        return Vec::new();
    };
    let names: Vec<String> = if refs.is_empty() {
        let head = repo
            .find_reference("HEAD")
            .ok()
            .and_then(|h| h.symbolic_target().ok().flatten().map(str::to_string))
            .unwrap_or_else(|| "HEAD".to_string());
        vec![
            head.strip_prefix("refs/heads/")
                .unwrap_or(&head)
                .to_string(),
        ]
    } else {
        refs.to_vec()
    };
    names
        .into_iter()
        .filter_map(|name| {
            let commit = resolve(&repo, &name).ok()?.id().to_string();
            Some((name, commit))
        })
        .collect()
}
