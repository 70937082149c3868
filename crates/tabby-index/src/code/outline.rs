//! Outlines for completion prompts: the signature lines of what a module offers (its top-level
//! definitions) or of a type's members, so that a model completing `util.` or `Error::` sees the
//! names it may write next. Built from the definitions of one tree-sitter parse
//! ([`super::intelligence::find_definitions`]).

use super::intelligence::Tag;

/// What to outline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope<'a> {
    /// The file's top-level definitions (functions, types, constants; not methods).
    Module,
    /// The members of the type of this name defined in the file: its class body, Rust's
    /// inherent `impl` blocks, Go's methods with that receiver.
    Type(&'a str),
    /// Go: the methods with a receiver of this type name, in a file of the type's package that
    /// need not define it (Go declares methods in any file of the package).
    Methods(&'a str),
}

/// One line of an outline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutlineLine {
    /// The line as written (indentation kept, at most [`MAX_LINE`] bytes).
    pub text: String,
    /// A type's own line or an `impl` line, written before its members.
    pub header: bool,
    /// A name the language marks as private by convention (`_name` in Python).
    pub private: bool,
    /// The name the line defines (the type's name on a header; empty where a line defines
    /// no one name, such as an import statement a package's facade offers).
    pub name: String,
    /// The line of the file (0-based) that holds the name; none where the line is not the
    /// file's own definition (an import statement).
    pub line: Option<usize>,
}

/// Most bytes of one outline line.
pub const MAX_LINE: usize = 160;
/// Most lines of one outline.
const MAX_LINES: usize = 400;

/// The outline of `scope` in `text` (a file in `language` whose definitions are `definitions`):
/// lines in file order; `None` when the type is not defined there (for `Methods`, when the
/// file declares none of its methods, or is not Go).
pub fn outline(
    language: &str,
    text: &str,
    definitions: &[Tag],
    scope: Scope<'_>,
) -> Option<Vec<OutlineLine>> {
    let lines: Vec<&str> = text.lines().collect();
    // The line of a definition's name, by binary search over the newlines (a file may hold
    // tens of thousands of definitions: nothing here is quadratic in them).
    let newlines: Vec<usize> = memchr_positions(text.as_bytes());
    let line_of = |tag: &Tag| newlines.partition_point(|&p| p < tag.name_range.start);
    let parents = innermost_parents(definitions);
    let render = |line: usize, header: bool, name: &str| OutlineLine {
        text: cut(lines.get(line).copied().unwrap_or_default().trim_end()),
        header,
        private: name.starts_with('_'),
        name: name.to_string(),
        line: Some(line),
    };
    let dunder = |name: &str| name.len() > 4 && name.starts_with("__") && name.ends_with("__");
    // Go's methods with a receiver of type `name`, in file order.
    let go_methods = |name: &str| -> Vec<OutlineLine> {
        (definitions.iter().filter(|t| t.kind == "method"))
            .map(|tag| (line_of(tag), tag))
            .filter(|(at, _)| go_receiver_is(lines.get(*at).copied().unwrap_or_default(), name))
            .map(|(at, tag)| render(at, false, &tag.name))
            .collect()
    };
    let mut out = Vec::new();
    match scope {
        Scope::Module => {
            for (tag, parent) in definitions.iter().zip(&parents) {
                if parent.is_some() || !is_module_level(&tag.kind) || dunder(&tag.name) {
                    continue;
                }
                out.push(render(line_of(tag), false, &tag.name));
            }
        }
        Scope::Type(name) => {
            let ty = definitions
                .iter()
                .find(|t| t.name == name && is_type(&t.kind))?;
            out.push(render(line_of(ty), true, name));
            match language {
                "rust" => {
                    for (start, end) in rust_inherent_impls(&lines, name) {
                        out.push(render(start, true, name));
                        for tag in definitions {
                            let at = line_of(tag);
                            if at > start && at < end && is_callable(&tag.kind) {
                                out.push(render(at, false, &tag.name));
                            }
                        }
                    }
                }
                "go" => out.extend(go_methods(name)),
                _ => {
                    // Its direct members: the definitions whose innermost enclosing range is
                    // its range (another definition of the same range stands for it).
                    for (tag, parent) in definitions.iter().zip(&parents) {
                        let direct =
                            parent.is_some_and(|p| definitions[p].line_range == ty.line_range);
                        if direct && !dunder(&tag.name) {
                            out.push(render(line_of(tag), false, &tag.name));
                        }
                    }
                }
            }
        }
        Scope::Methods(name) => {
            if language != "go" {
                return None;
            }
            out.extend(go_methods(name));
            if out.is_empty() {
                return None;
            }
        }
    }
    out.dedup_by(|a, b| a.text == b.text);
    out.truncate(MAX_LINES);
    Some(out)
}

