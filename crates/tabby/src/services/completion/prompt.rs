//! Building the FIM prompt of a standard completion from a byte budget.
//!
//! `max_input_length` bytes are shared out before anything is cut: the suffix gets at most
//! `suffix_bytes`, the snippets at most `snippet_bytes` (more when the prefix is short), the
//! prefix everything left. Snippets go in whole or not at all, in priority order; the prefix keeps
//! the lines nearest the cursor, the suffix its first lines; the template's own tokens are never
//! cut. Snippets are written either as line comments above the prefix (upstream's format) or as
//! the files of a repository ahead of the current one (`<|repo_name|>` / `<|file_sep|>`, the
//! format Qwen2.5-Coder was trained with for cross-file context).

use std::collections::HashMap;

use tabby_common::{api::code::ImportStatement, config::SnippetFormat, languages::Language};
use tabby_index::code::imports::{MERGED_IMPORT_WIDTH, compact_statements};

use super::types::Snippet;

/// Upstream's snippet budget (characters there; bytes here).
pub const UPSTREAM_SNIPPET_BYTES: usize = 768;

/// A FIM template with `{prefix}` and `{suffix}` placeholders, checked once at start-up.
#[derive(Clone, Debug)]
pub struct PromptTemplate {
    template: String,
    /// Bytes the template adds around prefix and suffix.
    overhead: usize,
}

