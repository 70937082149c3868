//! Outline candidates for completion: when the cursor follows `name.` or `path::`, what that
//! chain of names leads to — a module of the repository that the file imports (its top-level
//! definitions) or a type (its members) — written as the signature lines of those definitions,
//! so that the model sees the names it may write next. The type of a variable is read from the
//! prefix (`x: Type`, `x = Type(…)`, `x := &Type{…}`) or guessed from its name (`tokenizer` →
//! `Tokenizer`); every lookup stays within the request's source. When an outline does not fit
//! its budget, the members that the source uses most (not counting their definitions) stay.

use std::{
    collections::HashSet,
    sync::{Arc, OnceLock},
};

use tabby_common::api::code::{CodeOutline, CodeSearchError, CodeSearchQuery, ReceiverNames};
use tabby_index::code::{
    exports, imports,
    intelligence::{Tag, find_definitions},
    outline::{OutlineLine, Scope, outline},
};
use tantivy::Searcher;

use super::{
    CodeSearchService,
    generation_cache::PerGeneration,
    import_search::EditedFile,
    query,
    symbols::{self, SymbolUse},
};

/// Files whose parse is kept per searcher generation, and their bytes in all.
const MAX_CACHED_FILES: usize = 512;
const MAX_CACHED_BYTES: usize = 64 << 20;
/// Most names in a chain (`a.b.c.`) followed, and most bytes of one name (a longer one is no
/// name a definition has: the request's text is not searched with it).
const MAX_CHAIN: usize = 6;
const MAX_NAME: usize = 128;
/// Files a type's name is looked up in.
const MAX_TYPE_FILES: usize = 4;
/// Files of one module outlined (a Go package has several).
const MAX_MODULE_FILES: usize = 4;
/// Files of a Go package besides the type's own whose methods of the type are outlined.
const MAX_PACKAGE_FILES: usize = 16;

/// Per searcher generation: the text and definitions of files outlined.
pub struct OutlineCache {
    files: PerGeneration<Parsed>,
    /// How many chunks of a source use a member's name, by (source id, name).
    uses: PerGeneration<usize>,
    /// The type a file (as indexed) last annotates, assigns or constructs for a variable, by
    /// (source id, path and variable): a regex over a whole file, a few milliseconds in a
    /// large one, for each request after `variable.`.
    annotations: PerGeneration<Option<String>>,
    /// The other files of a Go package whose chunks name a type, by (source id, defining file
    /// and type name): an index search and up to 64 stored chunks read, for each request
    /// after `variable.` on a Go type.
    package_files: PerGeneration<Vec<String>>,
}

/// Names whose use counts are kept per searcher generation, at most.
const MAX_CACHED_USES: usize = 1 << 16;

impl Default for OutlineCache {
    fn default() -> Self {
        Self {
            files: PerGeneration::new(MAX_CACHED_FILES, MAX_CACHED_BYTES),
            uses: PerGeneration::new(MAX_CACHED_USES, MAX_CACHED_USES * 64),
            annotations: PerGeneration::new(MAX_CACHED_USES, MAX_CACHED_USES * 256),
            package_files: PerGeneration::new(MAX_CACHED_USES, MAX_CACHED_USES * 256),
        }
    }
}

struct Parsed {
    text: String,
    definitions: Vec<Tag>,
    /// The names the file offers as a module, read when first asked for.
    names: OnceLock<Option<Vec<String>>>,
}

impl OutlineCache {
    fn parsed(
        &self,
        service: &CodeSearchService,
        searcher: &Searcher,
        source_id: &str,
        language: &str,
        path: &str,
    ) -> Result<Arc<Parsed>, CodeSearchError> {
        self.files.get_or_make(
            searcher.generation().generation_id(),
            source_id,
            path,
            || {
                let text = service.source_text(searcher, source_id, path)?;
                let definitions = find_definitions(language, &text);
                Ok(Parsed {
                    text,
                    definitions,
                    names: OnceLock::new(),
                })
            },
            |parsed| parsed.text.len(),
        )
    }
}

/// The chain of names right before the cursor, and before the member name being typed there:
/// `x = self.md.parser.` and `x = self.md.parser.res` → [self, md, parser]; `crate::error::`
/// → [crate, error]; a constructor's call stands for its type (`Parser(src).`,
/// `new Parser(src).`, `Parser::new(src).` → [Parser]); `foo().` and a line not ending in an
/// access → none.
pub fn receiver_chain(prefix: &str) -> Option<Vec<String>> {
    let (mut rest, _) = access_before_cursor(prefix)?;
    let mut chain = Vec::new();
    if rest.ends_with(')') {
        rest = constructed_type(rest)?;
    }
    loop {
        let start = name_start(rest)?;
        let name = &rest[start..];
        if name.len() > MAX_NAME || name.chars().next().is_some_and(|c| c.is_ascii_digit()) {
            return None;
        }
        chain.push(name.to_string());
        rest = &rest[..start];
        if chain.len() > MAX_CHAIN {
            return None;
        }
        match strip_access(rest) {
            Some((before, _)) => rest = before,
            None => break,
        }
    }
    chain.reverse();
    Some(chain)
}

/// The cursor's line up to the access it ends with (`::`, `?.` or `.`, then maybe the start of
/// the member's name being typed), and that access; none when the line ends in no access.
fn access_before_cursor(prefix: &str) -> Option<(&str, &'static str)> {
    let line = prefix.rsplit('\n').next().unwrap_or(prefix);
    strip_access(line.trim_end_matches(|c: char| c.is_alphanumeric() || c == '_' || c == '$'))
}

/// `text` without the access it ends with (`::`, `?.` or `.`), and that access.
fn strip_access(text: &str) -> Option<(&str, &'static str)> {
    ["::", "?.", "."]
        .into_iter()
        .find_map(|access| Some((text.strip_suffix(access)?, access)))
}

/// Where the name that ends `text` starts; none when `text` does not end in one.
fn name_start(text: &str) -> Option<usize> {
    text.char_indices()
        .rev()
        .take_while(|(_, c)| c.is_alphanumeric() || *c == '_' || *c == '$')
        .last()
        .map(|(i, _)| i)
}

/// `text` ends in a call: the text up to and with the name of the type it constructs, if it is
/// one (`x = Parser(src)` → `x = Parser`, `Parser::new(a, b)` → `Parser`); none for a call
/// of a function (`foo(x)`) or brackets that do not balance on the line.
fn constructed_type(text: &str) -> Option<&str> {
    let mut depth = 0usize;
    let mut open = None;
    for (i, c) in text.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    open = Some(i);
                    break;
                }
            }
            _ => {}
        }
    }
    let callee = &text[..open?];
    let callee = callee.strip_suffix("::new").unwrap_or(callee);
    callee[name_start(callee)?..]
        .starts_with(|c: char| c.is_uppercase())
        .then_some(callee)
}

