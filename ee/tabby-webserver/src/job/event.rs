//! What a job run does: its command, stored in `job_runs` as upstream's JSON, and what
//! `triggerJobRun` may ask for.

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use tabby_common::git_url::{redact_url, redact_urls_in};

/// A repository to index, as upstream serializes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeRepositoryJob {
    pub git_url: String,
    pub source_id: String,
    #[serde(default)]
    pub git_refs: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebCrawlerJob {
    pub source_id: String,
    pub url: String,
    #[serde(default)]
    pub url_prefix: Option<String>,
}

/// A job's command (upstream's externally tagged enum).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BackgroundJobEvent {
    SchedulerGitRepository(CodeRepositoryJob),
    /// Indexes a provided repository (its id): code, issues and pull/merge requests.
    SchedulerGithubGitlabRepository(String),
    WebCrawler(WebCrawlerJob),
    /// Lists the repositories of an integration (its id).
    SyncThirdPartyRepositories(String),
    IndexGarbageCollection,
    SyncIngestionIndex,
    Hourly,
    Daily,
}

impl BackgroundJobEvent {
    /// The jobs that carry no data, which `triggerJobRun` takes by name alone.
    pub const DATALESS: [BackgroundJobEvent; 4] = [
        BackgroundJobEvent::IndexGarbageCollection,
        BackgroundJobEvent::SyncIngestionIndex,
        BackgroundJobEvent::Hourly,
        BackgroundJobEvent::Daily,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            BackgroundJobEvent::SchedulerGitRepository(_) => "scheduler_git",
            BackgroundJobEvent::SchedulerGithubGitlabRepository(_) => "scheduler_github_gitlab",
            BackgroundJobEvent::WebCrawler(_) => "web_crawler",
            BackgroundJobEvent::SyncThirdPartyRepositories(_) => "third_party_repository_sync",
            BackgroundJobEvent::IndexGarbageCollection => "index_garbage_collection",
            BackgroundJobEvent::SyncIngestionIndex => "ingestion_index_sync",
            BackgroundJobEvent::Hourly => "hourly",
            BackgroundJobEvent::Daily => "daily",
        }
    }

    /// The command stored in `job_runs` and shown to admins: upstream's JSON with every URL's
    /// credentials redacted. The worker never runs a URL from a command: it looks the source
    /// up by its id when the run starts.
    pub fn to_command(&self) -> String {
        let mut event = self.clone();
        match &mut event {
            BackgroundJobEvent::SchedulerGitRepository(job) => {
                job.git_url = redact_url(&job.git_url)
            }
            BackgroundJobEvent::WebCrawler(job) => job.url = redact_url(&job.url),
            _ => {}
        }
        serde_json::to_string(&event).expect("job events serialize")
    }

    pub fn from_command(command: &str) -> anyhow::Result<Self> {
        serde_json::from_str(command)
            .with_context(|| format!("not a job command: {}", redact_urls_in(command)))
    }
}

/// What `triggerJobRun` accepts: a job that carries no data, or a reference to an existing
/// row by its source id. Any other field of the caller's JSON (a `git_url`, a `url`, refs) is
/// skipped unread; the job is built from the row.
#[derive(Debug, Deserialize)]
pub enum JobRequest {
    SchedulerGitRepository(SourceRef),
    /// A provided repository by id.
    SchedulerGithubGitlabRepository(String),
    WebCrawler(SourceRef),
    /// An integration by id; the worker reads the row when the run starts.
    SyncThirdPartyRepositories(String),
    IndexGarbageCollection,
    SyncIngestionIndex,
    Hourly,
    Daily,
}

#[derive(Debug, Deserialize)]
pub struct SourceRef {
    pub source_id: String,
}

impl JobRequest {
    pub fn parse(command: &str) -> Option<JobRequest> {
        serde_json::from_str(command).ok()
    }

