//! Git remote URLs: canonical form without credentials, the repository name used to match an
//! editor's `git_url` against configured repositories, the directory name a mirror lives in,
//! which URLs the git CLI may be given at all ([`check_git_url`]), and the one redaction of
//! credentials in URLs ([`redact_url`]) used wherever a URL is logged or shown.

use std::path::PathBuf;

/// A parsed git remote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GitUrl {
    /// `https`, `http`, `ssh`, `git`, `file`, or `scp` for `user@host:path`.
    pub scheme: String,
    /// Host without credentials; empty for `file://`.
    pub host: String,
    /// Path components after the host, with a trailing `.git` removed from the last one.
    pub path: Vec<String>,
}

impl GitUrl {
    pub fn parse(url: &str) -> Option<GitUrl> {
        let url = url.trim();
        if url.is_empty() {
            return None;
        }
        let (scheme, rest) = if let Some((scheme, rest)) = url.split_once("://") {
            (scheme.to_ascii_lowercase(), rest)
        } else if let Some((user_host, path)) = url.split_once(':') {
            // scp-like syntax: git@github.com:org/repo.git
            if user_host.contains('/') {
                return None;
            }
            let host = user_host.rsplit('@').next().unwrap_or(user_host);
            return Some(GitUrl {
                scheme: "scp".into(),
                host: host.to_string(),
                path: split_path(path),
            });
        } else {
            return None;
        };
        if scheme == "file" {
            return Some(GitUrl {
                scheme,
                host: String::new(),
                path: split_path(rest),
            });
        }
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let host = authority.rsplit('@').next().unwrap_or(authority);
        Some(GitUrl {
            scheme,
            host: host.to_string(),
            path: split_path(path),
        })
    }

    /// The repository name: the last path component without `.git`.
    pub fn name(&self) -> &str {
        self.path.last().map(String::as_str).unwrap_or("")
    }

    /// The URL with credentials and a trailing `.git` removed.
    pub fn canonical(&self) -> String {
        match self.scheme.as_str() {
            "file" => format!("file:///{}", self.path.join("/")),
            "scp" => format!("{}:{}", self.host, self.path.join("/")),
            scheme => format!("{scheme}://{}/{}", self.host, self.path.join("/")),
        }
    }
}

fn split_path(path: &str) -> Vec<String> {
    let mut parts: Vec<String> = path
        .split('/')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    if let Some(last) = parts.last_mut()
        && let Some(stripped) = last.strip_suffix(".git")
    {
        *last = stripped.to_string();
    }
    parts
}

/// Canonical form of a remote URL (credentials and `.git` removed); the input if unparsable.
pub fn canonicalize_git_url(url: &str) -> String {
    GitUrl::parse(url)
        .map(|u| u.canonical())
        .unwrap_or_else(|| url.trim().to_string())
}

/// Longest readable part of a mirror directory name (the digest follows it).
const MAX_SLUG_CHARS: usize = 64;

/// The directory name of a remote's mirror under `$TABBY_ROOT/repositories`: a readable slug of
/// the canonical URL (chars outside `[A-Za-z0-9_.-]` mapped to `_`, runs collapsed, leading and
/// trailing `_`/`.` dropped, at most 64 chars) and the first 12 hex digits of the SHA-256 of the
/// canonical URL. Two different canonical URLs never share a directory, and the name is never
/// `.`, `..` or a path: `https://github.com/TabbyML/tabby.git` →
/// `https_github.com_TabbyML_tabby-<digest>`.
pub fn mirror_dir_name(url: &str) -> String {
    use sha2::{Digest, Sha256};
    let canonical = canonicalize_git_url(url);
    let mut slug = String::with_capacity(canonical.len().min(MAX_SLUG_CHARS));
    for ch in canonical.chars() {
        let ch = if ch.is_ascii_alphanumeric() || matches!(ch, '_' | '.' | '-') {
            ch
        } else {
            '_'
        };
        if ch == '_' && slug.ends_with('_') {
            continue;
        }
        slug.push(ch);
    }
    let slug = slug.trim_matches(|c| c == '_' || c == '.');
    let slug: String = slug.chars().take(MAX_SLUG_CHARS).collect();
    let slug = if slug.is_empty() {
        "repo"
    } else {
        slug.as_str()
    };
    let digest = Sha256::digest(canonical.as_bytes());
    let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("{slug}-{hex}")
}

