//! Usage events: what the editor reports (view / select / dismiss) and what the server records
//! (completion, chat completion). Serialized exactly as upstream's event log lines.

use serde::{Deserialize, Serialize};

/// `POST /v1/events` body.
#[derive(Clone, Debug, Deserialize, Serialize, utoipa::ToSchema)]
pub struct LogEventRequest {
    /// `view`, `select` or `dismiss`.
    #[serde(rename = "type")]
    pub event_type: String,
    pub completion_id: String,
    pub choice_index: u32,
    pub view_id: Option<String>,
    pub elapsed: Option<u32>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum SelectKind {
    Line,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Choice {
    pub index: u32,
    pub text: String,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Declaration {
    pub filepath: String,
    pub body: String,
}

/// The part of a completion request's segments that is logged.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct LoggedSegments {
    pub prefix: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suffix: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clipboard: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub declarations: Option<Vec<Declaration>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filepath: Option<String>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    View {
        completion_id: String,
        choice_index: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        view_id: Option<String>,
    },
    Select {
        completion_id: String,
        choice_index: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        kind: Option<SelectKind>,
        #[serde(skip_serializing_if = "Option::is_none")]
        view_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        elapsed: Option<u32>,
    },
    Dismiss {
        completion_id: String,
        choice_index: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        view_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        elapsed: Option<u32>,
    },
    Completion {
        completion_id: String,
        language: String,
        prompt: String,
        /// Boxed: the other events are a few words.
        #[serde(skip_serializing_if = "Option::is_none")]
        segments: Option<Box<LoggedSegments>>,
        choices: Vec<Choice>,
        user_agent: Option<String>,
    },
    ChatCompletion {},
}

/// One line of `events/YYYY-MM-DD.json`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct LogEntry {
    pub user: Option<String>,
    /// Unix time in milliseconds.
    pub ts: u128,
    pub event: Event,
}

/// Where events go. Implementations must not block the caller.
pub trait EventLogger: Send + Sync {
    fn log(&self, user: Option<String>, event: Event);
}

/// Sends every event to several loggers (the file log, and the DB in the enterprise layer).
pub struct ComposedLogger(pub Vec<std::sync::Arc<dyn EventLogger>>);

impl EventLogger for ComposedLogger {
    fn log(&self, user: Option<String>, event: Event) {
        for logger in &self.0 {
            logger.log(user.clone(), event.clone());
        }
    }
}
