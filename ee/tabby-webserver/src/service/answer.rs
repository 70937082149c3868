//! The Answer Engine: one run answers the last user message of a thread, streaming
//! [`ThreadRunItem`]s in upstream's order (facts §4.5) and persisting each as it goes.
//!
//! Steps: resolve the code query's repository among those the user may read → one chat call
//! decides whether snippets and/or the file list help (`SNIPPET` / `FILE_LIST`) → list files
//! (≤ 300) / search code (small files with several hits become one whole-file hit) → doc
//! search over the sources the user may read → optional follow-up questions (one chat call) →
//! the answer, streamed from the chat model with the context as numbered citations.
//!
//! The run is driven by its own task: a client that disconnects stops receiving items, but the
//! answer is still completed and stored, so the thread reads the same as if it had stayed.

use std::{collections::HashMap, sync::Arc};

use async_openai::types::chat::{
    ChatCompletionRequestAssistantMessage, ChatCompletionRequestAssistantMessageContent,
    ChatCompletionRequestMessage, ChatCompletionRequestSystemMessage,
    ChatCompletionRequestSystemMessageContent, ChatCompletionRequestUserMessage,
    ChatCompletionRequestUserMessageContent, CreateChatCompletionRequest,
};
use futures::StreamExt;
use tabby_common::{
    api::{
        code::{CodeContext, CodeRepository, CodeSearch, CodeSearchHit, CodeSearchQuery},
        doc::DocSearch,
        event::{Event, EventLogger},
    },
    config::{AnswerConfig, CodeSearchParams},
};
use tabby_db::{
    Attachment, AttachmentCode, AttachmentCodeFileList, AttachmentDoc, DbConn, ThreadMessageDAO,
};
use tabby_inference::ChatCompletionStream;
use tabby_schema::{
    AccessPolicy, CoreError, Result,
    thread::{
        ChatCompletionMessage, CodeQueryInput, MessageAttachmentCode, MessageAttachmentCodeScores,
        MessageCodeSearchHit, ThreadAssistantMessageAttachmentsCode,
        ThreadAssistantMessageAttachmentsCodeFileList, ThreadAssistantMessageAttachmentsDoc,
        ThreadAssistantMessageCompleted, ThreadAssistantMessageCompletedDebugData,
        ThreadAssistantMessageContentDelta, ThreadAssistantMessageReadingCode,
        ThreadAssistantMessageReadingDoc, ThreadRelevantQuestions, ThreadRunItem,
        ThreadRunOptionsInput,
    },
};
use tokio::sync::mpsc;
use tracing::warn;

pub use super::answer_docs::doc_item;
use super::answer_docs::{doc_attachment, doc_hit_item};

use crate::directory::Directory;

/// At most this many files in a file-list attachment.
pub const MAX_FILE_LIST: usize = 300;
/// Files shorter than this with several hits are attached whole.
const WHOLE_FILE_MAX_LINES: usize = 300;
/// Doc hits per run.
const DOC_HITS: usize = 5;

/// What the engine needs from the rest of the server.
pub struct AnswerDeps {
    pub chat: Arc<dyn ChatCompletionStream>,
    pub code: Option<Arc<dyn CodeSearch>>,
    /// Evidence packs for the code context; without them, plain search.
    pub code_context: Option<Arc<dyn CodeContext>>,
    pub docs: Option<Arc<dyn DocSearch>>,
    pub logger: Arc<dyn EventLogger>,
    pub config: AnswerConfig,
}

pub struct AnswerEngine {
    db: DbConn,
    directory: Arc<Directory>,
    deps: AnswerDeps,
}

/// One run's inputs.
pub struct RunInput {
    pub user_hashid: String,
    pub thread_id: i64,
    pub assistant_message_id: i64,
    pub policy: AccessPolicy,
    pub options: ThreadRunOptionsInput,
    /// Every message of the thread before the new (empty) assistant message, oldest first; the
    /// last one is the user message to answer.
    pub history: Vec<ThreadMessageDAO>,
}

