//! Next-edit suggestion mode: the model sees the original code, the diff of recent edits and the
//! current version, and writes the next version. No retrieval, no stop words.

use futures::StreamExt;

use tabby_common::api::event::{self, Event};

use super::{
    CompletionError, CompletionMode, CompletionRequest, CompletionResponse, CompletionService,
    DebugData, RequestContext,
};
use crate::services::completion::{Choice, types::EditHistory};
use tabby_inference::CompletionOptions;

pub fn next_edit_prompt(history: &EditHistory) -> String {
    let mut prompt = String::new();
    for (tag, body) in [
        ("<|original_code|>", &history.original_code),
        ("<|edits_diff|>", &history.edits_diff),
        ("<|current_version|>", &history.current_version),
    ] {
        prompt.push_str(tag);
        prompt.push('\n');
        prompt.push_str(body);
        if !body.ends_with('\n') {
            prompt.push('\n');
        }
    }
    prompt.push_str("<|next_version|>\n");
    prompt
}

impl CompletionService {
    pub(super) async fn next_edit(
        &self,
        completion_id: String,
        request: CompletionRequest,
        mut options: CompletionOptions,
        ctx: &RequestContext<'_>,
    ) -> Result<CompletionResponse, CompletionError> {
        let segments = request
            .segments
            .as_ref()
            .ok_or(CompletionError::EmptyPrompt)?;
        let history = segments
            .edit_history
            .as_ref()
            .ok_or(CompletionError::MissingEditHistory)?;
        let prompt = next_edit_prompt(history);
        options.max_decoding_tokens *= 2;
        let mut stream = self.engine.generate(&prompt, options).await;
        let mut text = String::new();
        while let Some(piece) = stream.next().await {
            match piece {
                Ok(piece) => text.push_str(&piece),
                Err(e) if text.is_empty() => return Err(e.into()),
                Err(e) => {
                    tracing::warn!("next-edit stream ended with an error: {e}");
                    break;
                }
            }
        }
        self.logger.log(
            ctx.user.clone().or(request.user.clone()),
            Event::Completion {
                completion_id: completion_id.clone(),
                language: request.language.clone().unwrap_or_else(|| "unknown".into()),
                prompt: prompt.clone(),
                segments: None,
                choices: vec![event::Choice {
                    index: 0,
                    text: text.clone(),
                }],
                user_agent: ctx.user_agent.map(str::to_string),
            },
        );
        let debug_data = request.debug_options.as_ref().map(|d| DebugData {
            snippets: None,
            prompt: d.return_prompt.then(|| prompt.clone()),
        });
        Ok(CompletionResponse {
            id: completion_id,
            choices: vec![Choice { index: 0, text }],
            debug_data,
            mode: CompletionMode::NextEditSuggestion,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_each_on_their_own_lines() {
        let prompt = next_edit_prompt(&EditHistory {
            original_code: "a = 1\n".into(),
            edits_diff: "-a = 1\n+a = 2".into(),
            current_version: "a = 2\n".into(),
        });
        assert_eq!(
            prompt,
            "<|original_code|>\na = 1\n<|edits_diff|>\n-a = 1\n+a = 2\n<|current_version|>\na = 2\n<|next_version|>\n"
        );
    }
}