/// The type a variable holds, as `text` says it last: an annotation (`x: T`, `x: &mut T`,
/// Go's `x *T`), or an assignment from a constructor (`x = T(`, `x = new T(`, `x := &T{`,
/// `let x = T::new(`); qualified names count by their last part.
fn annotated_type(language: &str, text: &str, variable: &str) -> Option<String> {
    let name = regex::escape(variable);
    let qualified = r"(?:[A-Za-z_]\w*(?:\.|::))*";
    let mut patterns = vec![
        format!(r"\b{name}\s*:\s*&?\s*(?:mut\s+)?{qualified}([A-Z]\w*)"),
        format!(r"\b{name}\s*:?=\s*&?\s*(?:new\s+)?{qualified}([A-Z]\w*)\s*[(\{{:<]"),
    ];
    if language == "go" {
        patterns.push(format!(r"\b{name}\s+\*?{qualified}([A-Z]\w*)\b"));
    }
    let mut best: Option<(usize, String)> = None;
    for pattern in patterns {
        let Ok(re) = regex::Regex::new(&pattern) else {
            continue;
        };
        if let Some(c) = re.captures_iter(text).last()
            && let Some(m) = c.get(1)
            && best.as_ref().is_none_or(|(at, _)| m.start() > *at)
        {
            best = Some((m.start(), m.as_str().to_string()));
        }
    }
    best.map(|(_, t)| t)
}

/// `content_length` / `contentLength` → `ContentLength`.
fn pascal_case(name: &str) -> Option<String> {
    let mut out = String::new();
    for part in name.split('_').filter(|p| !p.is_empty()) {
        let mut chars = part.chars();
        let first = chars.next()?;
        out.extend(first.to_uppercase());
        out.push_str(chars.as_str());
    }
    (out.len() > 1).then_some(out)
}

/// Most files of one module whose names are read (a Go package's; the import reader lists at
/// most 16, so a package with 16 may have more).
const MAX_NAMED_FILES: usize = 15;

/// Largest edited file whose indexed text comes with the names after an access.
const MAX_INDEXED_TEXT: usize = 512 * 1024;

/// Whether the editor's text may bind `name` to something else than the module it imports:
/// some use of the word outside an import statement or a comment is in a binding's place —
/// after `let`, `const`, `for`, `as`, `def`, `fn`, … (`for util in`), before an assignment
/// (`util = …`, `x := …`, an arrow's `util =>`), in a parameter list or pattern (`def
/// f(util):`, `|ping| ping.0`, `if let Some((ping, _))`, `Service(route) => route.`, a
/// parameter on a line of its own). A word after a `.` is another name (`self.ping`), one
/// followed by an access (`.`, `::`, `?.`, maybe on the next line) or in quotes is the
/// module or text, and in TypeScript a word in a type's place (after `:`, `<`, `|`, `&`)
/// names a type; passing the module as a value (`setattr(tags, …)`) does not rebind it.
fn maybe_rebound(language: &str, text: &str, name: &str) -> bool {
    const BINDING_KEYWORDS: [&str; 17] = [
        "let",
        "const",
        "var",
        "for",
        "as",
        "mut",
        "ref",
        "def",
        "class",
        "fn",
        "function",
        "lambda",
        "global",
        "nonlocal",
        "struct",
        "enum",
        "interface",
    ];
    const PATTERN_LINES: [&str; 9] = [
        "def ", "fn ", "function", "lambda", "let ", "const ", "var ", "case ", "for ",
    ];
    let is_name_char = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    let types = imports::is_javascript_family(language);
    text.match_indices(name).any(|(at, _)| {
        let before = &text[..at];
        let line_before = before.rsplit('\n').next().unwrap_or_default();
        let rest = &text[at + name.len()..];
        let line_after = rest.split('\n').next().unwrap_or_default();
        let head = line_before.trim_start();
        // Import and re-export statements, and comment lines (a doc comment that says
        // `Duration`).
        if [
            "import ",
            "from ",
            "use ",
            "pub use ",
            "pub(crate) use ",
            "//",
            "/*",
            "*",
            "#",
        ]
        .iter()
        .any(|k| head.starts_with(k))
            || (head.starts_with("export ") && line_after.contains(" from "))
        {
            return false;
        }
        let previous = line_before.chars().next_back();
        if previous.is_some_and(|c| is_name_char(c) || matches!(c, '.' | '"' | '\'' | '`'))
            || rest.starts_with(is_name_char)
        {
            return false; // part of another word, another name's member, or quoted
        }
        let next = rest.trim_start();
        if next.starts_with('.') || next.starts_with("::") || next.starts_with("?.") {
            return false; // the module itself
        }
        let before_trimmed = line_before.trim_end();
        if types && before_trimmed.ends_with(|c: char| matches!(c, ':' | '<' | '|' | '&')) {
            return false;
        }
        let after = line_after.trim_start();
        if after.starts_with(':') && innermost_open_bracket(before) == Some('{') {
            return false; // an object's key or a struct's field: `{ runtimeFlags: f }`
        }
        let previous_word = before_trimmed
            .rsplit(|c: char| !is_name_char(c))
            .next()
            .unwrap_or_default();
        let closes = |s: &str| s.starts_with([',', ')', ':', '|', ']', '}', '=']);
        BINDING_KEYWORDS.contains(&previous_word)
            || (after.starts_with('=') && !after.starts_with("=="))
            || after.starts_with(":=")
            || (head.is_empty() && closes(after))
            || (PATTERN_LINES.iter().any(|k| line_before.contains(k)) && closes(after))
            || (line_after.contains("=>") && closes(after))
            || (before_trimmed.ends_with('|') && (after.starts_with('|') || after.starts_with(',')))
    })
}

/// The innermost bracket that `text` leaves open (within its last 4 KB), if any.
fn innermost_open_bracket(text: &str) -> Option<char> {
    let mut from = text.len().saturating_sub(4096);
    while !text.is_char_boundary(from) {
        from += 1;
    }
    let mut depth = 0usize;
    for c in text[from..].chars().rev() {
        match c {
            ')' | ']' | '}' => depth += 1,
            '(' | '[' | '{' if depth == 0 => return Some(c),
            '(' | '[' | '{' => depth -= 1,
            _ => {}
        }
    }
    None
}

/// The edited file's import statements as indexed, then those the editor's text holds (a
/// new import not indexed yet).
fn statements_in_view(indexed: &[String], language: &str, content: &str) -> Vec<String> {
    let mut statements = indexed.to_vec();
    statements.extend(imports::statements(language, query::bounded(content)));
    statements
}

/// Whether `statements` bind `name` with a namespace import (`import * as name from …`).
fn namespace_import(statements: &[String], name: &str) -> bool {
    statements.iter().any(|s| {
        s.trim_start().starts_with("import")
            && s.split("* as ").skip(1).any(|after| {
                after.starts_with(name)
                    && !after[name.len()..]
                        .starts_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$')
            })
    })
}

/// A member of what a chain of names leads to: the file that defines it, its name, the line
/// (0-based) that holds the name, and how many chunks of the source use the name (0 past the
/// first `MAX_COUNTED` names).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub path: String,
    pub name: String,
    pub line: Option<usize>,
    pub uses: usize,
}

/// What an outline shows, before it is cut to size.
enum Target {
    Module(Vec<String>),
    Type { name: String, files: Vec<String> },
}

/// What a target is looked up with: the edited file, its imports and the request.
struct Lookup<'a> {
    query: &'a CodeSearchQuery,
    language: &'a str,
    filepath: &'a str,
    searcher: &'a Searcher,
    paths: &'a imports::PathIndex,
    statements: &'a [String],
}

/// Most base classes of the enclosing class outlined after `self.` / `this.`.
const MAX_BASES: usize = 2;

