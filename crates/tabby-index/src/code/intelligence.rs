//! Code intelligence per language: tree-sitter grammars and tags queries, and one parse per
//! file that gives both the definitions (the tags query run on the tree) and the chunks (cut
//! along the same tree's nodes) with exact 1-based start lines. Languages without a grammar are
//! chunked by text-splitter's TextSplitter.

use std::{cell::RefCell, collections::HashMap, ops::Range, sync::OnceLock};

use text_splitter::{ChunkConfig, TextSplitter};
use tree_sitter::{Node, Parser, QueryCursor, StreamingIterator, Tree};
use tree_sitter_tags::TagsConfiguration;

/// Default chunk size in characters when the languages table gives none.
pub const DEFAULT_CHUNK_SIZE: usize = 512;
/// Bumped when a tags query or what is read as a definition changes (2: Rust items in macro
/// call bodies); recorded in the index metadata.
pub const TAGS_QUERY_VERSION: u32 = 2;

/// A grammar and its tags configuration.
pub struct LanguageIntelligence {
    pub grammar: tree_sitter::Language,
    pub tags: TagsConfiguration,
    capture_roles: Vec<CaptureRole>,
    /// Rust: items in macro call bodies are definitions too (see `macro_items`).
    items_in_macros: bool,
}

fn csharp_tags_query() -> String {
    // tree-sitter-tags rejects the shipped query's `@module` capture: drop that pattern.
    tree_sitter_c_sharp::TAGS_QUERY
        .lines()
        .filter(|l| !l.trim_end().ends_with(") @module"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn build(canonical: &str) -> Option<LanguageIntelligence> {
    let (grammar, query, locals): (tree_sitter::Language, String, &str) = match canonical {
        "python" => (
            tree_sitter_python::LANGUAGE.into(),
            tree_sitter_python::TAGS_QUERY.into(),
            "",
        ),
        "rust" => (
            tree_sitter_rust::LANGUAGE.into(),
            tree_sitter_rust::TAGS_QUERY.into(),
            "",
        ),
        "java" => (
            tree_sitter_java::LANGUAGE.into(),
            tree_sitter_java::TAGS_QUERY.into(),
            "",
        ),
        "kotlin" => (
            tree_sitter_kotlin_ng::LANGUAGE.into(),
            include_str!("../../queries/kotlin.scm").into(),
            "",
        ),
        "javascript-typescript" => (
            tree_sitter_typescript::LANGUAGE_TSX.into(),
            // The TypeScript query covers only TS-specific nodes; the JS one covers the rest.
            format!(
                "{}\n{}",
                tree_sitter_javascript::TAGS_QUERY,
                tree_sitter_typescript::TAGS_QUERY
            ),
            "",
        ),
        "go" => (
            tree_sitter_go::LANGUAGE.into(),
            tree_sitter_go::TAGS_QUERY.into(),
            "",
        ),
        "ruby" => (
            tree_sitter_ruby::LANGUAGE.into(),
            tree_sitter_ruby::TAGS_QUERY.into(),
            "",
        ),
        "c" => (
            tree_sitter_c::LANGUAGE.into(),
            tree_sitter_c::TAGS_QUERY.into(),
            "",
        ),
        "cpp" => (
            tree_sitter_cpp::LANGUAGE.into(),
            tree_sitter_cpp::TAGS_QUERY.into(),
            "",
        ),
        "csharp" => (
            tree_sitter_c_sharp::LANGUAGE.into(),
            csharp_tags_query(),
            "",
        ),
        "php" => (
            tree_sitter_php::LANGUAGE_PHP.into(),
            tree_sitter_php::TAGS_QUERY.into(),
            "",
        ),
        "scala" => (
            tree_sitter_scala::LANGUAGE.into(),
            include_str!("../../queries/scala.scm").into(),
            "",
        ),
        "lua" => (
            tree_sitter_lua::LANGUAGE.into(),
            tree_sitter_lua::TAGS_QUERY.into(),
            "",
        ),
        "shellscript" => (
            tree_sitter_bash::LANGUAGE.into(),
            include_str!("../../queries/bash.scm").into(),
            "",
        ),
        _ => return None,
    };
    match TagsConfiguration::new(grammar.clone(), &query, locals) {
        Ok(tags) => Some(LanguageIntelligence {
            grammar,
            capture_roles: roles_of(&tags),
            tags,
            items_in_macros: canonical == "rust",
        }),
        Err(e) => {
            tracing::error!("tags query for {canonical} is invalid: {e}");
            None
        }
    }
}

/// Canonical names of the languages with a grammar and tags query.
pub const LANGUAGES_WITH_GRAMMAR: &[&str] = &[
    "python",
    "rust",
    "java",
    "kotlin",
    "javascript-typescript",
    "go",
    "ruby",
    "c",
    "cpp",
    "csharp",
    "php",
    "scala",
    "lua",
    "shellscript",
];

/// The grammar and tags configuration for a canonical language name, built once, when the
/// language is first met (compiling every language's tags query up front cost a small
/// re-index half a second).
pub fn intelligence(canonical: &str) -> Option<&'static LanguageIntelligence> {
    type Cells = HashMap<&'static str, OnceLock<Option<LanguageIntelligence>>>;
    static CACHE: OnceLock<Cells> = OnceLock::new();
    let cells = CACHE.get_or_init(|| {
        LANGUAGES_WITH_GRAMMAR
            .iter()
            .map(|name| (*name, OnceLock::new()))
            .collect()
    });
    let (name, cell) = cells.get_key_value(canonical)?;
    cell.get_or_init(|| build(name)).as_ref()
}

/// A definition found by tree-sitter-tags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tag {
    pub name: String,
    /// `function`, `class`, `method`, …
    pub kind: String,
    /// 0-based line range of the whole definition.
    pub line_range: Range<usize>,
    /// Byte range of the definition's name.
    pub name_range: Range<usize>,
}

/// Definitions in `text` (empty when the language has no tags query or the text does not parse).
pub fn find_definitions(canonical: &str, text: &str) -> Vec<Tag> {
    match (intelligence(canonical), parse(canonical, text)) {
        (Some(intel), Some(tree)) => definitions(intel, &tree, text),
        _ => vec![],
    }
}

/// What one parse of a file gives the indexer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileAnalysis {
    pub chunks: Vec<Chunk>,
    pub definitions: Vec<Tag>,
    /// Imports and implementations, for the file's relationship record.
    pub relations: super::relations::FileRelations,
}

