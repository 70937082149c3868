//! [`ThreadService`] over SQLite: threads, messages and runs of the Answer Engine.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock},
};

use async_trait::async_trait;
use tabby_db::{Attachment, AttachmentClientCode, DbConn, Pagination, ThreadDAO, ThreadMessageDAO};
use tabby_schema::{
    AccessPolicy, AnswerSources, AsID, CoreError, Result, encode_id,
    relay::RelayArgs,
    thread::{
        CreateMessageInput, CreateThreadAndRunInput, CreateThreadRunInput, Message,
        MessageAttachment, MessageAttachmentClientCode, MessageAttachmentCode,
        MessageAttachmentCodeFileList, MessageConnection, Role, Thread,
        ThreadAssistantMessageCreated, ThreadConnection, ThreadCreated, ThreadRunItem,
        ThreadRunOptionsInput, ThreadRunStream, ThreadService, ThreadUserMessageCreated,
    },
};
use tokio::sync::mpsc;

use super::answer::{AnswerEngine, RunInput, Sink, doc_item};

/// Items buffered for a slow client before the run waits for it.
const RUN_BUFFER: usize = 64;

pub struct ThreadServiceImpl {
    db: DbConn,
    /// Set once the chat model is known (after the models load).
    pub answer: OnceLock<Arc<AnswerEngine>>,
    /// User → their runs generating now.
    runs: Arc<Mutex<HashMap<i64, usize>>>,
}

/// One counted run; dropping it (when the run's task ends) frees the user's slot.
struct RunSlot {
    runs: Arc<Mutex<HashMap<i64, usize>>>,
    user_id: i64,
}

impl Drop for RunSlot {
    fn drop(&mut self) {
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = runs.get_mut(&self.user_id) {
            *count -= 1;
            if *count == 0 {
                runs.remove(&self.user_id);
            }
        }
    }
}

fn thread(dao: ThreadDAO) -> Thread {
    Thread {
        id: dao.id.as_id(),
        user_id: dao.user_id.as_id(),
        is_ephemeral: dao.is_ephemeral,
        created_at: dao.created_at,
        updated_at: dao.updated_at,
    }
}

/// What a reader who may not read every source of an answer sees instead of it.
pub const WITHHELD: &str =
    "This answer drew on sources you do not have access to; its content is withheld.";

/// The message as `reader` may see it, in a thread owned by `thread_owner`: an answer drawn
/// from a source the reader may not read keeps its place but not its text or attachments.
fn message_for(dao: ThreadMessageDAO, reader: &AccessPolicy, thread_owner: i64) -> Message {
    let attachment = dao.attachment();
    let readable = dao.role != "assistant"
        || reader.can_read_answer(&AnswerSources {
            thread_owner,
            code_source: dao.code_source_id.as_deref(),
            recorded: attachment.source_ids.as_deref(),
            has_docs: attachment.doc.as_ref().is_some_and(|d| !d.is_empty()),
        });
    if readable {
        return message(dao);
    }
    Message {
        code_source_id: None,
        content: WITHHELD.to_string(),
        attachment: MessageAttachment::default(),
        ..message(dao)
    }
}

pub fn message(dao: ThreadMessageDAO) -> Message {
    let attachment = dao.attachment();
    Message {
        id: dao.id.as_id(),
        thread_id: dao.thread_id.as_id(),
        code_source_id: dao.code_source_id.clone(),
        role: if dao.role == "assistant" {
            Role::Assistant
        } else {
            Role::User
        },
        content: dao.content.clone(),
        attachment: MessageAttachment {
            client_code: attachment
                .client_code
                .unwrap_or_default()
                .into_iter()
                .map(|c| MessageAttachmentClientCode {
                    filepath: c.filepath,
                    start_line: c.start_line.map(|l| l as i32),
                    content: c.content,
                })
                .collect(),
            code: attachment
                .code
                .unwrap_or_default()
                .into_iter()
                .map(|c| MessageAttachmentCode {
                    git_url: c.git_url,
                    commit: c.commit,
                    filepath: c.filepath,
                    language: c.language,
                    content: c.content,
                    start_line: c.start_line.map(|l| l as i32),
                    reason: c.reason,
                })
                .collect(),
            doc: attachment
                .doc
                .unwrap_or_default()
                .iter()
                .map(doc_item)
                .collect(),
            code_file_list: attachment
                .code_file_list
                .map(|l| MessageAttachmentCodeFileList {
                    file_list: l.file_list,
                    truncated: l.truncated,
                }),
        },
        created_at: dao.created_at,
        updated_at: dao.updated_at,
    }
}

