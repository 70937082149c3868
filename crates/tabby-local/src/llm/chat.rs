//! Chat with a local model: OpenAI chat requests rendered as ChatML (`<|im_start|>role\n…
//! <|im_end|>`), the reply streamed back as OpenAI chunk objects.
//!
//! Only ChatML templates are supported (Qwen2.5, SmolLM2); the Jinja template itself is not
//! evaluated, only read for the default system message it inserts when a conversation has
//! none. Tools are not supported.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use async_openai::types::chat::{
    ChatChoiceStream, ChatCompletionRequestAssistantMessageContent,
    ChatCompletionRequestAssistantMessageContentPart, ChatCompletionRequestDeveloperMessageContent,
    ChatCompletionRequestDeveloperMessageContentPart, ChatCompletionRequestMessage,
    ChatCompletionRequestSystemMessageContent, ChatCompletionRequestSystemMessageContentPart,
    ChatCompletionRequestToolMessageContent, ChatCompletionRequestToolMessageContentPart,
    ChatCompletionRequestUserMessageContent, ChatCompletionRequestUserMessageContentPart,
    ChatCompletionStreamResponseDelta, CreateChatCompletionRequest,
    CreateChatCompletionStreamResponse, FinishReason, Role, StopConfiguration,
};
use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use tabby_inference::{ChatCompletionStream, ModelError};

use super::engine::{Finish, Piece};
use super::{LlmConfig, LoadError, LocalLlm, SamplingOptions};

/// llama.cpp server's sampling defaults, used when a request leaves them unset.
const DEFAULT_TEMPERATURE: f32 = 0.8;
const DEFAULT_TOP_P: f32 = 0.95;

/// Chat with a local ChatML model.
#[derive(Clone)]
pub struct LocalChat {
    llm: Arc<LocalLlm>,
    default_system: Option<String>,
}

impl LocalChat {
    /// Loads the model in `model_dir`; see [`crate::llm::LlmConfig::parallelism`].
    pub fn new(model_dir: &Path, parallelism: usize) -> Result<Self, LoadError> {
        let config = LlmConfig {
            parallelism,
            ..LlmConfig::default()
        };
        Self::from_llm(Arc::new(LocalLlm::load(model_dir, &config)?))
    }

    /// Chat over an already loaded model; fails if its chat template is not ChatML.
    pub fn from_llm(llm: Arc<LocalLlm>) -> Result<Self, LoadError> {
        let chatml = match llm.chat_template() {
            Some(t) => t.contains("<|im_start|>") && t.contains("<|im_end|>"),
            None => llm.tokenizer().token_id("<|im_start|>").is_some(),
        };
        if !chatml {
            return Err(LoadError::ChatTemplate(llm.model_id().to_string()));
        }
        let default_system = llm.chat_template().and_then(default_system_message);
        Ok(Self {
            llm,
            default_system,
        })
    }
}

#[async_trait]
impl ChatCompletionStream for LocalChat {
    async fn chat_stream(
        &self,
        request: CreateChatCompletionRequest,
    ) -> Result<
        BoxStream<'static, Result<CreateChatCompletionStreamResponse, ModelError>>,
        ModelError,
    > {
        let prompt = render_chatml(&request.messages, self.default_system.as_deref())?;
        #[allow(deprecated)]
        let (max_tokens, seed) = (
            request.max_completion_tokens.or(request.max_tokens),
            request.seed,
        );
        let options = SamplingOptions {
            max_tokens: max_tokens.map(|n| n as usize),
            temperature: request.temperature.unwrap_or(DEFAULT_TEMPERATURE),
            top_p: Some(request.top_p.unwrap_or(DEFAULT_TOP_P)),
            seed: seed.map(|s| s as u64).unwrap_or_else(random_seed),
            presence_penalty: request.presence_penalty.unwrap_or(0.0),
            frequency_penalty: request.frequency_penalty.unwrap_or(0.0),
        };
        options.check()?;
        let stops = match request.stop {
            None => Vec::new(),
            Some(StopConfiguration::String(s)) => vec![s],
            Some(StopConfiguration::StringArray(v)) => v,
        };
        let pieces = self.llm.generate(prompt, options);
        let header = ChunkHeader {
            id: format!("chatcmpl-{:x}", random_seed()),
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs() as u32)
                .unwrap_or(0),
            model: self.llm.model_id().to_string(),
        };
        let state = ChunkStream {
            outbox: VecDeque::from([Ok(header.chunk(
                ChatCompletionStreamResponseDelta {
                    role: Some(Role::Assistant),
                    content: Some(String::new()),
                    ..Default::default()
                },
                None,
            ))]),
            pieces,
            stops: StopStrings::new(stops),
            header,
            done: false,
        };
        Ok(futures::stream::unfold(state, |mut s| async move {
            s.next().await.map(|item| (item, s))
        })
        .boxed())
    }
}