/// Chunks, definitions and relations of `text` from a single tree-sitter parse (text chunks and no
/// definitions for languages without a grammar).
pub fn analyze(canonical: &str, text: &str, chunk_size: usize) -> FileAnalysis {
    let chunk_size = chunk_size.max(1);
    match (intelligence(canonical), parse(canonical, text)) {
        (Some(intel), Some(tree)) => FileAnalysis {
            chunks: with_start_lines(text, syntax_chunks(text, &tree, chunk_size)),
            definitions: definitions(intel, &tree, text),
            relations: super::relations::extract(canonical, text, Some(&tree)),
        },
        _ => FileAnalysis {
            chunks: text_chunks(text, chunk_size),
            definitions: vec![],
            relations: super::relations::extract(canonical, text, None),
        },
    }
}

/// Parses `text` with the language's grammar, reusing one parser per thread.
pub(crate) fn parse(canonical: &str, text: &str) -> Option<Tree> {
    thread_local! {
        static PARSER: RefCell<Parser> = RefCell::new(Parser::new());
    }
    let intel = intelligence(canonical)?;
    PARSER.with(|parser| {
        let mut parser = parser.borrow_mut();
        parser.set_language(&intel.grammar).ok()?;
        parser.parse(text, None)
    })
}

/// The tags query run on `tree`, with tree-sitter-tags' rules: a match needs a `@name` and a
/// `@definition.*`/`@reference.*` capture, a name with a syntax error is dropped, one tag per
/// name node (the earliest pattern wins, `@ignore` claims the node), in name order. Only
/// definitions are kept. Rust adds the items in macro call bodies, which the query cannot see.
fn definitions(intel: &LanguageIntelligence, tree: &Tree, text: &str) -> Vec<Tag> {
    tags(intel, tree, text)
        .into_iter()
        .filter(|t| t.is_definition)
        .map(|t| t.tag)
        .collect()
}

/// One tag with the node it was captured on.
struct Captured<'t> {
    tag: Tag,
    node: Node<'t>,
    is_definition: bool,
}

/// Definitions and references of the tags query (see [`definitions`] for the rules).
fn tags<'t>(intel: &LanguageIntelligence, tree: &'t Tree, text: &str) -> Vec<Captured<'t>> {
    let query = &intel.tags.query;
    let captures = capture_roles(intel);
    let mut cursor = QueryCursor::new();
    let mut matches = cursor.matches(query, tree.root_node(), text.as_bytes());
    // Keyed by the name's (end, start), like tree-sitter-tags' queue.
    let mut found: Vec<((usize, usize), usize, Option<Captured<'t>>)> = Vec::new();
    while let Some(m) = matches.next() {
        let mut name_node = None;
        let mut tag_node: Option<(Node, &CaptureRole)> = None;
        let mut ignored = false;
        for capture in m.captures() {
            match &captures[capture.index as usize] {
                CaptureRole::Name => name_node = Some(capture.node),
                CaptureRole::Ignore => {
                    ignored = true;
                    name_node = Some(capture.node);
                }
                role @ CaptureRole::Tag { .. } => tag_node = Some((capture.node, role)),
                CaptureRole::Other => {}
            }
        }
        let Some(name_node) = name_node else { continue };
        let tag = match tag_node {
            Some((
                node,
                CaptureRole::Tag {
                    kind,
                    is_definition,
                },
            )) => {
                if name_node.has_error() {
                    continue;
                }
                let name_range = name_node.byte_range();
                let start = if node.start_byte() <= name_range.start {
                    node.start_position()
                } else {
                    name_node.start_position()
                };
                let end = if node.end_byte() >= name_range.end {
                    node.end_position()
                } else {
                    name_node.end_position()
                };
                Some(Captured {
                    tag: Tag {
                        name: text.get(name_range.clone()).unwrap_or_default().to_string(),
                        kind: kind.clone(),
                        line_range: start.row..end.row + 1,
                        name_range,
                    },
                    node,
                    is_definition: *is_definition,
                })
            }
            _ if ignored => None,
            _ => continue,
        };
        let range = name_node.byte_range();
        let key = (range.end, range.start);
        match found.binary_search_by_key(&key, |(k, _, _)| *k) {
            Ok(i) => {
                if found[i].1 > m.pattern_index {
                    found[i] = (key, m.pattern_index, tag);
                }
            }
            Err(i) => found.insert(i, (key, m.pattern_index, tag)),
        }
    }
    if intel.items_in_macros {
        for item in super::macro_items::macro_items(tree, text.as_bytes()) {
            let name_range = item.name.byte_range();
            let key = (name_range.end, name_range.start);
            if let Err(i) = found.binary_search_by_key(&key, |(k, _, _)| *k) {
                let tag = Tag {
                    name: text.get(name_range.clone()).unwrap_or_default().to_string(),
                    kind: item.kind.to_string(),
                    line_range: item.rows,
                    name_range,
                };
                let captured = Captured {
                    tag,
                    node: item.doc_anchor,
                    is_definition: true,
                };
                found.insert(i, (key, usize::MAX, Some(captured)));
            }
        }
    }
    found.into_iter().filter_map(|(_, _, tag)| tag).collect()
}