impl PromptTemplate {
    pub fn new(template: &str) -> Result<Self, String> {
        let filled = fill(template, "", "")?;
        Ok(Self {
            template: template.to_string(),
            overhead: filled.len(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.template
    }

    /// Whether the template is Qwen2.5-Coder's FIM (prefix first or suffix first), whose model
    /// also knows the repository tokens `<|repo_name|>` and `<|file_sep|>`.
    fn knows_file_sep(&self) -> bool {
        self.template.contains("<|fim_prefix|>")
    }
}

fn fill(template: &str, prefix: &str, suffix: &str) -> Result<String, String> {
    let vars = HashMap::from([
        ("prefix".to_string(), prefix.to_string()),
        ("suffix".to_string(), suffix.to_string()),
    ]);
    strfmt::strfmt(template, &vars)
        .map_err(|e| format!("prompt template {template:?} cannot be filled: {e}"))
}

/// How the prompt's bytes are shared out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromptBudget {
    /// The whole prompt, template included.
    pub max_input_length: usize,
    /// Most bytes of written snippets when the prefix needs the room.
    pub snippet_bytes: usize,
    /// Most bytes of suffix when the prefix needs the room.
    pub suffix_bytes: usize,
    /// Spacing of the anchor lines a clipped prefix starts at (`[completion] prefix_clip_lines`).
    pub prefix_clip_lines: usize,
    /// Most lines of a snippet's head (`[completion] snippet_head_lines`; 0: whole snippets
    /// only).
    pub head_lines: usize,
    /// The chosen snippets written best last (`[completion] snippets_best_last`).
    pub best_last: bool,
    /// Most bytes of the file's own import statements written above the prefix when the
    /// prefix does not hold them (`[completion] import_header_bytes`; 0: none).
    pub import_bytes: usize,
}

/// What goes into one prompt.
pub struct PromptInput<'a> {
    pub prefix: &'a str,
    pub suffix: &'a str,
    /// Candidates in priority order.
    pub snippets: &'a [Snippet],
    /// Outlines of what the name before the cursor leads to: candidates ahead of `snippets`,
    /// written after them (nearest the current file).
    pub outline: &'a [Snippet],
    pub language: &'a Language,
    /// The current file, for the repository format.
    pub filepath: Option<&'a str>,
    /// The repository's name, for the repository format.
    pub repo_name: Option<&'a str>,
    /// The current file's top-level import statements as indexed, in file order.
    pub imports: &'a [ImportStatement],
}

/// A prompt and the snippets it holds.
#[derive(Debug)]
pub struct BuiltPrompt {
    pub prompt: String,
    pub snippets: Vec<Snippet>,
}

/// The format snippets are written in for this template (`Auto`: the repository format where
/// the template is Qwen2.5-Coder's, comments elsewhere).
fn resolve_format(format: SnippetFormat, template: Option<&PromptTemplate>) -> SnippetFormat {
    match (format, template) {
        (_, None) => SnippetFormat::Comment,
        (SnippetFormat::Auto, Some(t)) if t.knows_file_sep() => SnippetFormat::FileSep,
        (SnippetFormat::Auto, _) => SnippetFormat::Comment,
        (f, _) => f,
    }
}

/// Builds the prompt within `budget` (see the module doc). Without a template the prompt is the
/// prefix alone (with comment snippets), its last `max_input_length` bytes at line starts.
pub fn build_prompt(
    template: Option<&PromptTemplate>,
    format: SnippetFormat,
    input: &PromptInput<'_>,
    budget: PromptBudget,
) -> BuiltPrompt {
    let format = resolve_format(format, template);
    let suffix = match (template, input.suffix) {
        (None, _) => "",
        (Some(_), "") => "\n",
        (Some(_), s) => s,
    };
    let overhead = template.map_or(0, |t| t.overhead);
    let room = budget.max_input_length.saturating_sub(overhead);

    // 1. The suffix, up to its share.
    let suffix_kept = head_lines(suffix, suffix.len().min(budget.suffix_bytes).min(room));
    let after_suffix = room - suffix_kept.len();
    // 2. The file's import statements that the prefix does not show, up to their share.
    let surely_kept = tail_lines(
        input.prefix,
        after_suffix.saturating_sub(budget.snippet_bytes + budget.import_bytes),
    );
    let header = import_header(
        input.language.canonical_name(),
        input.imports,
        surely_kept,
        budget.import_bytes.min(after_suffix),
    );
    let after_suffix = after_suffix - header.len();
    // 3. The snippets: their share, or all the prefix leaves.
    let writer = SnippetWriter::new(format, input, budget.head_lines);
    let snippet_room = budget
        .snippet_bytes
        .max(after_suffix.saturating_sub(input.prefix.len()))
        .min(after_suffix);
    let candidates: Vec<Snippet> = input
        .outline
        .iter()
        .chain(input.snippets)
        .cloned()
        .collect();
    let (written, chosen) = writer.write(&candidates, input.prefix, input.suffix, snippet_room);
    // Outlines are written last; the others best last when asked.
    let is_outline = |s: &Snippet| {
        input
            .outline
            .iter()
            .any(|o| o.filepath == s.filepath && o.body == s.body)
    };
    let (outlines, mut others): (Vec<&Snippet>, Vec<&Snippet>) =
        chosen.iter().partition(|s| is_outline(s));
    if budget.best_last {
        others.reverse();
    }
    let reordered = !outlines.is_empty() || (budget.best_last && others.len() > 1);
    let written = if reordered {
        others.extend(outlines);
        writer.rewrite(&others)
    } else {
        written
    };
    // 4. The prefix: the rest; then the suffix may grow into what the prefix did not need.
    let prefix_room = after_suffix - written.len();
    // What the prefix would fill cut at its best line start; the suffix grows only into
    // what that leaves, not into the lines a block cut gives up (the suffix is read again on
    // every keystroke, so it should not grow while the user types).
    let best_prefix = tail_lines(input.prefix, prefix_room);
    let prefix = tail_lines_in_blocks(input.prefix, prefix_room, budget.prefix_clip_lines);
    let suffix = head_lines(
        suffix,
        room - header.len() - written.len() - best_prefix.len(),
    );

    let prompt = match (template, format) {
        (None, _) => format!("{written}{header}{prefix}"),
        (Some(t), SnippetFormat::FileSep) => {
            let filled = fill(&t.template, &format!("{header}{prefix}"), suffix)
                .expect("validated at start-up");
            format!("{written}{filled}")
        }
        (Some(t), _) => fill(&t.template, &format!("{written}{header}{prefix}"), suffix)
            .expect("validated at start-up"),
    };
    BuiltPrompt {
        prompt,
        snippets: chosen,
    }
}

/// The import statements the prompt shows above the prefix, within `max` bytes: those not in
/// `prefix`, the ones that resolve to files of the repository first (where a call's callee is
/// most likely defined), whole statements only, written in file order and followed by a blank
/// line; empty when none fits. Python's `from M import a` statements of one module are written
/// as one.
fn import_header(language: &str, imports: &[ImportStatement], prefix: &str, max: usize) -> String {
    let shown: Vec<ImportStatement> = imports
        .iter()
        .filter(|s| !s.text.trim().is_empty() && !prefix.contains(s.text.trim()))
        .cloned()
        .collect();
    let shown = compact_statements(language, shown, MERGED_IMPORT_WIDTH);
    let mut chosen = vec![false; shown.len()];
    // The blank line that ends the header.
    let mut used = 1;
    for internal in [true, false] {
        for (i, statement) in shown.iter().enumerate() {
            let cost = statement.text.len() + 1;
            if statement.internal == internal && used + cost <= max {
                chosen[i] = true;
                used += cost;
            }
        }
    }
    let mut header = String::new();
    for (statement, _) in shown.iter().zip(&chosen).filter(|(_, c)| **c) {
        header.push_str(&statement.text);
        header.push('\n');
    }
    if !header.is_empty() {
        header.push('\n');
    }
    header
}

/// Writes snippets in one format.
struct SnippetWriter<'a> {
    format: SnippetFormat,
    comment: Option<&'a str>,
    /// The repository format's header and the current file's line, written once when any
    /// snippet is.
    header: String,
    footer: String,
    head_lines: usize,
}