struct ChunkHeader {
    id: String,
    created: u32,
    model: String,
}

impl ChunkHeader {
    fn chunk(
        &self,
        delta: ChatCompletionStreamResponseDelta,
        finish_reason: Option<FinishReason>,
    ) -> CreateChatCompletionStreamResponse {
        CreateChatCompletionStreamResponse {
            id: self.id.clone(),
            choices: vec![ChatChoiceStream {
                index: 0,
                delta,
                finish_reason,
                logprobs: None,
            }],
            created: self.created,
            model: self.model.clone(),
            object: "chat.completion.chunk".to_string(),
            ..Default::default()
        }
    }

    fn content(&self, text: String) -> CreateChatCompletionStreamResponse {
        self.chunk(
            ChatCompletionStreamResponseDelta {
                content: Some(text),
                ..Default::default()
            },
            None,
        )
    }

    fn end(&self, reason: FinishReason) -> CreateChatCompletionStreamResponse {
        self.chunk(ChatCompletionStreamResponseDelta::default(), Some(reason))
    }
}

/// Turns engine pieces into chunks; ends (dropping the engine stream, which stops the worker)
/// at a stop string.
struct ChunkStream {
    outbox: VecDeque<Result<CreateChatCompletionStreamResponse, ModelError>>,
    pieces: BoxStream<'static, Result<Piece, ModelError>>,
    stops: StopStrings,
    header: ChunkHeader,
    done: bool,
}

impl ChunkStream {
    async fn next(&mut self) -> Option<Result<CreateChatCompletionStreamResponse, ModelError>> {
        loop {
            if let Some(item) = self.outbox.pop_front() {
                return Some(item);
            }
            if self.done {
                return None;
            }
            let piece = self.pieces.next().await;
            let (text, finish) = match piece {
                Some(Ok(Piece::Text(text))) => match self.stops.push(&text) {
                    (text, true) => (text, Some(FinishReason::Stop)),
                    (text, false) => (text, None),
                },
                Some(Ok(Piece::End(finish))) => (
                    self.stops.finish(),
                    Some(match finish {
                        Finish::Stop => FinishReason::Stop,
                        Finish::Length => FinishReason::Length,
                    }),
                ),
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(e));
                }
                None => {
                    self.done = true;
                    return Some(Err(ModelError::Backend(
                        "the local model stopped without finishing".into(),
                    )));
                }
            };
            if !text.is_empty() {
                self.outbox.push_back(Ok(self.header.content(text)));
            }
            if let Some(reason) = finish {
                self.outbox.push_back(Ok(self.header.end(reason)));
                self.done = true;
                self.pieces = futures::stream::empty().boxed();
            }
        }
    }
}

/// Cuts the output at the first of the request's `stop` strings, holding back text that
/// might be the start of one.
struct StopStrings {
    stops: Vec<String>,
    held: String,
}

impl StopStrings {
    fn new(stops: Vec<String>) -> Self {
        Self {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
        }
    }