/// The local directory of a `file://` URL or an absolute path (indexed in place, never mirrored).
pub fn local_path(url: &str) -> Option<PathBuf> {
    let url = url.trim();
    if let Some(path) = url.strip_prefix("file://") {
        return Some(PathBuf::from(path));
    }
    url.starts_with('/').then(|| PathBuf::from(url))
}

/// The protocols the git CLI may use to fetch (its `GIT_ALLOW_PROTOCOL`). Local repositories
/// are read in place with git2 and never handed to the CLI, so `file` is not among them.
pub const GIT_ALLOWED_PROTOCOLS: &str = "https:ssh:git";

/// Why `url` cannot be a repository's git URL, or `Ok` when it can: `https://`, `ssh://`,
/// `git://`, `[user@]host:path`, `file:///abs/path` or `/abs/path`. Nothing in it can be read
/// as a git option: the URL, its user and its host never begin with `-`, and transport syntax
/// such as `ext::` is refused.
pub fn check_git_url(url: &str) -> Result<(), String> {
    let url = url.trim();
    if url.is_empty() {
        return Err("must not be empty".into());
    }
    if url.starts_with('-') {
        return Err(format!(
            "{:?} begins with '-' (git would read it as an option)",
            redact_url(url)
        ));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must not contain spaces or control characters".into());
    }
    let remote_hint = "must be an https://, ssh:// or git:// URL, user@host:path, \
                       a file:/// URL or an absolute path";
    if let Some(path) = url.strip_prefix("file://") {
        return if path.starts_with('/') {
            Ok(())
        } else {
            Err("a file:// URL needs an absolute path (file:///path)".into())
        };
    }
    if url.starts_with('/') {
        return Ok(());
    }
    if let Some((scheme, rest)) = url.split_once("://") {
        let scheme = scheme.to_ascii_lowercase();
        if !matches!(scheme.as_str(), "https" | "ssh" | "git") {
            return Err(format!(
                "protocol {scheme:?} is not allowed ({remote_hint}; use https:// instead of http://)"
            ));
        }
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let (user, host) = match authority.rsplit_once('@') {
            Some((user, host)) => (Some(user), host),
            None => (None, authority),
        };
        if host.is_empty() || host.starts_with('-') || user.is_some_and(|u| u.starts_with('-')) {
            return Err(format!(
                "{:?} has no valid host (a host or user must not begin with '-')",
                redact_url(url)
            ));
        }
        return Ok(());
    }
    // scp-like: [user@]host:path
    if let Some((user_host, path)) = url.split_once(':') {
        let host = user_host.rsplit('@').next().unwrap_or(user_host);
        let valid_chars = user_host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '@'));
        if valid_chars
            && !host.is_empty()
            && !host.starts_with('-')
            && !path.is_empty()
            && !path.starts_with(':')
            && !path.starts_with('-')
        {
            return Ok(());
        }
    }
    Err(remote_hint.into())
}

/// Query parameters whose values are credentials.
const SECRET_QUERY_KEYS: &[&str] = &[
    "token",
    "access_token",
    "private_token",
    "key",
    "api_key",
    "apikey",
    "password",
    "passwd",
    "secret",
    "client_secret",
    "sig",
    "signature",
    "auth",
];

fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_QUERY_KEYS.contains(&key.as_str())
        || key.ends_with("_token")
        || key.ends_with("-token")
        || key.ends_with("_secret")
        || key.ends_with("password")
}