impl<'a> SnippetWriter<'a> {
    fn new(format: SnippetFormat, input: &PromptInput<'a>, head_lines: usize) -> Self {
        let (header, footer) = match format {
            SnippetFormat::FileSep => (
                format!("<|repo_name|>{}\n", input.repo_name.unwrap_or("repository")),
                format!("<|file_sep|>{}\n", input.filepath.unwrap_or("current_file")),
            ),
            _ => (String::new(), String::new()),
        };
        Self {
            format,
            comment: input.language.snippet_comment(),
            header,
            footer,
            head_lines,
        }
    }

    /// The head of a snippet: its first `lines` lines (fewer than it has) and a line `…` that
    /// marks the rest as left out (a line comment in the repository format, where the language
    /// has one; comment snippets are comments already).
    fn head(&self, snippet: &Snippet, lines: usize) -> Option<Snippet> {
        let body = snippet.body.trim_end_matches('\n');
        let cut = body.match_indices('\n').nth(lines.checked_sub(1)?)?.0;
        let marker = match (self.format, self.comment) {
            (SnippetFormat::FileSep, Some(cc)) => format!("{cc} …"),
            _ => "…".to_string(),
        };
        Some(Snippet {
            filepath: snippet.filepath.clone(),
            body: format!("{}\n{marker}\n", &body[..cut]),
            score: snippet.score,
            defines: None,
        })
    }

    fn render(&self, snippet: &Snippet, first: bool) -> Option<String> {
        let mut out = String::new();
        match self.format {
            SnippetFormat::FileSep => {
                out.push_str("<|file_sep|>");
                out.push_str(&snippet.filepath);
                out.push('\n');
                out.push_str(snippet.body.trim_end_matches('\n'));
                out.push('\n');
            }
            _ => {
                let cc = self.comment?;
                if !first {
                    out.push_str(cc);
                    out.push('\n');
                }
                out.push_str(&format!("{cc} Path: {}\n", snippet.filepath));
                for line in snippet.body.lines() {
                    out.push_str(cc);
                    if !line.is_empty() {
                        out.push(' ');
                        out.push_str(line);
                    }
                    out.push('\n');
                }
            }
        }
        Some(out)
    }

    /// The snippets that fit in `room` bytes, in order: whole, or else (with `head_lines`) the
    /// longest head of at most `head_lines` whole lines that fits, or else passed over for
    /// smaller ones after it. One already in the prefix or suffix, or in a snippet of the same
    /// file written before it, is left out.
    fn write(
        &self,
        snippets: &[Snippet],
        prefix: &str,
        suffix: &str,
        room: usize,
    ) -> (String, Vec<Snippet>) {
        let frame = self.header.len() + self.footer.len();
        let mut body = String::new();
        let mut chosen = Vec::new();
        for snippet in snippets {
            let text = snippet.body.trim();
            // (a one-line hit such as `class Parser:` is in the outline of that class already)
            let shown = |c: &Snippet| c.filepath == snippet.filepath && c.body.contains(text);
            if text.is_empty()
                || prefix.contains(text)
                || suffix.contains(text)
                || chosen.iter().any(shown)
            {
                continue;
            }
            let first = chosen.is_empty();
            let Some(rendered) = self.render(snippet, first) else {
                break;
            };
            let fits = |r: &str| frame + body.len() + r.len() <= room;
            if fits(&rendered) {
                body.push_str(&rendered);
                chosen.push(snippet.clone());
                continue;
            }
            // A head has fewer lines than its snippet: the configured limit (any number) never
            // costs more tries than the snippet has lines.
            let shorter = snippet.body.trim_end_matches('\n').matches('\n').count();
            let head = (1..=self.head_lines.min(shorter)).rev().find_map(|lines| {
                let head = self.head(snippet, lines)?;
                let rendered = self.render(&head, first)?;
                fits(&rendered).then_some((head, rendered))
            });
            if let Some((head, rendered)) = head {
                body.push_str(&rendered);
                chosen.push(head);
            }
        }
        if chosen.is_empty() {
            return (String::new(), chosen);
        }
        (format!("{}{body}{}", self.header, self.footer), chosen)
    }

    /// The chosen snippets written again in another order (the same bytes in all: one of them
    /// is the first either way).
    fn rewrite(&self, chosen: &[&Snippet]) -> String {
        let body: String = chosen
            .iter()
            .enumerate()
            .filter_map(|(i, s)| self.render(s, i == 0))
            .collect();
        format!("{}{body}{}", self.header, self.footer)
    }
}

/// The longest end of `text` within `max` bytes that starts at a line start; when even the
/// last line is longer, its last `max` bytes (at a char boundary).
fn tail_lines(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let tail = tabby_inference::clip_to_last_bytes(text, max);
    let cut = text.len() - tail.len();
    if text.as_bytes().get(cut.wrapping_sub(1)) == Some(&b'\n') {
        return tail;
    }
    match tail.find('\n') {
        Some(i) if i + 1 < tail.len() => &tail[i + 1..],
        _ => tail,
    }
}