impl CodeSearchService {
    /// The outline of what the chain of names before the cursor leads to, one entry per file,
    /// within `max_bytes` in all; none when the cursor does not follow a chain, or the chain
    /// leads nowhere in the repository. After a bare `self.` or `this.` it is the class whose
    /// body holds the cursor: its bases first (what it inherits from other files, which the
    /// editor's window does not show), then the class itself.
    pub fn receiver_outline(
        &self,
        query: &CodeSearchQuery,
        max_bytes: usize,
    ) -> Result<Vec<CodeOutline>, CodeSearchError> {
        if max_bytes == 0 {
            return Ok(vec![]);
        }
        let fitted = self.with_outlined(query, |lookup, outlined| {
            let uses = member_uses(lookup, &self.outlines.uses, &outlined, max_bytes);
            fit(
                outlined,
                max_bytes,
                Access::of(lookup.language, &query.content),
                &uses,
            )
        })?;
        Ok(fitted.unwrap_or_default())
    }

    /// The members of what the chain of names before the cursor leads to (the targets of
    /// [`Self::receiver_outline`], uncut): those the access reaches first (after a Rust
    /// `Type::`, its associated functions), each group the most used in the request's source
    /// first (equal ones in outline order), each name of a file once; empty without a chain or a target.
    /// Headers and lines that define no one name are left out. The members leg's input.
    pub fn receiver_members(
        &self,
        query: &CodeSearchQuery,
    ) -> Result<Vec<Member>, CodeSearchError> {
        let members = self.with_outlined(query, |lookup, outlined| {
            // With no room at all, every member's uses are counted.
            let uses = member_uses(lookup, &self.outlines.uses, &outlined, 0);
            let access = Access::of(lookup.language, &query.content);
            let mut members: Vec<(bool, Member)> = Vec::new();
            // (A Go type's outline may span 17 files of 400 lines.)
            let mut seen: HashSet<(&str, &str)> = HashSet::new();
            for ((path, lines), uses) in outlined.iter().zip(&uses) {
                for (line, &used) in lines.iter().zip(uses) {
                    if line.header || line.name.is_empty() || !seen.insert((path, &line.name)) {
                        continue;
                    }
                    let member = Member {
                        path: path.clone(),
                        name: line.name.clone(),
                        line: line.line,
                        uses: used,
                    };
                    members.push((access.prefers(line), member));
                }
            }
            // What the access reaches first (`Type::` an associated function), then by use.
            members.sort_by_key(|(preferred, m)| (!preferred, std::cmp::Reverse(m.uses)));
            members.into_iter().map(|(_, m)| m).collect()
        })?;
        Ok(members.unwrap_or_default())
    }

    /// The outlines (uncut) of what the chain of names before the cursor leads to, given to
    /// `then` with the lookup that found them; None when the cursor does not follow a chain or
    /// the file is not indexed. After a bare `self.` or `this.` it is the class whose body
    /// holds the cursor: its bases first, then the class itself.
    fn with_outlined<R>(
        &self,
        query: &CodeSearchQuery,
        then: impl FnOnce(&Lookup, Vec<(String, Vec<OutlineLine>)>) -> R,
    ) -> Result<Option<R>, CodeSearchError> {
        // Python's `super().` is a call no type's name starts: it stands for the bases.
        let chain = match receiver_chain(&query.content) {
            Some(chain) => chain,
            None if calls_super(&query.content) => vec!["super".to_string()],
            None => return Ok(None),
        };
        let Some(EditedFile {
            language,
            filepath,
            searcher,
            paths,
            imports: file,
        }) = self.edited_file(query)?
        else {
            return Ok(None);
        };
        let statements = statements_in_view(&file.statements, &language, &query.content);
        let lookup = Lookup {
            query,
            language: &language,
            filepath: &filepath,
            searcher: &searcher,
            paths: &paths,
            statements: &statements,
        };
        let targets: Vec<Target> = match chain.as_slice() {
            [owner] if matches!(owner.as_str(), "self" | "this") => {
                self.enclosing_class_targets(&lookup, true)
            }
            [owner] if owner == "super" => self.enclosing_class_targets(&lookup, false),
            _ => self.chain_target(&lookup, &chain).into_iter().collect(),
        };
        let mut outlined: Vec<(String, Vec<OutlineLine>)> = Vec::new();
        for target in targets {
            for (path, lines) in self.outline_target(&lookup, target) {
                // One type's outline once (a base named twice, or the class itself).
                if !outlined
                    .iter()
                    .any(|(p, l)| *p == path && l.first() == lines.first())
                {
                    outlined.push((path, lines));
                }
            }
        }
        Ok(Some(then(&lookup, outlined)))
    }

    /// After a chain of names before the cursor: every name that may follow it, when the
    /// chain leads to a module of the repository (through a namespace import in
    /// JavaScript/TypeScript) and the module's files name all they offer
    /// ([`exports::module_names`]; `names` is none otherwise: a type, `self.`, a value, a
    /// module that re-exports a wildcard, a file that cannot be read), and the edited file's
    /// indexed text (when the index holds it, at most [`MAX_INDEXED_TEXT`] bytes). None
    /// without a chain. The names are not filtered by what is typed after the access.
    pub fn receiver_names(
        &self,
        query: &CodeSearchQuery,
    ) -> Result<Option<ReceiverNames>, CodeSearchError> {
        let Some(chain) = receiver_chain(&query.content) else {
            return Ok(None);
        };
        let Some(edited) = self.edited_file(query)? else {
            return Ok(None);
        };
        let indexed_text = self
            .outlines
            .parsed(
                self,
                &edited.searcher,
                &query.source_id,
                &edited.language,
                &edited.filepath,
            )
            .ok()
            .filter(|parsed| !parsed.text.is_empty() && parsed.text.len() <= MAX_INDEXED_TEXT)
            .map(|parsed| parsed.text.clone());
        let names = self.module_names(query, &chain, &edited)?;
        Ok(Some(ReceiverNames {
            names,
            indexed_text,
        }))
    }

    /// Every name the module that `chain` leads to offers, when it is one and says them all.
    fn module_names(
        &self,
        query: &CodeSearchQuery,
        chain: &[String],
        edited: &EditedFile,
    ) -> Result<Option<Vec<String>>, CodeSearchError> {
        let EditedFile {
            language,
            filepath,
            searcher,
            paths,
            imports: file,
        } = edited;
        if matches!(chain[0].as_str(), "self" | "this" | "super") {
            return Ok(None);
        }
        if maybe_rebound(language, query::bounded(&query.content), &chain[0]) {
            return Ok(None);
        }
        let statements = statements_in_view(&file.statements, language, &query.content);
        let names: Vec<&str> = chain.iter().map(String::as_str).collect();
        let Some(bound) = imports::bound_module(language, filepath, &statements, &names, paths)
        else {
            return Ok(None);
        };
        // A default import or `require` binds whatever the module chose, not its exports.
        if !bound.rest.is_empty()
            || (imports::is_javascript_family(language)
                && !namespace_import(&statements, &chain[0]))
            || bound.files.is_empty()
            || bound.files.len() > MAX_NAMED_FILES
        {
            return Ok(None);
        }
        let mut all: Vec<String> = Vec::new();
        for path in &bound.files {
            let parsed = self
                .outlines
                .parsed(self, searcher, &query.source_id, language, path)?;
            let names = parsed
                .names
                .get_or_init(|| exports::module_names(language, path, &parsed.text));
            match names {
                Some(names) => all.extend(names.iter().cloned()),
                None => return Ok(None),
            }
        }
        all.sort();
        all.dedup();
        Ok(Some(all))
    }

