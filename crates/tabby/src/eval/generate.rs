//! `tabby eval generate`: a labelled retrieval set in shared/eval's format from any source
//! tree, in every language with a tree-sitter tags query, so that teams can measure retrieval
//! on their own code (and we can make training data from registry packages).
//!
//! The rules follow shared/eval/README.md ("How it was built"), with tree-sitter tags for
//! definitions, references and doc comments:
//! * nl: definitions outside test files with a docstring (Python) or a doc comment right above
//!   them (`///`, `/** */`, Go's `//`); the query is the first sentence of its first paragraph
//!   with markup stripped and a leading copy of the name dropped; under 4 words, "Deprecated…",
//!   "See…" and "Alias…" are dropped; identical sentences are one query with several relevant
//!   definitions; at most 15 % of the queries from one file. The documentation is blanked in
//!   `corpus-nodocs/` (line numbers kept; a docstring that was its body's only statement
//!   becomes `...`).
//! * completion: a call (tags' `reference.call`) in file A of a name defined exactly once in
//!   the corpus, in another file B, 6+ characters, not `test…`, library code never calling
//!   into tests; the query is the 40 lines before the call line plus that line up to the name,
//!   dropped when it already holds the name; at most 2 per callee, 6 per query file, half from
//!   test files.
//! * relevant ranges: the definition's lines (tags' node); definitions over 300 lines are never
//!   targets.
//!
//! Seeded: the same tree and seed give the same set.

use std::{
    collections::{BTreeMap, HashMap},
    io::Write,
    path::{Path, PathBuf},
};

use anyhow::{Context, bail};
use serde_json::json;
use tabby_common::{index::code::is_test_path, languages::LanguageTable};
use tabby_index::code::intelligence::{FileTags, file_tags};

use super::Rng;

/// `tabby eval generate`'s arguments.
#[derive(clap::Args)]
pub struct GenerateOptions {
    /// The source tree (a directory or a git work tree).
    #[arg(long)]
    pub src: PathBuf,
    /// Where to write the set.
    #[arg(long)]
    pub out: PathBuf,
    /// The set's name (query ids are NAME-nl-0000, NAME-cc-0000).
    #[arg(long)]
    pub name: String,
    /// Only files of this language (`python`, `rust`, `go`, `java`,
    /// `javascript-typescript`, …).
    #[arg(long)]
    pub language: Option<String>,
    #[arg(long, default_value_t = 20240601)]
    pub seed: u64,
    /// nl queries at most (shared/eval's click set has 110).
    #[arg(long, default_value_t = 110)]
    pub max_nl: usize,
    /// completion queries at most (click: 93).
    #[arg(long, default_value_t = 93)]
    pub max_completion: usize,
}

const CONTEXT_LINES: usize = 40;
const MAX_TARGET_LINES: usize = 300;
const MAX_FILE_BYTES: u64 = 1 << 20;
const SKIPPED_DIRS: &[&str] = &["node_modules", "target", "vendor", "dist", "build"];

struct SourceFile {
    language: String,
    text: String,
    tags: FileTags,
}

/// The files of `src` the generator reads: regular UTF-8 files of at most 1 MiB in a language
/// with a tags query, outside dot-directories and build/vendor directories, by relative path.
/// Symbolic links are not followed, and `skip` (the output directory, when it lies inside the
/// tree) is not read.
fn read_tree(
    src: &Path,
    only: Option<&str>,
    skip: Option<&Path>,
) -> anyhow::Result<BTreeMap<String, SourceFile>> {
    let languages = LanguageTable::builtin();
    let mut files = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir)
            .with_context(|| format!("cannot read the directory {}", dir.display()))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if name.starts_with('.') {
                continue;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() {
                let skipped = skip.is_some_and(|s| path.canonicalize().is_ok_and(|p| p == s));
                if !SKIPPED_DIRS.contains(&name.as_str()) && !skipped {
                    stack.push(path);
                }
                continue;
            }
            if !kind.is_file() || entry.metadata().map_or(true, |m| m.len() > MAX_FILE_BYTES) {
                continue;
            }
            let Some(language) = languages.by_path(&path) else {
                continue;
            };
            let language = language.canonical_name().to_string();
            if only.is_some_and(|l| l != language) {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let Some(tags) = file_tags(&language, &text) else {
                continue;
            };
            let rel = path
                .strip_prefix(src)
                .unwrap_or(&path)
                .to_string_lossy()
                .replace('\\', "/");
            files.insert(
                rel,
                SourceFile {
                    language,
                    text,
                    tags,
                },
            );
        }
    }
    Ok(files)
}