/// A definition's documentation: a Python docstring, or the doc comment right above it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Doc {
    /// 0-based lines the docstring or comment spans.
    pub lines: Range<usize>,
    /// Its text without quotes or comment markers.
    pub text: String,
    /// A docstring that is its body's only statement (blanking it needs a placeholder).
    pub only_statement: bool,
}

/// A reference of the tags query: a call, a type's use, …
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    pub name: String,
    /// `call`, `class`, `implementation`, …
    pub kind: String,
    /// 0-based line and byte column of the name.
    pub line: usize,
    pub column: usize,
}

/// Definitions (each with its documentation, when it has one) and references of a file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileTags {
    pub definitions: Vec<(Tag, Option<Doc>)>,
    pub references: Vec<Reference>,
}

/// The tags of `text` with documentation (None without a grammar or when it does not parse).
pub fn file_tags(canonical: &str, text: &str) -> Option<FileTags> {
    let intel = intelligence(canonical)?;
    let tree = parse(canonical, text)?;
    let mut out = FileTags::default();
    for captured in tags(intel, &tree, text) {
        if captured.is_definition {
            let doc = doc_of(canonical, captured.node, text);
            out.definitions.push((captured.tag, doc));
        } else {
            let line_start = text[..captured.tag.name_range.start]
                .rfind('\n')
                .map_or(0, |i| i + 1);
            out.references.push(Reference {
                line: text[..captured.tag.name_range.start].matches('\n').count(),
                column: captured.tag.name_range.start - line_start,
                name: captured.tag.name,
                kind: captured.tag.kind,
            });
        }
    }
    Some(out)
}

/// Node kinds that sit between a doc comment and what it documents.
const DOC_TRANSPARENT: &[&str] = &[
    "attribute_item",
    "decorator",
    "annotation",
    "marker_annotation",
];
/// Containers whose children are the definitions: a doc comment is never looked for above them.
const DOC_CONTAINERS: &[&str] = &[
    "program",
    "source_file",
    "module",
    "class_body",
    "declaration_list",
    "block",
    "statement_block",
    "translation_unit",
    "compilation_unit",
    "field_declaration_list",
    "interface_body",
    "enum_body",
    "object_type",
];

fn doc_of(canonical: &str, node: Node, text: &str) -> Option<Doc> {
    if canonical == "python" {
        return python_docstring(node, text);
    }
    // What the comment sits above: the definition, or the statement that starts on its line
    // (`export function f`, `const f = () => …`, `pub(crate) fn` inside a macro…).
    let mut anchor = node;
    while let Some(parent) = anchor.parent() {
        if DOC_CONTAINERS.contains(&parent.kind())
            || parent.start_position().row != anchor.start_position().row
        {
            break;
        }
        anchor = parent;
    }
    let mut next_row = anchor.start_position().row;
    let mut sibling = anchor.prev_sibling();
    let mut comments: Vec<Node> = Vec::new();
    while let Some(s) = sibling {
        if s.end_position().row + 1 < next_row {
            break;
        }
        if DOC_TRANSPARENT.contains(&s.kind()) && comments.is_empty() {
            next_row = s.start_position().row;
        } else if s.kind().contains("comment") {
            comments.push(s);
            next_row = s.start_position().row;
        } else {
            break;
        }
        sibling = s.prev_sibling();
    }
    comments.reverse();
    // Only documentation comments: `///` and `/** */` everywhere, `//` lines in Go, `#` in Ruby.
    let marker_ok = |t: &str| match canonical {
        "go" => t.starts_with("//"),
        "ruby" | "shellscript" => t.starts_with('#'),
        "lua" => t.starts_with("---"),
        _ => t.starts_with("///") || t.starts_with("/**"),
    };
    // A run of line comments: keep the contiguous doc ones right above the definition.
    let mut kept: Vec<Node> = Vec::new();
    for c in comments.iter().rev() {
        let t = text.get(c.byte_range()).unwrap_or_default();
        if !marker_ok(t) || t.starts_with("//!") || t.starts_with("/*!") {
            break;
        }
        kept.push(*c);
    }
    kept.reverse();
    let (first, last) = (kept.first()?, kept.last()?);
    let body: Vec<String> = kept
        .iter()
        .flat_map(|c| text.get(c.byte_range()).unwrap_or_default().lines())
        .map(|line| strip_comment_marker(line.trim()))
        .collect();
    // A Rust line comment's node takes its line's newline along: it ends at column 0 of the
    // next line, which is the definition's, not the doc's.
    let end = last.end_position();
    let end_row = if end.column == 0 && end.row > last.start_position().row {
        end.row
    } else {
        end.row + 1
    };
    Some(Doc {
        lines: first.start_position().row..end_row,
        text: body.join("\n").trim().to_string(),
        only_statement: false,
    })
}

fn strip_comment_marker(line: &str) -> String {
    let mut l = line;
    for prefix in ["/**", "///", "---", "//", "#", "*"] {
        if let Some(rest) = l.strip_prefix(prefix) {
            l = rest;
            break;
        }
    }
    let l = l.strip_suffix("*/").unwrap_or(l);
    l.strip_prefix(' ').unwrap_or(l).trim_end().to_string()
}

fn python_docstring(node: Node, text: &str) -> Option<Doc> {
    let body = node.child_by_field_name("body")?;
    let first = body.named_child(0)?;
    if first.kind() != "expression_statement" {
        return None;
    }
    let string = first.named_child(0)?;
    if string.kind() != "string" || first.named_child_count() != 1 {
        return None;
    }
    let raw = text.get(string.byte_range())?;
    let inner = raw.trim_start_matches(|c: char| c.is_ascii_alphabetic());
    let quote = ["\"\"\"", "\'\'\'", "\"", "\'"]
        .into_iter()
        .find(|q| inner.starts_with(q) && inner.ends_with(q) && inner.len() >= 2 * q.len())?;
    let content = &inner[quote.len()..inner.len() - quote.len()];
    Some(Doc {
        lines: first.start_position().row..first.end_position().row + 1,
        text: content.trim().to_string(),
        only_statement: body.named_child_count() == 1,
    })
}