impl ThreadServiceImpl {
    pub fn new(db: DbConn) -> Self {
        Self {
            db,
            answer: OnceLock::new(),
            runs: Arc::default(),
        }
    }

    /// Counts a new run of `user_id`, or refuses it when they already have
    /// `[answer] max_runs_per_user` generating. The slot is held until the run's task ends.
    fn reserve_run(&self, engine: &AnswerEngine, user_id: i64) -> Result<RunSlot> {
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        let count = runs.entry(user_id).or_default();
        if *count >= engine.max_runs_per_user() {
            return Err(CoreError::TooManyRequests(format!(
                "too many answer runs in progress (at most {} per user); wait for one to finish",
                engine.max_runs_per_user()
            )));
        }
        *count += 1;
        Ok(RunSlot {
            runs: self.runs.clone(),
            user_id,
        })
    }

    fn engine(&self) -> Result<Arc<AnswerEngine>> {
        self.answer.get().cloned().ok_or(CoreError::Forbidden(
            "The Answer Engine needs a chat model; none is available",
        ))
    }

    async fn add_user_message(&self, thread_id: i64, input: &CreateMessageInput) -> Result<i64> {
        let client_code = input.attachments.as_ref().map(|a| {
            a.code
                .iter()
                .map(|c| AttachmentClientCode {
                    filepath: c.filepath.clone(),
                    start_line: c.start_line.map(i64::from),
                    content: c.content.clone(),
                })
                .collect()
        });
        let attachment = Attachment {
            client_code,
            ..Attachment::default()
        };
        Ok(self
            .db
            .create_thread_message(thread_id, "user", &input.content, &attachment, None)
            .await?)
    }

    /// Creates the assistant message and starts the run in its own task.
    #[allow(clippy::too_many_arguments)]
    async fn start_run(
        &self,
        engine: Arc<AnswerEngine>,
        slot: RunSlot,
        user_id: i64,
        thread_id: i64,
        user_message_id: i64,
        created: bool,
        policy: AccessPolicy,
        options: ThreadRunOptionsInput,
    ) -> Result<ThreadRunStream> {
        let history = self
            .db
            .list_thread_messages(thread_id, Pagination::all())
            .await?;
        let assistant_message_id = self
            .db
            .create_thread_message(thread_id, "assistant", "", &Attachment::default(), None)
            .await?;
        let (tx, rx) = mpsc::channel(RUN_BUFFER);
        let mut sink = Sink::new(tx);
        let db = self.db.clone();
        let input = RunInput {
            user_hashid: encode_id(user_id),
            thread_id,
            assistant_message_id,
            policy,
            options,
            history,
        };
        tokio::spawn(async move {
            if created {
                sink.emit(Ok(ThreadRunItem::ThreadCreated(ThreadCreated {
                    id: thread_id.as_id(),
                })))
                .await;
            }
            sink.emit(Ok(ThreadRunItem::ThreadUserMessageCreated(
                ThreadUserMessageCreated {
                    id: user_message_id.as_id(),
                },
            )))
            .await;
            sink.emit(Ok(ThreadRunItem::ThreadAssistantMessageCreated(
                ThreadAssistantMessageCreated {
                    id: assistant_message_id.as_id(),
                },
            )))
            .await;
            let left = sink.left();
            let grace = engine.abandoned_run_grace();
            let run = engine.run(input, &mut sink);
            tokio::pin!(run);
            tokio::select! {
                () = &mut run => {}
                () = async { left.await; tokio::time::sleep(grace).await } => {
                    // Everyone left: a persisted (shared) thread still gets its answer; an
                    // ephemeral one stops here, and dropping the run stops the model.
                    let persisted = db
                        .get_thread(thread_id)
                        .await
                        .ok()
                        .flatten()
                        .is_some_and(|t| !t.is_ephemeral);
                    if persisted {
                        run.await;
                    } else {
                        tracing::info!(
                            "answer run of thread {thread_id} stopped: its subscribers left"
                        );
                    }
                }
            }
            drop(slot);
        });
        Ok(Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        })))
    }
}