/// The URL without credentials, safe to log or show: `user:password@` is removed and the value
/// of every token-like query parameter (`token`, `access_token`, `private_token`, `key`,
/// `password`, `secret`, …) becomes `REDACTED`. Everything else is kept as it was.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let (before_fragment, fragment) = match tail.split_once('#') {
        Some((a, f)) => (a, Some(f)),
        None => (tail, None),
    };
    let mut out = format!("{scheme}://{host}");
    match before_fragment.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            let params: Vec<String> = query
                .split('&')
                .map(|param| match param.split_once('=') {
                    Some((key, _)) if is_secret_key(key) => format!("{key}=REDACTED"),
                    _ => param.to_string(),
                })
                .collect();
            out.push_str(&params.join("&"));
        }
        None => out.push_str(before_fragment),
    }
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
    out
}

/// `text` with every URL in it passed through [`redact_url`] (URLs end at whitespace, quotes,
/// `<`, `>`, `` ` ``, a closing bracket, or trailing punctuation): for log lines, job commands
/// and error messages.
pub fn redact_urls_in(text: &str) -> String {
    let is_end =
        |c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`' | ')' | ']' | '}');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        // The scheme: the letters, digits, '+', '-', '.' right before "://".
        let scheme_start = rest[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |i| i + 1);
        let mut url_end = rest[at..].find(is_end).map_or(rest.len(), |i| at + i);
        // Sentence punctuation after a URL is not part of it.
        while url_end > at + 3 && rest[..url_end].ends_with(['.', ',', ';', ':']) {
            url_end -= 1;
        }
        out.push_str(&rest[..scheme_start]);
        out.push_str(&redact_url(&rest[scheme_start..url_end]));
        rest = &rest[url_end..];
    }
    out.push_str(rest);
    out
}

/// Removes `user:password@` (and token-like query values) from a URL so it can be logged.
pub fn redact_credentials(url: &str) -> String {
    redact_url(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_forms() {
        for (input, canonical, name) in [
            (
                "https://github.com/TabbyML/tabby.git",
                "https://github.com/TabbyML/tabby",
                "tabby",
            ),
            (
                "https://user:secret@github.com/TabbyML/tabby",
                "https://github.com/TabbyML/tabby",
                "tabby",
            ),
            (
                "git@github.com:TabbyML/tabby.git",
                "github.com:TabbyML/tabby",
                "tabby",
            ),
            (
                "ssh://git@host:22/org/repo.git",
                "ssh://host:22/org/repo",
                "repo",
            ),
            (
                "file:///home/u/code/proj",
                "file:///home/u/code/proj",
                "proj",
            ),
        ] {
            let url = GitUrl::parse(input).unwrap();
            assert_eq!(url.canonical(), canonical, "{input}");
            assert_eq!(url.name(), name, "{input}");
        }
        assert_eq!(GitUrl::parse("not a url"), None);
    }

    #[test]
    fn dir_names() {
        let name = mirror_dir_name("https://github.com/TabbyML/tabby.git");
        assert!(
            name.starts_with("https_github.com_TabbyML_tabby-"),
            "{name}"
        );
        assert_eq!(name.len(), "https_github.com_TabbyML_tabby-".len() + 12);
        // Credentials and `.git` do not make another repository.
        assert_eq!(
            name,
            mirror_dir_name("https://u:p@github.com/TabbyML/tabby")
        );
    }

    #[test]
    fn colliding_slugs_get_different_directories() {
        // Same slug once '/' and '_' are both mapped to '_': different repositories.
        let a = mirror_dir_name("https://host/a_b/c");
        let b = mirror_dir_name("https://host/a/b_c");
        assert_ne!(a, b);
        assert_eq!(a.rsplit_once('-').unwrap().0, b.rsplit_once('-').unwrap().0);
    }

    #[test]
    fn dir_names_never_escape() {
        for url in [
            "..",
            "../..",
            "https://host/..",
            "file:///..",
            ".",
            "git@..:..",
            "/../../etc",
            "",
        ] {
            let name = mirror_dir_name(url);
            assert!(
                !name.contains('/') && !name.contains('\\'),
                "{url:?} → {name:?}"
            );
            assert!(
                name != "." && name != ".." && !name.starts_with('.'),
                "{url:?} → {name:?}"
            );
            let joined = std::path::Path::new("/root/repositories").join(&name);
            assert_eq!(
                joined.parent(),
                Some(std::path::Path::new("/root/repositories"))
            );
        }
        let long = format!("https://host/{}", "x".repeat(500));
        assert!(mirror_dir_name(&long).len() <= 64 + 13);
    }

    #[test]
    fn option_like_urls_are_refused() {
        for bad in [
            "--upload-pack=touch /tmp/pwned",
            "--upload-pack=touch",
            "-oProxyCommand=x:repo",
            "ssh://-oProxyCommand=touch/repo",
            "ssh://-oProxyCommand=x@host/repo",
            "ext::sh",
            "ext::touch",
            "http://host/repo",
            "fd::17",
            "file://relative",
            "host:-repo",
            "relative/path",
            "",
        ] {
            assert!(check_git_url(bad).is_err(), "{bad:?} was accepted");
        }
        for ok in [
            "https://github.com/TabbyML/tabby.git",
            "https://oauth2:tok@gitlab.com/g/r",
            "ssh://git@host:22/org/repo.git",
            "git://host/repo",
            "git@github.com:TabbyML/tabby.git",
            "file:///srv/git/repo",
            "/srv/git/repo",
        ] {
            assert_eq!(check_git_url(ok), Ok(()), "{ok:?}");
        }
        let message = check_git_url("--upload-pack=x").unwrap_err();
        assert!(message.contains("option"), "{message}");
    }

    #[test]
    fn local_paths() {
        assert_eq!(local_path("file:///srv/r"), Some(PathBuf::from("/srv/r")));
        assert_eq!(local_path("/srv/r"), Some(PathBuf::from("/srv/r")));
        assert_eq!(local_path("https://h/r"), None);
        assert_eq!(local_path("git@h:r"), None);
    }

    #[test]
    fn urls_are_redacted() {
        for (input, expected) in [
            ("https://u:p@host/x/y.git", "https://host/x/y.git"),
            (
                "https://oauth2:glpat-abc@gitlab.com/g/r",
                "https://gitlab.com/g/r",
            ),
            ("https://host", "https://host"),
            ("https://tok@host?x=1", "https://host?x=1"),
            (
                "https://h/docs?token=abc&page=2&access_token=def",
                "https://h/docs?token=REDACTED&page=2&access_token=REDACTED",
            ),
            (
                "https://h/p?private_token=a&key=b&password=c&secret=d&x_token=e#frag",
                "https://h/p?private_token=REDACTED&key=REDACTED&password=REDACTED&secret=REDACTED&x_token=REDACTED#frag",
            ),
            ("https://h/a@b/c", "https://h/a@b/c"),
            ("git@host:x/y", "git@host:x/y"),
        ] {
            assert_eq!(redact_url(input), expected, "{input}");
        }
    }

    #[test]
    fn urls_in_text_are_redacted() {
        let command = r#"{"SchedulerGitRepository":{"git_url":"https://oauth2:SECRET@host/r","source_id":"git:x"}}"#;
        let redacted = redact_urls_in(command);
        assert!(!redacted.contains("SECRET"), "{redacted}");
        assert!(
            redacted.contains(r#""git_url":"https://host/r""#),
            "{redacted}"
        );
        assert_eq!(
            redact_urls_in("fatal: could not read from https://a:b@h/r (x) and http://h/?token=t."),
            "fatal: could not read from https://h/r (x) and http://h/?token=REDACTED."
        );
        assert_eq!(redact_urls_in("no urls here"), "no urls here");
    }

    #[test]
    fn redaction() {
        assert_eq!(
            redact_credentials("https://u:p@host/x/y.git"),
            "https://host/x/y.git"
        );
        assert_eq!(redact_credentials("git@host:x/y"), "git@host:x/y");
    }
}