/// What each capture of a tags query stands for.
enum CaptureRole {
    Name,
    Ignore,
    Tag { kind: String, is_definition: bool },
    Other,
}

fn capture_roles(intel: &LanguageIntelligence) -> &[CaptureRole] {
    &intel.capture_roles
}

fn roles_of(tags: &TagsConfiguration) -> Vec<CaptureRole> {
    tags.query
        .capture_names()
        .iter()
        .map(|name| {
            if *name == "name" {
                CaptureRole::Name
            } else if *name == "ignore" {
                CaptureRole::Ignore
            } else if let Some(kind) = name.strip_prefix("definition.") {
                CaptureRole::Tag {
                    kind: kind.to_string(),
                    is_definition: true,
                }
            } else if let Some(kind) = name.strip_prefix("reference.") {
                CaptureRole::Tag {
                    kind: kind.to_string(),
                    is_definition: false,
                }
            } else {
                CaptureRole::Other
            }
        })
        .collect()
}

/// A piece of a file to index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub body: String,
    /// 1-based line of the chunk's first character.
    pub start_line: usize,
    /// Byte offset of the chunk in the file.
    pub offset: usize,
}

/// Cuts `text` into chunks of at most `chunk_size` characters: along syntax boundaries where the
/// language has a grammar, along text boundaries otherwise.
pub fn chunks(canonical: &str, text: &str, chunk_size: usize) -> Vec<Chunk> {
    analyze(canonical, text, chunk_size).chunks
}

fn text_chunks(text: &str, chunk_size: usize) -> Vec<Chunk> {
    let pieces = TextSplitter::new(ChunkConfig::new(chunk_size))
        .chunk_indices(text)
        .map(|(offset, body)| offset..offset + body.len())
        .collect();
    with_start_lines(text, pieces)
}

/// Chunks for byte ranges in increasing order, with their 1-based start lines.
fn with_start_lines(text: &str, pieces: Vec<Range<usize>>) -> Vec<Chunk> {
    let mut chunks = Vec::with_capacity(pieces.len());
    let (mut line, mut counted_to) = (1, 0);
    for range in pieces {
        // Offsets only grow, so count newlines incrementally.
        line += memchr_count(&text.as_bytes()[counted_to..range.start]);
        counted_to = range.start;
        chunks.push(Chunk {
            body: text[range.clone()].to_string(),
            start_line: line,
            offset: range.start,
        });
    }
    chunks
}

fn memchr_count(bytes: &[u8]) -> usize {
    bytes.iter().filter(|b| **b == b'\n').count()
}

/// Syntax chunking, CodeSplitter's rules on the tree it would have parsed: the text is covered
/// by the root's children, each with the gap after it (so a chunk starts where a node starts);
/// consecutive siblings are packed into a chunk while it stays within `max` characters, and a
/// sibling too large on its own is cut along its own children (a leaf by CodeSplitter's
/// fallback: sentences, then words, then grapheme clusters). Whitespace before a node that starts a chunk
/// is left out of it, as CodeSplitter left it. Chunks are trimmed as CodeSplitter trimmed them:
/// leading newlines and trailing whitespace go (a one-line chunk is trimmed on both sides).
/// Returns byte ranges in order.
fn syntax_chunks(text: &str, tree: &Tree, max: usize) -> Vec<Range<usize>> {
    let mut packer = Packer {
        text,
        max,
        out: Vec::new(),
        current: None,
        consumed: 0,
    };
    packer.pack(tree.root_node(), text.len());
    packer.flush();
    packer.out
}

struct Packer<'a> {
    text: &'a str,
    max: usize,
    out: Vec<Range<usize>>,
    /// The chunk being packed (untrimmed).
    current: Option<Range<usize>>,
    /// Text before this was taken by a fallback chunk that ran past its leaf.
    consumed: usize,
}

/// A step of packing, on an explicit stack instead of the call stack: a syntax tree can be
/// nested far deeper than a thread's stack allows (a generated expression of 20,000 terms is a
/// binary-expression chain that deep), and an oversized node's children are packed in turn.
enum Step<'t> {
    /// The children of a node and the gaps between them.
    Children(Node<'t>, usize, usize),
    Gap(usize, usize),
    Section(Option<Node<'t>>, usize, usize),
}

/// CodeSplitter's fallback levels below the syntax tree (text-splitter's `FallbackLevel`, with
/// the same ICU segmenters).
#[derive(Clone, Copy)]
enum Fallback {
    Grapheme,
    Word,
    Sentence,
}

impl Fallback {
    /// Section boundaries of `text`, 0 and `text.len()` included.
    fn boundaries(self, text: &str) -> Box<dyn Iterator<Item = usize> + '_> {
        use icu_segmenter::{
            GraphemeClusterSegmenter, SentenceSegmenter, WordSegmenter,
            options::{SentenceBreakInvariantOptions, WordBreakInvariantOptions},
        };
        static WORDS: OnceLock<icu_segmenter::WordSegmenterBorrowed<'static>> = OnceLock::new();
        static SENTENCES: OnceLock<icu_segmenter::SentenceSegmenterBorrowed<'static>> =
            OnceLock::new();
        match self {
            Fallback::Grapheme => Box::new(GraphemeClusterSegmenter::new().segment_str(text)),
            Fallback::Word => Box::new(
                WORDS
                    .get_or_init(|| {
                        WordSegmenter::new_dictionary(WordBreakInvariantOptions::default())
                    })
                    .segment_str(text),
            ),
            Fallback::Sentence => Box::new(
                SENTENCES
                    .get_or_init(
                        || SentenceSegmenter::new(SentenceBreakInvariantOptions::default()),
                    )
                    .segment_str(text),
            ),
        }
    }
}

