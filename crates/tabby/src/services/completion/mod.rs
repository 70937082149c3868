//! The completion service: turns a `CompletionRequest` into a prompt, streams the model with the
//! language's stop words, restores CRLF line endings and logs a `completion` event.
//! It knows nothing about HTTP.

mod name_cache;
mod next_edit;
pub mod prompt;
mod retrieval_cache;
mod scope;
mod snippets;
pub mod types;
mod used_names;

use std::sync::Arc;

use futures::StreamExt;
use tabby_common::{
    api::{
        code::{AllowedCodeRepository, CodeSearch, ReceiverNames},
        event::{self, Event, EventLogger},
    },
    config::{CodeSearchParams, CompletionConfig},
    languages::LanguageTable,
};
use tabby_inference::{
    CompletionOptions, CompletionStream, FirstNames, ModelError, StopConditionFactory,
    is_identifier_byte,
};
pub use types::*;

use self::prompt::{PromptBudget, PromptInput, PromptTemplate};

#[derive(Debug, thiserror::Error)]
pub enum CompletionError {
    #[error("request has neither `segments` nor `debug_options.raw_prompt`")]
    EmptyPrompt,
    #[error("next_edit_suggestion mode needs `segments.edit_history`")]
    MissingEditHistory,
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// A completion model plus how to prompt it.
pub struct CompletionModel {
    pub engine: Arc<dyn CompletionStream>,
    pub prompt_template: Option<PromptTemplate>,
    pub additional_stop_words: Vec<String>,
}

pub struct CompletionService {
    // Fields are read by the next-edit module too.
    engine: Arc<dyn CompletionStream>,
    template: Option<PromptTemplate>,
    stop_words: StopConditionFactory,
    languages: Arc<LanguageTable>,
    config: CompletionConfig,
    code_search: Option<Arc<dyn CodeSearch>>,
    logger: Arc<dyn EventLogger>,
    retrieval: retrieval_cache::RetrievalCache,
    defined_names: used_names::DefinedNames,
}

/// What the caller knows about the request beyond its body.
#[derive(Default)]
pub struct RequestContext<'a> {
    pub user: Option<String>,
    pub user_agent: Option<&'a str>,
    pub allowed_repositories: Option<&'a AllowedCodeRepository>,
}

impl CompletionService {
    pub fn new(
        model: CompletionModel,
        languages: Arc<LanguageTable>,
        config: CompletionConfig,
        code_search: Option<Arc<dyn CodeSearch>>,
        logger: Arc<dyn EventLogger>,
    ) -> Self {
        Self {
            engine: model.engine,
            template: model.prompt_template,
            stop_words: StopConditionFactory::new(model.additional_stop_words),
            languages,
            config,
            code_search,
            logger,
            retrieval: Default::default(),
            defined_names: Default::default(),
        }
    }

    /// The same service with the retrieval cache's entries counting for `ttl` instead of
    /// [`retrieval_cache::TTL`].
    pub fn with_retrieval_ttl(mut self, ttl: std::time::Duration) -> Self {
        self.retrieval = retrieval_cache::RetrievalCache::with_ttl(ttl);
        self
    }

