//! The modules a file imports, resolved to files of its repository, and the names it imports
//! from them: where a completion's callee is most likely defined.
//!
//! Import statements are read line by line (with the continuation lines of a parenthesized or
//! braced list) by a small parser per language: Python (`import a.b`, `from .a import b`),
//! JavaScript/TypeScript (`import … from './a'`, `export … from`, `require('./a')`), Rust
//! (`use crate::a::{b, c}`, `use super::a`, `mod a;`), Go (`import "x/y"` and import blocks) and
//! Java (`import a.b.C;`). Resolution only looks at the repository's own files: a module outside
//! it (a package from a registry) resolves to nothing.

use std::collections::{BTreeSet, HashMap, HashSet};

use tabby_common::api::code::ImportStatement;

/// A repository's indexed files, with lookups by file name and by directory name so that
/// resolving an import costs the few files of that name, not a scan of the repository.
#[derive(Debug, Default)]
pub struct PathIndex {
    paths: BTreeSet<String>,
    /// File name → the paths with that name.
    by_name: HashMap<String, Vec<String>>,
    /// Last segment of a directory → the files directly in such directories.
    by_dir: HashMap<String, Vec<String>>,
}

impl PathIndex {
    pub fn new(paths: impl IntoIterator<Item = String>) -> Self {
        let mut files = PathIndex::default();
        for path in paths {
            let (dir, name) = path.rsplit_once('/').unwrap_or(("", &path));
            let dir_name = dir.rsplit('/').next().unwrap_or("");
            files
                .by_name
                .entry(name.to_string())
                .or_default()
                .push(path.clone());
            files
                .by_dir
                .entry(dir_name.to_string())
                .or_default()
                .push(path.clone());
            files.paths.insert(path);
        }
        files
    }

    pub fn contains(&self, path: &str) -> bool {
        self.paths.contains(path)
    }

    fn named(&self, name: &str) -> &[String] {
        self.by_name.get(name).map_or(&[], Vec::as_slice)
    }

    fn in_dirs_named(&self, dir_name: &str) -> &[String] {
        self.by_dir.get(dir_name).map_or(&[], Vec::as_slice)
    }
}

/// What a file imports: candidate files (repository paths, existing ones only) and the imported
/// names.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Imports {
    pub files: Vec<String>,
    pub names: Vec<String>,
}

/// Most files one request's imports resolve to.
const MAX_FILES: usize = 16;
/// Most import statements read from one file.
pub const MAX_STATEMENTS: usize = 200;

/// Imports of `text`, the file `current` in `language`, resolved against `paths` (the indexed
/// files of the repository, `/`-separated).
/// Whether `language` (a canonical name or an editor's language id) is JavaScript or
/// TypeScript, whose imports and classes are read alike.
pub fn is_javascript_family(language: &str) -> bool {
    matches!(
        language,
        "javascript-typescript"
            | "javascript"
            | "typescript"
            | "javascriptreact"
            | "typescriptreact"
    )
}

pub fn resolve(language: &str, current: &str, text: &str, paths: &PathIndex) -> Imports {
    resolve_statements(language, current, &statements(language, text), paths)
}

/// [`resolve`] on import statements already read (as [`statements`] gives them; the index
/// stores each file's).
pub fn resolve_statements(
    language: &str,
    current: &str,
    statements: &[String],
    paths: &PathIndex,
) -> Imports {
    let current = current.replace('\\', "/");
    let dir = parent(&current);
    let mut files: Vec<String> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let add = |candidates: Vec<String>, found: &mut Vec<String>| {
        for c in candidates {
            let c = normalize(&c);
            if c != current && paths.contains(&c) {
                if !found.contains(&c) {
                    found.push(c);
                }
                break;
            }
        }
    };
    for statement in statements.iter().take(MAX_STATEMENTS) {
        match language {
            "python" => {
                for (module, imported) in python_imports(statement) {
                    for name in &imported {
                        // `from a import b` may import the module a/b.py.
                        let sub = if module.ends_with('.') {
                            format!("{module}{name}")
                        } else {
                            format!("{module}.{name}")
                        };
                        add(python_candidates(&sub, dir, &current, paths), &mut files);
                    }
                    add(python_candidates(&module, dir, &current, paths), &mut files);
                    names.extend(imported);
                }
            }
            js if is_javascript_family(js) => {
                if let Some((spec, imported)) = js_import(statement)
                    && spec.starts_with('.')
                {
                    add(js_candidates(&format!("{dir}/{spec}")), &mut files);
                    names.extend(imported);
                }
            }
            "rust" => {
                for (path, imported) in rust_uses(statement) {
                    let candidates = rust_candidates(&path, &current);
                    if !candidates.is_empty() {
                        add(candidates, &mut files);
                        names.extend(imported);
                    }
                }
            }
            "go" => {
                for import in go_imports(statement) {
                    files.extend(go_package_files(&import, paths, &current));
                }
            }
            "java" | "kotlin" => {
                if let Some(class) = java_import(statement) {
                    let path = class.replace('.', "/");
                    let ext = if language == "java" { "java" } else { "kt" };
                    let file_name =
                        format!("{}.{ext}", class.rsplit('.').next().unwrap_or_default());
                    let found: Vec<String> = paths
                        .named(&file_name)
                        .iter()
                        .filter(|p| {
                            p.strip_suffix(&format!(".{ext}"))
                                .is_some_and(|s| s == path || s.ends_with(&format!("/{path}")))
                        })
                        .take(1)
                        .cloned()
                        .collect();
                    if !found.is_empty()
                        && let Some(name) = class.rsplit('.').next()
                    {
                        names.push(name.to_string());
                    }
                    files.extend(found);
                }
            }
            _ => {}
        }
    }
    let mut seen = BTreeSet::new();
    files.retain(|f| f != &current && seen.insert(f.clone()));
    files.truncate(MAX_FILES);
    names.retain(|n| !n.is_empty() && n != "*");
    names.sort();
    names.dedup();
    Imports { files, names }
}

fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(d, _)| d)
}

/// `a/./b/../c` → `a/c`; a leading `/` or `..` that escapes the root is dropped.
fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// The import statements of `text`, each on one line (continuation lines joined).
pub fn statements(language: &str, text: &str) -> Vec<String> {
    let starts: &[&str] = match language {
        "python" => &["import ", "from "],
        "rust" => &["use ", "pub use ", "pub(crate) use ", "mod ", "pub mod "],
        "go" => &["import "],
        "java" | "kotlin" => &["import "],
        _ => &["import ", "export ", "const ", "let ", "var "],
    };
    let mut out = Vec::new();
    let mut open: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(mut s) = open.take() {
            s.push(' ');
            s.push_str(trimmed);
            if closes(language, &s) || s.len() > 4096 {
                out.push(s);
            } else {
                open = Some(s);
            }
            continue;
        }
        let is_start = starts.iter().any(|p| trimmed.starts_with(p))
            || (!matches!(language, "python" | "rust" | "go" | "java" | "kotlin")
                && trimmed.contains("require("));
        if !is_start {
            continue;
        }
        if closes(language, trimmed) {
            out.push(trimmed.to_string());
        } else {
            open = Some(trimmed.to_string());
        }
    }
    out.extend(open);
    out
}

