//! Repositories: clone or fetch remotes with the `git` CLI into a bare mirror (no working tree is
//! ever checked out or touched), read refs, trees and blobs with git2, and walk plain
//! directories with the `ignore` crate.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, anyhow, bail};
use tabby_common::git_url::{
    GIT_ALLOWED_PROTOCOLS, check_git_url, local_path, mirror_dir_name, redact_url, redact_urls_in,
};

/// Where a repository's files come from.
pub enum RepositorySource {
    /// A git repository (a local one in place, or our bare mirror of a remote).
    Git(PathBuf),
    /// A plain directory, indexed in place.
    Directory(PathBuf),
}

/// The mirror directory of a remote under `repositories_dir` (see
/// [`mirror_dir_name`]: one per canonical URL, never outside `repositories_dir`).
pub fn mirror_dir(repositories_dir: &Path, git_url: &str) -> PathBuf {
    repositories_dir.join(mirror_dir_name(git_url))
}

/// The local copy of a repository: its own directory when local, else its mirror.
pub fn local_copy(repositories_dir: &Path, git_url: &str) -> PathBuf {
    local_path(git_url).unwrap_or_else(|| mirror_dir(repositories_dir, git_url))
}

/// Credentials for a remote's host, handed to git as an HTTP header through its environment
/// (`GIT_CONFIG_COUNT` / `GIT_CONFIG_KEY_n` / `GIT_CONFIG_VALUE_n`): never in the URL, an
/// argument (which other users can read in the process list) or the mirror's config. The
/// header is scoped to one origin and redirects are not followed, so it reaches no other
/// host.
#[derive(Clone)]
pub struct GitHttpAuth {
    /// `https://host[:port]`, the origin the header is sent to.
    pub origin: String,
    /// The header's value, e.g. `Basic …`.
    pub authorization: String,
}

impl std::fmt::Debug for GitHttpAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GitHttpAuth({}, ***)", self.origin)
    }
}

impl GitHttpAuth {
    /// HTTP basic credentials (`user:secret`) for the origin of `git_url`, which must be an
    /// https URL.
    pub fn basic(git_url: &str, user: &str, secret: &str) -> anyhow::Result<Self> {
        use base64::Engine as _;
        let origin = https_origin(git_url)?;
        let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{secret}"));
        Ok(Self {
            origin,
            authorization: format!("Basic {encoded}"),
        })
    }

    fn apply(&self, command: &mut Command) {
        command
            .env("GIT_CONFIG_COUNT", "2")
            .env(
                "GIT_CONFIG_KEY_0",
                format!("http.{}/.extraHeader", self.origin),
            )
            .env(
                "GIT_CONFIG_VALUE_0",
                format!("Authorization: {}", self.authorization),
            )
            .env("GIT_CONFIG_KEY_1", "http.followRedirects")
            .env("GIT_CONFIG_VALUE_1", "false");
    }
}

/// `https://host[:port]` of an https URL (credentials dropped).
fn https_origin(git_url: &str) -> anyhow::Result<String> {
    let url = url::Url::parse(git_url)
        .map_err(|e| anyhow!("{:?} is not a URL: {e}", redact_url(git_url)))?;
    if url.scheme() != "https" || url.host_str().is_none() {
        bail!(
            "credentials are only sent over https (not to {:?})",
            redact_url(git_url)
        );
    }
    Ok(url.origin().ascii_serialization())
}

/// Makes the repository's files available locally: a `file://` URL or absolute path is used
/// in place (git2 only, never the git CLI); a remote is mirrored (cloned once, fetched
/// afterwards) under `repositories_dir`, with `auth` for its host when given (which must be
/// `git_url`'s own). A URL git could read as an option is refused.
pub fn sync_with(
    git_url: &str,
    repositories_dir: &Path,
    auth: Option<&GitHttpAuth>,
) -> anyhow::Result<RepositorySource> {
    check_git_url(git_url)
        .map_err(|e| anyhow!("git URL {:?} refused: {e}", redact_url(git_url)))?;
    if let Some(auth) = auth
        && https_origin(git_url)? != auth.origin
    {
        bail!(
            "the credentials are for {}, not for {:?}",
            auth.origin,
            redact_url(git_url)
        );
    }
    if let Some(path) = local_path(git_url) {
        if auth.is_some() {
            bail!("a local repository takes no credentials");
        }
        if !path.is_dir() {
            bail!("{} is not a directory", path.display());
        }
        return Ok(match git2::Repository::open(&path) {
            Ok(_) => RepositorySource::Git(path),
            Err(_) => RepositorySource::Directory(path),
        });
    }
    let dir = mirror_dir(repositories_dir, git_url);
    let redacted = redact_url(git_url);
    let with_auth = |mut command: Command| {
        if let Some(auth) = auth {
            auth.apply(&mut command);
        }
        command
    };
    if dir.join("HEAD").exists() {
        run_git(&mut with_auth(fetch_command(&dir, git_url)), &redacted)
            .with_context(|| format!("cannot fetch {redacted}"))?;
    } else {
        std::fs::create_dir_all(repositories_dir)
            .with_context(|| format!("cannot create {}", repositories_dir.display()))?;
        let mut partial_name = dir.file_name().unwrap_or_default().to_os_string();
        partial_name.push(".partial");
        let partial = dir.with_file_name(partial_name);
        let _ = std::fs::remove_dir_all(&partial);
        run_git(&mut with_auth(clone_command(git_url, &partial)), &redacted)
            .with_context(|| format!("cannot clone {redacted}"))?;
        std::fs::rename(&partial, &dir)
            .with_context(|| format!("cannot move clone into {}", dir.display()))?;
    }
    Ok(RepositorySource::Git(dir))
}