impl<'a> Packer<'a> {
    /// Packs the whole text, `root` being its syntax tree's root.
    fn pack<'t>(&mut self, root: Node<'t>, end: usize) {
        let mut steps = vec![Step::Children(root, 0, end)];
        while let Some(step) = steps.pop() {
            match step {
                Step::Children(node, start, end) => {
                    let first = steps.len();
                    Self::children(node, start, end, &mut steps);
                    // Popped in text order.
                    steps[first..].reverse();
                }
                Step::Gap(start, end) => self.gap(start, end),
                Step::Section(node, start, end) => {
                    if let Some(inside) = self.section(node, start, end) {
                        steps.push(inside);
                    }
                }
            }
        }
    }

    /// The steps that pack `start..end`, the span of `node`'s children and the gaps after
    /// them, in text order.
    fn children<'t>(node: Node<'t>, start: usize, end: usize, steps: &mut Vec<Step<'t>>) {
        let mut cursor = node.walk();
        let children: Vec<Node> = node.children(&mut cursor).collect();
        let mut from = start;
        for (i, child) in children.iter().enumerate() {
            let to = match children.get(i + 1) {
                Some(next) => next.start_byte().clamp(from, end),
                None => end,
            };
            if to > from {
                let node_start = child.start_byte().clamp(from, to);
                let node_end = child.end_byte().clamp(node_start, to);
                steps.push(Step::Gap(from, node_start));
                if node_end > node_start {
                    steps.push(Step::Section(Some(*child), node_start, node_end));
                }
                // Whitespace after the node, or text between the nodes inside a string.
                steps.push(Step::Gap(node_end, to));
            }
            from = to;
        }
        if children.is_empty() && end > start {
            steps.push(Step::Section(None, start, end));
        }
    }

    /// Text outside the child nodes: whitespace ends the chunk being packed, or is dropped when
    /// no chunk is open; other text (a string's content around its escapes) is packed as a
    /// section of its own.
    fn gap(&mut self, start: usize, end: usize) {
        let start = start.max(self.consumed);
        if end <= start {
            return;
        }
        if self.text[start..end].trim().is_empty() {
            if let Some(current) = &self.current {
                self.current = Some(current.start..end);
            }
        } else {
            // Without a node, a section never goes inside one.
            let _ = self.section(None, start, end);
        }
    }

    /// Packs one node's span (or a span of text without a node); a node too large for a
    /// chunk is returned, for its children to be packed next.
    fn section<'t>(
        &mut self,
        node: Option<Node<'t>>,
        start: usize,
        end: usize,
    ) -> Option<Step<'t>> {
        // Text a fallback chunk has already taken.
        if end <= self.consumed {
            return None;
        }
        let start = start.max(self.consumed);
        if let Some(current) = &self.current {
            let joined = current.start..end;
            if self.fits(joined.clone()) {
                self.current = Some(joined);
                return None;
            }
            self.flush();
        }
        if self.fits(start..end) {
            self.current = Some(start..end);
            return None;
        }
        match node {
            Some(node) if node.child_count() > 0 => return Some(Step::Children(node, start, end)),
            Some(node) => self.oversized(start, node.end_byte().clamp(start, end), end),
            None => self.oversized(start, end, end),
        }
        None
    }

    /// Text too large for a chunk that has no syntax node inside (a long string, comment or
    /// docstring; `leaf_end` is where it ends, `end` where the next node starts): CodeSplitter's
    /// fallback. Each chunk takes as many sentences of the text from its start as fit (words
    /// when a sentence is too long, then grapheme clusters), sentences starting past the leaf
    /// left out; the last one may run past the leaf's end. Once the rest of the leaf fits, it
    /// opens the next chunk, and packing goes on from there.
    fn oversized(&mut self, start: usize, leaf_end: usize, end: usize) {
        let mut at = start;
        while at < leaf_end {
            if self.fits(at..leaf_end) {
                self.current = Some(at..end.max(at));
                return;
            }
            let to = self.fallback_chunk(at, leaf_end);
            let piece = trim(self.text, at..to);
            if !piece.is_empty() {
                self.out.push(piece);
            }
            at = to;
        }
        // The last piece ended at or past the leaf's end: the next chunk starts where it ended.
        self.consumed = self.consumed.max(at);
        self.current = Some(at..at.max(end));
    }

    /// Where CodeSplitter's fallback ends a chunk that starts at `at` inside a leaf ending at
    /// `leaf_end`.
    fn fallback_chunk(&self, at: usize, leaf_end: usize) -> usize {
        let rest = &self.text[at..];
        let mut max_offset = leaf_end;
        for level in [Fallback::Sentence, Fallback::Word, Fallback::Grapheme] {
            let mut bounds = level.boundaries(rest).map(|b| at + b).skip(1);
            let Some(first) = bounds.next() else {
                return self.text.len();
            };
            if first - at > self.max && !self.fits(at..first) {
                max_offset = max_offset.min(first);
                continue;
            }
            // The largest run of this level's sections from `at` that fits, sections starting
            // after `max_offset` left out.
            let mut end = first;
            let mut section_start = first;
            for bound in bounds {
                if section_start > max_offset || !self.fits(at..bound) {
                    break;
                }
                end = bound;
                section_start = bound;
            }
            return end;
        }
        // A grapheme cluster longer than the chunk: the cluster on its own.
        Fallback::Grapheme
            .boundaries(rest)
            .nth(1)
            .map_or(self.text.len(), |b| at + b)
    }

    fn fits(&self, range: Range<usize>) -> bool {
        // An oversized node is asked at every level of its nesting: rule out what cannot fit
        // by its whitespace-trimmed length (4 bytes a character at most) before `trim`, which
        // looks for line breaks across all of it (quadratic in a deep single-line tree).
        if self.text[range.clone()].trim().len() > 4 * self.max {
            return false;
        }
        let trimmed = trim(self.text, range);
        // Characters never outnumber bytes: count them only when the bytes are over.
        trimmed.len() <= self.max || self.text[trimmed].chars().count() <= self.max
    }

    fn flush(&mut self) {
        if let Some(current) = self.current.take() {
            let trimmed = trim(self.text, current);
            if !trimmed.is_empty() {
                self.out.push(trimmed);
            }
        }
    }
}

