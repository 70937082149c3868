//! Outline candidates for completion: when the cursor follows `name.` or `path::`, what that
//! chain of names leads to — a module of the repository that the file imports (its top-level
//! definitions) or a type (its members) — written as the signature lines of those definitions,
//! so that the model sees the names it may write next. The type of a variable is read from the
//! prefix (`x: Type`, `x = Type(…)`, `x := &Type{…}`) or guessed from its name (`tokenizer` →
//! `Tokenizer`); every lookup stays within the request's source.

use std::sync::Arc;

use tabby_common::api::code::{CodeOutline, CodeSearchError, CodeSearchQuery};
use tabby_index::code::{
    imports,
    intelligence::{Tag, find_definitions},
    outline::{OutlineLine, Scope, outline},
};
use tantivy::Searcher;

use super::{
    CodeSearchService, generation_cache::PerGeneration, import_search::EditedFile, query,
    symbols::SymbolUse,
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

/// Per searcher generation: the text and definitions of files outlined.
pub struct OutlineCache {
    files: PerGeneration<Parsed>,
}

impl Default for OutlineCache {
    fn default() -> Self {
        Self {
            files: PerGeneration::new(MAX_CACHED_FILES, MAX_CACHED_BYTES),
        }
    }
}

struct Parsed {
    text: String,
    definitions: Vec<Tag>,
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
                Ok(Parsed { text, definitions })
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

/// What an outline shows, before it is cut to size.
enum Target {
    Module(Vec<String>),
    Type { name: String, files: Vec<String> },
}

impl CodeSearchService {
    /// The outline of what the chain of names before the cursor leads to, one entry per file,
    /// within `max_bytes` in all; none when the cursor does not follow a chain, or the chain
    /// leads nowhere in the repository.
    pub fn receiver_outline(
        &self,
        query: &CodeSearchQuery,
        max_bytes: usize,
    ) -> Result<Vec<CodeOutline>, CodeSearchError> {
        let Some(chain) = receiver_chain(&query.content) else {
            return Ok(vec![]);
        };
        if max_bytes == 0 {
            return Ok(vec![]);
        }
        let Some(EditedFile {
            language,
            filepath,
            searcher,
            paths,
            imports: file,
        }) = self.edited_file(query)?
        else {
            return Ok(vec![]);
        };
        let mut statements = file.statements.clone();
        statements.extend(imports::statements(
            &language,
            query::bounded(&query.content),
        ));
        let names: Vec<&str> = chain.iter().map(String::as_str).collect();
        let target = match imports::bound_module(&language, &filepath, &statements, &names, &paths)
        {
            Some(bound) => match bound.rest.as_slice() {
                [] => Target::Module(bound.files),
                [name] => Target::Type {
                    name: name.clone(),
                    files: bound.files,
                },
                _ => return Ok(vec![]),
            },
            None => {
                let last = chain.last().map(String::as_str).unwrap_or_default();
                let name = if last.starts_with(|c: char| c.is_uppercase()) {
                    last.to_string()
                } else if matches!(last, "self" | "this" | "super") {
                    return Ok(vec![]);
                } else {
                    // `self.x.` → what the prefix assigns to `self.x` or `x`.
                    let variable = match chain.as_slice() {
                        [owner, field] if matches!(owner.as_str(), "self" | "this") => {
                            format!("{owner}.{field}")
                        }
                        _ => last.to_string(),
                    };
                    // The prefix first, then the whole file as indexed (an attribute is often
                    // assigned in a constructor far above the cursor).
                    let prefix = query::bounded(&query.content);
                    let whole = self
                        .outlines
                        .parsed(self, &searcher, &query.source_id, &language, &filepath)
                        .map(|p| p.text.clone())
                        .unwrap_or_default();
                    let said = |text: &str| {
                        annotated_type(&language, text, &variable)
                            .or_else(|| annotated_type(&language, text, last))
                    };
                    match said(prefix)
                        .or_else(|| said(&whole))
                        .or_else(|| pascal_case(last))
                    {
                        Some(name) => name,
                        None => return Ok(vec![]),
                    }
                };
                Target::Type {
                    name,
                    files: vec![],
                }
            }
        };
        let outlined = match target {
            Target::Module(files) => files
                .iter()
                .take(MAX_MODULE_FILES)
                .filter_map(|path| {
                    let parsed = self
                        .outlines
                        .parsed(self, &searcher, &query.source_id, &language, path)
                        .ok()?;
                    let defined =
                        outline(&language, &parsed.text, &parsed.definitions, Scope::Module)?;
                    // What it imports from the repository's own modules: a package's
                    // `__init__.py`, an `index.ts` or a `mod.rs` offers those names.
                    let facade = defined.iter().filter(|l| !l.private).count() < 3;
                    let offered: Vec<_> =
                        imports::header_statements(&language, path, &parsed.text, &paths)
                            .into_iter()
                            .filter(|s| s.internal)
                            .collect();
                    let mut lines: Vec<OutlineLine> = imports::compact_statements(
                        &language,
                        offered,
                        imports::MERGED_IMPORT_WIDTH,
                    )
                    .into_iter()
                    .map(|s| OutlineLine {
                        text: s.text,
                        header: false,
                        private: !facade,
                    })
                    .collect();
                    lines.extend(defined);
                    Some((path.clone(), lines))
                })
                .collect::<Vec<_>>(),
            Target::Type { name, files } => {
                let mut candidates = files;
                if let Ok(found) = self.symbol_chunks(
                    &query.source_id,
                    &name,
                    SymbolUse::Definition,
                    4 * MAX_TYPE_FILES,
                ) {
                    // Files of the edited file's language: their definitions are parsed as such.
                    for doc in found {
                        let same_language =
                            self.languages.get(&doc.language).canonical_name() == language;
                        if same_language && !candidates.contains(&doc.filepath) {
                            candidates.push(doc.filepath);
                        }
                    }
                }
                candidates
                    .iter()
                    .take(MAX_TYPE_FILES)
                    .find_map(|path| {
                        let parsed = self
                            .outlines
                            .parsed(self, &searcher, &query.source_id, &language, path)
                            .ok()?;
                        let lines = outline(
                            &language,
                            &parsed.text,
                            &parsed.definitions,
                            Scope::Type(&name),
                        )?;
                        Some((path.clone(), lines))
                    })
                    .into_iter()
                    .collect()
            }
        };
        Ok(fit(
            outlined,
            max_bytes,
            Access::of(&language, &query.content),
        ))
    }
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
/// way, each group in file order; lines are written in file order. An outline left with no
/// member line is dropped.
fn fit(
    outlines: Vec<(String, Vec<OutlineLine>)>,
    max_bytes: usize,
    access: Access,
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
    for pass in passes {
        for (i, (_, lines)) in outlines.iter().enumerate() {
            for (j, line) in lines.iter().enumerate() {
                let cost = line.text.len() + 1;
                if pass(line) && !keep[i][j] && used + cost <= max_bytes {
                    keep[i][j] = true;
                    used += cost;
                }
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
        };
        let lines = vec![
            line("impl Error {", true),
            line("    pub fn is_parse(&self) -> bool {", false),
            line("    pub fn is_user(&self) -> bool {", false),
            line("    pub(super) fn new_closed() -> Error {", false),
        ];
        let outline = |access| fit(vec![("src/error.rs".into(), lines.clone())], 56, access);
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
        OutlineLine {
            text: text.into(),
            header,
            private,
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
        let all = fit(outlines.clone(), 1000, Access::Any);
        assert_eq!(
            all[0].body,
            "class A:\n    def _p(self):\n    def m(self):\n    def n(self, a, b):\n"
        );
        // Room for the header and the two public members only.
        let some = fit(outlines.clone(), 9 + 17 + 23, Access::Any);
        assert_eq!(
            some[0].body,
            "class A:\n    def m(self):\n    def n(self, a, b):\n"
        );
        // The header alone is no outline.
        assert!(fit(outlines, 12, Access::Any).is_empty());
    }
}