    /// What a caller may send, for the error a command that is none of them gets; the names
    /// come from [`BackgroundJobEvent`] itself.
    pub fn accepted() -> String {
        let dataless: Vec<String> = BackgroundJobEvent::DATALESS
            .iter()
            .map(BackgroundJobEvent::to_command)
            .collect();
        let by_source = [
            BackgroundJobEvent::SchedulerGitRepository(CodeRepositoryJob {
                git_url: String::new(),
                source_id: "git:…".into(),
                git_refs: vec![],
            }),
            BackgroundJobEvent::WebCrawler(WebCrawlerJob {
                source_id: "custom_web_document:…".into(),
                url: String::new(),
                url_prefix: None,
            }),
        ]
        .iter()
        .map(|e| {
            let variant = serde_json::to_value(e).expect("job events serialize");
            let (name, fields) = variant
                .as_object()
                .and_then(|o| o.iter().next())
                .expect("an externally tagged variant");
            format!("{{\"{name}\": {{\"source_id\": {}}}}}", fields["source_id"])
        })
        .collect::<Vec<_>>();
        format!(
            "Not a job command this server runs: {}, or an existing source by id: {}",
            dataless.join(", "),
            by_source.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_upstreams_json() {
        let git = BackgroundJobEvent::SchedulerGitRepository(CodeRepositoryJob {
            git_url: "https://example.com/r".into(),
            source_id: "git:abc".into(),
            git_refs: vec!["main".into()],
        });
        assert_eq!(
            git.to_command(),
            r#"{"SchedulerGitRepository":{"git_url":"https://example.com/r","source_id":"git:abc","git_refs":["main"]}}"#
        );
        assert_eq!(BackgroundJobEvent::Hourly.to_command(), r#""Hourly""#);
        assert_eq!(
            BackgroundJobEvent::from_command(
                r#"{"WebCrawler":{"source_id":"s","url":"http://x","url_prefix":null}}"#
            )
            .unwrap()
            .name(),
            "web_crawler"
        );
        assert!(BackgroundJobEvent::from_command("\"SyncPagesIndex\"").is_err());
    }

    #[test]
    fn commands_carry_no_credentials() {
        let git = BackgroundJobEvent::SchedulerGitRepository(CodeRepositoryJob {
            git_url: "https://oauth2:glpat-SECRET@gitlab.example/g/r".into(),
            source_id: "git:abc".into(),
            git_refs: vec![],
        });
        let command = git.to_command();
        assert!(!command.contains("SECRET"), "{command}");
        assert!(
            command.contains(r#""git_url":"https://gitlab.example/g/r""#),
            "{command}"
        );
        let web = BackgroundJobEvent::WebCrawler(WebCrawlerJob {
            source_id: "custom_web_document:x".into(),
            url: "https://docs.example/?private_token=SECRET".into(),
            url_prefix: None,
        });
        assert!(!web.to_command().contains("SECRET"), "{}", web.to_command());
        let err = BackgroundJobEvent::from_command(r#"{"X":"https://u:SECRET@h/"}"#)
            .unwrap_err()
            .to_string();
        assert!(!err.contains("SECRET"), "{err}");
    }

    /// A caller's URL in a `triggerJobRun` command is never read: only the source id.
    #[test]
    fn job_requests_reference_rows() {
        let attack = r#"{"SchedulerGitRepository":{"git_url":"--upload-pack=touch /tmp/pwned","source_id":"git:abc","git_refs":["--x"]}}"#;
        match JobRequest::parse(attack) {
            Some(JobRequest::SchedulerGitRepository(r)) => assert_eq!(r.source_id, "git:abc"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            JobRequest::parse(
                r#"{"WebCrawler":{"source_id":"custom_web_document:x","url":"http://169.254.169.254/"}}"#
            ),
            Some(JobRequest::WebCrawler(_))
        ));
        assert!(matches!(
            JobRequest::parse(r#""Daily""#),
            Some(JobRequest::Daily)
        ));
        for bad in [
            r#"{"SchedulerGitRepository":{}}"#,
            r#""SyncPagesIndex""#,
            "Daily",
            "",
        ] {
            assert!(JobRequest::parse(bad).is_none(), "{bad}");
        }
    }

    /// Every job that carries no data can be requested by name, and the error for a bad
    /// command names each of them.
    #[test]
    fn dataless_jobs_are_requestable() {
        let accepted = JobRequest::accepted();
        for event in BackgroundJobEvent::DATALESS {
            let command = event.to_command();
            assert!(JobRequest::parse(&command).is_some(), "{command}");
            assert!(accepted.contains(&command), "{accepted}");
        }
        assert!(
            accepted.contains(r#"{"SchedulerGitRepository": {"source_id": "git:…"}}"#),
            "{accepted}"
        );
    }
}