/// CodeSplitter's trim (`PreserveIndentation`): a chunk that spans lines loses its leading
/// newlines and its trailing whitespace; a one-line chunk loses whitespace on both sides.
fn trim(text: &str, range: Range<usize>) -> Range<usize> {
    let piece = &text[range.clone()];
    let inner = piece.trim();
    if inner.is_empty() {
        return range.start..range.start;
    }
    let start = if inner.contains(['\n', '\r']) {
        piece.len() - piece.trim_start_matches(['\n', '\r']).len()
    } else {
        piece.len() - piece.trim_start().len()
    };
    let end = piece.trim_end().len();
    range.start + start..range.start + end
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(language: &str, text: &str) -> Vec<String> {
        find_definitions(language, text)
            .into_iter()
            .map(|t| format!("{}:{}@{}", t.kind, t.name, t.line_range.start + 1))
            .collect()
    }

    #[test]
    fn every_registered_language_builds() {
        for language in LANGUAGES_WITH_GRAMMAR {
            assert!(intelligence(language).is_some(), "{language}");
        }
        assert!(intelligence("markdown").is_none());
    }

    #[test]
    fn definitions_per_language() {
        let cases: &[(&str, &str, &[&str])] = &[
            (
                "python",
                "class A:\n    def m(self):\n        pass\n\ndef f():\n    pass\n",
                &["class:A@1", "function:m@2", "function:f@5"],
            ),
            (
                "rust",
                "fn add() {}\nstruct Point;\nimpl Point {\n    fn norm(&self) {}\n}\n",
                &["function:add@1", "class:Point@2", "method:norm@4"],
            ),
            (
                "javascript-typescript",
                "interface I { x: number }\nclass C {\n  m() {}\n}\nfunction f() {}\n",
                &["interface:I@1", "class:C@2", "method:m@3", "function:f@5"],
            ),
            (
                "go",
                "package p\ntype T struct{}\nfunc (t T) M() {}\nfunc F() {}\n",
                &["type:T@2", "method:M@3", "function:F@4"],
            ),
            (
                "java",
                "class A {\n  void m() {}\n}\n",
                &["class:A@1", "method:m@2"],
            ),
            (
                "c",
                "struct S { int x; };\nint f(void) { return 0; }\n",
                &["class:S@1", "function:f@2"],
            ),
            (
                "cpp",
                "class K {};\nint g() { return 1; }\n",
                &["class:K@1", "function:g@2"],
            ),
            (
                "ruby",
                "class R\n  def m\n  end\nend\n",
                &["class:R@1", "method:m@2"],
            ),
            (
                "php",
                "<?php\nclass P {}\nfunction h() {}\n",
                &["class:P@2", "function:h@3"],
            ),
            (
                "csharp",
                "namespace N {\n  class Q {\n    void M() {}\n  }\n}\n",
                &["module:N@1", "class:Q@2", "method:M@3"],
            ),
            (
                "kotlin",
                "class Kt {\n  fun m(): Int = 1\n}\nobject O\nfun top() {}\n",
                &["class:Kt@1", "function:m@2", "object:O@4", "function:top@5"],
            ),
            (
                "shellscript",
                "greet() {\n  echo hi\n}\nfunction bye {\n  echo bye\n}\n",
                &["function:greet@1", "function:bye@4"],
            ),
            (
                "scala",
                "trait T\nclass C extends T {\n  def m(): Int = 1\n}\nobject O\n",
                &["interface:T@1", "class:C@2", "function:m@3", "object:O@5"],
            ),
            (
                "lua",
                "function f()\nend\nlocal function g()\nend\n",
                &["function:f@1", "function:g@3"],
            ),
        ];
        for (language, text, expected) in cases {
            let mut found = names(language, text);
            found.sort();
            let mut expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
            expected.sort();
            assert_eq!(found, expected, "{language}");
        }
    }

    #[test]
    fn code_chunks_follow_syntax_and_report_start_lines() {
        let text: String = (0..40)
            .map(|i| format!("def function_{i}(a, b):\n    return a + b * {i}\n\n"))
            .collect();
        let chunks = chunks("python", &text, 200);
        assert!(chunks.len() > 5);
        for chunk in &chunks {
            assert!(chunk.body.chars().count() <= 200, "{:?}", chunk.body);
            assert!(chunk.body.starts_with("def "), "{:?}", chunk.body);
            let line = text[..chunk.offset].matches('\n').count() + 1;
            assert_eq!(chunk.start_line, line);
            let expected = text.lines().nth(chunk.start_line - 1).unwrap();
            assert!(chunk.body.starts_with(expected), "{expected:?}");
        }
        assert_eq!(chunks[0].start_line, 1);
    }

    #[test]
    fn text_chunks_for_languages_without_grammar() {
        let text = "# Title\n\n".to_string() + &"Some words here. ".repeat(100);
        let chunks = chunks("markdown", &text, 512);
        assert!(chunks.len() >= 3);
        assert_eq!(chunks[0].start_line, 1);
        assert!(chunks.iter().all(|c| c.body.chars().count() <= 512));
    }

    /// This repository's own sources per language with a grammar.
    fn own_sources() -> Vec<(&'static str, String)> {
        // The directory cargo runs the test in, else the one it was built in (a test binary
        // reused from another checkout of the same sources must read this checkout).
        let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
        let root = manifest.join("../..");
        let mut out = Vec::new();
        let mut stack = vec![root.join("crates"), root.join("ee"), root.join("scripts")];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                let language = match path.extension().and_then(|e| e.to_str()) {
                    Some("rs") => "rust",
                    Some("py") => "python",
                    Some("js") | Some("mjs") => "javascript-typescript",
                    Some("sh") => "shellscript",
                    _ if path.is_dir() && !path.ends_with("vendor") => {
                        stack.push(path);
                        continue;
                    }
                    _ => continue,
                };
                if let Ok(text) = std::fs::read_to_string(&path) {
                    out.push((language, text));
                }
            }
        }
        assert!(out.len() > 50, "found {} sources", out.len());
        out
    }

    /// The definitions tree-sitter-tags gives (the implementation before the single parse).
    fn tree_sitter_tags_definitions(canonical: &str, text: &str) -> Vec<Tag> {
        let intel = intelligence(canonical).unwrap();
        let mut context = tree_sitter_tags::TagsContext::new();
        let (tags, _) = context
            .generate_tags(&intel.tags, text.as_bytes(), None)
            .unwrap();
        tags.filter_map(Result::ok)
            .filter(|tag| tag.is_definition)
            .map(|tag| Tag {
                name: text[tag.name_range.clone()].to_string(),
                kind: intel.tags.syntax_type_name(tag.syntax_type_id).to_string(),
                line_range: text[..tag.range.start].matches('\n').count()
                    ..text[..tag.range.end].matches('\n').count() + 1,
                name_range: tag.name_range,
            })
            .collect()
    }

    #[test]
    fn definitions_equal_tree_sitter_tags_on_this_repository() {
        for (language, text) in own_sources() {
            // Items in Rust macro call bodies are ours alone (tree-sitter-tags cannot see them).
            let in_macros: Vec<Range<usize>> = parse(language, &text)
                .filter(|_| language == "rust")
                .map(|tree| {
                    super::super::macro_items::macro_items(&tree, text.as_bytes())
                        .iter()
                        .map(|item| item.name.byte_range())
                        .collect()
                })
                .unwrap_or_default();
            let ours: Vec<Tag> = find_definitions(language, &text)
                .into_iter()
                .filter(|tag| !in_macros.contains(&tag.name_range))
                .collect();
            assert_eq!(
                ours,
                tree_sitter_tags_definitions(language, &text),
                "{language}: {}",
                &text[..text.len().min(200)]
            );
        }
    }

    /// Chunks cover every non-blank byte once, in order, within the size, at exact lines.
    fn check_chunks(text: &str, chunks: &[Chunk], max: usize) {
        let mut covered = 0;
        for chunk in chunks {
            assert!(chunk.body.chars().count() <= max, "{:?}", chunk.body);
            assert!(!chunk.body.trim().is_empty());
            assert!(
                chunk.offset >= covered,
                "chunks overlap at {}",
                chunk.offset
            );
            assert!(
                text[covered..chunk.offset].trim().is_empty(),
                "text left out: {:?}",
                &text[covered..chunk.offset]
            );
            assert_eq!(
                &text[chunk.offset..chunk.offset + chunk.body.len()],
                chunk.body
            );
            assert_eq!(
                chunk.start_line,
                text[..chunk.offset].matches('\n').count() + 1
            );
            covered = chunk.offset + chunk.body.len();
        }
        assert!(
            text[covered..].trim().is_empty(),
            "text left out at the end"
        );
    }

    #[test]
    fn syntax_chunks_cover_this_repository_within_the_size() {
        for (language, text) in own_sources() {
            let chunks = chunks(language, &text, 512);
            check_chunks(&text, &chunks, 512);
        }
    }

    /// CodeSplitter's chunks (the chunker before syntax-nodes), as byte ranges.
    fn code_splitter_ranges(language: &str, text: &str, max: usize) -> Vec<Range<usize>> {
        let intel = intelligence(language).unwrap();
        text_splitter::CodeSplitter::new(intel.grammar.clone(), ChunkConfig::new(max))
            .unwrap()
            .chunk_indices(text)
            .map(|(offset, body)| offset..offset + body.len())
            .collect()
    }

    /// How many chunks and files the syntax chunker cuts exactly as CodeSplitter did:
    /// (files, identical files, CodeSplitter's chunks, chunks also in ours, our chunks).
    fn compare_with_code_splitter(
        sources: &[(&str, String)],
        max: usize,
        mut report: impl FnMut(&str, &[Range<usize>], &[Range<usize>]),
    ) -> (usize, usize, usize, usize, usize) {
        let (mut files, mut same_files, mut old_total, mut same, mut new_total) = (0, 0, 0, 0, 0);
        for (language, text) in sources {
            let old = code_splitter_ranges(language, text, max);
            let new: Vec<Range<usize>> = chunks(language, text, max)
                .iter()
                .map(|c| c.offset..c.offset + c.body.len())
                .collect();
            files += 1;
            old_total += old.len();
            new_total += new.len();
            let new_set: std::collections::HashSet<_> = new.iter().cloned().collect();
            let common = old.iter().filter(|r| new_set.contains(*r)).count();
            same += common;
            if old == new {
                same_files += 1;
            } else {
                report(text, &old, &new);
            }
        }
        (files, same_files, old_total, same, new_total)
    }

    #[test]
    fn syntax_chunks_match_code_splitter_on_this_repository() {
        let (files, same_files, old, same, new) =
            compare_with_code_splitter(&own_sources(), 512, |_, _, _| {});
        eprintln!(
            "{same_files}/{files} files identical, {same}/{old} of CodeSplitter's chunks kept, {new} chunks"
        );
        assert!(same * 100 >= old * 99, "{same}/{old}");
    }

    #[test]
    fn long_docstrings_and_escapes_are_cut_as_code_splitter_cut_them() {
        let sentences = "This sentence says something. Another one follows it here! "
            .repeat(6)
            .replace("! T", "!\n    T");
        let texts = [
            format!(
                "def f(a):\n    \"\"\"{sentences}\n    \"\"\"\n    return a\n\n\ndef g():\n    pass\n"
            ),
            format!(
                "x = 1\nS = \"\"\"\\\n{sentences} C:\\\\Program Files \\n {sentences}\"\"\"\ny = 2\n"
            ),
            format!(
                "class A:\n    # {}\n    def m(self):\n        return 'a\\tb'\n",
                "word ".repeat(60)
            ),
            format!("s = '{}'\n", "é".repeat(300)),
        ];
        for text in &texts {
            for max in [40, 100, 200, 512] {
                let ours: Vec<Range<usize>> = chunks("python", text, max)
                    .iter()
                    .map(|c| c.offset..c.offset + c.body.len())
                    .collect();
                assert_eq!(
                    ours,
                    code_splitter_ranges("python", text, max),
                    "{max}: {text}"
                );
            }
        }
    }

    /// `CHUNKS_COMPARE_DIR=DIR cargo test -p tabby-index -- --ignored compare_chunks_in_dir`:
    /// the same comparison on the Python and Rust files under DIR that pass the quality filters;
    /// chunks of differing files are written to `CHUNKS_COMPARE_OUT` when set.
    #[test]
    #[ignore]
    fn compare_chunks_in_dir() {
        let dir = std::env::var("CHUNKS_COMPARE_DIR").expect("CHUNKS_COMPARE_DIR");
        let mut sources = Vec::new();
        let mut stack = vec![std::path::PathBuf::from(dir)];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                let language = match path.extension().and_then(|e| e.to_str()) {
                    Some("rs") => "rust",
                    Some("py") => "python",
                    _ if path.is_dir() => {
                        stack.push(path);
                        continue;
                    }
                    _ => continue,
                };
                // What the indexer would chunk.
                if let Ok(text) = std::fs::read_to_string(&path)
                    && crate::code::filter::quality_check(&text).is_ok()
                {
                    sources.push((language, text));
                }
            }
        }
        let mut out = String::new();
        let (files, same_files, old, same, new) =
            compare_with_code_splitter(&sources, 512, |text, old, new| {
                let old_set: std::collections::HashSet<_> = old.iter().cloned().collect();
                let new_set: std::collections::HashSet<_> = new.iter().cloned().collect();
                for r in old.iter().filter(|r| !new_set.contains(*r)).take(3) {
                    out += &format!(
                        "--- old only @{}\n{}\n",
                        text[..r.start].matches('\n').count() + 1,
                        &text[r.clone()]
                    );
                }
                for r in new.iter().filter(|r| !old_set.contains(*r)).take(3) {
                    out += &format!(
                        "+++ new only @{}\n{}\n",
                        text[..r.start].matches('\n').count() + 1,
                        &text[r.clone()]
                    );
                }
            });
        if let Ok(path) = std::env::var("CHUNKS_COMPARE_OUT") {
            std::fs::write(path, out).unwrap();
        }
        eprintln!(
            "{same_files}/{files} files identical, {same}/{old} of CodeSplitter's chunks kept, {new} chunks"
        );
    }

    #[test]
    fn oversized_leaves_are_cut_by_sentences_words_then_characters() {
        let long_string = format!("x = \"{}\"\n", "é".repeat(300));
        let text = format!("def f():\n    return 1\n\n{long_string}y = 2\n");
        let chunks = chunks("python", &text, 100);
        check_chunks(&text, &chunks, 100);
        assert_eq!(chunks[0].body, "def f():\n    return 1");
        assert!(chunks.len() >= 4, "{chunks:?}");
        assert!(chunks.last().unwrap().body.ends_with("y = 2"));
    }

    /// A generated expression of thousands of terms nests that deep in the syntax tree; the
    /// packer must not recurse per level (a 1 GB corpus of registry packages aborted the
    /// indexer with a stack overflow in a prepare worker).
    #[test]
    fn deeply_nested_syntax_is_chunked_without_deep_recursion() {
        let terms = vec!["\"abcdefgh\""; 20_000].join(" + ");
        let js = format!("var s = {terms};\nfunction after() {{ return s; }}\n");
        let python = format!("x = {}1{}\n", "(".repeat(3_000), ")".repeat(3_000));
        let handle = std::thread::Builder::new()
            // Well below the 2 MiB of a default thread: the depth must not matter at all.
            .stack_size(256 * 1024)
            .spawn(move || {
                (
                    analyze("javascript-typescript", &js, 512),
                    js,
                    analyze("python", &python, 512),
                    python,
                )
            })
            .unwrap();
        let (js_analysis, js, py_analysis, python) = handle.join().unwrap();
        check_chunks(&js, &js_analysis.chunks, 512);
        check_chunks(&python, &py_analysis.chunks, 512);
        assert!(js_analysis.chunks.len() > 100);
        assert!(
            js_analysis
                .chunks
                .last()
                .unwrap()
                .body
                .contains("function after")
        );
    }

    #[test]
    fn one_parse_gives_chunks_and_definitions() {
        let text = "class A:\n    def m(self):\n        pass\n\ndef f():\n    pass\n";
        let analysis = analyze("python", text, 512);
        assert_eq!(analysis.chunks, chunks("python", text, 512));
        assert_eq!(analysis.definitions, find_definitions("python", text));
        assert_eq!(analysis.chunks.len(), 1);
        assert_eq!(analysis.chunks[0].body, text.trim_end());
    }
}