/// The first sentence of a doc's first paragraph with markup stripped, or None when it is no
/// query (under 4 words, a deprecation or a cross-reference).
pub fn first_sentence(doc: &str, name: &str) -> Option<String> {
    let mut paragraph: Vec<&str> = Vec::new();
    for line in doc.trim().lines() {
        let line = line.trim();
        if line.is_empty()
            || line.starts_with(['@', '#', '-', '*', '|', '>', ':'])
            || line.starts_with("```")
            || line.starts_with("..")
        {
            break;
        }
        paragraph.push(line);
    }
    let mut text = paragraph.join(" ");
    // {@link x} / {@link x|label} → x; [x](url) → x; [`x`] → x; `x` and **x** → x.
    text = strip_braced_links(&text);
    text = strip_markdown_links(&text);
    text = text.replace("**", "").replace('`', "");
    text = text
        .replace(":func:", "")
        .replace(":class:", "")
        .replace(":meth:", "");
    let end = text
        .char_indices()
        .find(|&(i, c)| {
            matches!(c, '.' | '!' | '?')
                && text[i + c.len_utf8()..]
                    .chars()
                    .next()
                    .is_none_or(char::is_whitespace)
        })
        .map(|(i, c)| i + c.len_utf8());
    let mut sentence = match end {
        Some(end) => text[..end].trim().to_string(),
        None => text.trim().to_string(),
    };
    let first = sentence.split_whitespace().next().unwrap_or_default();
    if first == name || first == format!("{name}'s") {
        sentence = sentence[first.len()..].trim().to_string();
    }
    let lower = sentence.to_lowercase();
    if sentence.split_whitespace().count() < 4
        || lower.starts_with("deprecated")
        || lower.starts_with("see ")
        || lower.starts_with("alias")
    {
        return None;
    }
    Some(sentence)
}