/// Most bytes of a line of merged import statements.
pub const MERGED_IMPORT_WIDTH: usize = 100;

/// The statements written compactly, for a prompt: Python's `from M import a` statements of one
/// module, and JavaScript/TypeScript's `import { a } from "m"` ones (one-line or not), written
/// as one statement per module at the place of its first, its names wrapped into more
/// statements of the same module where a line would pass `width` bytes (`from M import a` ten
/// times over, or a name per line, is what a prompt need not spend its bytes on). Other
/// statements, and other languages', are kept as they are; `internal` holds when it held for any
/// statement merged.
pub fn compact_statements(
    language: &str,
    statements: Vec<ImportStatement>,
    width: usize,
) -> Vec<ImportStatement> {
    let parts: fn(&str) -> Option<ListParts> = if language == "python" {
        python_from_parts
    } else if is_javascript_family(language) {
        js_named_parts
    } else {
        return statements;
    };
    enum Slot {
        Kept(ImportStatement),
        Group(usize),
    }
    // Each (head, tail)'s names and whether any of its statements was internal; the names
    // seen per group in a set (a file may hold thousands: no quadratic scan).
    let mut groups: Vec<(String, String, Vec<String>, bool)> = Vec::new();
    let mut seen: HashSet<(usize, String)> = HashSet::new();
    let mut slots = Vec::new();
    for statement in statements {
        let Some((head, names, tail)) = parts(statement.text.trim_end()) else {
            slots.push(Slot::Kept(statement));
            continue;
        };
        let i = match groups
            .iter()
            .position(|(h, t, _, _)| *h == head && *t == tail)
        {
            Some(i) => i,
            None => {
                groups.push((head, tail, Vec::new(), false));
                slots.push(Slot::Group(groups.len() - 1));
                groups.len() - 1
            }
        };
        let group = &mut groups[i];
        for name in names {
            if seen.insert((i, name.clone())) {
                group.2.push(name);
            }
        }
        group.3 |= statement.internal;
    }
    let mut out = Vec::new();
    for slot in slots {
        let (head, tail, names, internal) = match slot {
            Slot::Kept(statement) => {
                out.push(statement);
                continue;
            }
            Slot::Group(i) => &groups[i],
        };
        let mut line = head.clone();
        for name in names {
            let first = line.len() == head.len();
            if !first && line.len() + 2 + name.len() + tail.len() > width {
                line.push_str(tail);
                out.push(ImportStatement {
                    text: std::mem::replace(&mut line, head.clone()),
                    internal: *internal,
                });
            } else if !first {
                line.push_str(", ");
            }
            line.push_str(name);
        }
        line.push_str(tail);
        out.push(ImportStatement {
            text: line,
            internal: *internal,
        });
    }
    out
}

/// A statement's text before its names, the names, and its text after them.
type ListParts = (String, Vec<String>, String);

/// A name of an import list as written once its whitespace is normalized: `a`, `a as b`, and
/// in TypeScript `type a`; None for anything else.
fn simple_name(name: &str, typescript: bool) -> Option<String> {
    let words: Vec<&str> = name.split_whitespace().collect();
    let ok = match words.as_slice() {
        [_] | [_, "as", _] => true,
        ["type", _] | ["type", _, "as", _] => typescript,
        _ => false,
    };
    let identifier = |w: &&str| {
        w.chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '$')
    };
    (ok && words.iter().all(identifier)).then(|| words.join(" "))
}

/// `from M import a, b as c` (one line, no comment, no star) → (`from M import `, names, ``).
fn python_from_parts(text: &str) -> Option<ListParts> {
    let rest = text.strip_prefix("from ")?;
    if text.contains(['\n', '(', '\\', '#', ';', '*']) {
        return None;
    }
    let (module, names) = rest.split_once(" import ")?;
    let module = module.trim();
    let names = names
        .split(',')
        .map(|n| simple_name(n, false))
        .collect::<Option<Vec<_>>>()?;
    (!module.is_empty()).then(|| (format!("from {module} import "), names, String::new()))
}

/// `import { a, b as c } from "m"`, `import type { … } from 'm';`, or the same with `export`
/// (a re-export), over any number of lines, with no comment → (`import { `, names,
/// ` } from "m"`).
fn js_named_parts(text: &str) -> Option<ListParts> {
    if text.contains("//") || text.contains("/*") {
        return None;
    }
    let keyword = ["import", "export"]
        .into_iter()
        .find(|k| text.starts_with(k))?;
    let rest = &text[keyword.len()..];
    let (kind, rest) = match rest.trim_start().strip_prefix("type ") {
        Some(rest) => (format!("{keyword} type {{ "), rest),
        None => (format!("{keyword} {{ "), rest),
    };
    let rest = rest.trim_start().strip_prefix('{')?;
    let (list, after) = rest.split_once('}')?;
    let after = after.trim_start().strip_prefix("from")?.trim();
    let (module, semicolon) = match after.strip_suffix(';') {
        Some(m) => (m.trim_end(), ";"),
        None => (after, ""),
    };
    let quoted = module.len() >= 2
        && (module.starts_with('"') && module.ends_with('"')
            || module.starts_with('\'') && module.ends_with('\''))
        && !module[1..module.len() - 1].contains(['"', '\'', '\n']);
    if !quoted {
        return None;
    }
    let names = list
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| simple_name(n, true))
        .collect::<Option<Vec<_>>>()?;
    if names.is_empty() {
        return None;
    }
    Some((kind, names, format!(" }} from {module}{semicolon}")))
}

/// Most bytes of one header statement (a longer one is left out, not cut).
const MAX_HEADER_STATEMENT: usize = 1024;