/// Byte offsets of the newlines of `bytes`.
fn memchr_positions(bytes: &[u8]) -> Vec<usize> {
    bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(i, _)| i)
        .collect()
}

/// For each definition, the index of the innermost other definition whose line range holds
/// its own (a different range; of equal ones, the first), if any: a sweep in start order with a stack of the ranges still
/// open, so its cost grows with the definitions times their nesting depth, not their square.
fn innermost_parents(definitions: &[Tag]) -> Vec<Option<usize>> {
    let mut order: Vec<usize> = (0..definitions.len()).collect();
    // By start, the wider first, so that a range comes before those it holds.
    order.sort_by_key(|&i| {
        let r = &definitions[i].line_range;
        (r.start, std::cmp::Reverse(r.end))
    });
    let mut parents = vec![None; definitions.len()];
    let mut open: Vec<usize> = Vec::new();
    for i in order {
        let range = &definitions[i].line_range;
        // A range ending before this one starts holds nothing that starts later.
        open.retain(|&o| definitions[o].line_range.end >= range.start);
        parents[i] = open.iter().rev().copied().find(|&o| {
            let outer = &definitions[o].line_range;
            outer.start <= range.start && range.end <= outer.end && outer != range
        });
        // A range equal to the last one open holds nothing more than it does (a minified
        // file's definitions all share one line).
        if open
            .last()
            .is_some_and(|&o| definitions[o].line_range == *range)
        {
            continue;
        }
        open.push(i);
    }
    parents
}

fn is_callable(kind: &str) -> bool {
    matches!(kind, "function" | "method")
}

fn is_type(kind: &str) -> bool {
    matches!(
        kind,
        "class" | "interface" | "type" | "struct" | "enum" | "trait" | "object"
    )
}

fn is_module_level(kind: &str) -> bool {
    !matches!(kind, "method" | "macro" | "module")
}

/// The line at most [`MAX_LINE`] bytes (at a char boundary).
fn cut(line: &str) -> String {
    let mut end = line.len().min(MAX_LINE);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line[..end].to_string()
}

/// The line ranges (the `impl` line, the closing `}` line) of the inherent `impl` blocks of
/// `name` written at the file's top level (`impl Name {`, `impl<T> Name<T> {`; not `impl X for
/// Name`).
fn rust_inherent_impls(lines: &[&str], name: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let head = line.split('{').next().unwrap_or(line);
        let is_impl = line.starts_with("impl") && !head.contains(" for ");
        if is_impl && names_type(head, name) {
            let end = (i + 1..lines.len())
                .find(|&j| lines[j].starts_with('}'))
                .unwrap_or(lines.len());
            out.push((i, end));
            i = end;
        }
        i += 1;
    }
    out
}

