//! The code browser: a repository's files at a ref, read from its local copy (the mirror the
//! indexing job keeps, or the local directory) through `tabby-index`'s [`RepoFiles`], for
//! the GraphQL fields `repositoryGrep` / `repositorySearch` and the raw-file route
//! `/repositories/{kind}/{id}/rev/{rev}/{path}`.
//!
//! Every call first finds the repository among those the caller may read: one they may not
//! read answers exactly like one that does not exist. A ref is a ref name or a commit id,
//! never a revision expression. Grep runs inside a budget (time, bytes read, results); the
//! regex engine is linear-time with bounded program size, so no pattern can pin a core.

use std::{
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use juniper::ID;
use regex::{Regex, RegexBuilder};
use tabby_common::languages::LanguageTable;
use tabby_index::repo_files::{RepoFileError, RepoFiles, Snapshot};
use tabby_schema::{AccessPolicy, AsRowid, CoreError, Result, repository::RepositoryKind};

use crate::directory::{Directory, git_source_id};

/// Grep's budget.
const GREP_MAX_TIME: Duration = Duration::from_secs(5);
const GREP_MAX_BYTES: u64 = 256 << 20;
const GREP_MAX_FILES: usize = 100;
const GREP_MAX_LINES: usize = 1000;
const GREP_MAX_LINES_PER_FILE: usize = 20;
const MAX_LINE_CHARS: usize = 500;
const MAX_QUERY_BYTES: usize = 1024;
const SEARCH_MAX_RESULTS: usize = 50;

/// A repository the caller may read, located.
pub struct Target {
    pub git_url: String,
    pub name: String,
}

pub struct CodeBrowser {
    directory: Arc<Directory>,
    files: RepoFiles,
    languages: LanguageTable,
}

/// One matching line: 1-based number, the text (cut at 500 characters) and the byte ranges
/// of the matches in it.
pub struct GrepLine {
    pub number: usize,
    pub text: String,
    pub matches: Vec<(usize, usize)>,
}

pub struct GrepFile {
    pub path: String,
    pub lines: Vec<GrepLine>,
}

pub struct GrepOutput {
    pub files: Vec<GrepFile>,
    /// Why the search stopped early, if it did.
    pub truncated: Option<&'static str>,
    pub elapsed: Duration,
}

/// A parsed `repositoryGrep` query: bare words form the content regex; `f:` matches the path,
/// `lang:` the language; `-` before any term negates it.
#[derive(Default)]
struct GrepQuery {
    content: Option<Regex>,
    not_content: Vec<Regex>,
    paths: Vec<Regex>,
    not_paths: Vec<Regex>,
    langs: Vec<String>,
    not_langs: Vec<String>,
}

fn regex(pattern: &str) -> std::result::Result<Regex, String> {
    RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .dfa_size_limit(8 << 20)
        .build()
        .map_err(|e| format!("{pattern:?} is not a valid regex: {e}"))
}

fn parse_query(query: &str) -> std::result::Result<GrepQuery, String> {
    if query.trim().is_empty() {
        return Err("the query is empty".into());
    }
    if query.len() > MAX_QUERY_BYTES {
        return Err(format!("the query is longer than {MAX_QUERY_BYTES} bytes"));
    }
    let mut parsed = GrepQuery::default();
    let mut words = Vec::new();
    for term in query.split_whitespace() {
        let (negated, term) = match term.strip_prefix('-') {
            Some(rest) if !rest.is_empty() => (true, rest),
            _ => (false, term),
        };
        if let Some(path) = term.strip_prefix("f:") {
            let re = regex(path)?;
            if negated {
                parsed.not_paths.push(re)
            } else {
                parsed.paths.push(re)
            }
        } else if let Some(lang) = term.strip_prefix("lang:") {
            let lang = lang.to_lowercase();
            if negated {
                parsed.not_langs.push(lang)
            } else {
                parsed.langs.push(lang)
            }
        } else if negated {
            parsed.not_content.push(regex(term)?);
        } else {
            words.push(term);
        }
    }
    if !words.is_empty() {
        parsed.content = Some(regex(&words.join(" "))?);
    }
    Ok(parsed)
}

/// A ref name (`main`, `refs/tags/v1`, `release/2.0`) or a commit id: no revision
/// expressions (`main~3`, `:/text`, `@{…}`), nothing an option parser could take.
fn valid_rev(rev: &str) -> bool {
    !rev.is_empty()
        && rev.len() <= 256
        && !rev.starts_with(['-', '/', '.'])
        && !rev.contains("..")
        && rev
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'))
}

fn file_error(e: RepoFileError) -> CoreError {
    match e {
        RepoFileError::BadPath(..) => CoreError::invalid("path", e.to_string()),
        RepoFileError::NotFound(message) | RepoFileError::TooLarge(message) => {
            CoreError::Rejected(message)
        }
        RepoFileError::Other(e) => CoreError::Other(e),
    }
}

/// What a path names in a snapshot.
pub enum Entry {
    /// The entries directly inside: (is a directory, path from the repository root).
    Dir(Vec<(bool, String)>),
    File(Vec<u8>),
}

impl CodeBrowser {
    pub fn new(directory: Arc<Directory>, repositories_dir: PathBuf) -> Self {
        Self {
            directory,
            files: RepoFiles::new(repositories_dir),
            languages: LanguageTable::builtin(),
        }
    }

    /// The repository `kind`/`id` if `policy` may read it.
    pub async fn target(
        &self,
        policy: &AccessPolicy,
        kind: RepositoryKind,
        id: &ID,
    ) -> Result<Target> {
        let missing = || CoreError::NotFound("Repository not found");
        let rowid = id.as_rowid().map_err(|_| missing())?;
        match kind {
            RepositoryKind::GitConfig => {
                let repo = usize::try_from(rowid)
                    .ok()
                    .and_then(|i| self.directory.config_repositories().get(i))
                    .filter(|r| policy.can_read(&r.source_id))
                    .ok_or_else(missing)?;
                Ok(Target {
                    git_url: repo.git_url.clone(),
                    name: repo.name.clone(),
                })
            }
            RepositoryKind::Git => {
                let snapshot = self.directory.snapshot().await?;
                let dao = snapshot
                    .db_repositories
                    .iter()
                    .find(|d| d.id == rowid && policy.can_read(&git_source_id(d.id)))
                    .ok_or_else(missing)?;
                Ok(Target {
                    git_url: dao.git_url.clone(),
                    name: dao.name.clone(),
                })
            }
            RepositoryKind::Github
            | RepositoryKind::Gitlab
            | RepositoryKind::GithubSelfHosted
            | RepositoryKind::GitlabSelfHosted => {
                let snapshot = self.directory.snapshot().await?;
                let entry = snapshot
                    .provided_repositories
                    .iter()
                    .find(|p| {
                        p.repo.id == rowid
                            && crate::service::repository::provided_kind(p.kind) == kind
                            && policy.can_read(&crate::directory::provided_source_id(p.repo.id))
                    })
                    .ok_or_else(missing)?;
                Ok(Target {
                    git_url: entry.repo.git_url.clone(),
                    name: entry.repo.name.clone(),
                })
            }
        }
    }

    /// The files of `target` at `rev` (the default branch when `None`).
    pub fn snapshot(&self, target: &Target, rev: Option<&str>) -> Result<Arc<Snapshot>> {
        if let Some(rev) = rev
            && !valid_rev(rev)
        {
            return Err(CoreError::invalid(
                "rev",
                "A ref name (e.g. main, refs/tags/v1) or a commit id",
            ));
        }
        self.files
            .snapshot(&target.git_url, rev)
            .map_err(file_error)
    }

    /// A file's bytes or a directory's entries; `path` empty for the root.
    pub fn entry(&self, snapshot: &Snapshot, path: &str) -> Result<Entry> {
        let path = path.trim_matches('/');
        if !path.is_empty() {
            let clean = tabby_index::repo_files::clean_path(path).map_err(file_error)?;
            if snapshot
                .files
                .binary_search_by(|f| f.as_str().cmp(&clean))
                .is_ok()
            {
                return snapshot.read(&clean).map(Entry::File).map_err(file_error);
            }
        }
        let prefix = if path.is_empty() {
            String::new()
        } else {
            format!("{path}/")
        };
        let mut entries: Vec<(bool, String)> = Vec::new();
        for file in snapshot.files.iter().filter(|f| f.starts_with(&prefix)) {
            let rest = &file[prefix.len()..];
            let entry = match rest.split_once('/') {
                Some((dir, _)) => (true, format!("{prefix}{dir}")),
                None => (false, file.clone()),
            };
            // Files are sorted, so the files of one directory are contiguous: comparing
            // with the last entry is enough.
            if entries.last() != Some(&entry) {
                entries.push(entry);
            }
        }
        if entries.is_empty() {
            return Err(CoreError::NotFound("No such file or directory"));
        }
        entries.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        Ok(Entry::Dir(entries))
    }

    /// `repositoryGrep`.
    pub fn grep(&self, snapshot: &Snapshot, query: &str) -> Result<GrepOutput> {
        let query = parse_query(query).map_err(|m| CoreError::invalid("query", m))?;
        let started = Instant::now();
        let mut out = GrepOutput {
            files: Vec::new(),
            truncated: None,
            elapsed: Duration::ZERO,
        };
        let mut lines_total = 0;
        let mut read: u64 = 0;
        for path in &snapshot.files {
            if started.elapsed() > GREP_MAX_TIME {
                out.truncated = Some("time budget (5 s) spent");
                break;
            }
            if read > GREP_MAX_BYTES {
                out.truncated = Some("read budget (256 MiB) spent");
                break;
            }
            if out.files.len() == GREP_MAX_FILES || lines_total >= GREP_MAX_LINES {
                out.truncated = Some("result limit reached");
                break;
            }
            if !query.paths.iter().all(|r| r.is_match(path))
                || query.not_paths.iter().any(|r| r.is_match(path))
            {
                continue;
            }
            if !query.langs.is_empty() || !query.not_langs.is_empty() {
                let lang = self
                    .languages
                    .by_path(std::path::Path::new(path))
                    .map(|l| l.canonical_name().to_lowercase())
                    .unwrap_or_default();
                if (!query.langs.is_empty() && !query.langs.contains(&lang))
                    || query.not_langs.contains(&lang)
                {
                    continue;
                }
            }
            if query.content.is_none() && query.not_content.is_empty() {
                out.files.push(GrepFile {
                    path: path.clone(),
                    lines: Vec::new(),
                });
                continue;
            }
            let Ok(bytes) = snapshot.read(path) else {
                continue;
            };
            read += bytes.len() as u64;
            if tabby_index::code::filter::looks_binary(&bytes) {
                continue;
            }
            let text = String::from_utf8_lossy(&bytes);
            if query.not_content.iter().any(|r| r.is_match(&text)) {
                continue;
            }
            let Some(content) = &query.content else {
                out.files.push(GrepFile {
                    path: path.clone(),
                    lines: Vec::new(),
                });
                continue;
            };
            let mut lines = Vec::new();
            for (i, line) in text.lines().enumerate() {
                if lines.len() == GREP_MAX_LINES_PER_FILE || lines_total >= GREP_MAX_LINES {
                    break;
                }
                if !content.is_match(line) {
                    continue;
                }
                let shown: String = line.chars().take(MAX_LINE_CHARS).collect();
                let matches = content
                    .find_iter(&shown)
                    .filter(|m| !m.is_empty())
                    .map(|m| (m.start(), m.end()))
                    .collect();
                lines.push(GrepLine {
                    number: i + 1,
                    text: shown,
                    matches,
                });
                lines_total += 1;
            }
            if !lines.is_empty() {
                out.files.push(GrepFile {
                    path: path.clone(),
                    lines,
                });
            }
        }
        out.elapsed = started.elapsed();
        Ok(out)
    }

    /// `repositorySearch`: paths that contain `pattern`'s characters in order (case
    /// ignored), tightest first; with the matched character positions.
    pub fn search(&self, snapshot: &Snapshot, pattern: &str) -> Result<Vec<(String, Vec<i32>)>> {
        if pattern.len() > MAX_QUERY_BYTES {
            return Err(CoreError::invalid("pattern", "At most 1024 bytes"));
        }
        let needle: Vec<char> = pattern
            .to_lowercase()
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        let mut scored: Vec<(usize, String, Vec<i32>)> = Vec::new();
        for path in &snapshot.files {
            let mut indices = Vec::with_capacity(needle.len());
            let mut next = 0;
            for (i, c) in path.to_lowercase().chars().enumerate() {
                if next < needle.len() && c == needle[next] {
                    indices.push(i as i32);
                    next += 1;
                }
            }
            if next < needle.len() {
                continue;
            }
            let spread = match (indices.first(), indices.last()) {
                (Some(a), Some(b)) => (b - a) as usize,
                _ => 0,
            };
            scored.push((spread * 1000 + path.len(), path.clone(), indices));
        }
        scored.sort();
        Ok(scored
            .into_iter()
            .take(SEARCH_MAX_RESULTS)
            .map(|(_, path, indices)| (path, indices))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_and_refs() {
        let q = parse_query("fn  main f:\\.rs$ -f:test lang:Rust -lang:go -todo").unwrap();
        assert_eq!(q.content.unwrap().as_str(), "fn main");
        assert_eq!((q.paths.len(), q.not_paths.len()), (1, 1));
        assert_eq!(
            (q.langs, q.not_langs),
            (vec!["rust".to_string()], vec!["go".to_string()])
        );
        assert_eq!(q.not_content.len(), 1);
        assert!(parse_query("").is_err());
        assert!(parse_query("(unclosed").is_err());
        // A pattern whose program would be huge is refused at once, not run.
        assert!(parse_query("(a{1000}){1000}").is_err());
        for ok in ["main", "refs/tags/v1.0", "release/2.0", "0123abcd"] {
            assert!(valid_rev(ok), "{ok}");
        }
        for bad in [
            "", "-c", "main~3", ":/fix", "HEAD@{1}", "a..b", "/etc", "main^",
        ] {
            assert!(!valid_rev(bad), "{bad}");
        }
    }
}
