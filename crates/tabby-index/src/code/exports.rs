//! The names a module offers to `module.` / `module::` in another file, read from its text: a
//! superset of them (a few names too many cost nothing: they only leave the model more to
//! choose from), or none when the file may offer names it does not spell out — a wildcard
//! re-export, CommonJS exports, a Python package's submodules, a module-level `__getattr__`.
//!
//! - JavaScript/TypeScript: what its `export` statements name (`export const x`, `export
//!   { a as b }`), for a namespace import (`import * as m`); none with an `export default`,
//!   whose members a bundler's interop may offer through the namespace.
//! - Python: the names its top-level statements bind or mention, including the bodies of a
//!   top-level `if`/`try`/`with`/`for` (not those of a `def` or `class`), and the module's own
//!   dunders.
//! - Rust: the names on its top-level lines and in its multi-line `use` statements.
//! - Go: the exported names (upper case) on a package file's top-level lines and in its
//!   `var (`/`const (`/`type (` groups; a package is the union of its files.

use std::collections::BTreeSet;

use super::imports::is_javascript_family;

/// The names `text` (the file `path` in `language`) offers, sorted; none when they cannot all
/// be known, or for a language not read here.
pub fn module_names(language: &str, path: &str, text: &str) -> Option<Vec<String>> {
    let names = match language {
        js if is_javascript_family(js) => javascript(text)?,
        "python" => python(path, text)?,
        "rust" => rust(text)?,
        "go" => go(text),
        _ => return None,
    };
    Some(names.into_iter().collect())
}

/// The identifiers in `text` (letters, digits, `_`, `$`, any non-ASCII character; not
/// starting with a digit).
fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
        .filter(|w| !w.is_empty() && !w.starts_with(|c: char| c.is_ascii_digit()))
}

fn first_identifier(text: &str) -> Option<&str> {
    let text = text.trim_start();
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
        .unwrap_or(text.len());
    let name = &text[..end];
    (!name.is_empty() && !name.starts_with(|c: char| c.is_ascii_digit())).then_some(name)
}

fn javascript(text: &str) -> Option<BTreeSet<String>> {
    if text.contains("module.exports") || text.contains("exports.") {
        return None;
    }
    let mut names = BTreeSet::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(rest) = line.trim_start().strip_prefix("export") else {
            continue;
        };
        if rest.starts_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$') {
            continue; // `exported`, `exports`
        }
        let rest = rest.trim_start();
        if let Some(star) = rest.strip_prefix('*') {
            // `export * as ns from` names one; `export * from` names whatever another file has.
            match star
                .trim_start()
                .strip_prefix("as ")
                .and_then(first_identifier)
            {
                Some(ns) => names.insert(ns.to_string()),
                None => return None,
            };
            continue;
        }
        if rest.starts_with('=') {
            return None; // `export = x`: CommonJS in TypeScript
        }
        if let Some(list) = rest.strip_prefix('{').or_else(|| {
            rest.strip_prefix("type")
                .map(str::trim_start)
                .and_then(|r| r.strip_prefix('{'))
        }) {
            let mut list = list.to_string();
            while !list.contains('}') {
                match lines.next() {
                    Some(more) => {
                        list.push(' ');
                        list.push_str(more);
                    }
                    None => break,
                }
            }
            let list = list.split('}').next().unwrap_or_default();
            for item in list.split(',') {
                let words: Vec<&str> = item.split_whitespace().filter(|w| *w != "type").collect();
                let exported = match words.as_slice() {
                    [.., "as", alias] => alias,
                    [name, ..] => name,
                    [] => continue,
                };
                match first_identifier(exported) {
                    Some("default") => return None,
                    Some(name) => {
                        names.insert(name.to_string());
                    }
                    None => {}
                }
            }
            continue;
        }
        let mut words = rest;
        loop {
            let word = first_identifier(words).unwrap_or_default();
            match word {
                // A namespace import of a module with a default export may be its default's
                // members (bundlers' CommonJS interop): they are not named here.
                "default" => return None,
                "declare" | "async" | "abstract" | "const" | "let" | "var" | "function"
                | "class" | "interface" | "type" | "enum" | "namespace" | "module" | "import" => {
                    words = words.trim_start()[word.len()..].trim_start();
                    words = words.strip_prefix('*').unwrap_or(words);
                    let next = words.trim_start();
                    if matches!(word, "const" | "let" | "var")
                        && (next.starts_with('{') || next.starts_with('['))
                    {
                        // A destructuring export: every name before its `=`.
                        let pattern = next.split('=').next().unwrap_or_default();
                        names.extend(identifiers(pattern).map(str::to_string));
                        break;
                    }
                }
                "" => break,
                name => {
                    names.insert(name.to_string());
                    break;
                }
            }
        }
    }
    Some(names)
}

