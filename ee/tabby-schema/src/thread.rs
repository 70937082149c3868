//! Answer Engine threads: the GraphQL types of threads, messages and their attachments, the
//! inputs of a thread run, the `ThreadRunItem` union a run streams, and [`ThreadService`].

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures::stream::BoxStream;
use juniper::{GraphQLEnum, GraphQLInputObject, GraphQLObject, GraphQLUnion, ID};

use crate::{AccessPolicy, CoreError, Result, connection, relay::RelayArgs};

#[derive(Clone, Copy, Debug, PartialEq, Eq, GraphQLEnum)]
pub enum Role {
    User,
    Assistant,
}

impl Role {
    pub fn as_db_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct Thread {
    pub id: ID,
    pub user_id: ID,
    pub is_ephemeral: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

connection!(ThreadConnection, ThreadEdge, Thread);

#[derive(Clone, Debug, GraphQLObject)]
pub struct MessageAttachmentClientCode {
    pub filepath: Option<String>,
    pub start_line: Option<i32>,
    pub content: String,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct MessageAttachmentCode {
    pub git_url: String,
    pub commit: Option<String>,
    pub filepath: String,
    pub language: String,
    pub content: String,
    /// `null` for a whole file.
    pub start_line: Option<i32>,
    /// Why it was retrieved: which search words matched, or which edge of the evidence pack
    /// (definition, caller, test) brought it; `null` for plain search hits.
    pub reason: Option<String>,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct MessageAttachmentCodeScores {
    pub rrf: f64,
    pub bm25: f64,
    pub embedding: f64,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct MessageCodeSearchHit {
    pub code: MessageAttachmentCode,
    pub scores: MessageAttachmentCodeScores,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct MessageAttachmentWebDoc {
    pub title: String,
    pub link: String,
    pub content: String,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct MessageAttachmentCommitDoc {
    pub sha: String,
    pub message: String,
    pub author_email: Option<String>,
    pub author_at: DateTime<Utc>,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct MessageAttachmentIngestedDoc {
    pub id: String,
    pub title: String,
    pub body: String,
    pub link: Option<String>,
}

#[derive(Clone, Debug, GraphQLUnion)]
pub enum MessageAttachmentDoc {
    Web(MessageAttachmentWebDoc),
    Issue(MessageAttachmentIssueDoc),
    Pull(MessageAttachmentPullDoc),
    Commit(MessageAttachmentCommitDoc),
    Ingested(MessageAttachmentIngestedDoc),
}

/// An issue of a provided GitHub/GitLab repository. `author` is the vendor's login (upstream
/// resolves it to a user of this server by e-mail; vendors rarely expose e-mails).
#[derive(Clone, Debug, GraphQLObject)]
pub struct MessageAttachmentIssueDoc {
    pub title: String,
    pub link: String,
    pub author: Option<String>,
    pub body: String,
    pub closed: bool,
}

/// A pull request (GitHub) or merge request (GitLab); `patch` is its patch summary.
#[derive(Clone, Debug, GraphQLObject)]
pub struct MessageAttachmentPullDoc {
    pub title: String,
    pub link: String,
    pub author: Option<String>,
    pub body: String,
    pub patch: String,
    pub merged: bool,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct MessageDocSearchHit {
    pub doc: MessageAttachmentDoc,
    pub score: f64,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct MessageAttachmentCodeFileList {
    pub file_list: Vec<String>,
    pub truncated: bool,
}

#[derive(Clone, Debug, Default, GraphQLObject)]
pub struct MessageAttachment {
    pub client_code: Vec<MessageAttachmentClientCode>,
    pub code: Vec<MessageAttachmentCode>,
    pub doc: Vec<MessageAttachmentDoc>,
    pub code_file_list: Option<MessageAttachmentCodeFileList>,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct Message {
    pub id: ID,
    pub thread_id: ID,
    pub code_source_id: Option<String>,
    pub role: Role,
    pub content: String,
    pub attachment: MessageAttachment,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

connection!(MessageConnection, MessageEdge, Message);

// ---- inputs (facts §4.4) ----

#[derive(Clone, Debug, GraphQLInputObject)]
pub struct MessageAttachmentCodeInput {
    pub filepath: Option<String>,
    /// `null`: the whole file.
    pub start_line: Option<i32>,
    pub content: String,
}

#[derive(Clone, Debug, GraphQLInputObject)]
pub struct MessageAttachmentInput {
    pub code: Vec<MessageAttachmentCodeInput>,
}

#[derive(Clone, Debug, GraphQLInputObject)]
pub struct CreateMessageInput {
    pub content: String,
    pub attachments: Option<MessageAttachmentInput>,
}

impl CreateMessageInput {
    pub fn validate(&self) -> Result<()> {
        if self.content.trim().is_empty() {
            return Err(CoreError::invalid(
                "content",
                "Message content must not be empty",
            ));
        }
        Ok(())
    }
}

#[derive(Clone, Debug, GraphQLInputObject)]
pub struct CreateThreadInput {
    pub user_message: CreateMessageInput,
}

#[derive(Clone, Debug, GraphQLInputObject)]
pub struct CodeQueryInput {
    pub filepath: Option<String>,
    pub language: Option<String>,
    pub content: String,
    pub git_url: Option<String>,
    pub source_id: Option<String>,
}

impl CodeQueryInput {
    pub fn validate(&self) -> Result<()> {
        if self.git_url.is_some() == self.source_id.is_some() {
            return Err(CoreError::invalid(
                "gitUrl",
                "Exactly one of gitUrl and sourceId must be given",
            ));
        }
        Ok(())
    }
}

#[derive(Clone, Debug, GraphQLInputObject)]
pub struct DocQueryInput {
    pub content: String,
    pub search_public: bool,
    pub source_ids: Option<Vec<String>>,
}

#[derive(Clone, Debug, Default, GraphQLInputObject)]
pub struct CodeSearchParamsOverrideInput {
    pub min_embedding_score: Option<f64>,
    pub min_bm25_score: Option<f64>,
    pub min_rrf_score: Option<f64>,
    pub num_to_return: Option<i32>,
    pub num_to_score: Option<i32>,
}

#[derive(Clone, Debug, Default, GraphQLInputObject)]
pub struct ThreadRunDebugOptionsInput {
    #[graphql(default)]
    pub code_search_params_override: Option<CodeSearchParamsOverrideInput>,
    /// Default false. Nullable so that clients may leave it out (juniper refuses a missing
    /// non-null field in variables even when it has a default).
    pub return_chat_completion_request: Option<bool>,
}

#[derive(Clone, Debug, Default, GraphQLInputObject)]
pub struct ThreadRunOptionsInput {
    #[graphql(default)]
    pub model_name: Option<String>,
    #[graphql(default)]
    pub doc_query: Option<DocQueryInput>,
    #[graphql(default)]
    pub code_query: Option<CodeQueryInput>,
    /// Default false (nullable so that clients may leave it out).
    pub generate_relevant_questions: Option<bool>,
    #[graphql(default)]
    pub debug_options: Option<ThreadRunDebugOptionsInput>,
}

impl ThreadRunOptionsInput {
    pub fn validate(&self) -> Result<()> {
        if let Some(code) = &self.code_query {
            code.validate()?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, GraphQLInputObject)]
pub struct CreateThreadAndRunInput {
    pub thread: CreateThreadInput,
    /// Default: no retrieval, no follow-up questions.
    pub options: Option<ThreadRunOptionsInput>,
}

#[derive(Clone, Debug, GraphQLInputObject)]
pub struct CreateThreadRunInput {
    pub thread_id: ID,
    pub additional_user_message: CreateMessageInput,
    /// Default: no retrieval, no follow-up questions.
    pub options: Option<ThreadRunOptionsInput>,
}

#[derive(Clone, Debug, GraphQLInputObject)]
pub struct UpdateMessageInput {
    pub id: ID,
    pub thread_id: ID,
    pub content: String,
}

// ---- run items (facts §4.5) ----

#[derive(Clone, Debug, GraphQLObject)]
pub struct ThreadCreated {
    pub id: ID,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct ThreadUserMessageCreated {
    pub id: ID,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct ThreadAssistantMessageCreated {
    pub id: ID,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct ThreadAssistantMessageReadingCode {
    pub snippet: bool,
    pub file_list: bool,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct ThreadAssistantMessageAttachmentsCodeFileList {
    pub file_list: Vec<String>,
    pub truncated: bool,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct ThreadAssistantMessageAttachmentsCode {
    pub hits: Vec<MessageCodeSearchHit>,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct ThreadAssistantMessageReadingDoc {
    pub source_ids: Vec<String>,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct ThreadAssistantMessageAttachmentsDoc {
    pub hits: Vec<MessageDocSearchHit>,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct ThreadRelevantQuestions {
    pub questions: Vec<String>,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct ThreadAssistantMessageContentDelta {
    pub delta: String,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct ChatCompletionMessage {
    pub role: String,
    pub content: String,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct ThreadAssistantMessageCompletedDebugData {
    pub chat_completion_messages: Vec<ChatCompletionMessage>,
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct ThreadAssistantMessageCompleted {
    pub debug_data: Option<ThreadAssistantMessageCompletedDebugData>,
}

/// What a thread run streams, in this order (clients select `__typename`).
#[derive(Clone, Debug, GraphQLUnion)]
pub enum ThreadRunItem {
    ThreadCreated(ThreadCreated),
    ThreadUserMessageCreated(ThreadUserMessageCreated),
    ThreadAssistantMessageCreated(ThreadAssistantMessageCreated),
    ThreadAssistantMessageReadingCode(ThreadAssistantMessageReadingCode),
    ThreadAssistantMessageAttachmentsCodeFileList(ThreadAssistantMessageAttachmentsCodeFileList),
    ThreadAssistantMessageAttachmentsCode(ThreadAssistantMessageAttachmentsCode),
    ThreadAssistantMessageReadingDoc(ThreadAssistantMessageReadingDoc),
    ThreadAssistantMessageAttachmentsDoc(ThreadAssistantMessageAttachmentsDoc),
    ThreadRelevantQuestions(ThreadRelevantQuestions),
    ThreadAssistantMessageContentDelta(ThreadAssistantMessageContentDelta),
    ThreadAssistantMessageCompleted(ThreadAssistantMessageCompleted),
}

pub type ThreadRunStream = BoxStream<'static, Result<ThreadRunItem>>;

#[async_trait]
pub trait ThreadService: Send + Sync {
    /// Creates an (ephemeral) thread owned by `user_id` and runs its first message.
    async fn create_thread_and_run(
        &self,
        user_id: i64,
        policy: AccessPolicy,
        input: CreateThreadAndRunInput,
    ) -> Result<ThreadRunStream>;
    /// Adds a user message to an existing thread (owned by `user_id`) and answers it.
    async fn create_thread_run(
        &self,
        user_id: i64,
        policy: AccessPolicy,
        input: CreateThreadRunInput,
    ) -> Result<ThreadRunStream>;
    async fn get(&self, id: i64) -> Result<Option<Thread>>;
    /// Threads `viewer` may read (all for admins), optionally only `owner`'s.
    async fn list(
        &self,
        ids: Vec<i64>,
        is_ephemeral: Option<bool>,
        owner: Option<i64>,
        viewer: Option<i64>,
        page: RelayArgs,
    ) -> Result<ThreadConnection>;
    /// The thread's messages as `reader` may see them: an answer drawn from a source the
    /// reader may not read comes with its text withheld and without attachments.
    async fn list_messages(
        &self,
        thread_id: i64,
        reader: &AccessPolicy,
        page: RelayArgs,
    ) -> Result<MessageConnection>;
    async fn set_persisted(&self, id: i64) -> Result<()>;
    async fn delete(&self, id: i64) -> Result<()>;
    async fn delete_message_pair(
        &self,
        thread_id: i64,
        user_message_id: i64,
        assistant_message_id: i64,
    ) -> Result<()>;
    async fn update_message(&self, thread_id: i64, id: i64, content: &str) -> Result<()>;
}