/// The file's top-level import statements as written, in file order (Python: unindented
/// `import`/`from` lines; Rust: `use` items; Go: `import` lines and blocks; Java/Kotlin:
/// `import`; JavaScript/TypeScript: `import`, `export … from` and `… = require(…)`), each marked
/// `internal` when it resolves to a file of `paths`. What a completion prompt shows of the
/// imports above the editor's window.
pub fn header_statements(
    language: &str,
    current: &str,
    text: &str,
    paths: &PathIndex,
) -> Vec<ImportStatement> {
    let python = language == "python";
    let starts: &[&str] = match language {
        "python" => &["import ", "from "],
        "rust" => &["use ", "pub use ", "pub(crate) use "],
        "go" => &["import ", "import("],
        "java" | "kotlin" => &["import "],
        _ => &["import ", "import{", "export ", "const ", "let ", "var "],
    };
    let js = !matches!(language, "python" | "rust" | "go" | "java" | "kotlin");
    let mut out: Vec<ImportStatement> = Vec::new();
    // (joined on one line, as written)
    let mut open: Option<(String, String)> = None;
    let finish = |joined: String, written: String, out: &mut Vec<ImportStatement>| {
        if written.len() > MAX_HEADER_STATEMENT || out.len() >= MAX_STATEMENTS {
            return;
        }
        if js && js_import(&joined).is_none() {
            return;
        }
        if python && !joined.starts_with("import ") && !joined.contains(" import ") {
            return;
        }
        let internal = !resolve_statements(language, current, std::slice::from_ref(&joined), paths)
            .files
            .is_empty();
        out.push(ImportStatement {
            text: written,
            internal,
        });
    };
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some((mut joined, mut written)) = open.take() {
            joined.push(' ');
            joined.push_str(trimmed);
            written.push('\n');
            written.push_str(line.trim_end());
            let python_continues = python && joined.ends_with('\\');
            if (closes(language, &joined) && !python_continues)
                || written.len() > MAX_HEADER_STATEMENT
            {
                finish(joined, written, &mut out);
            } else {
                open = Some((joined, written));
            }
            continue;
        }
        // Top level only: an indented import is local to a function or a condition.
        if line.starts_with([' ', '\t']) || !starts.iter().any(|p| trimmed.starts_with(p)) {
            continue;
        }
        if js
            && !(trimmed.starts_with("import")
                || trimmed.contains(" from ")
                || trimmed.contains("require("))
        {
            continue;
        }
        let joined = trimmed.to_string();
        let written = line.trim_end().to_string();
        if closes(language, &joined) && !(python && joined.ends_with('\\')) {
            finish(joined, written, &mut out);
        } else {
            open = Some((joined, written));
        }
    }
    if let Some((joined, written)) = open {
        finish(joined, written, &mut out);
    }
    out
}

/// Where a chain of names before the cursor (`util.`, `a.b.`, `crate::error::`, `ns.`) leads
/// through the file's imports: the repository files of the module the chain names, and what is
/// left of the chain after the module (a type or a name defined in those files).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bound {
    pub files: Vec<String>,
    pub rest: Vec<String>,
}

/// The module a chain of names starts with, through the import `statements` of the file
/// `current` (as [`statements`] reads them) or a Rust path (`crate::`, `self::`, `super::`);
/// `None` when its first name is not an imported module or name of the repository.
pub fn bound_module(
    language: &str,
    current: &str,
    statements: &[String],
    chain: &[&str],
    paths: &PathIndex,
) -> Option<Bound> {
    let current = current.replace('\\', "/");
    let (&first, tail) = chain.split_first()?;
    let existing = |candidates: Vec<String>| {
        candidates
            .into_iter()
            .map(|c| normalize(&c))
            .find(|c| *c != current && paths.contains(c))
    };
    let rest = |from: &[&str]| from.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    match language {
        "python" => {
            let dir = parent(&current);
            let (module, name) = statements
                .iter()
                .take(MAX_STATEMENTS)
                .find_map(|s| python_binding(s, first))?;
            // The longest module path the chain names, then the module alone with the imported
            // name (a class or function of it) first in what is left.
            let base: Vec<String> = match &name {
                Some(name) => vec![module.clone(), name.clone()],
                None => vec![module.clone()],
            };
            for k in (0..=tail.len()).rev() {
                let mut path = base.clone();
                path.extend(tail[..k].iter().map(|s| s.to_string()));
                if let Some(file) =
                    existing(python_candidates(&dotted(&path), dir, &current, paths))
                {
                    return Some(Bound {
                        files: vec![file],
                        rest: rest(&tail[k..]),
                    });
                }
            }
            let name = name?;
            let file = existing(python_candidates(&module, dir, &current, paths))?;
            let mut left = vec![name];
            left.extend(rest(tail));
            Some(Bound {
                files: vec![file],
                rest: left,
            })
        }
        js if is_javascript_family(js) => {
            let dir = parent(&current);
            let (spec, name) = statements
                .iter()
                .take(MAX_STATEMENTS)
                .find_map(|s| js_binding(s, first))?;
            if !spec.starts_with('.') {
                return None;
            }
            let file = existing(js_candidates(&format!("{dir}/{spec}")))?;
            let mut left: Vec<String> = name.into_iter().collect();
            left.extend(rest(tail));
            Some(Bound {
                files: vec![file],
                rest: left,
            })
        }
        "go" => {
            let import = statements
                .iter()
                .take(MAX_STATEMENTS)
                .flat_map(|s| go_bindings(s))
                .find(|(name, _)| name == first)
                .map(|(_, path)| path)?;
            let files = go_package_files(&import, paths, &current);
            (!files.is_empty()).then(|| Bound {
                files,
                rest: rest(tail),
            })
        }
        "rust" => {
            let mut path: Vec<String> = if matches!(first, "crate" | "self" | "super") {
                vec![first.to_string()]
            } else {
                let full = statements
                    .iter()
                    .take(MAX_STATEMENTS)
                    .flat_map(|s| rust_uses(s))
                    .find(|(full, _)| full.rsplit("::").next() == Some(first))
                    .map(|(full, _)| full)?;
                full.split("::").map(str::to_string).collect()
            };
            path.extend(tail.iter().map(|s| s.to_string()));
            let segments: Vec<&str> = path.iter().map(String::as_str).collect();
            // The longest module path of the chain (its own file), else the module it starts in.
            for k in (2..=segments.len()).rev() {
                let candidates = rust_candidates(&segments[..k].join("::"), &current);
                if let Some(file) = existing(candidates.into_iter().take(2).collect()) {
                    return Some(Bound {
                        files: vec![file],
                        rest: rest(&segments[k..]),
                    });
                }
            }
            let file = existing(rust_candidates(segments.first()?, &current))?;
            Some(Bound {
                files: vec![file],
                rest: rest(&segments[1..]),
            })
        }
        _ => None,
    }
}

fn dotted(path: &[String]) -> String {
    let mut out = String::new();
    for part in path {
        if !(out.is_empty() || out.ends_with('.')) {
            out.push('.');
        }
        out.push_str(part);
    }
    out
}