    /// The text that can be released now, and whether a stop string was reached.
    fn push(&mut self, text: &str) -> (String, bool) {
        self.held.push_str(text);
        if let Some(at) = self.stops.iter().filter_map(|s| self.held.find(s)).min() {
            self.held.truncate(at);
            return (std::mem::take(&mut self.held), true);
        }
        let keep = self
            .held
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| {
                let tail = &self.held[i..];
                self.stops.iter().any(|s| s.starts_with(tail))
            })
            .unwrap_or(self.held.len());
        let rest = self.held.split_off(keep);
        (std::mem::replace(&mut self.held, rest), false)
    }

    fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// The ChatML prompt for `messages`, ending with the opened assistant turn.
fn render_chatml(
    messages: &[ChatCompletionRequestMessage],
    default_system: Option<&str>,
) -> Result<String, ModelError> {
    use ChatCompletionRequestMessage as M;
    if messages.is_empty() {
        return Err(ModelError::InvalidRequest("`messages` is empty".into()));
    }
    let mut prompt = String::new();
    let mut turn = |role: &str, content: &str| {
        prompt.push_str("<|im_start|>");
        prompt.push_str(role);
        prompt.push('\n');
        prompt.push_str(content);
        prompt.push_str("<|im_end|>\n");
    };
    let starts_with_system = matches!(messages[0], M::System(_) | M::Developer(_));
    if let (false, Some(system)) = (starts_with_system, default_system) {
        turn("system", system);
    }
    for message in messages {
        match message {
            M::System(m) => turn("system", &system_text(&m.content)),
            M::Developer(m) => turn("system", &developer_text(&m.content)),
            M::User(m) => turn("user", &user_text(&m.content)?),
            M::Assistant(m) => {
                let text = match &m.content {
                    Some(c) => assistant_text(c),
                    None => String::new(),
                };
                turn("assistant", &text)
            }
            M::Tool(m) => turn(
                "user",
                &format!(
                    "<tool_response>\n{}\n</tool_response>",
                    tool_text(&m.content)
                ),
            ),
            M::Function(m) => turn(
                "user",
                &format!(
                    "<tool_response>\n{}\n</tool_response>",
                    m.content.as_deref().unwrap_or_default()
                ),
            ),
        }
    }
    prompt.push_str("<|im_start|>assistant\n");
    Ok(prompt)
}