/// Names every Python module has.
const PYTHON_MODULE_DUNDERS: [&str; 10] = [
    "__name__",
    "__file__",
    "__doc__",
    "__all__",
    "__path__",
    "__spec__",
    "__loader__",
    "__package__",
    "__dict__",
    "__builtins__",
];

fn python(path: &str, text: &str) -> Option<BTreeSet<String>> {
    // A package offers its submodules too, which its text does not name.
    if path.ends_with("__init__.py") || path.ends_with("__init__.pyi") {
        return None;
    }
    let mut names: BTreeSet<String> = PYTHON_MODULE_DUNDERS
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut in_body = false;
    for line in text.lines() {
        let top = !line.starts_with(|c: char| c.is_whitespace());
        if top && !line.is_empty() {
            let head = line.trim_end();
            if head.starts_with("from ") && head.contains(" import *") {
                return None;
            }
            if head.starts_with("def __getattr__") {
                return None;
            }
            // The bodies of a function or class bind no module names (`@decorator` lines are
            // their own top-level lines), and of its line only its name counts.
            let definition = ["async def ", "def ", "class "]
                .iter()
                .find_map(|k| head.strip_prefix(k));
            in_body = definition.is_some();
            match definition {
                Some(rest) => names.extend(first_identifier(rest).map(str::to_string)),
                None => names.extend(identifiers(head).map(str::to_string)),
            }
        } else if !in_body {
            names.extend(identifiers(line).map(str::to_string));
        }
    }
    Some(names)
}

fn rust(text: &str) -> Option<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    let mut in_use = false;
    for line in text.lines() {
        let top = !line.starts_with(|c: char| c.is_whitespace());
        if top && !line.is_empty() {
            let head = line.trim_end();
            let is_use = head
                .split_whitespace()
                .skip_while(|w| w.starts_with("pub"))
                .next()
                == Some("use");
            if is_use && head.starts_with("pub") && head.contains('*') {
                return None; // `pub use x::*`
            }
            in_use = is_use && !head.ends_with(';');
            names.extend(identifiers(head).map(str::to_string));
        } else if in_use {
            if line.contains('*') {
                return None;
            }
            names.extend(identifiers(line).map(str::to_string));
            if line.trim_end().ends_with(';') {
                in_use = false;
            }
        }
    }
    Some(names)
}

fn go(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut in_group = false;
    for line in text.lines() {
        let top = !line.starts_with(|c: char| c.is_whitespace());
        if top && !line.is_empty() {
            let head = line.trim_end();
            in_group = ["var (", "const (", "type ("]
                .iter()
                .any(|k| head.starts_with(k));
            names.extend(identifiers(head).map(str::to_string));
        } else if in_group {
            names.extend(identifiers(line).map(str::to_string));
        }
    }
    names.retain(|n| n.starts_with(|c: char| c.is_uppercase()));
    names
}

#[cfg(test)]
mod tests {
    use super::module_names;

    fn names(language: &str, path: &str, text: &str) -> Vec<String> {
        module_names(language, path, text).expect("a closed set of names")
    }

