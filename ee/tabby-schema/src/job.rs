//! Background jobs and the knowledge sources they index: job runs and their stats, web
//! documents to crawl, ingestion status, and admin notifications.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use juniper::{GraphQLInputObject, GraphQLObject, ID, graphql_object};

use crate::{
    AccessPolicy, CoreError, Result, connection,
    relay::RelayArgs,
    schema::{Context, check_admin},
};

#[derive(Clone, Debug)]
pub struct JobRun {
    pub id: ID,
    pub job: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// `null` while pending or running; 0 success, 1 failure, -1 interrupted or unreadable.
    pub exit_code: Option<i32>,
    /// Deprecated (always empty): logs are at `/background-jobs/{id}/logs`.
    pub stdout: String,
    /// The job's command, credentials redacted (what `triggerJobRun` takes).
    pub command: String,
    /// How far a running indexing run is; `None` otherwise.
    pub progress: Option<JobRunProgress>,
}

/// How far a running repository indexing run is, updated as each file is read.
#[derive(Clone, Debug, PartialEq, GraphQLObject)]
pub struct JobRunProgress {
    /// The repository being indexed (credentials redacted).
    pub repository: String,
    /// Files of the snapshot gone through so far (indexed, unchanged or skipped).
    pub files_done: i32,
    /// Files in the snapshot.
    pub files_total: i32,
    /// Megabytes (10^6 bytes) of code indexed so far.
    pub indexed_mb: f64,
    /// `indexedMb` over the seconds since the repository's indexing started.
    pub mb_per_second: f64,
    pub elapsed_seconds: f64,
}

#[graphql_object(context = Context)]
impl JobRun {
    fn id(&self) -> &ID {
        &self.id
    }
    fn job(&self) -> &str {
        &self.job
    }
    fn created_at(&self) -> DateTime<Utc> {
        self.created_at
    }
    fn updated_at(&self) -> DateTime<Utc> {
        self.updated_at
    }
    fn started_at(&self) -> Option<DateTime<Utc>> {
        self.started_at
    }
    fn finished_at(&self) -> Option<DateTime<Utc>> {
        self.finished_at
    }
    /// `null` while pending or running; 0 success, 1 failure, -1 interrupted or unreadable.
    fn exit_code(&self) -> Option<i32> {
        self.exit_code
    }
    /// Deprecated (always empty): logs are at `/background-jobs/{id}/logs`.
    fn stdout(&self) -> &str {
        &self.stdout
    }
    /// While an indexing run is running: files done of the total and throughput; `null` for
    /// other jobs and once the run has ended.
    fn progress(&self) -> Option<&JobRunProgress> {
        self.progress.as_ref()
    }
    /// The job's command with credentials redacted (what `triggerJobRun` takes). Admin only.
    async fn command(&self, ctx: &Context) -> Result<String> {
        check_admin(ctx).await?;
        Ok(self.command.clone())
    }
}

connection!(JobRunConnection, JobRunEdge, JobRun, Context);

#[derive(Clone, Debug, Default, GraphQLObject)]
pub struct JobStats {
    pub success: i32,
    pub failed: i32,
    pub pending: i32,
}

/// The latest run of a command (e.g. a repository's indexing job).
#[derive(Clone, Debug)]
pub struct JobInfo {
    pub last_job_run: Option<JobRun>,
    /// Credentials redacted.
    pub command: String,
}

#[graphql_object(context = Context)]
impl JobInfo {
    fn last_job_run(&self) -> Option<&JobRun> {
        self.last_job_run.as_ref()
    }
    /// The job's command with credentials redacted (what `triggerJobRun` takes). Admin only.
    async fn command(&self, ctx: &Context) -> Result<String> {
        check_admin(ctx).await?;
        Ok(self.command.clone())
    }
}

#[derive(Clone, Debug, GraphQLObject)]
#[graphql(context = Context)]
pub struct CustomWebDocument {
    pub id: ID,
    pub source_id: String,
    pub name: String,
    pub url: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub job_info: JobInfo,
}

connection!(
    CustomDocumentConnection,
    CustomDocumentEdge,
    CustomWebDocument,
    Context
);

#[derive(Clone, Debug, GraphQLInputObject)]
pub struct CreateCustomDocumentInput {
    pub name: String,
    pub url: String,
}

impl CreateCustomDocumentInput {
    pub fn validate(&self) -> Result<()> {
        let name = self.name.trim();
        if name.is_empty() || name.len() > 255 || name.chars().any(char::is_control) {
            return Err(CoreError::invalid(
                "name",
                "Name must be 1 to 255 characters without control characters",
            ));
        }
        let url = self.url.trim();
        let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
        if !scheme_ok || url.len() < 10 || url.chars().any(|c| c.is_whitespace()) {
            return Err(CoreError::invalid("url", "URL must be an http(s) URL"));
        }
        Ok(())
    }
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct IngestionStats {
    pub source: String,
    pub pending: i32,
    pub indexed: i32,
    pub failed: i32,
    pub total: i32,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct Notification {
    pub id: ID,
    /// Markdown.
    pub content: String,
    pub read: bool,
    pub created_at: DateTime<Utc>,
}

#[async_trait]
pub trait JobService: Send + Sync {
    async fn list(
        &self,
        ids: Vec<i64>,
        jobs: Vec<String>,
        page: RelayArgs,
    ) -> Result<JobRunConnection>;
    /// Over the last 7 days.
    async fn stats(&self, jobs: Vec<String>) -> Result<JobStats>;
    /// Enqueues a command (a serialized job event); an identical pending one is reused.
    async fn trigger(&self, command: &str) -> Result<ID>;
    /// The custom web documents `reader` may read (all of them for admins).
    async fn web_documents(
        &self,
        ids: Vec<i64>,
        reader: &AccessPolicy,
        page: RelayArgs,
    ) -> Result<CustomDocumentConnection>;
    async fn create_web_document(&self, input: &CreateCustomDocumentInput) -> Result<ID>;
    async fn delete_web_document(&self, id: i64) -> Result<()>;
    async fn ingestion_status(&self, sources: Vec<String>) -> Result<Vec<IngestionStats>>;
    async fn notifications(&self, user_id: i64, is_admin: bool) -> Result<Vec<Notification>>;
    async fn mark_notifications_read(
        &self,
        user_id: i64,
        is_admin: bool,
        id: Option<i64>,
    ) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn web_document_input() {
        let ok = CreateCustomDocumentInput {
            name: "Docs".into(),
            url: "https://example.com/docs/".into(),
        };
        assert!(ok.validate().is_ok());
        for (name, url, path) in [
            ("", "https://example.com", "name"),
            ("Docs", "ftp://example.com", "url"),
            ("Docs", "https://exa mple.com", "url"),
        ] {
            match (CreateCustomDocumentInput {
                name: name.into(),
                url: url.into(),
            })
            .validate()
            {
                Err(CoreError::InvalidInput(e)) => assert_eq!(e[0].path, path),
                other => panic!("{other:?}"),
            }
        }
    }
}
