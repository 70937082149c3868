//! Usage statistics: completions per day and language, and the raw user events.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use juniper::{GraphQLEnum, GraphQLObject, ID};

use crate::{Result, connection, relay::RelayArgs};

#[derive(Clone, Debug, GraphQLObject)]
pub struct CompletionStats {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub language: Language,
    pub completions: i32,
    pub views: i32,
    pub selects: i32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, GraphQLEnum)]
pub enum EventKind {
    Completion,
    ChatCompletion,
    Select,
    View,
    Dismiss,
}

impl EventKind {
    /// The value stored in `user_events.kind`.
    pub fn as_db_str(self) -> &'static str {
        match self {
            EventKind::Completion => "completion",
            EventKind::ChatCompletion => "chat_completion",
            EventKind::Select => "select",
            EventKind::View => "view",
            EventKind::Dismiss => "dismiss",
        }
    }

    pub fn from_db_str(kind: &str) -> Option<Self> {
        Some(match kind {
            "completion" => EventKind::Completion,
            "chat_completion" => EventKind::ChatCompletion,
            "select" => EventKind::Select,
            "view" => EventKind::View,
            "dismiss" => EventKind::Dismiss,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug, GraphQLObject)]
pub struct UserEvent {
    pub id: ID,
    pub user_id: ID,
    pub kind: EventKind,
    pub created_at: DateTime<Utc>,
    /// The event as JSON.
    pub payload: String,
}

connection!(UserEventConnection, UserEventEdge, UserEvent);

/// Languages of the usage statistics (upstream's enum); `OTHER` covers every other language.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, GraphQLEnum)]
pub enum Language {
    Rust,
    Python,
    Java,
    Kotlin,
    Javascript,
    Typescript,
    Go,
    Ruby,
    Csharp,
    C,
    Cpp,
    Solidity,
    Other,
}

impl Language {
    pub const NAMED: [Language; 12] = [
        Language::Rust,
        Language::Python,
        Language::Java,
        Language::Kotlin,
        Language::Javascript,
        Language::Typescript,
        Language::Go,
        Language::Ruby,
        Language::Csharp,
        Language::C,
        Language::Cpp,
        Language::Solidity,
    ];

    /// The editor language ids (as sent in completion requests) this value stands for.
    pub fn language_ids(self) -> &'static [&'static str] {
        match self {
            Language::Rust => &["rust"],
            Language::Python => &["python"],
            Language::Java => &["java"],
            Language::Kotlin => &["kotlin"],
            Language::Javascript => &["javascript", "javascriptreact"],
            Language::Typescript => &["typescript", "typescriptreact"],
            Language::Go => &["go"],
            Language::Ruby => &["ruby"],
            Language::Csharp => &["csharp"],
            Language::C => &["c"],
            Language::Cpp => &["cpp"],
            Language::Solidity => &["solidity"],
            Language::Other => &[],
        }
    }

    pub fn from_language_id(id: &str) -> Language {
        Self::NAMED
            .into_iter()
            .find(|l| l.language_ids().contains(&id))
            .unwrap_or(Language::Other)
    }
}

#[async_trait]
pub trait UsageService: Send + Sync {
    /// Completions, views and selects per UTC day and language in `[start, end)`. Empty
    /// `users` or `languages` mean all.
    async fn daily_stats(
        &self,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
        users: Vec<i64>,
        languages: Vec<Language>,
    ) -> Result<Vec<CompletionStats>>;
    async fn user_events(
        &self,
        page: RelayArgs,
        users: Vec<i64>,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> Result<UserEventConnection>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn language_ids_map_both_ways() {
        assert_eq!(
            Language::from_language_id("typescriptreact"),
            Language::Typescript
        );
        assert_eq!(Language::from_language_id("haskell"), Language::Other);
        for l in Language::NAMED {
            for id in l.language_ids() {
                assert_eq!(Language::from_language_id(id), l);
            }
        }
        for kind in ["completion", "chat_completion", "select", "view", "dismiss"] {
            assert_eq!(EventKind::from_db_str(kind).unwrap().as_db_str(), kind);
        }
    }
}