/// Whether an `impl` head's implemented type is `name`: the first path after `impl` and its
/// generic parameters (`impl<T: Clone> Name<T>` → `Name`; `impl fmt::Name` → `Name`).
fn names_type(head: &str, name: &str) -> bool {
    let mut rest = head.trim_start_matches("impl").trim_start();
    if rest.starts_with('<') {
        let mut depth = 0;
        let mut end = rest.len();
        for (i, c) in rest.char_indices() {
            match c {
                '<' => depth += 1,
                '>' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = rest[end..].trim_start();
    }
    let path = rest
        .split(|c: char| c == '<' || c.is_whitespace())
        .next()
        .unwrap_or("");
    path.rsplit("::").next() == Some(name)
}

/// Whether a Go method line `func (r *Name[T]) M(` has the receiver type `name`.
fn go_receiver_is(line: &str, name: &str) -> bool {
    let Some(receiver) = line
        .trim_start()
        .strip_prefix("func")
        .map(str::trim_start)
        .and_then(|r| r.strip_prefix('('))
        .and_then(|r| r.split(')').next())
    else {
        return false;
    };
    receiver
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(|word| word == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::intelligence::find_definitions;

    fn texts(language: &str, text: &str, scope: Scope<'_>) -> Option<Vec<String>> {
        let defs = find_definitions(language, text);
        outline(language, text, &defs, scope).map(|o| o.into_iter().map(|l| l.text).collect())
    }

    #[test]
    fn python_modules_and_classes() {
        let text = "import os\n\nclass Trivia:\n    \"\"\"Doc.\"\"\"\n\n    def __init__(self, indent=\"\"):\n        def inner():\n            pass\n\n    def copy(self):\n        return self\n\n    def _private(self):\n        pass\n\n\ndef parse_rfc3339(value):\n    return value\n\n\ndef _helper():\n    pass\n";
        assert_eq!(
            texts("python", text, Scope::Module).unwrap(),
            vec![
                "class Trivia:",
                "def parse_rfc3339(value):",
                "def _helper():"
            ]
        );
        let members = outline(
            "python",
            text,
            &find_definitions("python", text),
            Scope::Type("Trivia"),
        )
        .unwrap();
        let lines: Vec<(&str, bool, bool)> = members
            .iter()
            .map(|l| (l.text.as_str(), l.header, l.private))
            .collect();
        assert_eq!(
            lines,
            vec![
                ("class Trivia:", true, false),
                ("    def copy(self):", false, false),
                ("    def _private(self):", false, true),
            ]
        );
        assert!(texts("python", text, Scope::Type("Missing")).is_none());
        assert!(texts("python", text, Scope::Type("parse_rfc3339")).is_none());
    }

    #[test]
    fn rust_inherent_impls_only() {
        let text = "pub struct Error {\n    kind: Kind,\n}\n\nimpl Error {\n    pub(super) fn new_closed() -> Error {\n        todo!()\n    }\n\n    fn new_incomplete() -> Error {\n        todo!()\n    }\n}\n\nimpl fmt::Display for Error {\n    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {\n        todo!()\n    }\n}\n\nimpl<T: Clone> Other<T> {\n    fn other(&self) {}\n}\n\npub fn top_level() {}\n";
        assert_eq!(
            texts("rust", text, Scope::Type("Error")).unwrap(),
            vec![
                "pub struct Error {",
                "impl Error {",
                "    pub(super) fn new_closed() -> Error {",
                "    fn new_incomplete() -> Error {",
            ]
        );
        assert_eq!(
            texts("rust", text, Scope::Type("Other")).unwrap_or_default(),
            Vec::<String>::new(),
            "no type of that name is defined"
        );
        let module = texts("rust", text, Scope::Module).unwrap();
        assert!(
            module.contains(&"pub fn top_level() {}".to_string()),
            "{module:?}"
        );
        assert!(
            !module.iter().any(|l| l.contains("new_closed")),
            "{module:?}"
        );
        assert!(names_type("impl<T: Clone> Other<T> ", "Other"));
        assert!(names_type("impl fmt::Debug ", "Debug"));
    }

    #[test]
    fn go_methods_in_a_file_that_does_not_define_their_type() {
        let text = "package toml\n\nfunc (md *MetaData) Keys() []Key {\n\treturn nil\n}\n\nfunc (k Key) String() string {\n\treturn \"\"\n}\n";
        assert_eq!(texts("go", text, Scope::Type("MetaData")), None);
        assert_eq!(
            texts("go", text, Scope::Methods("MetaData")).unwrap(),
            vec!["func (md *MetaData) Keys() []Key {"]
        );
        assert_eq!(texts("go", text, Scope::Methods("Decoder")), None);
        assert_eq!(
            texts("rust", "impl A { fn f() {} }\n", Scope::Methods("A")),
            None
        );
    }

    #[test]
    fn go_methods_by_receiver() {
        let text = "package toml\n\ntype MetaData struct {\n\tkeys []Key\n}\n\nfunc (md *MetaData) IsDefined(key ...string) bool {\n\treturn false\n}\n\nfunc (k Key) String() string {\n\treturn \"\"\n}\n\nfunc DecodeFile(path string, v any) (MetaData, error) {\n\treturn MetaData{}, nil\n}\n";
        assert_eq!(
            texts("go", text, Scope::Type("MetaData")).unwrap(),
            vec![
                "type MetaData struct {",
                "func (md *MetaData) IsDefined(key ...string) bool {"
            ]
        );
        let module = texts("go", text, Scope::Module).unwrap();
        assert!(
            module.contains(&"func DecodeFile(path string, v any) (MetaData, error) {".to_string()),
            "{module:?}"
        );
        assert!(!module.iter().any(|l| l.contains("IsDefined")));
    }

    #[test]
    fn typescript_class_members() {
        let text = "export class Reaction {\n    constructor(public name_: string) {}\n    schedule_() {\n        this.x = 1\n    }\n    track(fn: () => void) {\n        fn()\n    }\n}\n\nexport function autorun(view: any) {\n    return view\n}\n";
        let members = texts("javascript-typescript", text, Scope::Type("Reaction")).unwrap();
        assert_eq!(members[0], "export class Reaction {");
        assert!(
            members.contains(&"    schedule_() {".to_string()),
            "{members:?}"
        );
        assert!(
            members.contains(&"    track(fn: () => void) {".to_string()),
            "{members:?}"
        );
        let module = texts("javascript-typescript", text, Scope::Module).unwrap();
        assert!(
            module.iter().any(|l| l.contains("function autorun")),
            "{module:?}"
        );
    }

    /// A file of many definitions, nested and on one shared line: the outline is the same as
    /// the nesting rule says, found without a quadratic scan.
    #[test]
    fn many_definitions() {
        let mut text = String::from("class Big:\n");
        for i in 0..3000 {
            text.push_str(&format!(
                "    def m{i}(self):\n        def inner{i}():\n            pass\n"
            ));
        }
        for i in 0..3000 {
            text.push_str(&format!("def f{i}(): pass\n"));
        }
        let members = texts("python", &text, Scope::Type("Big")).unwrap();
        assert_eq!(members.len(), MAX_LINES.min(3001));
        assert_eq!(members[1], "    def m0(self):");
        assert!(!members.iter().any(|l| l.contains("inner")));
        let module = texts("python", &text, Scope::Module).unwrap();
        assert_eq!(module[0], "class Big:");
        assert_eq!(module[1], "def f0(): pass");
        assert_eq!(module.len(), MAX_LINES.min(3001));
        // Minified: every definition on one line, none inside another.
        let one_line: String = (0..5000).map(|i| format!("function f{i}(){{}} ")).collect();
        let module = texts("javascript-typescript", &one_line, Scope::Module).unwrap();
        assert!(!module.is_empty());
    }

    /// Lines are cut to MAX_LINE bytes at a char boundary.
    #[test]
    fn long_lines_are_cut() {
        let long = format!("def f({}):\n    pass\n", "é".repeat(200));
        let lines = texts("python", &long, Scope::Module).unwrap();
        assert!(lines[0].len() <= MAX_LINE);
        assert!(lines[0].starts_with("def f("));
    }
}
