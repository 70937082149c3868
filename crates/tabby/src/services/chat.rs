//! The chat service behind `/v1/chat/completions`: sets the user, starts the backend stream and
//! records a `chat_completion` event.

use std::sync::Arc;

use async_openai::types::chat::{CreateChatCompletionRequest, CreateChatCompletionStreamResponse};
use futures::stream::BoxStream;
use tabby_common::api::event::{Event, EventLogger};
use tabby_inference::{ChatCompletionStream, ModelError};

pub struct ChatService {
    engine: Arc<dyn ChatCompletionStream>,
    logger: Arc<dyn EventLogger>,
}

pub type ChatChunkStream =
    BoxStream<'static, Result<CreateChatCompletionStreamResponse, ModelError>>;

impl ChatService {
    pub fn new(engine: Arc<dyn ChatCompletionStream>, logger: Arc<dyn EventLogger>) -> Self {
        Self { engine, logger }
    }

    pub async fn stream(
        &self,
        mut request: CreateChatCompletionRequest,
        user: Option<String>,
    ) -> Result<ChatChunkStream, ModelError> {
        if let Some(user) = &user {
            #[allow(deprecated)]
            {
                request.user = Some(user.clone());
            }
        }
        let stream = self.engine.chat_stream(request).await?;
        self.logger.log(user, Event::ChatCompletion {});
        Ok(stream)
    }
}