    /// The edited file as indexed, parsed (cached per searcher generation; none when it
    /// cannot be read).
    fn indexed_file(&self, lookup: &Lookup) -> Option<Arc<Parsed>> {
        self.outlines
            .parsed(
                self,
                lookup.searcher,
                &lookup.query.source_id,
                lookup.language,
                lookup.filepath,
            )
            .ok()
    }

    /// The enclosing class's bases (each as its own chain of names would lead), then, with
    /// `itself`, the class.
    fn enclosing_class_targets(&self, lookup: &Lookup, itself: bool) -> Vec<Target> {
        let prefix = query::bounded(&lookup.query.content);
        let class = enclosing_class(lookup.language, prefix).or_else(|| {
            let whole = self.indexed_file(lookup)?;
            let above = text_above_cursor(prefix, &whole.text)?;
            enclosing_class(lookup.language, &above)
        });
        let Some(class) = class else {
            return Vec::new();
        };
        let mut targets: Vec<Target> = class
            .bases
            .iter()
            .take(MAX_BASES)
            .filter_map(|base| {
                let chain: Vec<String> = base.split('.').map(str::to_string).collect();
                self.chain_target(lookup, &chain)
            })
            .filter(|t| matches!(t, Target::Type { .. }))
            .collect();
        if itself {
            targets.push(Target::Type {
                name: class.name,
                files: vec![lookup.filepath.to_string()],
            });
        }
        targets
    }

    /// Where a chain of names leads: a module the file imports, a type of it, or a type the
    /// file annotates, constructs or names.
    fn chain_target(&self, lookup: &Lookup, chain: &[String]) -> Option<Target> {
        let names: Vec<&str> = chain.iter().map(String::as_str).collect();
        if let Some(bound) = imports::bound_module(
            lookup.language,
            lookup.filepath,
            lookup.statements,
            &names,
            lookup.paths,
        ) {
            return match bound.rest.as_slice() {
                [] => Some(Target::Module(bound.files)),
                [name] => Some(Target::Type {
                    name: name.clone(),
                    files: bound.files,
                }),
                _ => None,
            };
        }
        let last = chain.last().map(String::as_str).unwrap_or_default();
        let name = if last.starts_with(|c: char| c.is_uppercase()) {
            last.to_string()
        } else if matches!(last, "self" | "this" | "super") {
            return None;
        } else {
            // `self.x.` → what the prefix assigns to `self.x` or `x`.
            let variable = match chain {
                [owner, field] if matches!(owner.as_str(), "self" | "this") => {
                    format!("{owner}.{field}")
                }
                _ => last.to_string(),
            };
            // The prefix first, then the whole file as indexed (an attribute is often
            // assigned in a constructor far above the cursor).
            let prefix = query::bounded(&lookup.query.content);
            let said = |text: &str| {
                annotated_type(lookup.language, text, &variable)
                    .or_else(|| annotated_type(lookup.language, text, last))
            };
            let in_file = || {
                let key = format!("{}\0{variable}\0{last}", lookup.filepath);
                let found = self
                    .outlines
                    .annotations
                    .get_or_make::<std::convert::Infallible>(
                        lookup.searcher.generation().generation_id(),
                        &lookup.query.source_id,
                        &key,
                        || Ok(self.indexed_file(lookup).and_then(|file| said(&file.text))),
                        |_| 64 + key.len(),
                    );
                found.ok().and_then(|t| (*t).clone())
            };
            said(prefix)
                .or_else(in_file)
                .or_else(|| pascal_case(last))?
        };
        Some(Target::Type {
            name,
            files: vec![],
        })
    }

    /// A target's outline lines, per file.
    fn outline_target(&self, lookup: &Lookup, target: Target) -> Vec<(String, Vec<OutlineLine>)> {
        let (language, searcher, source_id) =
            (lookup.language, lookup.searcher, &lookup.query.source_id);
        match target {
            Target::Module(files) => files
                .iter()
                .take(MAX_MODULE_FILES)
                .filter_map(|path| {
                    let parsed = self
                        .outlines
                        .parsed(self, searcher, source_id, language, path)
                        .ok()?;
                    let defined =
                        outline(language, &parsed.text, &parsed.definitions, Scope::Module)?;
                    // What it imports from the repository's own modules: a package's
                    // `__init__.py`, an `index.ts` or a `mod.rs` offers those names.
                    let facade = defined.iter().filter(|l| !l.private).count() < 3;
                    let offered: Vec<_> =
                        imports::header_statements(language, path, &parsed.text, lookup.paths)
                            .into_iter()
                            .filter(|s| s.internal)
                            .collect();
                    let mut lines: Vec<OutlineLine> = imports::compact_statements(
                        language,
                        offered,
                        imports::MERGED_IMPORT_WIDTH,
                    )
                    .into_iter()
                    .map(|s| OutlineLine {
                        text: s.text,
                        header: false,
                        private: !facade,
                        name: String::new(),
                        line: None,
                    })
                    .collect();
                    lines.extend(defined);
                    Some((path.clone(), lines))
                })
                .collect(),
            Target::Type { name, files } => {
                let mut candidates = files;
                if let Ok(found) =
                    self.symbol_chunks(source_id, &name, SymbolUse::Definition, 4 * MAX_TYPE_FILES)
                {
                    // Files of the edited file's language: their definitions are parsed as such.
                    for doc in found {
                        let same_language =
                            self.languages.get(&doc.language).canonical_name() == language;
                        if same_language && !candidates.contains(&doc.filepath) {
                            candidates.push(doc.filepath);
                        }
                    }
                }
                let defined = candidates.iter().take(MAX_TYPE_FILES).find_map(|path| {
                    let parsed = self
                        .outlines
                        .parsed(self, searcher, source_id, language, path)
                        .ok()?;
                    let lines = outline(
                        language,
                        &parsed.text,
                        &parsed.definitions,
                        Scope::Type(&name),
                    )?;
                    Some((path.clone(), lines))
                });
                let Some((path, lines)) = defined else {
                    return vec![];
                };
                let methods = match language {
                    "go" => self.go_methods_elsewhere(lookup, &name, &path),
                    _ => vec![],
                };
                std::iter::once((path, lines)).chain(methods).collect()
            }
        }
    }

    /// Go: the methods of type `name` declared in the other files of its package (the
    /// directory of `defining`, test files left out), one outline per file in path order: of
    /// the files whose chunks name the type best, at most [`MAX_PACKAGE_FILES`].
    fn go_methods_elsewhere(
        &self,
        lookup: &Lookup,
        name: &str,
        defining: &str,
    ) -> Vec<(String, Vec<OutlineLine>)> {
        let (searcher, source_id) = (lookup.searcher, &lookup.query.source_id);
        let package = defining.rsplit_once('/').map_or("", |(dir, _)| dir);
        let key = format!("{defining}\0{name}");
        let files = self.outlines.package_files.get_or_make(
            searcher.generation().generation_id(),
            source_id,
            &key,
            || {
                let chunks = self.symbol_chunks(
                    source_id,
                    name,
                    SymbolUse::Occurrence,
                    4 * MAX_PACKAGE_FILES,
                )?;
                let mut files: Vec<String> = Vec::new();
                for doc in chunks {
                    let path = doc.filepath;
                    let dir = path.rsplit_once('/').map_or("", |(dir, _)| dir);
                    if dir == package
                        && path != defining
                        && path.ends_with(".go")
                        && !path.ends_with("_test.go")
                        && !files.contains(&path)
                    {
                        files.push(path);
                    }
                }
                files.truncate(MAX_PACKAGE_FILES);
                files.sort();
                Ok::<_, CodeSearchError>(files)
            },
            |files| key.len() + files.iter().map(|f| f.len() + 24).sum::<usize>(),
        );
        let Ok(files) = files else {
            return vec![];
        };
        files
            .iter()
            .filter_map(|path| {
                let parsed = (self.outlines)
                    .parsed(self, searcher, source_id, lookup.language, path)
                    .ok()?;
                let lines = outline(
                    lookup.language,
                    &parsed.text,
                    &parsed.definitions,
                    Scope::Methods(name),
                )?;
                Some((path.clone(), lines))
            })
            .collect()
    }
}