fn strip_braced_links(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{@") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            rest = &rest[start..];
            break;
        };
        let inner = &after[..end];
        let inner = inner.split_once(char::is_whitespace).map_or("", |(_, t)| t);
        out.push_str(inner.split('|').next().unwrap_or_default().trim());
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

fn strip_markdown_links(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut skip_until = 0;
    for (i, c) in text.char_indices() {
        if i < skip_until {
            continue;
        }
        let close = (c == '[').then(|| text[i + 1..].find(']')).flatten();
        let Some(close) = close else {
            out.push(c);
            continue;
        };
        let label = &text[i + 1..i + 1 + close];
        let mut after = i + 1 + close + 1;
        // [label](url) or [label][ref]: drop the target.
        for (open, shut) in [("(", ')'), ("[", ']')] {
            if text[after..].starts_with(open) {
                if let Some(e) = text[after + 1..].find(shut) {
                    after += 1 + e + 1;
                }
                break;
            }
        }
        out.push_str(label);
        skip_until = after;
    }
    out
}

/// (language, name) → (file, first line, last line) of each definition of that name.
type DefinitionsByName = HashMap<(String, String), Vec<(String, usize, usize)>>;

struct Definition {
    file: String,
    lines: (usize, usize), // 1-based, inclusive
}

struct NlCandidate {
    sentence: String,
    symbol: String,
    target: Definition,
    doc_lines: std::ops::Range<usize>,
    only_statement: bool,
}

struct Site {
    file: String,
    line: usize, // 1-based
    column: usize,
    callee: String,
    query: String,
    target: (String, usize, usize),
}

pub fn run(options: GenerateOptions) -> anyhow::Result<()> {
    if !options.src.is_dir() {
        bail!("{} is not a directory", options.src.display());
    }
    if options.name.is_empty() || options.name.contains(['/', '\\', '"']) {
        bail!("the set name must be a plain word, not {:?}", options.name);
    }
    let out = options.out.canonicalize().ok();
    let files = read_tree(&options.src, options.language.as_deref(), out.as_deref())?;
    if files.is_empty() {
        bail!(
            "{} holds no source files in a language with a tags query{}",
            options.src.display(),
            options
                .language
                .as_deref()
                .map(|l| format!(" (--language {l})"))
                .unwrap_or_default()
        );
    }
    let mut rng = Rng(options.seed);

    // Definitions by name (per language), and the nl candidates.
    let mut by_name: DefinitionsByName = HashMap::new();
    let mut nl_candidates: Vec<NlCandidate> = Vec::new();
    for (rel, file) in &files {
        let in_test = is_test_path(rel);
        for (tag, doc) in &file.tags.definitions {
            let (start, end) = (tag.line_range.start + 1, tag.line_range.end);
            by_name
                .entry((file.language.clone(), tag.name.clone()))
                .or_default()
                .push((rel.clone(), start, end));
            let Some(doc) = doc else { continue };
            if in_test || end + 1 - start > MAX_TARGET_LINES {
                continue;
            }
            let Some(sentence) = first_sentence(&doc.text, &tag.name) else {
                continue;
            };
            // The definition's lines (a doc comment above it is not part of them).
            nl_candidates.push(NlCandidate {
                sentence,
                symbol: tag.name.clone(),
                target: Definition {
                    file: rel.clone(),
                    lines: (start, end),
                },
                doc_lines: doc.lines.clone(),
                only_statement: doc.only_statement,
            });
        }
    }

    // nl: one query per distinct sentence, at most 15 % of the queries from one file.
    let mut groups: BTreeMap<String, Vec<NlCandidate>> = BTreeMap::new();
    for c in nl_candidates {
        groups.entry(c.sentence.clone()).or_default().push(c);
    }
    let mut groups: Vec<Vec<NlCandidate>> = groups.into_values().collect();
    rng.shuffle(&mut groups);
    let per_file_cap = ((options.max_nl as f64 * 0.15).ceil() as usize).max(1);
    let mut per_file: HashMap<String, usize> = HashMap::new();
    let mut nl: Vec<Vec<NlCandidate>> = Vec::new();
    for group in groups {
        if nl.len() >= options.max_nl {
            break;
        }
        let count = per_file.entry(group[0].target.file.clone()).or_default();
        if *count >= per_file_cap {
            continue;
        }
        *count += 1;
        nl.push(group);
    }
    nl.sort_by(|a, b| {
        (&a[0].target.file, a[0].target.lines).cmp(&(&b[0].target.file, b[0].target.lines))
    });

    // completion: calls of uniquely defined names from another file.
    let mut sites: Vec<Site> = Vec::new();
    for (rel, file) in &files {
        let lines: Vec<&str> = file.text.split('\n').collect();
        let in_test = is_test_path(rel);
        for reference in &file.tags.references {
            if reference.kind != "call"
                || reference.name.chars().count() < 6
                || reference.name.to_lowercase().starts_with("test")
            {
                continue;
            }
            let Some(defs) = by_name.get(&(file.language.clone(), reference.name.clone())) else {
                continue;
            };
            let [(target_file, start, end)] = defs.as_slice() else {
                continue;
            };
            if target_file == rel
                || (is_test_path(target_file) && !in_test)
                || end + 1 - start > MAX_TARGET_LINES
            {
                continue;
            }
            let Some(line) = lines.get(reference.line) else {
                continue;
            };
            let Some(head) = line.get(..reference.column) else {
                continue;
            };
            let before = &lines[reference.line.saturating_sub(CONTEXT_LINES)..reference.line];
            let mut query = before.join("\n");
            if !before.is_empty() {
                query.push('\n');
            }
            query.push_str(head);
            if contains_word(&query, &reference.name) {
                continue;
            }
            sites.push(Site {
                file: rel.clone(),
                line: reference.line + 1,
                column: reference.column,
                callee: reference.name.clone(),
                query,
                target: (target_file.clone(), *start, *end),
            });
        }
    }
    rng.shuffle(&mut sites);
    let (mut per_callee, mut per_query_file) = (HashMap::new(), HashMap::new());
    let mut from_tests = 0;
    let mut completion: Vec<Site> = Vec::new();
    for site in sites {
        if completion.len() >= options.max_completion {
            break;
        }
        let callee = per_callee.entry(site.callee.clone()).or_insert(0usize);
        let query_file = per_query_file.entry(site.file.clone()).or_insert(0usize);
        let test = is_test_path(&site.file);
        if *callee >= 2 || *query_file >= 6 || (test && from_tests >= options.max_completion / 2) {
            continue;
        }
        *callee += 1;
        *query_file += 1;
        from_tests += usize::from(test);
        completion.push(site);
    }
    completion.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));

    write_set(&options, &files, &nl, &completion)?;
    println!(
        "{}: {} files, {} nl and {} completion queries -> {}",
        options.name,
        files.len(),
        nl.len(),
        completion.len(),
        options.out.display()
    );
    Ok(())
}

fn contains_word(text: &str, word: &str) -> bool {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    text.match_indices(word).any(|(i, _)| {
        !text[..i].chars().next_back().is_some_and(is_ident)
            && !text[i + word.len()..].chars().next().is_some_and(is_ident)
    })
}