/// What `statement` binds `name` to: (module, None) for a module (`import a.b` binds `a` to
/// `a`, `import a.b as x` binds `x` to `a.b`, `from . import x` binds `x` to `.` and `x`), or
/// (module, Some(imported)) for a name imported from a module.
fn python_binding(statement: &str, name: &str) -> Option<(String, Option<String>)> {
    let statement = statement.split('#').next().unwrap_or("");
    if let Some(rest) = statement.strip_prefix("from ") {
        let (module, names) = rest.split_once(" import ")?;
        let names = names.trim().trim_start_matches('(').trim_end_matches(')');
        for item in names.split(',') {
            let mut words = item.split_whitespace();
            let imported = words.next()?;
            let bound = match (words.next(), words.next()) {
                (Some("as"), Some(alias)) => alias,
                _ => imported,
            };
            if bound == name {
                return Some((module.trim().to_string(), Some(imported.to_string())));
            }
        }
        return None;
    }
    let rest = statement.strip_prefix("import ")?;
    for item in rest.split(',') {
        let mut words = item.split_whitespace();
        let module = words.next()?;
        match (words.next(), words.next()) {
            (Some("as"), Some(alias)) if alias == name => return Some((module.to_string(), None)),
            (None, _) if module.split('.').next() == Some(name) => {
                return Some((name.to_string(), None));
            }
            _ => {}
        }
    }
    None
}

/// What a JavaScript/TypeScript import binds `name` to: (spec, None) for a namespace or default
/// import (`import * as ns from './x'`, `import x from './x'`, `const x = require('./x')`),
/// (spec, Some(imported)) for a named one (`import { a as b } from './x'`).
fn js_binding(statement: &str, name: &str) -> Option<(String, Option<String>)> {
    let (spec, _) = js_import(statement)?;
    let head = statement.split(" from ").next().unwrap_or("");
    let head = head
        .trim_start_matches("import")
        .trim_start()
        .trim_start_matches("type ")
        .trim_start_matches("export");
    if let (Some(open), Some(close)) = (head.find('{'), head.rfind('}')) {
        for item in head[open + 1..close].split(',') {
            let mut words = item.split_whitespace();
            let Some(imported) = words.next() else {
                continue;
            };
            let bound = match (words.next(), words.next()) {
                (Some("as"), Some(alias)) => alias,
                _ => imported,
            };
            if bound == name {
                return Some((spec, Some(imported.to_string())));
            }
        }
    }
    let outside = match (head.find('{'), head.rfind('}')) {
        (Some(open), Some(close)) => format!("{} {}", &head[..open], &head[close + 1..]),
        _ => head.to_string(),
    };
    let bound = outside
        .replace(['=', ','], " ")
        .split_whitespace()
        .filter(|w| !matches!(*w, "*" | "as" | "const" | "let" | "var" | "type"))
        .any(|w| w == name || w.starts_with(&format!("{name}=")));
    bound.then_some((spec, None))
}

/// The names a Go import statement binds and their import paths: the alias, else the path's
/// last segment (a major-version suffix `v2` skipped).
fn go_bindings(statement: &str) -> Vec<(String, String)> {
    let body = statement
        .trim_start_matches("import")
        .trim()
        .trim_start_matches('(')
        .trim_end_matches(')');
    let mut out = Vec::new();
    let mut alias: Option<&str> = None;
    let mut rest = body;
    loop {
        let rest_trimmed = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ';');
        if rest_trimmed.is_empty() {
            break;
        }
        if let Some(after) = rest_trimmed.strip_prefix('"') {
            let Some(end) = after.find('"') else { break };
            let path = &after[..end];
            let segments: Vec<&str> = path.split('/').collect();
            let last = match segments.as_slice() {
                [.., name, version]
                    if version.starts_with('v') && version[1..].parse::<u32>().is_ok() =>
                {
                    *name
                }
                [.., name] => *name,
                [] => "",
            };
            let bound = alias.take().unwrap_or(last);
            if !matches!(bound, "_" | ".") {
                out.push((bound.to_string(), path.to_string()));
            }
            rest = &after[end + 1..];
        } else {
            let end = rest_trimmed
                .find(|c: char| c.is_whitespace() || c == '"')
                .unwrap_or(rest_trimmed.len());
            alias = Some(&rest_trimmed[..end]);
            rest = &rest_trimmed[end..];
        }
        if out.len() >= MAX_USE_PATHS {
            break;
        }
    }
    out
}

/// Whether a statement is complete (its brackets closed, and for Rust its `;` reached).
fn closes(language: &str, s: &str) -> bool {
    let depth = |o: char, c: char| s.matches(o).count() as i64 - s.matches(c).count() as i64;
    let balanced = depth('(', ')') <= 0 && depth('{', '}') <= 0;
    match language {
        "rust" => balanced && s.trim_end().ends_with(';'),
        _ => balanced,
    }
}

/// `import a.b as c, d` → [(a.b, []), (d, [])]; `from .a import (b, c as d)` → [(.a, [b, c])].
fn python_imports(statement: &str) -> Vec<(String, Vec<String>)> {
    let statement = statement.split('#').next().unwrap_or("");
    if let Some(rest) = statement.strip_prefix("from ") {
        let Some((module, names)) = rest.split_once(" import ") else {
            return vec![];
        };
        let names = names
            .trim()
            .trim_start_matches('(')
            .trim_end_matches(')')
            .split(',')
            .filter_map(|n| n.split_whitespace().next())
            .map(str::to_string)
            .collect();
        return vec![(module.trim().to_string(), names)];
    }
    statement
        .strip_prefix("import ")
        .map(|rest| {
            rest.split(',')
                .filter_map(|m| m.split_whitespace().next())
                .map(|m| (m.to_string(), vec![]))
                .collect()
        })
        .unwrap_or_default()
}

/// Paths module `module` (maybe relative: leading dots) may live at, relative to `dir` or to
/// any ancestor of the current file (src layouts, packages below the repository root).
fn python_candidates(module: &str, dir: &str, current: &str, paths: &PathIndex) -> Vec<String> {
    let dots = module.chars().take_while(|&c| c == '.').count();
    let rest = module[dots..].replace('.', "/");
    let forms = |base: &str| {
        let joined = if base.is_empty() {
            rest.clone()
        } else if rest.is_empty() {
            base.to_string()
        } else {
            format!("{base}/{rest}")
        };
        vec![format!("{joined}.py"), format!("{joined}/__init__.py")]
    };
    if dots > 0 {
        let mut base = dir.to_string();
        for _ in 1..dots {
            base = parent(&base).to_string();
        }
        return forms(&base);
    }
    // Absolute: the repository root, then each ancestor of the current file, then any
    // directory that holds the module's path (a `src/` or `lib/` layout seen from `tests/`),
    // the shortest first.
    let mut out = forms("");
    let mut base = parent(current);
    while !base.is_empty() {
        out.extend(forms(base));
        base = parent(base);
    }
    if !rest.is_empty() {
        let file = rest.rsplit('/').next().unwrap_or(&rest);
        let mut found: Vec<&String> = paths
            .named(&format!("{file}.py"))
            .iter()
            .filter(|p| p.ends_with(&format!("/{rest}.py")))
            .chain(
                paths
                    .named("__init__.py")
                    .iter()
                    .filter(|p| p.ends_with(&format!("/{rest}/__init__.py"))),
            )
            .collect();
        found.sort_by_key(|p| (p.len(), p.as_str()));
        out.extend(found.into_iter().take(MAX_FILES).cloned());
    }
    out
}