/// [`tail_lines`], cut further down at an anchor line when one comes within `2 * spacing - 1`
/// lines (else at the best line start), also when the whole text fits. Anchors are chosen by
/// content, about one line in `spacing` (a line whose hash is a multiple of it, or one after a
/// blank line), so the cut stays on the same line while the prefix grows at its end or loses
/// lines at its start (tabby-agent sends a fixed number of lines before the cursor, so its
/// window moves with every new line): the prompts of consecutive keystrokes, and of consecutive
/// lines, then keep their start. `spacing` 1: every line is an anchor, the best line start.
fn tail_lines_in_blocks(text: &str, max: usize, spacing: usize) -> &str {
    let tail = tail_lines(text, max);
    let spacing = spacing.max(1);
    let cut = text.len() - tail.len();
    if spacing == 1 || (cut > 0 && !text[..cut].ends_with('\n')) {
        return tail;
    }
    // The line before the cut (none where the text starts: its first line is wherever the
    // editor's window starts, not an anchor by position).
    let mut previous_blank = cut > 0
        && text[..cut - 1]
            .rsplit('\n')
            .next()
            .is_some_and(|l| l.trim().is_empty());
    let mut at = cut;
    for line in tail.split_inclusive('\n').take(2 * spacing - 1) {
        if !line.ends_with('\n') {
            break;
        }
        if previous_blank
            || (fnv1a(line.trim_end().as_bytes()) >> 32).is_multiple_of(spacing as u64)
        {
            return &text[at..];
        }
        previous_blank = line.trim().is_empty();
        at += line.len();
    }
    tail
}

/// FNV-1a: a hash that is the same in every process (anchors must not move between runs). Its
/// low bits depend only on the low bits of the bytes: take its high ones.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The longest start of `text` within `max` bytes that ends after a newline; when even the first
/// line is longer, its first `max` bytes (at a char boundary).
fn head_lines(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let head = &text[..end];
    match head.rfind('\n') {
        Some(i) => &head[..=i],
        None => head,
    }
}

#[cfg(test)]
mod tests {
    use tabby_common::languages::LanguageTable;

    use super::*;

    const QWEN: &str = "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>";

    fn snippet(path: &str, body: &str) -> Snippet {
        Snippet {
            filepath: path.into(),
            body: body.into(),
            score: 1.0,
            defines: None,
        }
    }

    fn budget(max: usize, snippets: usize, suffix: usize) -> PromptBudget {
        PromptBudget {
            max_input_length: max,
            snippet_bytes: snippets,
            suffix_bytes: suffix,
            prefix_clip_lines: 1,
            head_lines: 0,
            best_last: false,
            import_bytes: 0,
        }
    }

    fn build(
        template: Option<&str>,
        format: SnippetFormat,
        prefix: &str,
        suffix: &str,
        snippets: &[Snippet],
        budget: PromptBudget,
    ) -> BuiltPrompt {
        let table = LanguageTable::builtin();
        let template = template.map(|t| PromptTemplate::new(t).unwrap());
        build_prompt(
            template.as_ref(),
            format,
            &PromptInput {
                prefix,
                suffix,
                snippets,
                language: table.get("python"),
                filepath: Some("pkg/main.py"),
                repo_name: Some("acme/app"),
                imports: &[],
                outline: &[],
            },
            budget,
        )
    }

    /// An editor-sized request: 40 lines before the cursor, 20 after.
    fn editor_request() -> (String, String) {
        let prefix: String = (0..40)
            .map(|i| format!("    value_{i} = compute_something(value_{i}, option={i})\n"))
            .collect::<String>()
            + "    result = helper(";
        let suffix: String = (0..20)
            .map(|i| format!("    after_{i} = finish(after_{i})\n"))
            .collect();
        (prefix, suffix)
    }

    #[test]
    fn editor_sized_prompt_keeps_the_top_snippet_whole() {
        let (prefix, suffix) = editor_request();
        assert!(prefix.len() + suffix.len() > 2000);
        let top = snippet(
            "pkg/helper.py",
            "def helper(a, b):\n    \"\"\"Adds.\"\"\"\n    return a + b",
        );
        for format in [SnippetFormat::Comment, SnippetFormat::FileSep] {
            let built = build(
                Some(QWEN),
                format,
                &prefix,
                &suffix,
                std::slice::from_ref(&top),
                budget(1536, 512, 256),
            );
            let p = &built.prompt;
            assert!(p.len() <= 1536, "{}", p.len());
            assert!(p.contains("def helper(a, b):"), "{format:?}: {p}");
            assert!(p.contains("return a + b"), "{format:?}: {p}");
            assert_eq!(built.snippets.len(), 1);
            // The cursor line and the suffix's first line are there; the prefix starts at a line.
            assert!(
                p.contains("    result = helper(<|fim_suffix|>    after_0 = finish(after_0)\n")
            );
            assert!(p.ends_with("<|fim_middle|>"));
        }
    }