/// Removes the mirrors under `repositories_dir` that belong to none of `git_urls`: repositories
/// that were removed, and mirrors named by older versions (before names carried a digest of
/// the canonical URL), which are cloned again under their new name. Only bare mirrors (a
/// directory with a `HEAD`) and unfinished `.partial` clones are touched. Returns the names
/// removed.
pub fn remove_stale_mirrors(repositories_dir: &Path, git_urls: &[String]) -> Vec<String> {
    let keep: std::collections::HashSet<String> = git_urls
        .iter()
        .filter(|url| local_path(url).is_none())
        .map(|url| mirror_dir_name(url))
        .collect();
    let Ok(entries) = std::fs::read_dir(repositories_dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
        else {
            continue;
        };
        let owner = name.strip_suffix(".partial").unwrap_or(&name);
        let is_mirror = path.join("HEAD").is_file() || name.ends_with(".partial");
        if !path.is_dir() || !is_mirror || keep.contains(owner) {
            continue;
        }
        if std::fs::remove_dir_all(&path).is_ok() {
            removed.push(name);
        }
    }
    removed.sort();
    removed
}

/// `git` with the environment every call gets: only https, ssh and git transports (no
/// `file`, `ext`, `fd`), and never a prompt for credentials.
fn git_command() -> Command {
    let mut command = Command::new("git");
    command
        .env("GIT_ALLOW_PROTOCOL", GIT_ALLOWED_PROTOCOLS)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "true")
        .args(["-c", "protocol.allow=never"]);
    command
}

/// `git clone --mirror -- <url> <dest>`: `--` ends the options, so neither can be one.
fn clone_command(git_url: &str, dest: &Path) -> Command {
    let mut command = git_command();
    command
        .args(["clone", "--mirror", "--quiet", "--"])
        .arg(git_url)
        .arg(dest);
    command
}

/// `git -C <dir> fetch --prune --force -- <url> <refspec>`.
fn fetch_command(dir: &Path, git_url: &str) -> Command {
    let mut command = git_command();
    command
        .arg("-C")
        .arg(dir)
        .args(["fetch", "--prune", "--force", "--"])
        .arg(git_url)
        .arg("+refs/heads/*:refs/heads/*");
    command
}