/// `import { a, b as c } from './x'` → ('./x', [a, b]); `const d = require('./y')` → ('./y', [d]).
fn js_import(statement: &str) -> Option<(String, Vec<String>)> {
    let spec = quoted_after(statement, " from ")
        .or_else(|| quoted_after(statement, "require("))
        .or_else(|| quoted_after(statement, "import("))
        .or_else(|| {
            statement
                .strip_prefix("import ")
                .and_then(|r| quoted(r.trim()))
        })?;
    let head = statement.split(" from ").next().unwrap_or("");
    let head = head
        .trim_start_matches("import")
        .trim_start_matches("export")
        .trim_start_matches(" type");
    let mut names = Vec::new();
    if let (Some(open), Some(close)) = (head.find('{'), head.rfind('}')) {
        for n in head[open + 1..close].split(',') {
            if let Some(name) = n.split_whitespace().next() {
                names.push(name.to_string());
            }
        }
    } else if let Some(name) = head
        .split(['=', ','])
        .next()
        .and_then(|h| h.split_whitespace().last())
        .filter(|n| {
            n.chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '$')
        })
    {
        names.push(name.to_string());
    }
    Some((spec, names))
}

fn quoted_after(s: &str, marker: &str) -> Option<String> {
    let at = s.find(marker)? + marker.len();
    quoted(s[at..].trim_start())
}

fn quoted(s: &str) -> Option<String> {
    let q = s.chars().next().filter(|c| matches!(c, '\'' | '"' | '`'))?;
    let end = s[1..].find(q)? + 1;
    Some(s[1..end].to_string())
}

fn js_candidates(base: &str) -> Vec<String> {
    let base = base.trim_end_matches('/');
    let exts = ["ts", "tsx", "js", "jsx", "mjs", "cjs", "mts", "cts"];
    let mut out = vec![base.to_string()];
    // `./a.js` written for a TypeScript source `./a.ts`.
    if let Some(stem) = base.strip_suffix(".js") {
        out.push(format!("{stem}.ts"));
        out.push(format!("{stem}.tsx"));
    }
    out.extend(exts.iter().map(|e| format!("{base}.{e}")));
    out.extend(exts.iter().map(|e| format!("{base}/index.{e}")));
    out
}

/// `use crate::a::{b, c::d};` → [(crate::a::b, [b]), (crate::a::c::d, [d])]; `mod x;` → (self::x).
fn rust_uses(statement: &str) -> Vec<(String, Vec<String>)> {
    let s = statement.trim_end_matches(';').trim();
    let s = s
        .strip_prefix("pub(crate) ")
        .or_else(|| s.strip_prefix("pub "))
        .unwrap_or(s);
    if let Some(name) = s.strip_prefix("mod ") {
        let name = name.trim();
        if name.chars().all(|c| c.is_alphanumeric() || c == '_') {
            return vec![(format!("mod::{name}"), vec![])];
        }
        return vec![];
    }
    let Some(tree) = s.strip_prefix("use ") else {
        return vec![];
    };
    let mut out = Vec::new();
    expand_use("", tree.trim(), &mut out, 0);
    out
}

/// Use trees nested deeper than this are not followed (real ones nest a few levels; the text
/// comes from an editor request, and each level is a call).
const MAX_USE_TREE_DEPTH: usize = 16;
/// Paths taken from one use statement.
const MAX_USE_PATHS: usize = 256;

/// Flattens a use tree: `a::{b, c::{d, e}}` → a::b, a::c::d, a::c::e.
fn expand_use(prefix: &str, tree: &str, out: &mut Vec<(String, Vec<String>)>, depth: usize) {
    if out.len() >= MAX_USE_PATHS {
        return;
    }
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        if depth >= MAX_USE_TREE_DEPTH {
            return;
        }
        let head = tree[..open].trim_end_matches("::").trim();
        let inner = tree[open + 1..].trim_end().trim_end_matches('}');
        let prefix = join_path(prefix, head);
        let mut nesting = 0;
        let mut start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => nesting += 1,
                '}' => nesting -= 1,
                ',' if nesting == 0 => {
                    expand_use(&prefix, &inner[start..i], out, depth + 1);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand_use(&prefix, &inner[start..], out, depth + 1);
        return;
    }
    let path = tree.split(" as ").next().unwrap_or("").trim();
    if path.is_empty() {
        return;
    }
    let full = join_path(prefix, path);
    let name = full.rsplit("::").next().unwrap_or("").to_string();
    let names = if name == "self" || name == "*" {
        vec![]
    } else {
        vec![name]
    };
    out.push((full, names));
}

fn join_path(prefix: &str, path: &str) -> String {
    match (prefix.is_empty(), path.is_empty()) {
        (true, _) => path.to_string(),
        (_, true) => prefix.to_string(),
        _ => format!("{prefix}::{path}"),
    }
}

/// Files a Rust path may be defined in: each prefix of the module path, as `x.rs` or
/// `x/mod.rs`, from the crate's `src/` (crate::), the current module (self::, `mod x;`) or its
/// parent (super::).
fn rust_candidates(path: &str, current: &str) -> Vec<String> {
    let segments: Vec<&str> = path.split("::").collect();
    let Some(first) = segments.first() else {
        return vec![];
    };
    // The directory of the current module's children.
    let stem = current.strip_suffix(".rs").unwrap_or(current);
    let file = stem.rsplit('/').next().unwrap_or("");
    let module_dir = if matches!(file, "mod" | "lib" | "main") {
        parent(stem).to_string()
    } else {
        stem.to_string()
    };
    let crate_root = match current.rfind("src/") {
        Some(i) => current[..i + 3].to_string(),
        None => String::new(),
    };
    let (base, rest) = match *first {
        "crate" => (crate_root, &segments[1..]),
        "self" | "mod" => (module_dir, &segments[1..]),
        "super" => {
            let mut base = parent(&module_dir).to_string();
            let mut rest = &segments[1..];
            while rest.first() == Some(&"super") {
                base = parent(&base).to_string();
                rest = &rest[1..];
            }
            (base, rest)
        }
        _ => return vec![],
    };
    let mut out = Vec::new();
    for k in (1..=rest.len()).rev() {
        let joined = rest[..k].join("/");
        let at = if base.is_empty() {
            joined
        } else {
            format!("{base}/{joined}")
        };
        out.push(format!("{at}.rs"));
        out.push(format!("{at}/mod.rs"));
    }
    // The module the path starts from (`use super::Cart` → the parent module's file).
    if base.ends_with("src") || base == "src" {
        out.push(format!("{base}/lib.rs"));
        out.push(format!("{base}/main.rs"));
    } else if !base.is_empty() {
        out.push(format!("{base}.rs"));
        out.push(format!("{base}/mod.rs"));
    }
    out
}