    pub async fn generate(
        &self,
        request: CompletionRequest,
        ctx: RequestContext<'_>,
    ) -> Result<CompletionResponse, CompletionError> {
        let completion_id = format!("cmpl-{}", uuid::Uuid::new_v4());
        let mut options = CompletionOptions {
            max_decoding_tokens: self.config.max_decoding_tokens as i32,
            sampling_temperature: request.temperature.unwrap_or(0.1),
            seed: request.seed.unwrap_or_else(now_millis),
            presence_penalty: 0.0,
            first_names: None,
        };
        if request.mode == CompletionMode::NextEditSuggestion {
            return self.next_edit(completion_id, request, options, &ctx).await;
        }

        let language_name = request.language.as_deref().unwrap_or("unknown");
        let language = self.languages.get(language_name);
        let debug = request.debug_options.as_ref();

        let (prompt, snippets, crlf, scope) = if let Some(raw) =
            debug.and_then(|d| d.raw_prompt.clone())
        {
            (raw, vec![], false, None)
        } else {
            let segments = request
                .segments
                .as_ref()
                .ok_or(CompletionError::EmptyPrompt)?;
            let crlf = segments.prefix.contains("\r\n")
                || segments
                    .suffix
                    .as_deref()
                    .is_some_and(|s| s.contains("\r\n"));
            let mut snippets = snippets::client_snippets(segments);
            let rag_disabled = debug.is_some_and(|d| d.disable_retrieval_augmented_code_completion);
            let mut line_key = None;
            let mut imports = Vec::new();
            let mut outline = Vec::new();
            if let (false, Some(search), Some(allowed)) =
                (rag_disabled, &self.code_search, ctx.allowed_repositories)
            {
                // The keystrokes of one line get the same snippets (a stable prompt start).
                let key = retrieval_cache::LineKey::new(ctx.user.as_deref(), allowed, segments);
                let searched = match self.retrieval.get(&key) {
                    Some(cached) => cached,
                    None => {
                        let params = CodeSearchParams {
                            names_leg: self.config.names_leg,
                            members_leg: self.config.members_leg,
                            ..self.config.code_search_params.clone()
                        };
                        let searched = snippets::code_search_snippets(
                            search.as_ref(),
                            allowed,
                            segments,
                            language_name,
                            &params,
                            self.config.import_snippets,
                            self.config.search_hits_from_both_legs,
                        )
                        .await;
                        // A new line: the file's last prompt's snippets first while the
                        // search's best hit is one of them (a stable prompt start).
                        let searched = if self.config.steady_snippets {
                            self.retrieval.steady(&key, searched)
                        } else {
                            searched
                        };
                        if !searched.is_empty() {
                            self.retrieval.put(key.clone(), searched.clone());
                        }
                        searched
                    }
                };
                if self.config.import_header_bytes > 0 || self.config.snippets_of_used_names {
                    imports =
                        snippets::file_imports(search.as_ref(), allowed, segments, language_name)
                            .await;
                }
                // The gate needs the file's imports: a file not in the index (a new one)
                // keeps every hit.
                let imported = if self.config.snippets_of_used_names {
                    snippets::imported_files(search.as_ref(), allowed, segments, language_name)
                        .await
                } else {
                    None
                };
                if let Some(imported) = imported {
                    let used = used_names::UsedNames::new(
                        &segments.prefix,
                        segments.suffix.as_deref().unwrap_or_default(),
                        imports.iter().map(|i| i.text.as_str()),
                    );
                    let near = used_names::NearFiles::new(
                        language.canonical_name(),
                        segments.filepath.as_deref(),
                        imported,
                    );
                    snippets.extend(self.defined_names.keep_used(
                        language.canonical_name(),
                        &searched,
                        &used,
                        &near,
                    ));
                } else {
                    snippets.extend(searched.iter().cloned());
                }
                // What the name before the cursor leads to: looked up at each keystroke (it
                // follows what is typed), kept for the rest of the line.
                if self.config.outline_bytes > 0 {
                    let fresh = snippets::receiver_outline(
                        search.as_ref(),
                        allowed,
                        segments,
                        language_name,
                        self.config.outline_bytes,
                    )
                    .await;
                    outline = self.retrieval.line_outline(&key, fresh);
                }
                if self.config.member_names_only || self.config.name_cache_weight > 0.0 {
                    let suffix = segments.suffix.as_deref().unwrap_or_default();
                    options.first_names =
                        snippets::receiver_names(search.as_ref(), allowed, segments, language_name)
                            .await
                            .and_then(|found| {
                                first_names(&self.config, &segments.prefix, suffix, found)
                            })
                            .map(Arc::new);
                }
                line_key = Some((key, searched));
            }
            let suffix = segments.suffix.as_deref().unwrap_or_default();
            let (prefix, suffix) = if crlf {
                (
                    segments.prefix.replace("\r\n", "\n"),
                    suffix.replace("\r\n", "\n"),
                )
            } else {
                (segments.prefix.clone(), suffix.to_string())
            };
            let repo_name = segments
                .git_url
                .as_deref()
                .and_then(tabby_common::git_url::GitUrl::parse);
            let built = prompt::build_prompt(
                self.template.as_ref(),
                self.config.snippet_format,
                &PromptInput {
                    prefix: &prefix,
                    suffix: &suffix,
                    snippets: &snippets,
                    language,
                    filepath: segments.filepath.as_deref(),
                    repo_name: repo_name.as_ref().map(|u| u.name()),
                    imports: &imports,
                    outline: &outline,
                },
                PromptBudget {
                    max_input_length: self.config.max_input_length,
                    snippet_bytes: self.config.snippet_bytes,
                    suffix_bytes: self.config.suffix_bytes,
                    prefix_clip_lines: self.config.prefix_clip_lines,
                    head_lines: self.config.snippet_head_lines,
                    best_last: self.config.snippets_best_last,
                    import_bytes: self.config.import_header_bytes,
                },
            );
            if let (Some((key, searched)), true) = (&line_key, self.config.steady_snippets) {
                self.retrieval.served(key, &built.snippets, searched);
            }
            let scope = scope::Scope::new(&prefix, &suffix);
            (built.prompt, built.snippets, crlf, Some(scope))
        };

        let mut text = self
            .stream_until_stop(&prompt, options, language, scope)
            .await?;
        if crlf {
            text = to_crlf(&text);
        }

        self.logger.log(
            ctx.user.clone().or(request.user.clone()),
            Event::Completion {
                completion_id: completion_id.clone(),
                language: language_name.to_string(),
                prompt: prompt.clone(),
                segments: request.segments.as_ref().map(|s| Box::new(s.to_logged())),
                choices: vec![event::Choice {
                    index: 0,
                    text: text.clone(),
                }],
                user_agent: ctx.user_agent.map(str::to_string),
            },
        );

        let debug_data = debug.map(|d| DebugData {
            snippets: d.return_snippets.then_some(snippets),
            prompt: d.return_prompt.then_some(prompt),
        });
        Ok(CompletionResponse {
            id: completion_id,
            choices: vec![Choice { index: 0, text }],
            debug_data,
            mode: CompletionMode::Standard,
        })
    }

