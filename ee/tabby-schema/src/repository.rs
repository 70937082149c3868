//! Repositories: the git repositories added through GraphQL (source id `git:<id>`) and the
//! combined list with the ones from `config.toml` (source id `config:<hashid>`).

use std::sync::LazyLock;

use async_trait::async_trait;
use juniper::{GraphQLEnum, GraphQLObject, ID};
use regex::Regex;

use crate::{CoreError, Result, connection, policy::AccessPolicy, relay::RelayArgs};

#[derive(Clone, Debug, GraphQLObject)]
pub struct GitReference {
    pub name: String,
    /// The commit the reference pointed at when the repository was last synced (empty before
    /// the first sync).
    pub commit: String,
}

#[derive(Clone, Debug, GraphQLObject)]
#[graphql(context = crate::Context)]
pub struct GitRepository {
    pub id: ID,
    pub source_id: String,
    pub name: String,
    /// Credentials redacted.
    pub git_url: String,
    pub refs: Vec<GitReference>,
    /// The repository's indexing job and its latest run.
    pub job_info: crate::job::JobInfo,
}

connection!(
    GitRepositoryConnection,
    GitRepositoryEdge,
    GitRepository,
    crate::Context
);

#[derive(Clone, Copy, Debug, PartialEq, Eq, GraphQLEnum)]
pub enum RepositoryKind {
    Git,
    Github,
    Gitlab,
    GithubSelfHosted,
    GitlabSelfHosted,
    GitConfig,
}

/// Any repository a user may use as context.
#[derive(Clone, Debug, GraphQLObject)]
#[graphql(context = crate::Context)]
pub struct Repository {
    pub id: ID,
    pub source_id: String,
    pub source_kind: String,
    pub source_name: String,
    pub name: String,
    pub kind: RepositoryKind,
    pub git_url: String,
    pub refs: Vec<GitReference>,
    /// The repository's indexing job and its latest run (not in upstream's type; config
    /// repositories are indexed by the same jobs as the ones added here).
    pub job_info: crate::job::JobInfo,
}

/// A byte range of a match within [`GrepLine::text`].
#[derive(Clone, Debug, GraphQLObject)]
pub struct GrepSubMatch {
    pub bytes_start: i32,
    pub bytes_end: i32,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct GrepLine {
    /// 1-based.
    pub line_number: i32,
    /// The line, cut at 500 characters.
    pub text: String,
    pub sub_matches: Vec<GrepSubMatch>,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct GrepFile {
    pub path: String,
    /// Empty when the query has no content pattern (a file-name search).
    pub lines: Vec<GrepLine>,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct RepositoryGrepOutput {
    pub files: Vec<GrepFile>,
    pub elapsed_ms: i32,
    /// Why the search stopped early (time or read budget, result limit), if it did.
    pub truncated: Option<String>,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct FileEntrySearchResult {
    pub r#type: String,
    pub path: String,
    /// Character positions of the pattern's characters in `path`.
    pub indices: Vec<i32>,
}

static REPOSITORY_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-zA-Z][\w.-]+$").expect("valid regex"));

pub fn validate_repository_name(name: &str) -> Result<()> {
    if name.len() > 255 || !REPOSITORY_NAME.is_match(name) {
        return Err(CoreError::invalid(
            "name",
            "Name must start with a letter and contain only letters, digits, '_', '.' and '-'",
        ));
    }
    Ok(())
}

/// A git URL we can index: https, ssh or git URLs, `user@host:path`, a `file://` URL or an
/// absolute path (local ones are further limited to `[security] local_repository_roots` by the
/// service). Nothing that git could read as an option.
pub fn validate_git_url(url: &str) -> Result<()> {
    tabby_common::git_url::check_git_url(url)
        .map_err(|message| CoreError::invalid("gitUrl", format!("Git URL {message}")))
}

#[async_trait]
pub trait RepositoryService: Send + Sync {
    async fn list_git(&self, page: RelayArgs) -> Result<GitRepositoryConnection>;
    /// Adds a repository; with `user_group_ids`, only those groups (and admins) may read it
    /// from the first moment.
    async fn create_git(
        &self,
        name: &str,
        git_url: &str,
        refs: Vec<String>,
        user_group_ids: Vec<i64>,
    ) -> Result<ID>;
    async fn update_git(&self, id: i64, refs: Vec<String>) -> Result<()>;
    async fn delete_git(&self, id: i64) -> Result<()>;
    /// Config and DB repositories the policy allows.
    async fn repository_list(&self, policy: &AccessPolicy) -> Result<Vec<Repository>>;
    /// Searches a readable repository's files at `rev` (default branch when `None`): bare
    /// words are a regex over lines, `f:` over paths, `lang:` the language, `-` negates.
    async fn grep(
        &self,
        policy: &AccessPolicy,
        kind: RepositoryKind,
        id: &juniper::ID,
        rev: Option<&str>,
        query: &str,
    ) -> Result<RepositoryGrepOutput>;
    /// Paths of a readable repository at `rev` that contain `pattern`'s characters in order.
    async fn search_files(
        &self,
        policy: &AccessPolicy,
        kind: RepositoryKind,
        id: &juniper::ID,
        rev: Option<&str>,
        pattern: &str,
    ) -> Result<Vec<FileEntrySearchResult>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_urls() {
        for ok in ["tabby", "my-repo.rs", "A_b"] {
            assert!(validate_repository_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a", "1abc", "-abc", "a b", "a/b"] {
            assert!(validate_repository_name(bad).is_err(), "{bad}");
        }
        for ok in [
            "https://github.com/TabbyML/tabby",
            "git@github.com:TabbyML/tabby.git",
            "file:///tmp/repo",
            "/srv/git/repo",
        ] {
            assert!(validate_git_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "https://",
            "not a url",
            "relative/path",
            "ftp://x/y",
            "--upload-pack=touch /tmp/pwned",
            "-u",
        ] {
            assert!(validate_git_url(bad).is_err(), "{bad}");
        }
    }
}
