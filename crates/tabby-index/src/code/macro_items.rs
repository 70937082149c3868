//! Rust items written inside a macro call's body (`ffi_fn! { pub fn hyper_body_new() … }`,
//! `cfg_rt! { pub fn spawn … }`): tree-sitter leaves such a body as an unparsed token tree, so
//! the tags query never sees the functions and types in it. They are found here from the
//! tokens: an item keyword directly followed by an identifier, the item running to its body
//! (`{ … }`) or its `;`. Bodies of `macro_rules!` definitions are left out: their `fn $name`
//! items are templates, not definitions.

use std::ops::Range;

use tree_sitter::{Node, Tree};

/// The tag kind of the item an anonymous keyword token starts, as the tags queries name it.
fn kind_of(keyword: &str) -> Option<&'static str> {
    Some(match keyword {
        "fn" => "function",
        "struct" | "enum" | "union" | "type" => "class",
        "trait" => "interface",
        "mod" => "module",
        _ => return None,
    })
}

/// One item found in a macro call's body.
pub(crate) struct MacroItem<'t> {
    pub kind: &'static str,
    /// The item's name (an `identifier` token).
    pub name: Node<'t>,
    /// 0-based rows from the item's header (`pub(crate) unsafe fn …`) to the end of its body.
    pub rows: Range<usize>,
    /// Where a doc comment above the item ends: the first attribute (`#[…]`) over the header
    /// on the rows just above it, else the header's first token.
    pub doc_anchor: Node<'t>,
}

/// Items inside the bodies of the macro calls of a Rust tree, in source order: one walk of the
/// tree that steps over everything but macro calls' token trees.
pub(crate) fn macro_items<'t>(tree: &'t Tree, text: &[u8]) -> Vec<MacroItem<'t>> {
    let mut out = Vec::new();
    let mut cursor = tree.walk();
    loop {
        let node = cursor.node();
        let descend = match node.kind() {
            // A template, not code: `fn $name` and `fn helper` alike are what calls expand to.
            "macro_definition" => false,
            // A token tree holds no parsed nodes, so no macro call nests in one.
            "macro_invocation" => {
                let mut trees = vec![node];
                while let Some(tree) = trees.pop() {
                    let mut walk = tree.walk();
                    for child in tree.children(&mut walk) {
                        if child.kind() == "token_tree" {
                            items_in(child, text, &mut out);
                            trees.push(child);
                        }
                    }
                }
                false
            }
            _ => true,
        };
        if descend && cursor.goto_first_child() {
            continue;
        }
        while !cursor.goto_next_sibling() {
            if !cursor.goto_parent() {
                out.sort_by_key(|item| item.name.start_byte());
                return out;
            }
        }
    }
}

/// The items among one token tree's direct children (nested trees are visited on their own).
fn items_in<'t>(tree: Node<'t>, text: &[u8], out: &mut Vec<MacroItem<'t>>) {
    let mut cursor = tree.walk();
    let tokens: Vec<Node<'t>> = tree.children(&mut cursor).collect();
    for (i, token) in tokens.iter().enumerate() {
        if token.is_named() {
            continue;
        }
        let Some(kind) = kind_of(token.kind()) else {
            continue;
        };
        let Some(name) = tokens.get(i + 1).filter(|n| n.kind() == "identifier") else {
            continue;
        };
        // The item ends with its body or its `;`, whichever comes first.
        let end = tokens[i + 2..]
            .iter()
            .find(|t| t.kind() == ";" || (t.kind() == "token_tree" && opens_with(**t, "{")))
            .map_or(name.end_position().row, |t| t.end_position().row);
        let header = header_start(&tokens, i, text);
        out.push(MacroItem {
            kind,
            name: *name,
            rows: tokens[header].start_position().row..end + 1,
            doc_anchor: tokens[attributes_start(&tokens, header)],
        });
    }
}

fn opens_with(node: Node, bracket: &str) -> bool {
    node.child(0).is_some_and(|c| c.kind() == bracket)
}

