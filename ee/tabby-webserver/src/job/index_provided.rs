//! The `SchedulerGithubGitlabRepository` job: an active provided repository's code, cloned
//! over https with its integration's token (a header for the vendor's own host, never in a
//! URL, an argument, a log or the command), then its issues and pull/merge requests into the
//! doc corpus, those changed since the last run that finished.

use anyhow::Context as _;
use chrono::{Duration, Utc};
use tabby_index::{
    RepositoryToIndex,
    doc::{DocFields, DocIndexer, StructuredDoc},
};

use super::{JobLog, JobService};
use crate::{directory::provided_source_id, integration::vendor};

/// Up to this many active provided repositories are all indexed every hour; beyond it, each
/// hour takes one share of about this size, so that every one is indexed every few hours.
pub const HOURLY_SHARE: usize = 24;

/// Vendors' clocks and ours differ, and an issue may change while it is being read: the next
/// run asks for changes since a little before this one started.
const SINCE_SLACK_MINUTES: i64 = 10;

/// The provided repositories (by id) to index in `hour` (hours since the epoch).
pub fn hourly_share(ids: &[i64], hour: i64) -> Vec<i64> {
    let shares = ids.len().div_ceil(HOURLY_SHARE).max(1) as i64;
    ids.iter()
        .copied()
        .filter(|id| id.rem_euclid(shares) == hour.rem_euclid(shares))
        .collect()
}

/// The doc corpus id of a provided repository's issue or pull request.
pub fn provided_doc_id(source_id: &str, kind: &str, number: &str) -> String {
    format!("{source_id}:{kind}:{number}")
}

impl JobService {
    pub(super) async fn index_provided_repository(
        &self,
        id: i64,
        log: &JobLog,
    ) -> anyhow::Result<()> {
        let deps = self.deps()?;
        let (repo, integration) = self
            .db
            .get_provided_repository(id)
            .await?
            .context("the provided repository no longer exists")?;
        if !repo.active {
            log.info("the repository is not active: nothing to index");
            return Ok(());
        }
        let sync = self
            .integrations
            .get()
            .context("integrations are not set up in this server")?;
        let access = sync.access(&integration)?;
        let auth = access.git_auth(&repo.git_url)?;
        let source_id = provided_source_id(id);
        let started = Utc::now();

        super::index_repository::index_code(
            &deps,
            &RepositoryToIndex {
                source_id: source_id.clone(),
                git_url: repo.git_url.clone(),
                refs: repo.refs.clone(),
            },
            log,
            Some(&auth),
        )
        .await?;

        let api = access.api(sync.http());
        let documents =
            match vendor::list_documents(&api, &repo.name, &repo.vendor_id, repo.docs_synced_at)
                .await
            {
                Ok(documents) => documents,
                Err(e) => {
                    // A refused token shows on the integration as well.
                    let message =
                        format!("reading issues and pull requests of {}: {e:#}", repo.name);
                    if let Err(db) = self
                        .db
                        .set_integration_error(integration.id, &message)
                        .await
                    {
                        log.warn(format!("cannot record the error on the integration: {db}"));
                    }
                    return Err(anyhow::anyhow!(message));
                }
            };
        let mut docs = DocIndexer::open(&deps.index_dir, deps.embedding.clone())?;
        let (mut issues, mut pulls) = (0, 0);
        for doc in documents {
            let fields = match doc.kind {
                "issue" => {
                    issues += 1;
                    DocFields::Issue {
                        title: doc.title,
                        link: doc.link,
                        author: doc.author,
                        body: doc.body,
                        closed: doc.done,
                    }
                }
                _ => {
                    pulls += 1;
                    DocFields::Pull {
                        title: doc.title,
                        link: doc.link,
                        author: doc.author,
                        body: doc.body,
                        diff: doc.diff,
                        merged: doc.done,
                    }
                }
            };
            docs.add(&StructuredDoc {
                source_id: source_id.clone(),
                id: provided_doc_id(&source_id, doc.kind, &doc.number),
                fields,
            })
            .await?;
        }
        docs.commit()?;
        self.db
            .set_provided_repository_docs_synced(
                id,
                started - Duration::minutes(SINCE_SLACK_MINUTES),
            )
            .await?;
        log.info(format!(
            "indexed {issues} issues and {pulls} pull requests changed {}",
            match repo.docs_synced_at {
                Some(at) => format!("since {}", at.to_rfc3339()),
                None => "ever".into(),
            }
        ));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_repository_is_indexed_within_a_few_hours() {
        let few: Vec<i64> = (1..=HOURLY_SHARE as i64).collect();
        assert_eq!(hourly_share(&few, 7), few, "all of them every hour");
        let many: Vec<i64> = (1..=100).collect();
        let shares = 100usize.div_ceil(HOURLY_SHARE) as i64;
        let mut seen = Vec::new();
        for hour in 0..shares {
            let share = hourly_share(&many, hour);
            assert!(share.len() <= HOURLY_SHARE, "{}", share.len());
            seen.extend(share);
        }
        seen.sort();
        assert_eq!(seen, many);
        assert!(hourly_share(&[], 3).is_empty());
    }
}