/// Most member names whose uses are counted for one outline (each count is one search of the
/// index, kept for the searcher's generation); members past them count 0.
const MAX_COUNTED: usize = 64;

/// For each outline line, how many chunks of the request's source use the name it defines,
/// when the outlines do not all fit in `max_bytes` (else 0 for all: nothing is left out). A
/// name's later lines (overloads: Python's `@overload` stubs, a TypeScript signature list)
/// count 0, so one much-used name does not crowd out the others. A line that defines no one
/// name (a facade's import statement) ranks first, where file order put it; headers count 0
/// (they go in first anyway).
fn member_uses(
    lookup: &Lookup,
    cache: &PerGeneration<usize>,
    outlined: &[(String, Vec<OutlineLine>)],
    max_bytes: usize,
) -> Vec<Vec<usize>> {
    let mut uses: Vec<Vec<usize>> = outlined.iter().map(|(_, l)| vec![0; l.len()]).collect();
    let total: usize = (outlined.iter().flat_map(|(_, l)| l))
        .map(|l| l.text.len() + 1)
        .sum();
    if total <= max_bytes {
        return uses;
    }
    let mut seen: HashSet<&str> = Default::default();
    for (i, (_, lines)) in outlined.iter().enumerate() {
        for (j, line) in lines.iter().enumerate() {
            uses[i][j] = if line.header {
                0
            } else if line.name.is_empty() {
                usize::MAX
            } else if !seen.insert(&line.name) || seen.len() > MAX_COUNTED {
                0
            } else {
                let (searcher, source_id) = (lookup.searcher, &lookup.query.source_id);
                let count = cache.get_or_make::<std::convert::Infallible>(
                    searcher.generation().generation_id(),
                    source_id,
                    &line.name,
                    || Ok(symbols::identifier_uses(searcher, source_id, &line.name)),
                    |_| 64 + line.name.len(),
                );
                count.map_or(0, |c| *c)
            };
        }
    }
    uses
}

/// Whether the cursor follows Python's `super().` (maybe with the member's name begun).
fn calls_super(prefix: &str) -> bool {
    access_before_cursor(prefix).is_some_and(|(rest, access)| {
        access == "."
            && rest.strip_suffix("super()").is_some_and(|before| {
                !before.ends_with(|c: char| c.is_alphanumeric() || matches!(c, '_' | '$' | '.'))
            })
    })
}

/// The class (in Rust the type of the `impl`) whose body holds the end of `text`, and the
/// names of its bases as written (`TestCase`, `util.Processor`; none in Rust).
#[derive(Debug, PartialEq, Eq)]
struct Class {
    name: String,
    bases: Vec<String>,
}

/// Lines read back from the cursor for the enclosing class's header.
const MAX_LINES_UP: usize = 5_000;

/// The class whose body holds the end of `text` (the text before the cursor): walking back
/// from the cursor's line, each line less indented than the lines after it opens the block
/// that holds them; the first of those that is a class header (or a Rust `impl`) is it. None
/// when a line at the left margin that is no header comes first (a top-level function). A
/// line of brackets alone (the `{` of a header written on several lines) opens nothing.
fn enclosing_class(language: &str, text: &str) -> Option<Class> {
    let lines: Vec<&str> = text.rsplit('\n').take(MAX_LINES_UP).collect();
    let (cursor, above) = lines.split_first()?;
    let indent = |line: &str| line.len() - line.trim_start().len();
    let brackets = |line: &str| line.trim().chars().all(|c| "{}()[];,:".contains(c));
    // The lines of a string over several lines (a test's expected text) say nothing of the
    // code's blocks: read back, a line with an odd number of a string delimiter opens or
    // closes one.
    let delimiters: &[&str] = match language {
        "python" => &["\"\"\"", "'''"],
        js if imports::is_javascript_family(js) => &["`"],
        _ => &[],
    };
    let mut in_string: Option<&str> = None;
    let mut bound = indent(cursor);
    for (i, line) in above.iter().enumerate() {
        let toggles = |d: &str| line.matches(d).count() % 2 == 1;
        match in_string {
            // Its first line: code before the string.
            Some(d) if toggles(d) => in_string = None,
            Some(_) => continue,
            None => {
                in_string = delimiters.iter().copied().find(|d| toggles(d));
                if in_string.is_some() {
                    continue;
                }
            }
        }
        if brackets(line) || indent(line) >= bound {
            continue;
        }
        // A header may go on over the next lines (`class A<T>\n    extends B\n{`), which
        // the walk has passed: join it up to the line that opens its body.
        let mut header = line.trim().to_string();
        let opens_type = header.starts_with("impl")
            || header.starts_with("unsafe impl")
            || header.split_whitespace().any(|w| w == "class");
        for next in above[..i]
            .iter()
            .rev()
            .take(HEADER_LINES * usize::from(opens_type))
        {
            if header.ends_with(':') || header.contains('{') {
                break;
            }
            header.push(' ');
            header.push_str(next.trim());
        }
        if let Some(class) = class_header(language, &header) {
            return Some(class);
        }
        bound = indent(line);
        if bound == 0 {
            return None;
        }
    }
    None
}

/// Most lines a class header is read over.
const HEADER_LINES: usize = 6;

/// The class a header line opens, with its bases.
fn class_header(language: &str, line: &str) -> Option<Class> {
    static PYTHON: OnceLock<regex::Regex> = OnceLock::new();
    static CLASS: OnceLock<regex::Regex> = OnceLock::new();
    static RUST: OnceLock<regex::Regex> = OnceLock::new();
    let name = |c: &regex::Captures, i: usize| c.get(i).map(|m| m.as_str().to_string());
    match language {
        "python" => {
            let re = PYTHON.get_or_init(|| {
                regex::Regex::new(r"^class\s+([A-Za-z_]\w*)\s*(?:\(([^)]*)\))?\s*:").unwrap()
            });
            let c = re.captures(line)?;
            let bases = c
                .get(2)
                .map(|m| m.as_str())
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|b| {
                    !b.is_empty()
                        && !b.contains('=')
                        && b.chars()
                            .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
                })
                .map(str::to_string)
                .collect();
            Some(Class {
                name: name(&c, 1)?,
                bases,
            })
        }
        "rust" => {
            let re = RUST.get_or_init(|| {
                regex::Regex::new(
                    r"^(?:unsafe\s+)?impl\b(?:<[^{]*?>)?\s+(?:[\w:]+(?:<[^{]*?>)?\s+for\s+)?(?:[\w]+::)*([A-Z]\w*)",
                )
                .unwrap()
            });
            let c = re.captures(line)?;
            Some(Class {
                name: name(&c, 1)?,
                bases: Vec::new(),
            })
        }
        "go" => None,
        _ => {
            // JavaScript, TypeScript, Java, Kotlin, C#, PHP: `class Name<T> extends Base`.
            let re = CLASS.get_or_init(|| {
                regex::Regex::new(
                    r"\bclass\s+([A-Za-z_$][\w$]*)(?:\s*<[^{]*?>)?(?:\s+extends\s+([A-Za-z_$][\w$.]*))?",
                )
                .unwrap()
            });
            let c = re.captures(line)?;
            Some(Class {
                name: name(&c, 1)?,
                bases: name(&c, 2).into_iter().collect(),
            })
        }
    }
}

