//! A document hit in its three forms: as the doc search returns it, as a message stores it
//! (`thread_messages.attachment`), and as GraphQL shows it; and the text the answer's prompt
//! gets for it.

use tabby_common::api::doc::{DocSearchDocument, DocSearchHit};
use tabby_db::{
    AttachmentCommitDoc, AttachmentDoc, AttachmentIngestedDoc, AttachmentIssueDoc,
    AttachmentPullDoc, AttachmentWebDoc,
};
use tabby_schema::thread::{
    MessageAttachmentCommitDoc, MessageAttachmentDoc, MessageAttachmentIngestedDoc,
    MessageAttachmentIssueDoc, MessageAttachmentPullDoc, MessageAttachmentWebDoc,
    MessageDocSearchHit,
};

pub(super) fn doc_attachment(doc: &DocSearchDocument) -> AttachmentDoc {
    match doc.clone() {
        DocSearchDocument::Web {
            title,
            link,
            content,
        } => AttachmentDoc::Web(AttachmentWebDoc {
            title,
            link,
            content,
        }),
        DocSearchDocument::Commit {
            sha,
            message,
            author_email,
            author_at,
        } => AttachmentDoc::Commit(AttachmentCommitDoc {
            sha,
            message,
            author_email,
            author_at,
        }),
        DocSearchDocument::Ingested {
            id,
            title,
            body,
            link,
        } => AttachmentDoc::Ingested(AttachmentIngestedDoc {
            id,
            title,
            body,
            link,
        }),
        DocSearchDocument::Issue {
            title,
            link,
            author,
            body,
            closed,
        } => AttachmentDoc::Issue(AttachmentIssueDoc {
            title,
            link,
            author,
            body,
            closed,
        }),
        DocSearchDocument::Pull {
            title,
            link,
            author,
            body,
            diff,
            merged,
        } => AttachmentDoc::Pull(AttachmentPullDoc {
            title,
            link,
            author,
            body,
            diff,
            merged,
        }),
    }
}

/// The GraphQL form of a stored doc attachment.
pub fn doc_item(doc: &AttachmentDoc) -> MessageAttachmentDoc {
    match doc.clone() {
        AttachmentDoc::Web(d) => MessageAttachmentDoc::Web(MessageAttachmentWebDoc {
            title: d.title,
            link: d.link,
            content: d.content,
        }),
        AttachmentDoc::Commit(d) => MessageAttachmentDoc::Commit(MessageAttachmentCommitDoc {
            sha: d.sha,
            message: d.message,
            author_email: d.author_email,
            author_at: d.author_at,
        }),
        AttachmentDoc::Ingested(d) => {
            MessageAttachmentDoc::Ingested(MessageAttachmentIngestedDoc {
                id: d.id,
                title: d.title,
                body: d.body,
                link: d.link,
            })
        }
        AttachmentDoc::Issue(d) => MessageAttachmentDoc::Issue(MessageAttachmentIssueDoc {
            title: d.title,
            link: d.link,
            author: d.author,
            body: d.body,
            closed: d.closed,
        }),
        AttachmentDoc::Pull(d) => MessageAttachmentDoc::Pull(MessageAttachmentPullDoc {
            title: d.title,
            link: d.link,
            author: d.author,
            body: d.body,
            patch: d.diff,
            merged: d.merged,
        }),
    }
}

pub(super) fn doc_hit_item(hit: &DocSearchHit) -> MessageDocSearchHit {
    MessageDocSearchHit {
        doc: doc_item(&doc_attachment(&hit.doc)),
        score: hit.score as f64,
    }
}

/// What the answer's prompt shows of a document.
pub(super) fn prompt_block(doc: &AttachmentDoc) -> String {
    let state = |done: bool, yes: &str, no: &str| if done { yes } else { no }.to_string();
    match doc {
        AttachmentDoc::Web(d) => format!("{} ({})\n{}", d.title, d.link, d.content),
        AttachmentDoc::Commit(d) => format!("Commit {}\n{}", d.sha, d.message),
        AttachmentDoc::Ingested(d) => format!("{}\n{}", d.title, d.body),
        AttachmentDoc::Issue(d) => format!(
            "Issue: {} ({}, {})\n{}",
            d.title,
            d.link,
            state(d.closed, "closed", "open"),
            d.body
        ),
        AttachmentDoc::Pull(d) => format!(
            "Pull request: {} ({}, {})\n{}\n\nChanges:\n{}",
            d.title,
            d.link,
            state(d.merged, "merged", "not merged"),
            d.body,
            d.diff
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored pull stays a pull and an issue an issue (the stored union is untagged).
    #[test]
    fn issues_and_pulls_round_trip_through_storage() {
        let issue = doc_attachment(&DocSearchDocument::Issue {
            title: "Crash on start".into(),
            link: "https://h/o/r/issues/1".into(),
            author: Some("octo".into()),
            body: "It crashes".into(),
            closed: true,
        });
        let pull = doc_attachment(&DocSearchDocument::Pull {
            title: "Fix crash".into(),
            link: "https://h/o/r/pull/2".into(),
            author: None,
            body: "Fixes #1".into(),
            diff: "src/main.rs (+1 -1)".into(),
            merged: false,
        });
        for doc in [issue, pull] {
            let json = serde_json::to_string(&doc).unwrap();
            let back: AttachmentDoc = serde_json::from_str(&json).unwrap();
            assert_eq!(back, doc, "{json}");
        }
        let block = prompt_block(&doc_attachment(&DocSearchDocument::Pull {
            title: "T".into(),
            link: "L".into(),
            author: None,
            body: "B".into(),
            diff: "D".into(),
            merged: true,
        }));
        assert_eq!(block, "Pull request: T (L, merged)\nB\n\nChanges:\nD");
    }
}