/// `import "a/b"`, `import x "a/b"`, `import ( "a" ; y "b" )` → the quoted paths.
fn go_imports(statement: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = statement;
    while let Some(start) = rest.find('"') {
        let Some(len) = rest[start + 1..].find('"') else {
            break;
        };
        out.push(rest[start + 1..start + 1 + len].to_string());
        rest = &rest[start + 2 + len..];
    }
    out
}

/// The non-test Go files of the repository directory an import path names: the longest tail
/// of the path that is a directory of the repository.
fn go_package_files(import: &str, paths: &PathIndex, current: &str) -> Vec<String> {
    let segments: Vec<&str> = import.split('/').collect();
    let Some(last) = segments.last() else {
        return vec![];
    };
    let in_dirs = paths.in_dirs_named(last);
    for k in (1..=segments.len()).rev() {
        let tail = segments[segments.len() - k..].join("/");
        let files: Vec<String> = in_dirs
            .iter()
            .filter(|p| {
                p.ends_with(".go")
                    && !p.ends_with("_test.go")
                    && p.as_str() != current
                    && (parent(p) == tail || parent(p).ends_with(&format!("/{tail}")))
            })
            .take(MAX_FILES)
            .cloned()
            .collect();
        if !files.is_empty() {
            return files;
        }
    }
    vec![]
}