/// Lines of the indexed file a cursor is placed in, and lines above the cursor tried.
const MAX_PLACED_LINES: usize = 50_000;
const PROBES: usize = 20;

/// The indexed file's text (at most its MAX_LINES_UP lines) down to the line the editor's cursor is on, found by the nearest
/// line above the cursor that the indexed text holds once; none when no such line is found
/// (a new file, or one that changed too much).
fn text_above_cursor(prefix: &str, whole: &str) -> Option<String> {
    let mut above: Vec<&str> = prefix.split('\n').collect();
    let cursor = above.pop()?;
    // Bounded per keystroke: a file's first MAX_PLACED_LINES lines, PROBES lines tried.
    let indexed: Vec<&str> = whole.lines().take(MAX_PLACED_LINES).collect();
    for (distance, line) in above.iter().rev().enumerate().take(PROBES) {
        let probe = line.trim();
        if probe.len() < 8 {
            continue;
        }
        let mut at = indexed
            .iter()
            .enumerate()
            .filter(|(_, l)| l.trim() == probe);
        let (Some((i, _)), None) = (at.next(), at.next()) else {
            continue;
        };
        // The indexed lines to the probe, the editor's lines after it, and the cursor's line.
        // (No more than the walk up to the header reads.)
        let mut text: Vec<&str> = indexed[(i + 1).saturating_sub(MAX_LINES_UP)..=i].to_vec();
        text.extend(&above[above.len() - distance..]);
        text.push(cursor);
        return Some(text.join("\n"));
    }
    None
}

/// Which members the access before the cursor reaches first. In Rust `Type::` calls
/// associated functions (`Error::new_closed()`), not methods (`fn is_parse(&self)`); a
/// value's `.` reaches both methods and fields, so it keeps every member (preferring methods
/// there lost two callees on the hyper set with the 0.5B model: README).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// Any member.
    Any,
    /// Members without a `self` parameter first.
    Associated,
}

impl Access {
    /// The access the prefix ends with, for `language`.
    fn of(language: &str, prefix: &str) -> Self {
        match access_before_cursor(prefix) {
            Some((_, "::")) if language == "rust" => Access::Associated,
            _ => Access::Any,
        }
    }

    /// Whether `line` (an outline line) is a member this access reaches first.
    fn prefers(self, line: &OutlineLine) -> bool {
        match self {
            Access::Any => true,
            Access::Associated => !takes_self(&line.text),
        }
    }
}

/// Whether a Rust signature line's first parameter is `self` (`&self`, `&'a mut self`,
/// `mut self`, `self: Pin<&mut Self>`).
fn takes_self(line: &str) -> bool {
    // After the function's name, not a visibility's `pub(crate)`.
    let signature = line.find("fn ").map_or(line, |at| &line[at..]);
    let Some((_, params)) = signature.split_once('(') else {
        return false;
    };
    let first = params.split([',', ')']).next().unwrap_or_default().trim();
    let first = first.split(':').next().unwrap_or_default().trim();
    first == "self" || first.ends_with(" self") || first.ends_with("&self")
}

