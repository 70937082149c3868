//! Git remote URLs: canonical form without credentials, the repository name used to match an
//! editor's `git_url` against configured repositories, and the directory name a clone lives in.

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

/// A directory name for a clone: canonical URL with every char outside `[A-Za-z0-9_.-]` mapped to
/// `_` and runs of `_` collapsed. `https://github.com/TabbyML/tabby.git` → `https_github.com_TabbyML_tabby`.
pub fn sanitize_git_url_to_dir_name(url: &str) -> String {
    let canonical = canonicalize_git_url(url);
    let mut out = String::with_capacity(canonical.len());
    for ch in canonical.chars() {
        let ch = if ch.is_ascii_alphanumeric() || matches!(ch, '_' | '.' | '-') {
            ch
        } else {
            '_'
        };
        if ch == '_' && out.ends_with('_') {
            continue;
        }
        out.push(ch);
    }
    out
}

/// Removes `user:password@` from a URL so it can be logged.
pub fn redact_credentials(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        let (authority, path) = rest
            .split_once('/')
            .map_or((rest, None), |(a, p)| (a, Some(p)));
        if let Some((_, host)) = authority.rsplit_once('@') {
            return match path {
                Some(p) => format!("{scheme}://{host}/{p}"),
                None => format!("{scheme}://{host}"),
            };
        }
    }
    url.to_string()
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
        assert_eq!(
            sanitize_git_url_to_dir_name("https://github.com/TabbyML/tabby.git"),
            "https_github.com_TabbyML_tabby"
        );
        assert_eq!(
            sanitize_git_url_to_dir_name("https://u:p@github.com/TabbyML/tabby"),
            "https_github.com_TabbyML_tabby"
        );
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