    #[test]
    fn typescript_offers_what_its_exports_name() {
        let text = "\
import * as core from \"./internal/core.js\"
const hidden = 1
export const map: {
  <A, B>(f: (a: A) => B): Effect<B>
} = core.map
export declare const toMillis: (self: Duration) => number
export async function run() {}
export function* gen() {}
export abstract class Base {}
export interface Options { verbose: boolean }
export type Id = string
export const enum Kind { A }
export {
  unsafeGet,
  orElse as or,
  type Shape,
}
export { zip } from \"./zip.js\"
export * as Option from \"./Option.js\"
export const { left, right } = pair
";
        let got = names("javascript-typescript", "src/Effect.ts", text);
        for expected in [
            "map",
            "toMillis",
            "run",
            "gen",
            "Base",
            "Options",
            "Id",
            "Kind",
            "unsafeGet",
            "or",
            "Shape",
            "zip",
            "Option",
            "left",
            "right",
        ] {
            assert!(got.iter().any(|n| n == expected), "{expected} in {got:?}");
        }
        for absent in ["hidden", "core", "orElse", "Effect", "pair"] {
            assert!(!got.iter().any(|n| n == absent), "{absent} in {got:?}");
        }
    }

    #[test]
    fn files_that_may_offer_unnamed_names_give_no_set() {
        for (language, path, text) in [
            (
                "javascript-typescript",
                "a.ts",
                "export * from \"./b.js\"\n",
            ),
            ("javascript-typescript", "a.js", "module.exports = { a }\n"),
            ("javascript-typescript", "a.js", "exports.a = 1\n"),
            ("javascript-typescript", "a.ts", "export = Foo\n"),
            (
                "javascript-typescript",
                "a.js",
                "const inst = {}\nexport default inst;\n",
            ),
            (
                "javascript-typescript",
                "a.js",
                "const inst = {}\nexport { inst as default };\n",
            ),
            ("python", "pkg/__init__.py", "x = 1\n"),
            ("python", "pkg/a.py", "from .b import *\n"),
            (
                "python",
                "pkg/a.py",
                "def __getattr__(name):\n    return 1\n",
            ),
            ("rust", "src/a.rs", "pub use crate::b::*;\n"),
            ("rust", "src/a.rs", "pub use crate::{\n    b::*,\n};\n"),
            ("cobol", "a.cob", "x"),
        ] {
            assert_eq!(module_names(language, path, text), None, "{text:?}");
        }
    }

    #[test]
    fn python_offers_its_top_level_bindings_not_its_bodies() {
        let text = "\
import os
from .util import (
    helper,
    other as alias,
)
try:
    import json
except ImportError:
    json = None
CONSTANT = 1

@decorator
def parse(text, *, strict=False):
    local = text
    return local

class Parser:
    field = 1
";
        let got = names("python", "pkg/mod.py", text);
        for expected in [
            "os",
            "helper",
            "alias",
            "json",
            "CONSTANT",
            "decorator",
            "parse",
            "Parser",
            "__name__",
        ] {
            assert!(got.iter().any(|n| n == expected), "{expected} in {got:?}");
        }
        for absent in ["local", "field"] {
            assert!(!got.iter().any(|n| n == absent), "{absent} in {got:?}");
        }
    }

    #[test]
    fn rust_and_go_offer_their_top_level_items() {
        let rust = "\
use std::fmt;
pub use crate::other::{
    Alpha,
    beta,
};
pub mod inner;
pub fn parse(input: &str) -> Result<Value, Error> {
    let hidden = 1;
}
pub struct Value {
    field: u8,
}
";
        let got = names("rust", "src/a.rs", rust);
        for expected in ["fmt", "Alpha", "beta", "inner", "parse", "Value"] {
            assert!(got.iter().any(|n| n == expected), "{expected} in {got:?}");
        }
        for absent in ["hidden", "field"] {
            assert!(!got.iter().any(|n| n == absent), "{absent} in {got:?}");
        }
        let go = "\
package util

const (
\tMaxSize = 10
\tminSize = 1
)

func Parse(s string) (*Value, error) {
\tHidden := 1
}

type Value struct {
\tField int
}
";
        let got = names("go", "util/a.go", go);
        assert_eq!(got, ["MaxSize", "Parse", "Value"]);
    }
}
