//! Wire types of `POST /v1/completions`, field for field as upstream's (see the facts sheet §1.3).

use serde::{Deserialize, Serialize};
use tabby_common::api::event::{Declaration as LoggedDeclaration, LoggedSegments};
use utoipa::ToSchema;

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CompletionMode {
    #[default]
    Standard,
    NextEditSuggestion,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
#[schema(example = json!({
    "language": "python",
    "segments": {"prefix": "def fib(n):\n    ", "suffix": "\n        return fib(n - 1) + fib(n - 2)"}
}))]
pub struct CompletionRequest {
    /// Language identifier (VS Code ids such as `python`, `typescriptreact`). Absent means `unknown`.
    pub language: Option<String>,
    /// The editor's context. Ignored when `debug_options.raw_prompt` is set.
    pub segments: Option<Segments>,
    /// Replaced by the authenticated user when the server knows one.
    pub user: Option<String>,
    pub debug_options: Option<DebugOptions>,
    /// Sampling temperature; default 0.1.
    pub temperature: Option<f32>,
    /// Sampling seed; default: current time in milliseconds.
    pub seed: Option<u64>,
    #[serde(default)]
    pub mode: CompletionMode,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct Segments {
    /// Content before the cursor.
    pub prefix: String,
    /// Content after the cursor; missing or empty becomes "\n" in the prompt.
    pub suffix: Option<String>,
    /// Path of the file being edited, relative to the repository (or workspace) root.
    pub filepath: Option<String>,
    /// The repository's remote URL; selects a server-side repository for retrieval.
    pub git_url: Option<String>,
    /// LSP declarations of symbols near the cursor.
    pub declarations: Option<Vec<Declaration>>,
    pub relevant_snippets_from_changed_files: Option<Vec<Snippet>>,
    pub relevant_snippets_from_recently_opened_files: Option<Vec<Snippet>>,
    /// Logged only; never put in the prompt.
    pub clipboard: Option<String>,
    /// Required in `next_edit_suggestion` mode.
    pub edit_history: Option<EditHistory>,
}

impl Segments {
    pub fn to_logged(&self) -> LoggedSegments {
        LoggedSegments {
            prefix: self.prefix.clone(),
            suffix: self.suffix.clone(),
            clipboard: self.clipboard.clone(),
            git_url: self.git_url.clone(),
            declarations: self.declarations.as_ref().map(|ds| {
                ds.iter()
                    .map(|d| LoggedDeclaration {
                        filepath: d.filepath.clone(),
                        body: d.body.clone(),
                    })
                    .collect()
            }),
            filepath: self.filepath.clone(),
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, ToSchema)]
pub struct Declaration {
    pub filepath: String,
    pub body: String,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, ToSchema)]
pub struct Snippet {
    pub filepath: String,
    pub body: String,
    pub score: f32,
    /// For a code search hit, the names of the definitions that start in it (from the index);
    /// `None` for the editor's snippets and wherever unknown. Never read from a request.
    #[serde(skip)]
    pub defines: Option<std::sync::Arc<[String]>>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, ToSchema)]
pub struct EditHistory {
    pub original_code: String,
    pub edits_diff: String,
    pub current_version: String,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct DebugOptions {
    /// Sent to the model as is; segments are ignored.
    pub raw_prompt: Option<String>,
    #[serde(default)]
    pub return_snippets: bool,
    #[serde(default)]
    pub return_prompt: bool,
    #[serde(default)]
    pub disable_retrieval_augmented_code_completion: bool,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, ToSchema)]
pub struct Choice {
    pub index: u32,
    pub text: String,
}

#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[schema(example = json!({
    "id": "cmpl-5c1a3a5e-2b4e-4a52-9d8f-1f0c1a2b3c4d",
    "choices": [{"index": 0, "text": "string"}],
    "mode": "standard"
}))]
pub struct CompletionResponse {
    /// `cmpl-` followed by a UUID v4; events refer to it.
    pub id: String,
    /// Always exactly one choice.
    pub choices: Vec<Choice>,
    /// Present only when the request had `debug_options`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug_data: Option<DebugData>,
    pub mode: CompletionMode,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct DebugData {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snippets: Option<Vec<Snippet>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
}