fn system_text(c: &ChatCompletionRequestSystemMessageContent) -> String {
    match c {
        ChatCompletionRequestSystemMessageContent::Text(t) => t.clone(),
        ChatCompletionRequestSystemMessageContent::Array(parts) => parts
            .iter()
            .map(|ChatCompletionRequestSystemMessageContentPart::Text(t)| t.text.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

fn developer_text(c: &ChatCompletionRequestDeveloperMessageContent) -> String {
    match c {
        ChatCompletionRequestDeveloperMessageContent::Text(t) => t.clone(),
        ChatCompletionRequestDeveloperMessageContent::Array(parts) => parts
            .iter()
            .map(|ChatCompletionRequestDeveloperMessageContentPart::Text(t)| t.text.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

fn user_text(c: &ChatCompletionRequestUserMessageContent) -> Result<String, ModelError> {
    match c {
        ChatCompletionRequestUserMessageContent::Text(t) => Ok(t.clone()),
        ChatCompletionRequestUserMessageContent::Array(parts) => {
            let mut texts = Vec::with_capacity(parts.len());
            for part in parts {
                match part {
                    ChatCompletionRequestUserMessageContentPart::Text(t) => {
                        texts.push(t.text.as_str())
                    }
                    _ => {
                        return Err(ModelError::InvalidRequest(
                            "the local chat model accepts text only".into(),
                        ));
                    }
                }
            }
            Ok(texts.join("\n"))
        }
    }
}

fn assistant_text(c: &ChatCompletionRequestAssistantMessageContent) -> String {
    match c {
        ChatCompletionRequestAssistantMessageContent::Text(t) => t.clone(),
        ChatCompletionRequestAssistantMessageContent::Array(parts) => parts
            .iter()
            .map(|p| match p {
                ChatCompletionRequestAssistantMessageContentPart::Text(t) => t.text.as_str(),
                ChatCompletionRequestAssistantMessageContentPart::Refusal(r) => r.refusal.as_str(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

fn tool_text(c: &ChatCompletionRequestToolMessageContent) -> String {
    match c {
        ChatCompletionRequestToolMessageContent::Text(t) => t.clone(),
        ChatCompletionRequestToolMessageContent::Array(parts) => parts
            .iter()
            .map(|ChatCompletionRequestToolMessageContentPart::Text(t)| t.text.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// The system message a ChatML template inserts when a conversation has none: the first
/// `<|im_start|>system` turn written out as a literal in the template.
fn default_system_message(template: &str) -> Option<String> {
    const OPEN: &str = "<|im_start|>system";
    const CLOSE: &str = "<|im_end|>";
    let mut rest = template;
    while let Some(at) = rest.find(OPEN) {
        rest = &rest[at + OPEN.len()..];
        let body = rest.strip_prefix("\\n").or_else(|| rest.strip_prefix('\n'));
        let Some(body) = body else { continue };
        let Some(end) = body.find(CLOSE) else { break };
        let literal = &body[..end];
        // A Jinja expression or the end of a string literal: not a fixed message.
        if literal.contains(['\'', '"', '+', '{', '}']) {
            continue;
        }
        return Some(literal.replace("\\n", "\n"));
    }
    None
}

fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

#[cfg(test)]
mod tests {
    use async_openai::types::chat::{
        ChatCompletionRequestAssistantMessage, ChatCompletionRequestSystemMessage,
        ChatCompletionRequestUserMessage,
    };

    use super::*;

    fn user(text: &str) -> ChatCompletionRequestMessage {
        ChatCompletionRequestMessage::User(ChatCompletionRequestUserMessage {
            content: ChatCompletionRequestUserMessageContent::Text(text.into()),
            name: None,
        })
    }

    #[test]
    fn renders_chatml_with_default_system() {
        let assistant =
            ChatCompletionRequestMessage::Assistant(ChatCompletionRequestAssistantMessage {
                content: Some(ChatCompletionRequestAssistantMessageContent::Text(
                    "Hello".into(),
                )),
                ..Default::default()
            });
        let prompt =
            render_chatml(&[user("Hi"), assistant, user("Bye")], Some("Be brief.")).unwrap();
        assert_eq!(
            prompt,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
             <|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n\
             <|im_start|>assistant\n"
        );
    }

    #[test]
    fn own_system_message_replaces_the_default() {
        let system = ChatCompletionRequestMessage::System(ChatCompletionRequestSystemMessage {
            content: ChatCompletionRequestSystemMessageContent::Text("Mine".into()),
            name: None,
        });
        let prompt = render_chatml(&[system, user("Hi")], Some("Default")).unwrap();
        assert_eq!(
            prompt,
            "<|im_start|>system\nMine<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn empty_conversation_is_rejected() {
        assert!(matches!(
            render_chatml(&[], None),
            Err(ModelError::InvalidRequest(_))
        ));
    }

    #[test]
    fn default_system_from_templates() {
        // Qwen2.5 (escaped newlines inside the Jinja literals) and SmolLM2 (raw newlines).
        let qwen = r#"{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}{%- else %}{{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}{%- endif %}"#;
        assert_eq!(
            default_system_message(qwen).as_deref(),
            Some("You are Qwen, created by Alibaba Cloud. You are a helpful assistant.")
        );
        let smol = "{{ '<|im_start|>system\nYou are SmolLM<|im_end|>\n' }}{{'<|im_start|>' + message['role'] + '\n' }}";
        assert_eq!(
            default_system_message(smol).as_deref(),
            Some("You are SmolLM")
        );
        assert_eq!(default_system_message("{{ '<|im_start|>' + role }}"), None);
    }

    #[test]
    fn stop_strings_cut_and_hold_back() {
        let mut s = StopStrings::new(vec!["END".into()]);
        assert_eq!(s.push("abc E"), ("abc ".to_string(), false));
        assert_eq!(s.push("N"), (String::new(), false));
        assert_eq!(s.push("X"), ("ENX".to_string(), false));
        assert_eq!(s.push("yEND tail"), ("y".to_string(), true));
        let mut none = StopStrings::new(Vec::new());
        assert_eq!(none.push("all"), ("all".to_string(), false));
    }
}