/// `import a.b.C;` / `import static a.b.C.m;` → `a.b.C` (the class's path); `*` imports none.
fn java_import(statement: &str) -> Option<String> {
    let s = statement
        .strip_prefix("import ")?
        .trim()
        .trim_end_matches(';');
    let (s, is_static) = match s.strip_prefix("static ") {
        Some(rest) => (rest.trim(), true),
        None => (s, false),
    };
    if s.ends_with(".*") {
        return None;
    }
    let class = if is_static {
        s.rsplit_once('.').map_or(s, |(c, _)| c)
    } else {
        s
    };
    Some(class.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(list: &[&str]) -> PathIndex {
        PathIndex::new(list.iter().map(|p| p.to_string()))
    }

    fn check(
        language: &str,
        current: &str,
        text: &str,
        repo: &[&str],
        files: &[&str],
        names: &[&str],
    ) {
        let got = resolve(language, current, text, &paths(repo));
        assert_eq!(got.files, files, "files of {text:?}");
        assert_eq!(got.names, names, "names of {text:?}");
    }

    #[test]
    fn import_statements_of_one_module_merge_in_place_and_wrap() {
        let st = |text: &str, internal: bool| ImportStatement {
            text: text.to_string(),
            internal,
        };
        let input = vec![
            st("import os", false),
            st("from shop.api import load", true),
            st("from shop.errors import KeyError_", true),
            st("from shop.api import dump as write", false),
            st("from shop.api import load", true),
            st("from typing import (\n    Any,\n)", false),
            st("from shop.api import *", true),
            st("from shop.errors import ParseError  # the parser's", true),
        ];
        let got = compact_statements("python", input.clone(), 100);
        let texts: Vec<&str> = got.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "import os",
                "from shop.api import load, dump as write",
                "from shop.errors import KeyError_",
                "from typing import (\n    Any,\n)",
                "from shop.api import *",
                "from shop.errors import ParseError  # the parser's",
            ]
        );
        assert!(got[1].internal, "internal when any merged statement was");
        // Other languages are untouched.
        assert_eq!(compact_statements("rust", input.clone(), 100), input);
        // Names wrap into more statements of the same module, none longer than the width
        // unless one name alone is.
        let many: Vec<ImportStatement> = (0..30)
            .map(|i| st(&format!("from pkg.api import name_{i:02}"), true))
            .collect();
        let got = compact_statements("python", many, 60);
        assert!(got.len() > 1 && got.len() < 30, "{got:?}");
        let mut names = Vec::new();
        for s in &got {
            assert!(s.text.len() <= 60, "{}", s.text);
            let (_, list) = s.text.split_once(" import ").unwrap();
            names.extend(list.split(", ").map(str::to_string));
        }
        let want: Vec<String> = (0..30).map(|i| format!("name_{i:02}")).collect();
        assert_eq!(names, want);
        let long = vec![st(&format!("from m import {}", "x".repeat(80)), false)];
        assert_eq!(compact_statements("python", long.clone(), 60), long);

        // JavaScript/TypeScript: named imports and re-exports over several lines, per module
        // and kind, the quotes and semicolon as written.
        let ts = vec![
            st(
                "import {\n    $mobx,\n    endBatch,\n    startBatch as begin\n} from \"../internal\"",
                true,
            ),
            st("import React from \"react\"", false),
            st("import type { IAtom } from '../core/atom';", true),
            st("import { die, endBatch } from \"../internal\"", true),
            st("export { autorun } from \"./api/autorun\"", true),
            st("import { a, /* b, */ c } from \"./x\"", true),
            st("import * as all from \"./y\"", true),
        ];
        let got = compact_statements("javascript-typescript", ts, 100);
        let texts: Vec<&str> = got.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "import { $mobx, endBatch, startBatch as begin, die } from \"../internal\"",
                "import React from \"react\"",
                "import type { IAtom } from '../core/atom';",
                "export { autorun } from \"./api/autorun\"",
                "import { a, /* b, */ c } from \"./x\"",
                "import * as all from \"./y\"",
            ]
        );
        let wide: Vec<ImportStatement> = vec![st(
            &format!(
                "import {{\n{}\n}} from \"../internal\"",
                (0..40)
                    .map(|i| format!("    name{i:02},"))
                    .collect::<String>()
            ),
            true,
        )];
        let got = compact_statements("javascript-typescript", wide, 100);
        assert!(got.len() >= 3, "{got:?}");
        for s in &got {
            assert!(s.text.len() <= 100, "{}", s.text);
            assert!(
                s.text.starts_with("import { name") && s.text.ends_with(" } from \"../internal\"")
            );
        }
        // A hostile file: the most statements a header reads, each a KiB of names, all of one
        // module and mostly the same names, merge into the distinct names (kept in a set: no
        // quadratic scan on the typing path).
        let hostile: Vec<ImportStatement> = (0..MAX_STATEMENTS)
            .map(|i| {
                let names: Vec<String> = (0..130)
                    .map(|j| format!("n{}", (i * 7 + j) % 4000))
                    .collect();
                st(&format!("from m import {}", names.join(", ")), false)
            })
            .collect();
        let got = compact_statements("python", hostile, 100);
        let distinct: HashSet<&str> = got
            .iter()
            .flat_map(|s| s.text.split_once(" import ").unwrap().1.split(", "))
            .collect();
        let total: usize = got.iter().map(|s| s.text.split(", ").count()).sum();
        assert_eq!(distinct.len(), total, "no name twice");
        assert!(distinct.len() >= 1000, "{}", distinct.len());
    }

    #[test]
    fn python_absolute_relative_and_src_layouts() {
        let repo = [
            "src/shop/pricing.py",
            "src/shop/cart/__init__.py",
            "src/shop/cart/items.py",
            "src/shop/checkout.py",
            "src/shop/util.py",
        ];
        check(
            "python",
            "src/shop/checkout.py",
            "import os\nfrom shop.pricing import compute_price, round_cents as rc\nfrom .cart import (\n    add_item,\n    items,\n)\nfrom . import util\nimport requests\n",
            &repo,
            &[
                "src/shop/pricing.py",
                "src/shop/cart/items.py",
                "src/shop/cart/__init__.py",
                "src/shop/util.py",
            ],
            &["add_item", "compute_price", "items", "round_cents", "util"],
        );
        // A test outside the package's `src/` directory.
        check(
            "python",
            "tests/test_checkout.py",
            "from shop import pricing\nimport shop.cart.items\n",
            &repo,
            &["src/shop/pricing.py", "src/shop/cart/items.py"],
            &["pricing"],
        );
    }

    #[test]
    fn typescript_relative_imports_with_extensions_and_index_files() {
        let repo = [
            "src/api/client.ts",
            "src/util/index.ts",
            "src/app.tsx",
            "src/legacy.js",
        ];
        check(
            "typescript",
            "src/app.tsx",
            "import React from 'react';\nimport { fetchUser, saveUser as save } from './api/client';\nimport * as util from \"./util\";\nconst legacy = require('./legacy.js');\nexport { helper } from './api/client.js';\n",
            &repo,
            &["src/api/client.ts", "src/util/index.ts", "src/legacy.js"],
            &["fetchUser", "helper", "legacy", "saveUser", "util"],
        );
    }

    #[test]
    fn rust_use_trees_mods_and_super() {
        let repo = [
            "src/lib.rs",
            "src/pricing.rs",
            "src/cart/mod.rs",
            "src/cart/items.rs",
            "src/checkout.rs",
            "src/checkout/steps.rs",
        ];
        check(
            "rust",
            "src/checkout.rs",
            "use std::collections::HashMap;\nuse crate::pricing::compute_price;\nuse crate::cart::{\n    items::{add_item, Item},\n    Cart,\n};\nmod steps;\nuse super::lib_fn;\n",
            &repo,
            &[
                "src/pricing.rs",
                "src/cart/items.rs",
                "src/cart/mod.rs",
                "src/checkout/steps.rs",
                "src/lib.rs",
            ],
            &["Cart", "Item", "add_item", "compute_price", "lib_fn"],
        );
        check(
            "rust",
            "src/cart/items.rs",
            "use super::super::pricing;\nuse super::Cart;\n",
            &repo,
            &["src/pricing.rs", "src/cart/mod.rs"],
            &["Cart", "pricing"],
        );
    }

    /// The text comes from an editor request: a use tree nested 100,000 deep (one line of
    /// 500 KB) once recursed per level and aborted the server with a stack overflow.
    #[test]
    fn hostile_use_trees_are_cut_short() {
        let deep = format!(
            "use crate::{}pricing{};\n",
            "a::{".repeat(100_000),
            "}".repeat(100_000)
        );
        let wide = format!(
            "use crate::{{{}}};\n",
            (0..100_000)
                .map(|i| format!("m{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let repo = paths(&["src/lib.rs", "src/pricing.rs"]);
        let imports = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                (
                    resolve("rust", "src/lib.rs", &deep, &repo),
                    resolve("rust", "src/lib.rs", &wide, &repo),
                )
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(imports.0.files.is_empty());
        assert!(imports.1.names.len() <= MAX_USE_PATHS);
        assert_eq!(
            rust_uses("use crate::a::{b::{c::{d, e}}, f};"),
            vec![
                ("crate::a::b::c::d".to_string(), vec!["d".to_string()]),
                ("crate::a::b::c::e".to_string(), vec!["e".to_string()]),
                ("crate::a::f".to_string(), vec!["f".to_string()]),
            ]
        );
    }

    #[test]
    fn go_import_paths_name_package_directories() {
        let repo = [
            "go.mod",
            "internal/pricing/price.go",
            "internal/pricing/price_test.go",
            "internal/pricing/round.go",
            "cmd/shop/main.go",
        ];
        check(
            "go",
            "cmd/shop/main.go",
            "package main\n\nimport (\n\t\"fmt\"\n\tp \"example.com/shop/internal/pricing\"\n)\n",
            &repo,
            &["internal/pricing/price.go", "internal/pricing/round.go"],
            &[],
        );
    }

    #[test]
    fn java_classes_and_static_imports() {
        let repo = [
            "src/main/java/com/acme/Pricing.java",
            "src/main/java/com/acme/App.java",
        ];
        check(
            "java",
            "src/main/java/com/acme/App.java",
            "import java.util.List;\nimport static com.acme.Pricing.compute;\nimport com.acme.*;\n",
            &repo,
            &["src/main/java/com/acme/Pricing.java"],
            &["Pricing"],
        );
    }

    fn header(language: &str, current: &str, text: &str, repo: &[&str]) -> Vec<(String, bool)> {
        header_statements(language, current, text, &paths(repo))
            .into_iter()
            .map(|s| (s.text, s.internal))
            .collect()
    }

    #[test]
    fn header_statements_are_top_level_imports_as_written() {
        let repo = [
            "src/shop/pricing.py",
            "src/shop/util.py",
            "src/shop/checkout.py",
        ];
        let text = "\"\"\"Checkout.\"\"\"\nimport os\nfrom .pricing import (\n    compute_price,\n    round_cents,\n)\nfrom . import util\nfrom typing import \\\n    Any\n\nif TYPE_CHECKING:\n    from .cart import Cart\n\ndef f():\n    import json\n    return util.x()\n";
        assert_eq!(
            header("python", "src/shop/checkout.py", text, &repo),
            vec![
                ("import os".to_string(), false),
                (
                    "from .pricing import (\n    compute_price,\n    round_cents,\n)".to_string(),
                    true
                ),
                ("from . import util".to_string(), true),
                ("from typing import \\\n    Any".to_string(), false),
            ]
        );
        let go = "package main\n\nimport (\n\t\"fmt\"\n\tp \"example.com/shop/internal/pricing\"\n)\n\nfunc main() {}\n";
        assert_eq!(
            header(
                "go",
                "cmd/shop/main.go",
                go,
                &["internal/pricing/price.go", "cmd/shop/main.go"]
            ),
            vec![(
                "import (\n\t\"fmt\"\n\tp \"example.com/shop/internal/pricing\"\n)".to_string(),
                true
            )]
        );
        let ts = "import React from 'react';\nimport {\n  fetchUser,\n} from './api/client';\nexport const x = 1;\nconst legacy = require('./legacy');\nconst y = 2;\n";
        assert_eq!(
            header(
                "typescript",
                "src/app.ts",
                ts,
                &["src/api/client.ts", "src/legacy.js", "src/app.ts"]
            ),
            vec![
                ("import React from 'react';".to_string(), false),
                (
                    "import {\n  fetchUser,\n} from './api/client';".to_string(),
                    true
                ),
                ("const legacy = require('./legacy');".to_string(), true),
            ]
        );
        let rust = "use std::fmt;\nuse crate::pricing::{\n    compute,\n};\nmod steps;\n\nfn f() {\n    use crate::pricing::x;\n}\n";
        assert_eq!(
            header(
                "rust",
                "src/checkout.rs",
                rust,
                &["src/pricing.rs", "src/checkout.rs"]
            ),
            vec![
                ("use std::fmt;".to_string(), false),
                ("use crate::pricing::{\n    compute,\n};".to_string(), true),
            ]
        );
    }

    /// A statement that never closes, or a huge one, is bounded: left out, not cut.
    #[test]
    fn header_statements_are_bounded() {
        let open = format!("from .a import (\n{}", "    name,\n".repeat(10_000));
        assert!(header("python", "x.py", &open, &["a.py"]).is_empty());
        let many: String = (0..1000).map(|i| format!("import m{i}\n")).collect();
        assert_eq!(header("python", "x.py", &many, &[]).len(), MAX_STATEMENTS);
    }

    fn bound(
        language: &str,
        current: &str,
        text: &str,
        chain: &[&str],
        repo: &[&str],
    ) -> Option<(Vec<String>, Vec<String>)> {
        bound_module(
            language,
            current,
            &statements(language, text),
            chain,
            &paths(repo),
        )
        .map(|b| (b.files, b.rest))
    }

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn chains_lead_through_imports_to_modules_and_the_names_left() {
        let repo = [
            "src/shop/pricing.py",
            "src/shop/util.py",
            "src/shop/cart/items.py",
            "src/shop/checkout.py",
        ];
        let text = "import os\nimport shop.cart.items\nimport shop.pricing as p\nfrom . import util\nfrom .pricing import Price as P2, round_cents\n";
        let py = |chain: &[&str]| bound("python", "src/shop/checkout.py", text, chain, &repo);
        assert_eq!(
            py(&["util"]),
            Some((strings(&["src/shop/util.py"]), vec![]))
        );
        assert_eq!(
            py(&["p"]),
            Some((strings(&["src/shop/pricing.py"]), vec![]))
        );
        assert_eq!(
            py(&["shop", "cart", "items", "Item"]),
            Some((strings(&["src/shop/cart/items.py"]), strings(&["Item"])))
        );
        assert_eq!(
            py(&["P2"]),
            Some((strings(&["src/shop/pricing.py"]), strings(&["Price"])))
        );
        assert_eq!(py(&["os"]), None, "not a module of the repository");
        assert_eq!(py(&["unknown"]), None);

        let ts = "import * as api from './api/client';\nimport Store from \"./store\";\nimport { Reaction as R, autorun } from '../core/reaction';\nimport React from 'react';\n";
        let repo = [
            "src/api/client.ts",
            "src/store.ts",
            "core/reaction.ts",
            "src/app.ts",
        ];
        let js = |chain: &[&str]| bound("javascript-typescript", "src/app.ts", ts, chain, &repo);
        assert_eq!(
            js(&["api"]),
            Some((strings(&["src/api/client.ts"]), vec![]))
        );
        assert_eq!(js(&["Store"]), Some((strings(&["src/store.ts"]), vec![])));
        assert_eq!(
            js(&["R"]),
            Some((strings(&["core/reaction.ts"]), strings(&["Reaction"])))
        );
        assert_eq!(js(&["React"]), None);

        let go = "import (\n\t\"fmt\"\n\tp \"example.com/shop/internal/pricing\"\n\t\"example.com/shop/internal/tags/v2\"\n)\n";
        let repo = [
            "internal/pricing/price.go",
            "internal/tags/v2/tags.go",
            "cmd/main.go",
        ];
        assert_eq!(
            bound("go", "cmd/main.go", go, &["p"], &repo),
            Some((strings(&["internal/pricing/price.go"]), vec![]))
        );
        assert_eq!(
            bound("go", "cmd/main.go", go, &["tags", "Tag"], &repo),
            Some((strings(&["internal/tags/v2/tags.go"]), strings(&["Tag"])))
        );
        assert_eq!(bound("go", "cmd/main.go", go, &["fmt"], &repo), None);

        let rs = "use crate::proto::h1;\nuse std::fmt;\n";
        let repo = [
            "src/lib.rs",
            "src/error.rs",
            "src/proto/h1/mod.rs",
            "src/body/chan.rs",
        ];
        let rust = |chain: &[&str]| bound("rust", "src/body/chan.rs", rs, chain, &repo);
        assert_eq!(
            rust(&["crate", "error", "Error"]),
            Some((strings(&["src/error.rs"]), strings(&["Error"])))
        );
        assert_eq!(
            rust(&["crate", "Error"]),
            Some((strings(&["src/lib.rs"]), strings(&["Error"])))
        );
        assert_eq!(
            rust(&["h1", "Conn"]),
            Some((strings(&["src/proto/h1/mod.rs"]), strings(&["Conn"])))
        );
        assert_eq!(rust(&["fmt"]), None);
    }

    #[test]
    fn paths_never_escape_the_repository_and_unknown_languages_import_nothing() {
        let repo = ["a.py", "etc/passwd.py"];
        check(
            "python",
            "pkg/x.py",
            "from .... import passwd\n",
            &repo,
            &[],
            &["passwd"],
        );
        check(
            "typescript",
            "x.ts",
            "import a from '../../../../etc/passwd';\n",
            &repo,
            &[],
            &["a"],
        );
        check("haskell", "x.hs", "import Data.List\n", &repo, &[], &[]);
        assert_eq!(normalize("../../a/./b/../c"), "a/c");
    }
}