/// The outlines cut to `max_bytes` in all (each line with its newline): headers first, then
/// the members `access` reaches (public ones, then private ones), then the others the same
/// way, each group by `uses` (the most used first; equal ones in file order); lines are
/// written in file order. An outline left with no member line is dropped.
fn fit(
    outlines: Vec<(String, Vec<OutlineLine>)>,
    max_bytes: usize,
    access: Access,
    uses: &[Vec<usize>],
) -> Vec<CodeOutline> {
    let mut used = 0;
    let mut keep: Vec<Vec<bool>> = outlines.iter().map(|(_, l)| vec![false; l.len()]).collect();
    let member = |l: &OutlineLine, preferred: bool, private: bool| {
        !l.header && access.prefers(l) == preferred && l.private == private
    };
    let passes: [&dyn Fn(&OutlineLine) -> bool; 5] = [
        &|l| l.header,
        &|l| member(l, true, false),
        &|l| member(l, true, true),
        &|l| member(l, false, false),
        &|l| member(l, false, true),
    ];
    let mut order: Vec<(usize, usize)> = (outlines.iter().enumerate())
        .flat_map(|(i, (_, lines))| (0..lines.len()).map(move |j| (i, j)))
        .collect();
    let used_by = |i: usize, j: usize| uses.get(i).and_then(|u| u.get(j)).copied();
    order.sort_by_key(|&(i, j)| std::cmp::Reverse(used_by(i, j).unwrap_or(0)));
    for pass in passes {
        for &(i, j) in &order {
            let line = &outlines[i].1[j];
            let cost = line.text.len() + 1;
            if pass(line) && !keep[i][j] && used + cost <= max_bytes {
                keep[i][j] = true;
                used += cost;
            }
        }
    }
    outlines
        .into_iter()
        .zip(keep)
        .filter_map(|((filepath, lines), keep)| {
            let kept: Vec<&OutlineLine> = lines
                .iter()
                .zip(&keep)
                .filter(|(_, k)| **k)
                .map(|(l, _)| l)
                .collect();
            if !kept.iter().any(|l| !l.header) {
                return None;
            }
            let body: String = kept.iter().map(|l| format!("{}\n", l.text)).collect();
            Some(CodeOutline { filepath, body })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_name_is_rebound_only_in_a_binding_s_place() {
        let rebound = |language: &str, text: &str, name: &str| maybe_rebound(language, text, name);
        for (language, text, name) in [
            ("rust", "let f = |ping| ping.0.clone();\nping.", "ping"),
            (
                "rust",
                "if let Some((ping, _)) = &self.ping {\n    ping.",
                "ping",
            ),
            (
                "rust",
                "Fallback::Default(route) | Fallback::Service(route) => route.",
                "route",
            ),
            ("rust", "fn f(ping: &Ponger) {\n    ping.", "ping"),
            ("python", "for util in items:\n    util.", "util"),
            ("python", "def f(util):\n    return util.", "util"),
            ("python", "def f(\n    util,\n):\n    return util.", "util"),
            ("python", "with open(p) as util:\n    util.", "util"),
            ("python", "util = load()\nutil.", "util"),
            ("go", "util := load()\nutil.", "util"),
            (
                "typescript",
                "const f = (Duration: number) =>\n  Duration.",
                "Duration",
            ),
            (
                "typescript",
                "const { Duration } = x\nDuration.",
                "Duration",
            ),
            ("typescript", "items.map(Duration => Duration.", "Duration"),
        ] {
            assert!(rebound(language, text, name), "{text:?}");
        }
        for (language, text, name) in [
            (
                "python",
                "import util\nx = util.parse(t)\nself.util = 1\ny = util.",
                "util",
            ),
            (
                "python",
                "monkeypatch.setattr(tags, \"name\", f)\ntags.",
                "tags",
            ),
            ("python", "d = {\"version\": 1}\nversion.", "version"),
            ("python", "# the util module\nutil.", "util"),
            (
                "typescript",
                "/**\n * Adds a `Duration`.\n */\nconst f = (d: number): Duration =>\n  Duration.",
                "Duration",
            ),
            (
                "typescript",
                "const x: Record<string, Option.Option<number>> = core\n  .pipe(\n  core.",
                "core",
            ),
            (
                "rust",
                "use crate::proto::ping;\nlet p = ping::channel();\nping::",
                "ping",
            ),
            (
                "typescript",
                "return {\n  runtimeFlags: defaultFlags,\n  x: runtimeFlags.",
                "runtimeFlags",
            ),
            (
                "typescript",
                "const { Duration: D } = x\nDuration.",
                "Duration",
            ),
        ] {
            assert!(!rebound(language, text, name), "{text:?}");
        }
    }

    fn chain(s: &str) -> Option<Vec<&str>> {
        // Leaked for the comparison's convenience in tests only.
        receiver_chain(s).map(|c| {
            c.into_iter()
                .map(|n| &*Box::leak(n.into_boxed_str()))
                .collect()
        })
    }

    #[test]
    fn chains_before_the_cursor() {
        assert_eq!(chain("x = 1\n    y = util."), Some(vec!["util"]));
        assert_eq!(
            chain("    y = util.form"),
            Some(vec!["util"]),
            "a member being typed"
        );
        assert_eq!(chain("    y = util"), None);
        assert_eq!(
            chain("        self.md.parser."),
            Some(vec!["self", "md", "parser"])
        );
        assert_eq!(
            chain("    Poll::Ready(Err(crate::Error::"),
            Some(vec!["crate", "Error"])
        );
        assert_eq!(chain("    a?.b?."), Some(vec!["a", "b"]));
        assert_eq!(chain("    foo()."), None);
        assert_eq!(chain("    return bar(x)."), None);
        // A constructor's call stands for its type.
        assert_eq!(chain("    return Parser(src)."), Some(vec!["Parser"]));
        assert_eq!(
            chain("    return Parser(f(src), (1, 2))._parse"),
            Some(vec!["Parser"])
        );
        assert_eq!(chain("    const t = new Date()."), Some(vec!["Date"]));
        assert_eq!(
            chain("    p = items.Parser(src)."),
            Some(vec!["items", "Parser"])
        );
        assert_eq!(chain("    let b = Builder::new(1)."), Some(vec!["Builder"]));
        assert_eq!(chain("    let b = Builder::new()."), Some(vec!["Builder"]));
        assert_eq!(chain("    x = a)."), None, "brackets that do not balance");
        assert_eq!(chain("    x = (Parser)."), None);
        assert_eq!(chain("    x = "), None);
        assert_eq!(chain("    1."), None);
        assert_eq!(chain("a.b.c.d.e.f.g.h."), None, "bounded");
        let long = format!("    {}.", "x".repeat(100_000));
        assert_eq!(chain(&long), None, "a name no definition has");
    }

    fn class(language: &str, text: &str) -> Option<(String, Vec<String>)> {
        enclosing_class(language, text).map(|c| (c.name, c.bases))
    }

    #[test]
    fn the_class_around_the_cursor() {
        let owned = |name: &str, bases: &[&str]| {
            Some((
                name.to_string(),
                bases.iter().map(|b| b.to_string()).collect(),
            ))
        };
        let python = "import x\n\n\nclass AdmonitionProcessor(BlockProcessor, util.Mixin, metaclass=Meta):\n    RE = 1\n\n    def run(self, parent):\n        if x:\n            y = 2\n\n        sibling = self.";
        assert_eq!(
            class("python", python),
            owned("AdmonitionProcessor", &["BlockProcessor", "util.Mixin"])
        );
        assert_eq!(
            class("python", "class Plain:\n    def f(self):\n        self."),
            owned("Plain", &[])
        );
        assert_eq!(
            class(
                "python",
                "class A(B):\n    pass\n\n\ndef helper(x):\n    return x."
            ),
            None,
            "a top-level function's body is in no class"
        );
        assert_eq!(
            class("python", "        self."),
            None,
            "no header above the cursor"
        );
        assert_eq!(
            class(
                "typescript",
                "export default class ObservableValue<T> extends Atom implements IObservable {\n    get() {\n        return this."
            ),
            owned("ObservableValue", &["Atom"])
        );
        assert_eq!(
            class(
                "rust",
                "impl<T: Send> fmt::Debug for Sender<T> {\n    fn fmt(&self) {\n        self."
            ),
            owned("Sender", &[])
        );
        assert_eq!(
            class(
                "rust",
                "impl Connection {\n    pub fn close(&mut self) {\n        self."
            ),
            owned("Connection", &[])
        );
        assert_eq!(class("go", "func (s *Server) Run() {\n\ts."), None);
        // A string over several lines, less indented than the code around it.
        assert_eq!(
            class(
                "python",
                "class TestTableBlocks(TestCase):\n\n    def test_empty_cells(self):\n        \"\"\"Empty cells.\"\"\"\n\n        text = \"\"\"\n   | Second Header\n------------- | -----\n\"\"\"\n\n        self."
            ),
            owned("TestTableBlocks", &["TestCase"])
        );
        assert_eq!(
            class(
                "typescript",
                "class Store extends Base {\n    render() {\n        const t = `\n<div>\n`\n        this."
            ),
            owned("Store", &["Base"])
        );
        // A header over several lines, its body's bracket on a line of its own.
        assert_eq!(
            class(
                "typescript",
                "export class ObservableValue<T>\n    extends Atom\n    implements IObservableValue<T>\n{\n    hasUnreportedChange_ = false\n\n    setNewValue_(newValue: T) {\n        this."
            ),
            owned("ObservableValue", &["Atom"])
        );
        assert_eq!(
            class(
                "python",
                "class Long(\n    Base,\n    mixins.Other,\n):\n    def f(self):\n        self."
            ),
            owned("Long", &["Base", "mixins.Other"])
        );
        // Bounded: a long file without a header is read back at most MAX_LINES_UP lines.
        let long = format!(
            "class A:\n{}    def f(self):\n        self.",
            "    x = 1\n".repeat(MAX_LINES_UP + 10)
        );
        assert_eq!(class("python", &long), None);
    }

    #[test]
    fn super_calls() {
        assert!(calls_super("        super()."));
        assert!(calls_super("        return super().__ini"));
        assert!(!calls_super("        x.super()."), "a method named super");
        assert!(!calls_super("        super()"));
        assert!(!calls_super("        not_super()."));
        assert_eq!(chain("        super."), Some(vec!["super"]));
    }

    #[test]
    fn the_indexed_file_shows_the_header_above_the_window() {
        let whole = "from b import Base\n\n\nclass Mine(Base):\n    def one(self):\n        return 1\n\n    def run(self, parent):\n        old = self.one()\n        return old\n";
        // The editor's window starts inside the method; its file has changed since indexing.
        let prefix = "    def run(self, parent):\n        new = 2\n        x = self.";
        let above = text_above_cursor(prefix, whole).unwrap();
        assert!(above.starts_with("from b import Base\n\n\nclass Mine(Base):"));
        assert!(above.ends_with("    def run(self, parent):\n        new = 2\n        x = self."));
        assert_eq!(
            class("python", &above),
            Some(("Mine".into(), vec!["Base".into()]))
        );
        // A line the indexed text holds twice, or not at all, does not place the cursor.
        assert!(
            text_above_cursor(
                "        return old\n        self.",
                "        return old\n        return old\n"
            )
            .is_none()
        );
        assert!(text_above_cursor("    def brand_new(self):\n        self.", whole).is_none());
        // Bounded: a line past the first MAX_PLACED_LINES of a file is not looked for.
        let huge = format!(
            "{}class Far(Base):\n    def run(self, parent):\n",
            "x = 1\n".repeat(MAX_PLACED_LINES)
        );
        assert!(text_above_cursor("    def run(self, parent):\n        self.", &huge).is_none());
    }

    #[test]
    fn rust_paths_reach_associated_functions_first() {
        assert!(takes_self("    pub fn is_parse(&self) -> bool {"));
        assert!(takes_self(
            "    fn poll(&'a mut self, cx: &mut Context<'_>) {"
        ));
        assert!(takes_self("    fn into_inner(mut self) -> T {"));
        assert!(takes_self("    fn poll(self: Pin<&mut Self>) {"));
        assert!(!takes_self("    pub(super) fn new_closed() -> Error {"));
        assert!(takes_self(
            "    pub(super) fn with<C: Into<Cause>>(mut self, cause: C) -> Error {"
        ));
        assert!(takes_self("    pub(crate) fn kind(&self) -> &Kind {"));
        assert!(!takes_self("    pub fn new(selfish: u8) -> Self {"));
        assert!(!takes_self("pub struct Error {"));
        assert_eq!(
            Access::of("rust", "    Err(crate::Error::"),
            Access::Associated
        );
        assert_eq!(
            Access::of("rust", "    Err(crate::Error::new_c"),
            Access::Associated
        );
        assert_eq!(Access::of("rust", "    err."), Access::Any);
        assert_eq!(Access::of("python", "    Error."), Access::Any);
        assert_eq!(Access::of("go", "    errors::"), Access::Any);
        let line = |text: &str, header: bool| OutlineLine {
            text: text.into(),
            header,
            private: false,
            name: String::new(),
            line: None,
        };
        let lines = vec![
            line("impl Error {", true),
            line("    pub fn is_parse(&self) -> bool {", false),
            line("    pub fn is_user(&self) -> bool {", false),
            line("    pub(super) fn new_closed() -> Error {", false),
        ];
        let outline = |access| {
            fit(
                vec![("src/error.rs".into(), lines.clone())],
                56,
                access,
                &[],
            )
        };
        assert_eq!(
            outline(Access::Associated)[0].body,
            "impl Error {\n    pub(super) fn new_closed() -> Error {\n"
        );
        assert_eq!(
            outline(Access::Any)[0].body,
            "impl Error {\n    pub fn is_parse(&self) -> bool {\n"
        );
    }

    #[test]
    fn types_from_the_prefix() {
        let py = "def f(ctx: click.Context, n: int):\n    tok = Tokenizer(source, rules=r)\n    self._current = TOMLChar(c)\n";
        assert_eq!(
            annotated_type("python", py, "ctx").as_deref(),
            Some("Context")
        );
        assert_eq!(
            annotated_type("python", py, "tok").as_deref(),
            Some("Tokenizer")
        );
        assert_eq!(
            annotated_type("python", py, "self._current").as_deref(),
            Some("TOMLChar")
        );
        assert_eq!(annotated_type("python", py, "n"), None);
        let rs = "    let mut conn: Conn<I, B, T> = x;\n    let tx = Sender::new(1);\n";
        assert_eq!(annotated_type("rust", rs, "conn").as_deref(), Some("Conn"));
        assert_eq!(annotated_type("rust", rs, "tx").as_deref(), Some("Sender"));
        let go =
            "func (d *Decoder) Decode(md *MetaData) {\n\tp := &parser{}\n\tenc := NewEncoder(w)\n";
        assert_eq!(annotated_type("go", go, "md").as_deref(), Some("MetaData"));
        assert_eq!(
            annotated_type("go", go, "p"),
            None,
            "not exported: no type name"
        );
        // The later of two says what the variable holds now.
        let later = "x = Alpha()\nx = Beta()\n";
        assert_eq!(
            annotated_type("python", later, "x").as_deref(),
            Some("Beta")
        );
        // A variable name is matched whole and literally.
        assert_eq!(
            annotated_type("python", "a.b = Gamma()\n", "a.b").as_deref(),
            Some("Gamma")
        );
        assert_eq!(annotated_type("python", "axb = Gamma()\n", "a.b"), None);
    }

    #[test]
    fn names_to_types() {
        assert_eq!(
            pascal_case("content_length").as_deref(),
            Some("ContentLength")
        );
        assert_eq!(pascal_case("tokenizer").as_deref(), Some("Tokenizer"));
        assert_eq!(pascal_case("x"), None);
    }

    fn line(text: &str, header: bool, private: bool) -> OutlineLine {
        let name = text.trim().strip_prefix("def ").unwrap_or_default();
        OutlineLine {
            text: text.into(),
            header,
            private,
            name: name.split('(').next().unwrap_or_default().to_string(),
            line: None,
        }
    }

    #[test]
    fn outlines_fit_headers_then_public_then_private_in_file_order() {
        let outlines = vec![(
            "a.py".to_string(),
            vec![
                line("class A:", true, false),
                line("    def _p(self):", false, true),
                line("    def m(self):", false, false),
                line("    def n(self, a, b):", false, false),
            ],
        )];
        let all = fit(outlines.clone(), 1000, Access::Any, &[]);
        assert_eq!(
            all[0].body,
            "class A:\n    def _p(self):\n    def m(self):\n    def n(self, a, b):\n"
        );
        // Room for the header and the two public members only.
        let some = fit(outlines.clone(), 9 + 17 + 23, Access::Any, &[]);
        assert_eq!(
            some[0].body,
            "class A:\n    def m(self):\n    def n(self, a, b):\n"
        );
        // The header alone is no outline.
        assert!(fit(outlines, 12, Access::Any, &[]).is_empty());
    }

    #[test]
    fn the_most_used_members_fit_first_and_are_written_in_file_order() {
        let outlines = vec![(
            "core.py".to_string(),
            vec![
                line("class Markdown:", true, false),
                line("    def build_parser(self):", false, false),
                line(
                    "    def registerExtensions(self, extensions):",
                    false,
                    false,
                ),
                line("    def is_block_level(self, tag):", false, false),
                line("    def convert(self, source):", false, false),
                line("    def _private(self):", false, true),
            ],
        )];
        let uses = vec![vec![0, 2, 1, 9, 40, 99]];
        // Room for the header and two members: the two most used public ones, in file order.
        let budget = 16 + 35 + 31;
        let two = fit(outlines.clone(), budget, Access::Any, &uses);
        assert_eq!(
            two[0].body,
            "class Markdown:\n    def is_block_level(self, tag):\n    def convert(self, source):\n"
        );
        // Without counts it is file order, as before.
        let file_order = fit(outlines.clone(), budget, Access::Any, &[]);
        assert_eq!(
            file_order[0].body,
            "class Markdown:\n    def build_parser(self):\n    def is_block_level(self, tag):\n"
        );
        // A private member stays behind the public ones however much it is used.
        let all_public = fit(outlines, 16 + 28 + 46 + 35 + 31, Access::Any, &uses);
        assert_eq!(
            all_public[0].body.lines().count(),
            5,
            "{}",
            all_public[0].body
        );
        assert!(
            !all_public[0].body.contains("_private"),
            "{}",
            all_public[0].body
        );
    }
}