#[async_trait]
impl ThreadService for ThreadServiceImpl {
    async fn create_thread_and_run(
        &self,
        user_id: i64,
        policy: AccessPolicy,
        input: CreateThreadAndRunInput,
    ) -> Result<ThreadRunStream> {
        input.thread.user_message.validate()?;
        let options = input.options.unwrap_or_default();
        options.validate()?;
        let engine = self.engine()?;
        let slot = self.reserve_run(&engine, user_id)?;
        let thread_id = self.db.create_thread(user_id, true).await?;
        let user_message_id = self
            .add_user_message(thread_id, &input.thread.user_message)
            .await?;
        self.start_run(
            engine,
            slot,
            user_id,
            thread_id,
            user_message_id,
            true,
            policy,
            options,
        )
        .await
    }

    async fn create_thread_run(
        &self,
        user_id: i64,
        policy: AccessPolicy,
        input: CreateThreadRunInput,
    ) -> Result<ThreadRunStream> {
        use tabby_schema::AsRowid;
        input.additional_user_message.validate()?;
        let options = input.options.unwrap_or_default();
        options.validate()?;
        let thread_id = input.thread_id.as_rowid()?;
        let thread = self
            .db
            .get_thread(thread_id)
            .await?
            .ok_or(CoreError::NotFound("Thread not found"))?;
        if thread.user_id != user_id {
            return Err(CoreError::Forbidden("You can only run your own threads"));
        }
        let engine = self.engine()?;
        let slot = self.reserve_run(&engine, user_id)?;
        let user_message_id = self
            .add_user_message(thread_id, &input.additional_user_message)
            .await?;
        self.start_run(
            engine,
            slot,
            user_id,
            thread_id,
            user_message_id,
            false,
            policy,
            options,
        )
        .await
    }

    async fn get(&self, id: i64) -> Result<Option<Thread>> {
        Ok(self.db.get_thread(id).await?.map(thread))
    }

    async fn list(
        &self,
        ids: Vec<i64>,
        is_ephemeral: Option<bool>,
        owner: Option<i64>,
        viewer: Option<i64>,
        page: RelayArgs,
    ) -> Result<ThreadConnection> {
        let page = page
            .paginate(
                |t: &Thread| t.id.to_string(),
                |p| async move {
                    Ok(self
                        .db
                        .list_threads(&ids, owner, viewer, is_ephemeral, p)
                        .await?
                        .into_iter()
                        .map(thread)
                        .collect())
                },
            )
            .await?;
        Ok(page.into())
    }

    async fn list_messages(
        &self,
        thread_id: i64,
        reader: &AccessPolicy,
        page: RelayArgs,
    ) -> Result<MessageConnection> {
        let owner = self
            .db
            .get_thread(thread_id)
            .await?
            .ok_or(CoreError::NotFound("Thread not found"))?
            .user_id;
        let page = page
            .paginate(
                |m: &Message| m.id.to_string(),
                |p| async move {
                    Ok(self
                        .db
                        .list_thread_messages(thread_id, p)
                        .await?
                        .into_iter()
                        .map(|dao| message_for(dao, reader, owner))
                        .collect())
                },
            )
            .await?;
        Ok(page.into())
    }

    async fn set_persisted(&self, id: i64) -> Result<()> {
        self.db
            .set_thread_persisted(id)
            .await
            .map_err(CoreError::not_found_as("Thread not found"))
    }

    async fn delete(&self, id: i64) -> Result<()> {
        self.db
            .delete_thread(id)
            .await
            .map_err(CoreError::not_found_as("Thread not found"))
    }

    async fn delete_message_pair(
        &self,
        thread_id: i64,
        user_message_id: i64,
        assistant_message_id: i64,
    ) -> Result<()> {
        self.db
            .delete_thread_message_pair(thread_id, user_message_id, assistant_message_id)
            .await
            .map_err(CoreError::not_found_as("Message pair not found"))
    }

    async fn update_message(&self, thread_id: i64, id: i64, content: &str) -> Result<()> {
        self.db
            .update_thread_message_content(thread_id, id, content)
            .await
            .map_err(CoreError::not_found_as("Message not found"))
    }
}