/// Sends items to the client while it listens; the run goes on when it has left.
pub struct Sink {
    tx: mpsc::Sender<Result<ThreadRunItem>>,
    open: bool,
}

impl Sink {
    pub fn new(tx: mpsc::Sender<Result<ThreadRunItem>>) -> Self {
        Self { tx, open: true }
    }

    /// Resolves once the subscriber has gone (its stream dropped).
    pub fn left(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let tx = self.tx.clone();
        async move { tx.closed().await }
    }

    pub async fn emit(&mut self, item: Result<ThreadRunItem>) {
        if self.open && self.tx.send(item).await.is_err() {
            self.open = false;
        }
    }
}

fn user_message(text: String) -> ChatCompletionRequestMessage {
    ChatCompletionRequestMessage::User(ChatCompletionRequestUserMessage {
        content: ChatCompletionRequestUserMessageContent::Text(text),
        name: None,
    })
}

fn system_message(text: String) -> ChatCompletionRequestMessage {
    ChatCompletionRequestMessage::System(ChatCompletionRequestSystemMessage {
        content: ChatCompletionRequestSystemMessageContent::Text(text),
        name: None,
    })
}

#[allow(deprecated)]
fn assistant_message(text: String) -> ChatCompletionRequestMessage {
    ChatCompletionRequestMessage::Assistant(ChatCompletionRequestAssistantMessage {
        content: Some(ChatCompletionRequestAssistantMessageContent::Text(text)),
        ..Default::default()
    })
}

fn message_role_and_text(message: &ChatCompletionRequestMessage) -> (String, String) {
    match message {
        ChatCompletionRequestMessage::System(m) => (
            "system".into(),
            match &m.content {
                ChatCompletionRequestSystemMessageContent::Text(t) => t.clone(),
                _ => String::new(),
            },
        ),
        ChatCompletionRequestMessage::User(m) => (
            "user".into(),
            match &m.content {
                ChatCompletionRequestUserMessageContent::Text(t) => t.clone(),
                _ => String::new(),
            },
        ),
        ChatCompletionRequestMessage::Assistant(m) => (
            "assistant".into(),
            match &m.content {
                Some(ChatCompletionRequestAssistantMessageContent::Text(t)) => t.clone(),
                _ => String::new(),
            },
        ),
        _ => ("other".into(), String::new()),
    }
}

/// Numbered context blocks around a question, as the answer prompt's user turn.
pub fn context_prompt(question: &str, attachment: &Attachment) -> String {
    let mut blocks = Vec::new();
    for code in attachment.client_code.iter().flatten() {
        let title = code.filepath.as_deref().unwrap_or("selection");
        blocks.push(format!("```{title}\n{}\n```", code.content));
    }
    for code in attachment.code.iter().flatten() {
        let lines = match code.start_line {
            Some(start) => format!(
                " lines {start}-{}",
                start + code.content.lines().count() as i64 - 1
            ),
            None => String::new(),
        };
        blocks.push(format!(
            "```{} title=\"{}\"{lines}\n{}\n```",
            code.language, code.filepath, code.content
        ));
    }
    for doc in attachment.doc.iter().flatten() {
        blocks.push(super::answer_docs::prompt_block(doc));
    }
    if let Some(list) = &attachment.code_file_list {
        let more = if list.truncated {
            "\n(list truncated)"
        } else {
            ""
        };
        blocks.push(format!(
            "Files in the repository:\n{}{more}",
            list.file_list.join("\n")
        ));
    }
    if blocks.is_empty() {
        return question.to_string();
    }
    let numbered: Vec<String> = blocks
        .into_iter()
        .enumerate()
        .map(|(i, block)| format!("[[citation:{}]]\n{block}", i + 1))
        .collect();
    format!(
        "Context for the question below, as numbered citations:\n\n{}\n\n\
         Answer the question. Use the citations where they are relevant and mark each statement \
         that relies on one with its [[citation:N]] right after it. If the context does not \
         contain the answer, say so and answer from general knowledge.\n\n\
         Question: {question}",
        numbered.join("\n\n")
    )
}