fn write_set(
    options: &GenerateOptions,
    files: &BTreeMap<String, SourceFile>,
    nl: &[Vec<NlCandidate>],
    completion: &[Site],
) -> anyhow::Result<()> {
    // Only what this command writes is replaced.
    for sub in ["corpus-full", "corpus-nodocs"] {
        let dir = options.out.join(sub);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .with_context(|| format!("cannot replace {}", dir.display()))?;
        }
    }
    let mut blank: HashMap<&str, Vec<(&std::ops::Range<usize>, bool)>> = HashMap::new();
    for group in nl {
        for c in group {
            blank
                .entry(c.target.file.as_str())
                .or_default()
                .push((&c.doc_lines, c.only_statement));
        }
    }
    for (rel, file) in files {
        let write = |sub: &str, text: &str| -> anyhow::Result<()> {
            let path = options.out.join(sub).join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("cannot create {}", parent.display()))?;
            }
            std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
        };
        write("corpus-full", &file.text)?;
        let text = match blank.get(rel.as_str()) {
            Some(spans) => {
                let mut lines: Vec<String> = file.text.split('\n').map(str::to_string).collect();
                for (span, only) in spans {
                    for k in span.start..span.end.min(lines.len()) {
                        lines[k] = String::new();
                    }
                    if *only && span.start < lines.len() {
                        // The body keeps a statement, indented as the docstring was.
                        let indent: String = file
                            .text
                            .split('\n')
                            .nth(span.start)
                            .unwrap_or("")
                            .chars()
                            .take_while(|c| c.is_whitespace())
                            .collect();
                        lines[span.start] = format!("{indent}...");
                    }
                }
                lines.join("\n")
            }
            None => file.text.clone(),
        };
        if !nl.is_empty() {
            write("corpus-nodocs", &text)?;
        }
    }
    let path = options.out.join("queries.jsonl");
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(&path).with_context(|| format!("cannot write {}", path.display()))?,
    );
    let name = &options.name;
    for (i, group) in nl.iter().enumerate() {
        let c = &group[0];
        let relevant: Vec<_> = group
            .iter()
            .map(|c| json!({"filepath": c.target.file, "start_line": c.target.lines.0, "end_line": c.target.lines.1}))
            .collect();
        writeln!(
            out,
            "{}",
            json!({
                "id": format!("{name}-nl-{i:04}"), "set": name, "kind": "nl",
                "language": files[&c.target.file].language, "query": c.sentence,
                "filepath": null, "corpus": "nodocs", "symbol": c.symbol, "relevant": relevant,
            })
        )?;
    }
    for (i, s) in completion.iter().enumerate() {
        writeln!(
            out,
            "{}",
            json!({
                "id": format!("{name}-cc-{i:04}"), "set": name, "kind": "completion",
                "language": files[&s.file].language, "query": s.query, "filepath": s.file,
                "cursor": {"line": s.line, "column": s.column}, "context_lines": CONTEXT_LINES,
                "corpus": "full", "symbol": s.callee, "call_line": s.line,
                "relevant": [{"filepath": s.target.0, "start_line": s.target.1, "end_line": s.target.2}],
            })
        )?;
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_sentences_strip_markup_and_the_name() {
        assert_eq!(
            first_sentence("Returns the number of `active` streams.\n\nMore.", "x").as_deref(),
            Some("Returns the number of active streams.")
        );
        assert_eq!(
            first_sentence(
                "ParseConfig reads a [config](http://x) file from disk.",
                "ParseConfig"
            )
            .as_deref(),
            Some("reads a config file from disk.")
        );
        assert_eq!(
            first_sentence("Links {@link Foo|the foo} to a bar baz.", "x").as_deref(),
            Some("Links Foo to a bar baz.")
        );
        assert_eq!(first_sentence("Too short.", "x"), None);
        assert_eq!(
            first_sentence("Deprecated: use the other one instead.", "x"),
            None
        );
        assert_eq!(
            first_sentence("Splits v1.2 versions into parts and more", "x").as_deref(),
            Some("Splits v1.2 versions into parts and more")
        );
    }

    #[test]
    fn the_generator_is_seeded() {
        let mut a = Rng(7);
        let mut b = Rng(7);
        let mut x: Vec<u32> = (0..50).collect();
        let mut y = x.clone();
        a.shuffle(&mut x);
        b.shuffle(&mut y);
        assert_eq!(x, y);
        assert_ne!(x, (0..50).collect::<Vec<_>>());
    }
}