    /// Streams the model, cutting at the first stop word, or where the editor would cut the
    /// completion (`scope`): dropping the stream there stops generation. An error before any
    /// text is returned; an error after some text keeps what was generated.
    async fn stream_until_stop(
        &self,
        prompt: &str,
        options: CompletionOptions,
        language: &tabby_common::languages::Language,
        scope: Option<scope::Scope>,
    ) -> Result<String, ModelError> {
        let mut stop = self.stop_words.create(language, prompt);
        let mut stream = self.engine.generate(prompt, options).await;
        let mut text = String::new();
        while let Some(piece) = stream.next().await {
            let piece = match piece {
                Ok(piece) => piece,
                Err(e) if text.is_empty() => return Err(e),
                Err(e) => {
                    tracing::warn!("completion stream ended with an error: {e}");
                    break;
                }
            };
            text.push_str(&piece);
            if let Some(keep) = stop.push(&piece) {
                let mut keep = keep.min(text.len());
                while !text.is_char_boundary(keep) {
                    keep -= 1;
                }
                text.truncate(keep);
                break;
            }
            if let Some(keep) = scope.and_then(|s| s.cut(&text)) {
                text.truncate(keep);
                break;
            }
        }
        Ok(text)
    }
}

/// What may follow the cursor of the module's `names`: each name that starts with the part
/// the editor has typed after the access, less that part; none when none does, or the cursor
/// is inside a name (the suffix goes on with one).
fn names_after_typed(prefix: &str, suffix: &str, names: &[String]) -> Option<FirstNames> {
    if suffix.bytes().next().is_some_and(is_identifier_byte) {
        return None;
    }
    let typed = typed_part(prefix);
    FirstNames::new(names.iter().filter_map(|n| n.strip_prefix(typed)))
}

/// How the completion after an access must or may start: with one of the module's names
/// (`member_names_only`, when the access leads to a module that says them all), led by the
/// names the file itself wrote after the same access elsewhere ([`name_cache`], weight
/// `name_cache_weight`); where the names are not all known, those the file wrote lead alone
/// (an open prior: nothing is masked). Less the part the editor has typed after the access.
fn first_names(
    config: &CompletionConfig,
    prefix: &str,
    suffix: &str,
    found: ReceiverNames,
) -> Option<FirstNames> {
    let weight = config.name_cache_weight;
    let counts = if weight > 0.0 {
        name_cache::following_counts(prefix, suffix, found.indexed_text.as_deref())
    } else {
        vec![]
    };
    let typed = typed_part(prefix);
    let left = counts
        .iter()
        .filter_map(|(name, count)| Some((name.strip_prefix(typed)?, *count)));
    match found.names {
        Some(names) if config.member_names_only => {
            Some(names_after_typed(prefix, suffix, &names)?.with_prior(left, weight))
        }
        _ if suffix.bytes().next().is_some_and(is_identifier_byte) => None,
        _ => FirstNames::open_prior(left, weight),
    }
}