fn run_git(command: &mut Command, redacted_url: &str) -> anyhow::Result<()> {
    let output = command
        .output()
        .context("cannot run `git` (is it installed?)")?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Never let a credential-bearing URL reach a log or an error message.
    let cleaned = redact_urls_in(&stderr.split_whitespace().collect::<Vec<_>>().join(" "));
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

/// The commit each ref of a repository points at now, from the local copy (local path or
/// our mirror under `repositories_dir`); an empty `refs` means the default branch. Refs that do
/// not resolve (or a repository not cloned yet) are left out.
pub fn ref_commits(
    git_url: &str,
    repositories_dir: &Path,
    refs: &[String],
) -> Vec<(String, String)> {
    let dir = local_copy(repositories_dir, git_url);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(command: &Command) -> Vec<String> {
        command
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    fn env(command: &Command, key: &str) -> Option<String> {
        command
            .get_envs()
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.map(|v| v.to_string_lossy().into_owned()))
    }

    #[test]
    fn positional_arguments_follow_a_double_dash() {
        let clone = clone_command("https://h/r", Path::new("/m/r.partial"));
        let a = args(&clone);
        let dd = a.iter().position(|x| x == "--").expect("`--` in clone");
        assert_eq!(&a[dd + 1..], ["https://h/r", "/m/r.partial"]);
        let fetch = fetch_command(Path::new("/m/r"), "https://h/r");
        let a = args(&fetch);
        let dd = a.iter().position(|x| x == "--").expect("`--` in fetch");
        assert_eq!(&a[dd + 1..], ["https://h/r", "+refs/heads/*:refs/heads/*"]);
        for command in [&clone, &fetch] {
            assert_eq!(
                env(command, "GIT_ALLOW_PROTOCOL").as_deref(),
                Some("https:ssh:git")
            );
            assert_eq!(env(command, "GIT_TERMINAL_PROMPT").as_deref(), Some("0"));
        }
    }

    /// An integration's token goes to git as a header scoped to the URL's origin, through
    /// the environment: never in an argument; redirects are off; a URL of another host or a
    /// local path refuses the credentials before git runs.
    #[test]
    fn credentials_travel_in_the_environment_for_one_origin() {
        let auth = GitHttpAuth::basic(
            "https://git.example:8443/o/r.git",
            "x-access-token",
            "s3cret",
        )
        .unwrap();
        assert_eq!(auth.origin, "https://git.example:8443");
        assert!(!format!("{auth:?}").contains("s3cret"));
        let mut clone = clone_command("https://git.example:8443/o/r.git", Path::new("/m/r"));
        auth.apply(&mut clone);
        assert!(args(&clone).iter().all(|a| !a.contains("s3cret")));
        assert_eq!(env(&clone, "GIT_CONFIG_COUNT").as_deref(), Some("2"));
        assert_eq!(
            env(&clone, "GIT_CONFIG_KEY_0").as_deref(),
            Some("http.https://git.example:8443/.extraHeader")
        );
        use base64::Engine as _;
        let value = env(&clone, "GIT_CONFIG_VALUE_0").unwrap();
        let encoded = value.strip_prefix("Authorization: Basic ").unwrap();
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .unwrap(),
            b"x-access-token:s3cret"
        );
        assert_eq!(
            env(&clone, "GIT_CONFIG_KEY_1").as_deref(),
            Some("http.followRedirects")
        );
        assert_eq!(env(&clone, "GIT_CONFIG_VALUE_1").as_deref(), Some("false"));

        assert!(GitHttpAuth::basic("http://git.example/o/r", "u", "s").is_err());
        assert!(GitHttpAuth::basic("ssh://git.example/o/r", "u", "s").is_err());
        let dir = tempfile::tempdir().unwrap();
        for url in [
            "https://evil.example/o/r.git".to_string(),
            "https://git.example/o/r.git".to_string(),
            format!("file://{}", dir.path().display()),
        ] {
            let err = match sync_with(&url, dir.path(), Some(&auth)) {
                Ok(_) => panic!("{url} took the credentials"),
                Err(e) => format!("{e:#}"),
            };
            assert!(!err.contains("s3cret"), "{err}");
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    /// An attacker's URL never reaches the git CLI: nothing is run, nothing is created.
    #[test]
    fn option_like_urls_are_refused_before_git_runs() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("pwned");
        let repositories = dir.path().join("repositories");
        for url in [
            format!("--upload-pack=touch {}", marker.display()),
            format!("--upload-pack=touch${{IFS}}{}", marker.display()),
            "ssh://-oProxyCommand=touch/repo".to_string(),
            "ext::sh".to_string(),
            "http://127.0.0.1:1/repo".to_string(),
        ] {
            let err = match sync_with(&url, &repositories, None) {
                Ok(_) => panic!("{url:?} was synced"),
                Err(e) => format!("{e:#}"),
            };
            assert!(err.contains("refused"), "{url:?}: {err}");
        }
        assert!(!marker.exists());
        assert!(
            !repositories.exists(),
            "nothing is created for a refused URL"
        );
    }

    /// The git CLI cannot be steered to another transport even when asked directly.
    #[test]
    fn git_cli_refuses_other_protocols() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("source");
        std::fs::create_dir_all(&source).unwrap();
        let init = Command::new("git")
            .args(["init", "--quiet", "--bare"])
            .arg(&source)
            .status()
            .unwrap();
        assert!(init.success());
        let url = format!("file://{}", source.display());
        let output = clone_command(&url, &dir.path().join("copy"))
            .output()
            .unwrap();
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("not allowed"), "{stderr}");
    }

    #[test]
    fn stale_mirrors_are_removed_and_current_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let current = "https://h/team/current.git";
        let mirror = |name: &str| {
            std::fs::create_dir_all(root.join(name)).unwrap();
            std::fs::write(root.join(name).join("HEAD"), "ref: refs/heads/main\n").unwrap();
        };
        mirror(&mirror_dir_name(current));
        mirror("https_h_team_current"); // named by an older version
        mirror(&mirror_dir_name("https://h/team/deleted"));
        std::fs::create_dir_all(root.join(format!("{}.partial", mirror_dir_name("https://h/x"))))
            .unwrap();
        std::fs::create_dir_all(root.join("notes")).unwrap(); // not a mirror: left alone
        let removed = remove_stale_mirrors(root, &[current.to_string(), "file:///srv/r".into()]);
        assert_eq!(removed.len(), 3, "{removed:?}");
        assert!(root.join(mirror_dir_name(current)).join("HEAD").exists());
        assert!(root.join("notes").exists());
        assert!(remove_stale_mirrors(&root.join("missing"), &[]).is_empty());
    }

    #[test]
    fn mirrors_stay_inside_the_repositories_dir() {
        let root = Path::new("/tabby/repositories");
        for url in ["https://h/..", "git@..:..", "https://h/a/../../../etc"] {
            let dir = mirror_dir(root, url);
            assert_eq!(dir.parent(), Some(root), "{url}");
        }
        assert_ne!(
            mirror_dir(root, "https://h/a_b/c"),
            mirror_dir(root, "https://h/a/b_c")
        );
        assert_eq!(local_copy(root, "file:///srv/r"), PathBuf::from("/srv/r"));
    }
}