/// The first token of the item header whose keyword is at `keyword`: the visibility and
/// qualifiers before it on the same row (`pub`, `pub(crate)`, `unsafe`, `async`, `extern "C"`).
fn header_start(tokens: &[Node], keyword: usize, text: &[u8]) -> usize {
    let row = tokens[keyword].start_position().row;
    let is_extern =
        |n: Node| n.kind() == "identifier" && text.get(n.byte_range()) == Some(&b"extern"[..]);
    let mut start = keyword;
    while start > 0 {
        let prev = tokens[start - 1];
        let before = start.checked_sub(2).map(|i| tokens[i]);
        let qualifier = match prev.kind() {
            "pub" | "unsafe" | "async" | "const" | "default" => true,
            "identifier" => is_extern(prev),
            // `extern "C"`, `pub(crate)`
            "string_literal" => before.is_some_and(is_extern),
            "token_tree" => opens_with(prev, "(") && before.is_some_and(|b| b.kind() == "pub"),
            _ => false,
        };
        if prev.start_position().row != row || !qualifier {
            break;
        }
        start -= 1;
    }
    start
}

/// The first token of the attributes (`#[…]`, `#![…]` excluded) right above the header.
fn attributes_start(tokens: &[Node], header: usize) -> usize {
    let mut start = header;
    while start >= 2
        && tokens[start - 1].kind() == "token_tree"
        && opens_with(tokens[start - 1], "[")
        && tokens[start - 2].kind() == "#"
    {
        start -= 2;
    }
    start
}

#[cfg(test)]
mod tests {
    use crate::code::intelligence::{file_tags, find_definitions};

    const SOURCE: &str = r#"use std::ptr;

ffi_fn! {
    /// Creates a new "empty" body.
    ///
    /// More about it.
    pub(crate) unsafe fn hyper_body_new() -> *mut hyper_body {
        Box::into_raw(Box::new(hyper_body::empty()))
    } ?= ptr::null_mut()
}

cfg_rt! {
    /// A handle.
    #[cfg(feature = "rt")]
    #[derive(Clone)]
    pub struct Handle { inner: u8 }

    mod blocking {
        pub extern "C" fn spawn_blocking(f: fn(u8) -> u8) {}
    }
    type Callback = fn(u8);
}

macro_rules! make {
    ($name:ident) => { fn $name() {} fn template_only() {} };
}

#[cfg(fn_like)]
fn plain() {}
"#;

    /// (name, kind, 0-based first row, rows past the end) of each definition.
    fn definitions() -> Vec<(String, String, usize, usize)> {
        find_definitions("rust", SOURCE)
            .into_iter()
            .map(|t| (t.name, t.kind, t.line_range.start, t.line_range.end))
            .collect()
    }

    #[test]
    fn items_in_macro_call_bodies_are_definitions_with_their_docs() {
        let found = definitions();
        // Not `fn(u8)` (a type), `template_only` or `$name` (a `macro_rules!` template) or
        // `fn_like` (an attribute's argument).
        let expected = [
            ("hyper_body_new", "function", 6, 9),
            ("Handle", "class", 15, 16),
            ("blocking", "module", 17, 20),
            ("spawn_blocking", "function", 18, 19),
            ("Callback", "class", 20, 21),
            ("make", "macro", 23, 26),
            ("plain", "function", 28, 29),
        ];
        let expected: Vec<(String, String, usize, usize)> = expected
            .iter()
            .map(|(n, k, a, b)| (n.to_string(), k.to_string(), *a, *b))
            .collect();
        assert_eq!(found, expected);

        // The doc comment above the header, and above the attributes, is the item's doc.
        let tags = file_tags("rust", SOURCE).unwrap();
        let doc = |name: &str| {
            tags.definitions
                .iter()
                .find(|(t, _)| t.name == name)
                .and_then(|(_, d)| d.as_ref())
                .map(|d| (d.text.clone(), d.lines.clone()))
        };
        assert_eq!(
            doc("hyper_body_new"),
            Some((
                "Creates a new \"empty\" body.\n\nMore about it.".into(),
                3..6
            ))
        );
        assert_eq!(doc("Handle"), Some(("A handle.".into(), 12..13)));
        assert_eq!(doc("spawn_blocking"), None);
    }
}