/// What the editor has typed of the identifier the cursor ends.
fn typed_part(prefix: &str) -> &str {
    let typed_from = prefix
        .bytes()
        .rposition(|b| !is_identifier_byte(b))
        .map_or(0, |i| i + 1);
    &prefix[typed_from..]
}

fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

/// `\n` → `\r\n`, leaving existing `\r\n` alone.
fn to_crlf(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 16);
    let mut prev = '\0';
    for ch in text.chars() {
        if ch == '\n' && prev != '\r' {
            out.push('\r');
        }
        out.push(ch);
        prev = ch;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_left_are_those_the_typed_part_starts() {
        let names: Vec<String> = ["map", "mapError", "flatMap"].map(String::from).to_vec();
        let left = names_after_typed("  x = Effect.ma", ")\n", &names).unwrap();
        assert_eq!(left.names(), ["p", "pError"]);
        let all = names_after_typed("  x = Effect.", "", &names).unwrap();
        assert_eq!(all.names(), ["flatMap", "map", "mapError"]);
        // A whole name typed: the completion may also go on past it.
        let done = names_after_typed("Effect.map", "", &names).unwrap();
        assert_eq!(done.names(), ["", "Error"]);
        // Nothing the module offers starts so, or the cursor is inside a name: no constraint.
        assert!(names_after_typed("Effect.zz", "", &names).is_none());
        assert!(names_after_typed("Effect.", "map(f)", &names).is_none());
    }

    #[test]
    fn the_file_s_habit_is_the_prior_of_what_is_left_to_type() {
        let module = |names: &[&str]| ReceiverNames {
            names: Some(names.iter().map(|n| n.to_string()).collect()),
            indexed_text: None,
        };
        let config = CompletionConfig::default();
        // `mapError` followed `core.map` once before; the editor has typed `ma` of the next.
        let prefix = "a = core.map(core.mapError(f))\nb = core.map(core.ma";
        let all = ["map", "mapError", "flatMap"];
        let led = first_names(&config, prefix, ")\n", module(&all)).unwrap();
        assert!(!led.is_open());
        assert_eq!(led.names(), ["p", "pError"]);
        let start = led.start();
        assert_eq!(led.prior_weight(start), Some(0.5));
        assert_eq!(led.prior_share(start, b"pE"), 1.0);
        assert_eq!(led.prior_share(start, b"p("), 0.0);
        // Weight 0, or nothing seen after the access: the names alone.
        let alone = CompletionConfig {
            name_cache_weight: 0.0,
            ..config.clone()
        };
        let names = first_names(&alone, prefix, ")\n", module(&all)).unwrap();
        assert_eq!(names.prior_weight(start), None);
        let fresh = "b = core.map(core.ma";
        let names = first_names(&config, fresh, "", module(&all)).unwrap();
        assert_eq!(names.prior_weight(start), None);
        // A value's members are not all known: what the file wrote leads, nothing is masked.
        let value = ReceiverNames {
            names: None,
            indexed_text: None,
        };
        let open = first_names(&config, prefix, ")\n", value.clone()).unwrap();
        assert!(open.is_open());
        assert_eq!(open.names(), ["pError"]);
        assert!(first_names(&config, fresh, "", value.clone()).is_none());
        assert!(first_names(&alone, prefix, ")\n", value.clone()).is_none());
        // Inside a name: neither.
        assert!(first_names(&config, prefix, "Error(f)", value).is_none());
        assert!(first_names(&config, prefix, "Error(f)", module(&all)).is_none());
        // Without `member_names_only` the module's names lead too, without masking.
        let free = CompletionConfig {
            member_names_only: false,
            ..config
        };
        assert!(
            first_names(&free, prefix, ")\n", module(&all))
                .unwrap()
                .is_open()
        );
    }

    #[test]
    fn crlf_restored_without_doubling() {
        assert_eq!(to_crlf("a\nb\r\nc\n"), "a\r\nb\r\nc\r\n");
    }
}