/// Parses the decision call's answer: which of `SNIPPET` and `FILE_LIST` it names.
pub fn parse_code_decision(answer: &str) -> (bool, bool) {
    let upper = answer.to_uppercase();
    (upper.contains("SNIPPET"), upper.contains("FILE_LIST"))
}

/// Up to three questions, one per line, without list markers.
pub fn parse_questions(answer: &str) -> Vec<String> {
    answer
        .lines()
        .map(|l| {
            l.trim()
                .trim_start_matches(|c: char| c.is_ascii_digit() || "-*.) ".contains(c))
                .trim()
                .to_string()
        })
        .filter(|l| l.len() > 3)
        .take(3)
        .collect()
}

/// Several hits of one small file become one hit with the whole file (best scores kept);
/// everything else stays as it is, in rank order.
pub async fn merge_small_files(
    code: &dyn CodeSearch,
    hits: Vec<CodeSearchHit>,
) -> Vec<CodeSearchHit> {
    let mut count: HashMap<String, usize> = HashMap::new();
    for hit in &hits {
        *count.entry(hit.doc.file_id.clone()).or_default() += 1;
    }
    // File id → index of its whole-file hit in `out`, or `None` when it stays in chunks.
    let mut whole: HashMap<String, Option<usize>> = HashMap::new();
    let mut out: Vec<CodeSearchHit> = Vec::new();
    for hit in hits {
        let id = hit.doc.file_id.clone();
        if count[&id] < 2 {
            out.push(hit);
            continue;
        }
        match whole.get(&id) {
            Some(Some(at)) => {
                let kept = &mut out[*at].scores;
                kept.rrf = kept.rrf.max(hit.scores.rrf);
                kept.bm25 = kept.bm25.max(hit.scores.bm25);
                kept.embedding = kept.embedding.max(hit.scores.embedding);
                continue;
            }
            Some(None) => {
                out.push(hit);
                continue;
            }
            None => {}
        }
        match code.file_content(&id).await {
            Ok(Some(content)) if content.lines().count() < WHOLE_FILE_MAX_LINES => {
                let mut merged = hit;
                merged.doc.body = content;
                merged.doc.start_line = None;
                whole.insert(id, Some(out.len()));
                out.push(merged);
            }
            _ => {
                whole.insert(id, None);
                out.push(hit);
            }
        }
    }
    out
}

fn code_attachment((hit, reason): &(CodeSearchHit, Option<String>)) -> AttachmentCode {
    AttachmentCode {
        git_url: hit.doc.git_url.clone(),
        commit: hit.doc.commit.clone(),
        language: hit.doc.language.clone(),
        filepath: hit.doc.filepath.clone(),
        content: hit.doc.body.clone(),
        start_line: hit.doc.start_line.map(|l| l as i64),
        reason: reason.clone(),
    }
}

fn code_hit_item((hit, reason): &(CodeSearchHit, Option<String>)) -> MessageCodeSearchHit {
    MessageCodeSearchHit {
        code: MessageAttachmentCode {
            git_url: hit.doc.git_url.clone(),
            commit: hit.doc.commit.clone(),
            filepath: hit.doc.filepath.clone(),
            language: hit.doc.language.clone(),
            content: hit.doc.body.clone(),
            start_line: hit.doc.start_line.map(|l| l as i32),
            reason: reason.clone(),
        },
        scores: MessageAttachmentCodeScores {
            rrf: hit.scores.rrf as f64,
            bm25: hit.scores.bm25 as f64,
            embedding: hit.scores.embedding as f64,
        },
    }
}