    #[test]
    fn a_clipped_prefix_starts_at_an_anchor_line_that_survives_typing() {
        let lines = |from: usize, to: usize| -> String {
            (from..to)
                .map(|i| format!("value_{i:03} = {i}\n"))
                .collect()
        };
        let line_len = "value_000 = 0\n".len() + 2;
        let room = 12 * line_len;
        // The editor's window moves down a line at a time (24 lines before the cursor), and
        // the prefix has room for about 12: with anchors every 4 lines the first line changes
        // only when the best start passes the next anchor, and stays an anchor's line.
        let starts: Vec<String> = (0..24)
            .map(|shift| {
                let text = lines(100 + shift, 124 + shift);
                let kept = tail_lines_in_blocks(&text, room, 4);
                assert!(kept.len() <= room && text.ends_with(kept));
                // Never more than 7 lines below the best start.
                let best = tail_lines(&text, room);
                assert!(best.lines().count() - kept.lines().count() <= 7, "{shift}");
                kept.lines().next().unwrap().to_string()
            })
            .collect();
        let changes = starts.windows(2).filter(|w| w[0] != w[1]).count();
        assert!(changes <= 12, "{changes} changes in 24 lines: {starts:?}");
        // Spacing 1 is the best line start, which moves with every line.
        let text = lines(0, 40);
        assert_eq!(
            tail_lines_in_blocks(&text, room, 1),
            tail_lines(&text, room)
        );
        let best_starts: Vec<String> = (0..24)
            .map(|shift| {
                let text = lines(100 + shift, 124 + shift);
                tail_lines_in_blocks(&text, room, 1)
                    .lines()
                    .next()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(best_starts.windows(2).filter(|w| w[0] != w[1]).count(), 23);
        // A line after a blank line is an anchor.
        let text = format!("{}\n{}", lines(0, 3), lines(3, 20));
        let kept = tail_lines_in_blocks(&text, text.len() - 2 * line_len, 1000);
        assert!(kept.starts_with("value_003"), "{kept:?}");
        // Fits: cut at an anchor too, so that the editor's moving window keeps the start.
        let window_starts: Vec<String> = (0..24)
            .map(|shift| {
                let text = lines(100 + shift, 112 + shift);
                let kept = tail_lines_in_blocks(&text, 1000, 4);
                assert!(text.lines().count() - kept.lines().count() <= 7, "{shift}");
                kept.lines().next().unwrap().to_string()
            })
            .collect();
        let changes = window_starts.windows(2).filter(|w| w[0] != w[1]).count();
        assert!(
            changes <= 12,
            "{changes} changes in 24 lines: {window_starts:?}"
        );
        // ... and with spacing 1 it is untouched; one long line: its tail.
        assert_eq!(tail_lines_in_blocks(&text, 1000, 1), text);
        let long = "x".repeat(100);
        assert_eq!(tail_lines_in_blocks(&long, 10, 3).len(), 10);
    }

    #[test]
    fn comment_format_above_the_prefix() {
        let built = build(
            Some(QWEN),
            SnippetFormat::Comment,
            "def f():",
            "",
            &[snippet("a.py", "x = 1\n\ny = 2"), snippet("b.py", "z")],
            budget(1000, 500, 100),
        );
        assert_eq!(
            built.prompt,
            "<|fim_prefix|># Path: a.py\n# x = 1\n#\n# y = 2\n#\n# Path: b.py\n# z\ndef f():\
             <|fim_suffix|>\n<|fim_middle|>"
        );
    }

    #[test]
    fn repository_format_puts_files_ahead_of_the_current_one() {
        let built = build(
            Some(QWEN),
            SnippetFormat::FileSep,
            "def f():",
            "    pass\n",
            &[snippet("a.py", "x = 1\n")],
            budget(1000, 500, 100),
        );
        assert_eq!(
            built.prompt,
            "<|repo_name|>acme/app\n<|file_sep|>a.py\nx = 1\n<|file_sep|>pkg/main.py\n\
             <|fim_prefix|>def f():<|fim_suffix|>    pass\n<|fim_middle|>"
        );
    }

    #[test]
    fn a_snippet_too_large_goes_in_as_its_head_of_whole_lines() {
        let long = snippet(
            "lib.py",
            "def parse(text, strict=False):\n    \"\"\"Parse text.\"\"\"\n    a = 1\n    b = 2\n    return a + b\n",
        );
        let small = snippet("b.py", "y = 2\n");
        let run = |head_lines, room| {
            let mut b = budget(2000, room, 100);
            b.head_lines = head_lines;
            build(
                Some(QWEN),
                SnippetFormat::FileSep,
                &"p = 0\n".repeat(400),
                "",
                &[long.clone(), small.clone()],
                b,
            )
        };
        // Whole when it fits, heads or not.
        let whole = run(8, 400);
        assert_eq!(whole.snippets[0].body, long.body);
        // Too large: without heads it is passed over for the smaller one.
        let without = run(0, 90);
        assert_eq!(without.snippets.len(), 1);
        assert_eq!(without.snippets[0].filepath, "b.py");
        // With heads: the longest head that fits, whole lines, marked.
        let two_lines = "def parse(text, strict=False):\n    \"\"\"Parse text.\"\"\"\n# …\n";
        let longest = run(8, 125);
        assert_eq!(longest.snippets.len(), 1, "{}", longest.prompt);
        assert_eq!(longest.snippets[0].body, two_lines);
        // At most `head_lines` lines, then the smaller one after it.
        let with = run(2, 150);
        assert_eq!(with.snippets.len(), 2, "{}", with.prompt);
        assert_eq!(with.snippets[0].body, two_lines);
        assert!(with.prompt.contains(&format!(
            "<|file_sep|>lib.py\n{two_lines}<|file_sep|>b.py\ny = 2\n"
        )));
        let one = run(1, 150);
        assert_eq!(
            one.snippets[0].body,
            "def parse(text, strict=False):\n# …\n"
        );
        // A room too small for one line takes none.
        // A limit far above any snippet's length costs no more than the snippet's lines.
        let huge = run(usize::MAX, 125);
        assert_eq!(huge.snippets[0].body, two_lines);
        let none = run(8, 40);
        assert!(none.snippets.iter().all(|s| s.filepath != "lib.py"));
        // Comment format: the marker is a comment line like the others.
        let mut b = budget(2000, 110, 100);
        b.head_lines = 8;
        let prefix = "p = 0\n".repeat(400);
        let comment = build(
            Some(QWEN),
            SnippetFormat::Comment,
            &prefix,
            "",
            std::slice::from_ref(&long),
            b,
        );
        assert!(
            comment
                .prompt
                .contains("# Path: lib.py\n# def parse(text, strict=False):\n"),
            "{}",
            comment.prompt
        );
        assert!(comment.prompt.contains("\n# …\n"), "{}", comment.prompt);
        assert!(comment.prompt.len() <= 2000);
    }

    #[test]
    fn auto_picks_the_repository_format_for_qwen_templates_only() {
        let qwen = PromptTemplate::new(QWEN).unwrap();
        let other = PromptTemplate::new("<PRE> {prefix} <SUF>{suffix} <MID>").unwrap();
        assert_eq!(
            resolve_format(SnippetFormat::Auto, Some(&qwen)),
            SnippetFormat::FileSep
        );
        assert_eq!(
            resolve_format(SnippetFormat::Auto, Some(&other)),
            SnippetFormat::Comment
        );
        assert_eq!(
            resolve_format(SnippetFormat::FileSep, None),
            SnippetFormat::Comment
        );
    }

    #[test]
    fn snippets_are_whole_or_left_out_and_smaller_ones_still_fit() {
        let big = snippet("big.py", &"b = 1\n".repeat(100));
        let small = snippet("small.py", "s = 2");
        let (prefix, suffix) = editor_request();
        let built = build(
            Some(QWEN),
            SnippetFormat::Comment,
            &prefix,
            &suffix,
            &[big, small],
            budget(1536, 300, 256),
        );
        assert_eq!(built.snippets.len(), 1);
        assert_eq!(built.snippets[0].filepath, "small.py");
        assert!(!built.prompt.contains("big.py"));
        assert!(built.prompt.contains("# Path: small.py\n# s = 2\n"));
    }

    /// Written best last, the same snippets (chosen in priority order) come in reverse, in the
    /// same bytes, and the current file's line still follows them.
    #[test]
    fn best_last_writes_the_chosen_snippets_in_reverse() {
        let (prefix, suffix) = editor_request();
        let snippets: Vec<_> = (0..6)
            .map(|i| snippet(&format!("m{i}.py"), &format!("def m{i}(x):\n    return x")))
            .collect();
        for format in [SnippetFormat::FileSep, SnippetFormat::Comment] {
            let first = build(
                Some(QWEN),
                format,
                &prefix,
                &suffix,
                &snippets,
                budget(1536, 300, 200),
            );
            let mut reversed = budget(1536, 300, 200);
            reversed.best_last = true;
            let last = build(Some(QWEN), format, &prefix, &suffix, &snippets, reversed);
            assert!(first.snippets.len() >= 2, "{:?}", first.snippets);
            assert_eq!(first.snippets, last.snippets);
            assert_eq!(first.prompt.len(), last.prompt.len());
            let at = |p: &str, path: &str| p.find(path).unwrap();
            assert!(at(&first.prompt, "m0.py") < at(&first.prompt, "m1.py"));
            assert!(at(&last.prompt, "m0.py") > at(&last.prompt, "m1.py"));
            if format == SnippetFormat::FileSep {
                assert!(last.prompt.contains("<|file_sep|>m0.py\ndef m0(x):\n    return x\n<|file_sep|>pkg/main.py\n<|fim_prefix|>"), "{}", last.prompt);
            }
        }
    }

    #[test]
    fn budget_split_between_snippets_prefix_and_suffix() {
        let (prefix, suffix) = editor_request();
        let snippets: Vec<_> = (0..10)
            .map(|i| {
                snippet(
                    &format!("m{i}.py"),
                    &format!("def m{i}(x):\n    return x * {i}"),
                )
            })
            .collect();
        let built = build(
            Some(QWEN),
            SnippetFormat::FileSep,
            &prefix,
            &suffix,
            &snippets,
            budget(1536, 400, 200),
        );
        let p = &built.prompt;
        let overhead = "<|fim_prefix|><|fim_suffix|><|fim_middle|>".len();
        let (head, rest) = p.split_once("<|fim_prefix|>").unwrap();
        let (pre, rest) = rest.split_once("<|fim_suffix|>").unwrap();
        let suf = rest.strip_suffix("<|fim_middle|>").unwrap();
        assert!(head.len() <= 400, "snippets {}", head.len());
        assert!(
            suf.len() <= 200 && suf.ends_with('\n'),
            "suffix {}",
            suf.len()
        );
        assert_eq!(head.len() + pre.len() + suf.len() + overhead, p.len());
        assert!(p.len() <= 1536);
        // The prefix took the rest, at a line start.
        assert!(
            pre.len() > 1536 - overhead - 400 - 200 - 60,
            "prefix {}",
            pre.len()
        );
        assert!(prefix.ends_with(pre) && pre.starts_with("    value_"));
        assert!(built.snippets.len() >= 3);
    }

    #[test]
    fn a_short_prefix_leaves_its_room_to_snippets_and_suffix() {
        let snippets: Vec<_> = (0..10)
            .map(|i| snippet(&format!("m{i}.py"), &"x".repeat(90)))
            .collect();
        let suffix = "tail line\n".repeat(100);
        let built = build(
            Some(QWEN),
            SnippetFormat::FileSep,
            "import os\n",
            &suffix,
            &snippets,
            budget(1536, 200, 200),
        );
        assert!(built.snippets.len() >= 10, "{}", built.snippets.len());
        assert!(built.prompt.len() > 1400 && built.prompt.len() <= 1536);
    }

    #[test]
    fn the_fim_tokens_survive_any_input() {
        let one_line = "x".repeat(5000) + "CURSOR";
        let built = build(
            Some(QWEN),
            SnippetFormat::Auto,
            &one_line,
            &"y".repeat(5000),
            &[snippet("a.py", &"z".repeat(3000))],
            budget(1536, 512, 256),
        );
        let p = &built.prompt;
        assert!(p.starts_with("<|fim_prefix|>"), "{}", &p[..40]);
        assert!(p.contains("CURSOR<|fim_suffix|>"));
        assert!(p.ends_with("<|fim_middle|>"));
        assert!(p.len() <= 1536);
        assert!(built.snippets.is_empty());
    }

    #[test]
    fn snippet_already_in_the_prefix_is_left_out() {
        let built = build(
            Some(QWEN),
            SnippetFormat::Comment,
            "def g():\n    return 1\n\ndef f():",
            "",
            &[snippet("a.py", "def g():\n    return 1\n")],
            budget(1000, 500, 100),
        );
        assert!(built.snippets.is_empty());
    }

    #[test]
    fn snippet_already_in_a_snippet_of_its_file_is_left_out() {
        let outline = snippet("pkg/parser.py", "class Parser:\n    def parse(self):\n");
        let built = build(
            Some(QWEN),
            SnippetFormat::FileSep,
            "x = 1\n",
            "",
            &[
                outline.clone(),
                snippet("pkg/parser.py", "class Parser:"),
                snippet("pkg/other.py", "class Parser:"),
            ],
            budget(1000, 500, 100),
        );
        let files: Vec<&str> = built.snippets.iter().map(|s| s.filepath.as_str()).collect();
        assert_eq!(files, ["pkg/parser.py", "pkg/other.py"]);
        assert_eq!(built.snippets[0], outline);
        assert_eq!(built.prompt.matches("class Parser:").count(), 2);
    }

    #[test]
    fn no_template_means_prefix_only() {
        let built = build(
            None,
            SnippetFormat::Auto,
            "abc\ndef",
            "zzz",
            &[],
            budget(4, 0, 0),
        );
        assert_eq!(built.prompt, "def");
    }

    #[test]
    fn no_comment_syntax_means_no_comment_snippets() {
        let table = LanguageTable::builtin();
        let t = PromptTemplate::new(QWEN).unwrap();
        let built = build_prompt(
            Some(&t),
            SnippetFormat::Comment,
            &PromptInput {
                prefix: "p",
                suffix: "",
                snippets: &[snippet("a", "b")],
                language: table.get("unknown"),
                filepath: None,
                repo_name: None,
                imports: &[],
                outline: &[],
            },
            budget(1000, 500, 100),
        );
        assert!(built.snippets.is_empty());
        assert_eq!(
            built.prompt,
            "<|fim_prefix|>p<|fim_suffix|>\n<|fim_middle|>"
        );
    }

    #[test]
    fn bad_template_is_rejected() {
        assert!(PromptTemplate::new("{prefix} {nope}").is_err());
    }

    #[test]
    fn line_clipping_helpers() {
        assert_eq!(tail_lines("aa\nbb\ncc", 5), "bb\ncc");
        assert_eq!(tail_lines("aa\nbb\ncc", 4), "cc");
        assert_eq!(tail_lines("aaaaaa", 3), "aaa");
        assert_eq!(tail_lines("aé", 1), "");
        assert_eq!(head_lines("aa\nbb\ncc", 5), "aa\n");
        assert_eq!(head_lines("aaaaaa", 3), "aaa");
        assert_eq!(head_lines("éé", 3), "é");
    }

    fn statement(text: &str, internal: bool) -> ImportStatement {
        ImportStatement {
            text: text.into(),
            internal,
        }
    }

    /// The file's imports above the editor's window reach the prompt: whole statements, the
    /// repository's own first when room is short, in file order, none the prefix shows, one
    /// module's `from … import` statements as one, the FIM tokens intact, within the whole
    /// budget.
    #[test]
    fn import_statements_the_prefix_does_not_show_go_above_it() {
        let (prefix, suffix) = editor_request();
        // A statement near the cursor, which the prefix keeps.
        let prefix = prefix.replace(
            "    result = helper(",
            "    from .shown import visible\n    result = helper(",
        );
        let imports = [
            statement("import os", false),
            statement("from .pricing import (\n    compute_price,\n)", true),
            statement("from .shown import visible", true),
            statement("import collections.abc", false),
            statement("from .cart import add_item", true),
            statement("from .cart import remove_item", true),
        ];
        let table = LanguageTable::builtin();
        let template = PromptTemplate::new(QWEN).unwrap();
        let top = snippet("pkg/helper.py", "def helper(a, b):\n    return a + b");
        for (import_bytes, expected) in [
            (0, ""),
            // The repository's own two (44 bytes, and 40 for the two statements of `.cart`
            // written as one, with their newlines) and a blank line.
            (
                85,
                "from .pricing import (\n    compute_price,\n)\nfrom .cart import add_item, remove_item\n\n",
            ),
            (
                200,
                "import os\nfrom .pricing import (\n    compute_price,\n)\nimport collections.abc\nfrom .cart import add_item, remove_item\n\n",
            ),
            // Too small for any: nothing, not a cut statement.
            (10, ""),
        ] {
            let mut b = budget(1536, 512, 256);
            b.import_bytes = import_bytes;
            let built = build_prompt(
                Some(&template),
                SnippetFormat::FileSep,
                &PromptInput {
                    prefix: &prefix,
                    suffix: &suffix,
                    snippets: std::slice::from_ref(&top),
                    language: table.get("python"),
                    filepath: Some("pkg/main.py"),
                    repo_name: Some("acme/app"),
                    imports: &imports,
                    outline: &[],
                },
                b,
            );
            let p = &built.prompt;
            assert!(p.len() <= 1536, "{}", p.len());
            assert!(p.contains("def helper(a, b):"), "{p}");
            assert!(p.ends_with("<|fim_middle|>"));
            let current = p.split("<|fim_prefix|>").nth(1).unwrap();
            assert!(
                current.starts_with(expected),
                "import_bytes {import_bytes}: {current}"
            );
            let after = &current[expected.len()..];
            assert!(
                !after.starts_with("import ") && !after.starts_with("from "),
                "{after}"
            );
            assert_eq!(p.matches("from .shown import visible").count(), 1, "{p}");
            assert!(p.contains("    result = helper(<|fim_suffix|>"));
        }
    }

    /// A statement the editor sent but the budget would cut from the prefix is written in the
    /// header; one the kept prefix shows is not written twice.
    #[test]
    fn import_statements_cut_from_the_prefix_come_back() {
        let (body, suffix) = editor_request();
        let prefix = format!("from .cart import add_item\n{body}");
        let imports = [statement("from .cart import add_item", true)];
        let table = LanguageTable::builtin();
        let template = PromptTemplate::new(QWEN).unwrap();
        let mut b = budget(1536, 512, 256);
        b.import_bytes = 256;
        let built = build_prompt(
            Some(&template),
            SnippetFormat::FileSep,
            &PromptInput {
                prefix: &prefix,
                suffix: &suffix,
                snippets: &[],
                language: table.get("python"),
                filepath: Some("pkg/main.py"),
                repo_name: Some("acme/app"),
                imports: &imports,
                outline: &[],
            },
            b,
        );
        assert!(
            built
                .prompt
                .starts_with("<|fim_prefix|>from .cart import add_item\n\n    value_"),
            "{}",
            built.prompt
        );
        let short = "from .cart import add_item\nx = add_item(";
        let built = build_prompt(
            Some(&template),
            SnippetFormat::FileSep,
            &PromptInput {
                prefix: short,
                suffix: "",
                snippets: &[],
                language: table.get("python"),
                filepath: Some("pkg/main.py"),
                repo_name: Some("acme/app"),
                imports: &imports,
                outline: &[],
            },
            b,
        );
        assert_eq!(
            built.prompt.matches("from .cart import add_item").count(),
            1
        );
    }
}