fn params_with_override(
    base: &CodeSearchParams,
    options: &ThreadRunOptionsInput,
) -> CodeSearchParams {
    let mut params = base.clone();
    let Some(o) = options
        .debug_options
        .as_ref()
        .and_then(|d| d.code_search_params_override.as_ref())
    else {
        return params;
    };
    if let Some(v) = o.min_embedding_score {
        params.min_embedding_score = v as f32;
    }
    if let Some(v) = o.min_bm25_score {
        params.min_bm25_score = v as f32;
    }
    if let Some(v) = o.min_rrf_score {
        params.min_rrf_score = v as f32;
    }
    if let Some(v) = o.num_to_return {
        params.num_to_return = v.clamp(0, 100) as usize;
    }
    if let Some(v) = o.num_to_score {
        params.num_to_score = v.clamp(0, 1000) as usize;
    }
    params
}

impl AnswerEngine {
    /// `[answer] max_runs_per_user`.
    pub fn max_runs_per_user(&self) -> usize {
        self.deps.config.max_runs_per_user
    }

    /// `[answer] abandoned_run_grace_secs`.
    pub fn abandoned_run_grace(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.deps.config.abandoned_run_grace_secs)
    }

    pub fn new(db: DbConn, directory: Arc<Directory>, deps: AnswerDeps) -> Self {
        Self {
            db,
            directory,
            deps,
        }
    }

    /// One chat call, collected into a string.
    async fn ask(&self, model: &str, prompt: String) -> anyhow::Result<String> {
        #[allow(deprecated)]
        let request = CreateChatCompletionRequest {
            model: model.to_string(),
            messages: vec![user_message(prompt)],
            temperature: Some(0.0),
            max_completion_tokens: Some(256),
            ..Default::default()
        };
        let mut stream = self.deps.chat.chat_stream(request).await?;
        let mut text = String::new();
        while let Some(chunk) = stream.next().await {
            for choice in chunk?.choices {
                if let Some(content) = choice.delta.content {
                    text.push_str(&content);
                }
            }
        }
        Ok(text)
    }

    /// Runs to the end, whether or not anyone still listens.
    pub async fn run(&self, input: RunInput, sink: &mut Sink) {
        if let Err(e) = self.run_inner(&input, sink).await {
            warn!("answer run of thread {} failed: {e}", input.thread_id);
            sink.emit(Err(e)).await;
        }
        self.deps
            .logger
            .log(Some(input.user_hashid.clone()), Event::ChatCompletion {});
    }

    async fn run_inner(&self, input: &RunInput, sink: &mut Sink) -> Result<()> {
        let question = input
            .history
            .last()
            .map(|m| m.content.clone())
            .unwrap_or_default();
        let mut attachment = Attachment {
            client_code: input
                .history
                .last()
                .and_then(|m| m.attachment().client_code),
            ..Attachment::default()
        };
        self.code_context(input, &question, &mut attachment, sink)
            .await?;
        self.doc_context(input, &mut attachment, sink).await?;
        self.follow_ups(input, &question, &attachment, sink).await?;
        self.answer(input, &attachment, sink).await
    }

    /// Step 1: the code the question needs (snippets and/or the file list), as the model decides.
    async fn code_context(
        &self,
        input: &RunInput,
        question: &str,
        attachment: &mut Attachment,
        sink: &mut Sink,
    ) -> Result<()> {
        let model = input.options.model_name.clone().unwrap_or_default();
        let assistant = input.assistant_message_id;
        if let (Some(query), Some(code)) = (&input.options.code_query, &self.deps.code) {
            let snapshot = self.directory.snapshot().await?;
            let allowed = input.policy.filter_repositories(&snapshot.all_repositories);
            let repository = match (&query.source_id, &query.git_url) {
                (Some(source_id), _) => allowed.list.iter().find(|r| &r.source_id == source_id),
                (None, Some(git_url)) => allowed.closest_match(git_url),
                (None, None) => None,
            }
            .cloned();
            if let Some(repository) = repository {
                self.db
                    .update_thread_message_code_source_id(assistant, &repository.source_id)
                    .await?;
                let source = [repository.source_id.clone()];
                attachment.add_sources(&source);
                self.db
                    .update_thread_message_attachment(assistant, |a| a.add_sources(&source))
                    .await?;
                let decision = self
                    .ask(
                        &model,
                        format!(
                            "A user asks about the repository {}:\n\n{question}\n\n\
                             Which context would help answer? Reply with SNIPPET if relevant \
                             code snippets would help, FILE_LIST if the list of the \
                             repository's files would help, or both words. Reply with the \
                             words only.",
                            repository.git_url
                        ),
                    )
                    .await;
                let (snippet, file_list) = match decision {
                    Ok(answer) => parse_code_decision(&answer),
                    Err(e) => {
                        warn!("the code-context decision failed, searching snippets: {e:#}");
                        (true, false)
                    }
                };
                sink.emit(Ok(ThreadRunItem::ThreadAssistantMessageReadingCode(
                    ThreadAssistantMessageReadingCode { snippet, file_list },
                )))
                .await;
                if file_list {
                    let (files, truncated) = code
                        .list_files(&repository.source_id, MAX_FILE_LIST)
                        .await
                        .map_err(|e| CoreError::Other(e.into()))?;
                    let list = AttachmentCodeFileList {
                        file_list: files.clone(),
                        truncated,
                    };
                    attachment.code_file_list = Some(list.clone());
                    self.db
                        .update_thread_message_attachment(assistant, |a| {
                            a.code_file_list = Some(list)
                        })
                        .await?;
                    sink.emit(Ok(
                        ThreadRunItem::ThreadAssistantMessageAttachmentsCodeFileList(
                            ThreadAssistantMessageAttachmentsCodeFileList {
                                file_list: files,
                                truncated,
                            },
                        ),
                    ))
                    .await;
                }
                if snippet {
                    let content = if query.content.trim().is_empty() {
                        question.to_string()
                    } else {
                        query.content.clone()
                    };
                    let hits = self
                        .code_snippets(code.as_ref(), input, query, &repository, content)
                        .await?;
                    let stored: Vec<AttachmentCode> = hits.iter().map(code_attachment).collect();
                    attachment.code = Some(stored.clone());
                    self.db
                        .update_thread_message_attachment(assistant, |a| a.code = Some(stored))
                        .await?;
                    sink.emit(Ok(ThreadRunItem::ThreadAssistantMessageAttachmentsCode(
                        ThreadAssistantMessageAttachmentsCode {
                            hits: hits.iter().map(code_hit_item).collect(),
                        },
                    )))
                    .await;
                }
            }
        }

        Ok(())
    }

    /// The snippets of step 1: the evidence pack for the question (search hits, the
    /// definitions it names, their callers and tests, each with its reason), or plain hybrid
    /// search when no pack builder is set, the client names a file, or the debug options
    /// override the search parameters.
    async fn code_snippets(
        &self,
        code: &dyn CodeSearch,
        input: &RunInput,
        query: &CodeQueryInput,
        repository: &CodeRepository,
        content: String,
    ) -> Result<Vec<(CodeSearchHit, Option<String>)>> {
        let overridden = input
            .options
            .debug_options
            .as_ref()
            .is_some_and(|d| d.code_search_params_override.is_some());
        if let (Some(packs), None, false) = (&self.deps.code_context, &query.filepath, overridden) {
            return match packs.context(repository, &content).await {
                Ok(items) => Ok(items.into_iter().map(|c| (c.hit, Some(c.reason))).collect()),
                Err(tabby_common::api::code::CodeSearchError::NotReady) => Ok(Vec::new()),
                Err(e) => Err(CoreError::Other(e.into())),
            };
        }
        let params = params_with_override(&self.deps.config.code_search_params, &input.options);
        let hits = match code
            .search_in_language(
                CodeSearchQuery {
                    include_generated: false,
                    filepath: query.filepath.clone(),
                    language: query.language.clone(),
                    content,
                    source_id: repository.source_id.clone(),
                },
                params,
            )
            .await
        {
            Ok(hits) => merge_small_files(code, hits).await,
            Err(tabby_common::api::code::CodeSearchError::NotReady) => Vec::new(),
            Err(e) => return Err(CoreError::Other(e.into())),
        };
        Ok(hits.into_iter().map(|h| (h, None)).collect())
    }

    /// Step 2: documents from the sources the reader may read.
    async fn doc_context(
        &self,
        input: &RunInput,
        attachment: &mut Attachment,
        sink: &mut Sink,
    ) -> Result<()> {
        let assistant = input.assistant_message_id;
        if let Some(query) = &input.options.doc_query {
            let source_ids: Vec<String> = query
                .source_ids
                .clone()
                .unwrap_or_default()
                .into_iter()
                .filter(|s| input.policy.can_read(s))
                .collect();
            attachment.add_sources(&source_ids);
            self.db
                .update_thread_message_attachment(assistant, |a| a.add_sources(&source_ids))
                .await?;
            sink.emit(Ok(ThreadRunItem::ThreadAssistantMessageReadingDoc(
                ThreadAssistantMessageReadingDoc {
                    source_ids: source_ids.clone(),
                },
            )))
            .await;
            let hits = match (&self.deps.docs, source_ids.is_empty()) {
                (Some(docs), false) => docs
                    .search(&source_ids, &query.content, DOC_HITS)
                    .await
                    .map_err(CoreError::Other)?,
                _ => Vec::new(),
            };
            let stored: Vec<AttachmentDoc> = hits.iter().map(|h| doc_attachment(&h.doc)).collect();
            attachment.doc = Some(stored.clone());
            self.db
                .update_thread_message_attachment(assistant, |a| a.doc = Some(stored))
                .await?;
            sink.emit(Ok(ThreadRunItem::ThreadAssistantMessageAttachmentsDoc(
                ThreadAssistantMessageAttachmentsDoc {
                    hits: hits.iter().map(doc_hit_item).collect(),
                },
            )))
            .await;
        }

        Ok(())
    }

    /// Step 3: follow-up questions, when asked for and there is context to ask about.
    async fn follow_ups(
        &self,
        input: &RunInput,
        question: &str,
        attachment: &Attachment,
        sink: &mut Sink,
    ) -> Result<()> {
        let model = input.options.model_name.clone().unwrap_or_default();
        if input.options.generate_relevant_questions.unwrap_or(false) {
            let has_context = attachment.code.as_ref().is_some_and(|c| !c.is_empty())
                || attachment.doc.as_ref().is_some_and(|d| !d.is_empty());
            let questions = if has_context {
                self.ask(
                    &model,
                    format!(
                        "{}\n\nSuggest three short follow-up questions the user could ask next \
                         about this context. One question per line, nothing else.",
                        context_prompt(question, attachment)
                    ),
                )
                .await
                .map(|answer| parse_questions(&answer))
            } else {
                Ok(Vec::new())
            };
            match questions {
                Ok(questions) => {
                    self.db
                        .update_thread_relevant_questions(input.thread_id, &questions)
                        .await?;
                    sink.emit(Ok(ThreadRunItem::ThreadRelevantQuestions(
                        ThreadRelevantQuestions { questions },
                    )))
                    .await;
                }
                Err(e) => warn!("follow-up questions failed: {e:#}"),
            }
        }

        Ok(())
    }

    /// Step 4: the answer, streamed and persisted as it comes.
    async fn answer(
        &self,
        input: &RunInput,
        attachment: &Attachment,
        sink: &mut Sink,
    ) -> Result<()> {
        let model = input.options.model_name.clone().unwrap_or_default();
        let assistant = input.assistant_message_id;
        let messages = self.answer_messages(&input.history, attachment);
        #[allow(deprecated)]
        let request = CreateChatCompletionRequest {
            model,
            messages: messages.clone(),
            presence_penalty: Some(self.deps.config.presence_penalty),
            max_completion_tokens: Some(self.deps.config.max_tokens),
            ..Default::default()
        };
        let mut stream = self.deps.chat.chat_stream(request).await.map_err(|e| {
            CoreError::Rejected(format!("The chat model failed: {}", e.client_message()))
        })?;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                CoreError::Rejected(format!("The chat model failed: {}", e.client_message()))
            })?;
            for choice in chunk.choices {
                let Some(delta) = choice.delta.content.filter(|d| !d.is_empty()) else {
                    continue;
                };
                self.db
                    .append_thread_message_content(assistant, &delta)
                    .await?;
                sink.emit(Ok(ThreadRunItem::ThreadAssistantMessageContentDelta(
                    ThreadAssistantMessageContentDelta { delta },
                )))
                .await;
            }
        }
        let debug = input
            .options
            .debug_options
            .as_ref()
            .is_some_and(|d| d.return_chat_completion_request.unwrap_or(false));
        sink.emit(Ok(ThreadRunItem::ThreadAssistantMessageCompleted(
            ThreadAssistantMessageCompleted {
                debug_data: debug.then(|| ThreadAssistantMessageCompletedDebugData {
                    chat_completion_messages: messages
                        .iter()
                        .map(|m| {
                            let (role, content) = message_role_and_text(m);
                            ChatCompletionMessage { role, content }
                        })
                        .collect(),
                }),
            },
        )))
        .await;
        Ok(())
    }

    /// System prompt, earlier turns (user turns with the context their answer used), then the
    /// question with this run's context.
    fn answer_messages(
        &self,
        history: &[ThreadMessageDAO],
        current: &Attachment,
    ) -> Vec<ChatCompletionRequestMessage> {
        let mut messages = vec![system_message(self.deps.config.system_prompt.clone())];
        let Some((last, earlier)) = history.split_last() else {
            return messages;
        };
        for (i, message) in earlier.iter().enumerate() {
            if message.role == "user" {
                // The context of a user turn is stored on the answer that follows it.
                let mut context = earlier
                    .get(i + 1)
                    .filter(|m| m.role == "assistant")
                    .map(|m| m.attachment())
                    .unwrap_or_default();
                context.client_code = message.attachment().client_code;
                messages.push(user_message(context_prompt(&message.content, &context)));
            } else if !message.content.is_empty() {
                messages.push(assistant_message(message.content.clone()));
            }
        }
        messages.push(user_message(context_prompt(&last.content, current)));
        messages
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tabby_db::AttachmentWebDoc;

    #[test]
    fn decision_and_questions_parsing() {
        assert_eq!(parse_code_decision("SNIPPET"), (true, false));
        assert_eq!(parse_code_decision("file_list, snippet"), (true, true));
        assert_eq!(parse_code_decision("neither"), (false, false));
        assert_eq!(
            parse_questions("1. How is X tested?\n- Where is Y?\n\n3) Why Z?\n4. Extra?"),
            ["How is X tested?", "Where is Y?", "Why Z?"]
        );
    }

    #[test]
    fn context_is_numbered_citations() {
        let attachment = Attachment {
            code: Some(vec![AttachmentCode {
                git_url: "https://example.com/shop".into(),
                commit: None,
                language: "python".into(),
                filepath: "src/pricing.py".into(),
                content: "def price():\n    return 1".into(),
                start_line: Some(3),
                reason: None,
            }]),
            doc: Some(vec![AttachmentDoc::Web(AttachmentWebDoc {
                title: "Docs".into(),
                link: "https://example.com/docs".into(),
                content: "Prices are in cents.".into(),
            })]),
            ..Default::default()
        };
        let prompt = context_prompt("How are prices computed?", &attachment);
        assert!(prompt.contains("[[citation:1]]\n```python title=\"src/pricing.py\" lines 3-4"));
        assert!(prompt.contains("[[citation:2]]\nDocs (https://example.com/docs)"));
        assert!(prompt.ends_with("Question: How are prices computed?"));
        assert_eq!(context_prompt("plain", &Attachment::default()), "plain");
    }
}
