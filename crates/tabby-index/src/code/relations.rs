//! Relationship records: what each indexed file imports and which of its types implement or
//! extend which interfaces, traits or base classes. The indexer stores one record per file on
//! the file's document row (see `IndexSchema::field_file_relations`), so records are committed,
//! versioned and garbage-collected with the file's chunks; the server resolves them into a
//! repository's graph (imports to files, implementations to interfaces, tests to sources).
//!
//! Implementations come from the same tree-sitter parse as the chunks and tags: Rust
//! `impl Trait for Type`, Java/TypeScript `extends` / `implements` (classes and interfaces),
//! Python base classes, C++ base classes; Go's interfaces are implicit, so a Go file records
//! its interfaces' method names and its methods' receivers, and the graph matches method sets.
//! Import statements are recorded as the import reader reads them ([`super::imports`]), and
//! resolved against the repository's file list when the graph is built (a file added later
//! resolves without re-reading the importer).

use serde::{Deserialize, Serialize};
use tree_sitter::{Node, Tree};

use super::imports;

/// Bumped when what a record holds, or how it is extracted, changes; recorded in the index
/// metadata so that a change rebuilds the code corpus.
pub const RELATIONS_VERSION: u32 = 1;

/// Most implementations, methods and interfaces one record keeps (a generated file can declare
/// thousands), and method names per interface.
const MAX_IMPLEMENTATIONS: usize = 500;
const MAX_METHODS: usize = 2000;
const MAX_INTERFACES: usize = 200;
const MAX_INTERFACE_METHODS: usize = 100;
/// Longest name kept (a type or interface name longer than this is not a name).
const MAX_NAME_BYTES: usize = 200;
/// Nesting followed inside a heritage clause (`A<B<C>>`, `pkg.mod.Base`).
const MAX_HERITAGE_DEPTH: usize = 8;

/// A type that implements or extends an interface, trait or base class.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Implementation {
    /// The implementing type (`Type` in `impl Trait for Type`, the class declared).
    #[serde(rename = "type")]
    pub type_name: String,
    /// The interface, trait or base class, by its last name (`io::Write` → `Write`).
    pub interface: String,
    /// `impl` (Rust), `implements` or `extends`.
    pub how: String,
    /// 1-based, inclusive lines of the declaration (the impl block, the class).
    pub start_line: usize,
    pub end_line: usize,
}

/// A Go interface and the names of its methods.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterfaceDecl {
    pub name: String,
    pub methods: Vec<String>,
    pub start_line: usize,
    pub end_line: usize,
}

/// A Go method: its receiver's type and its name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MethodDecl {
    pub receiver: String,
    pub name: String,
}

/// The relations one file declares.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRelations {
    /// Import statements, one per entry, as [`imports::statements`] reads them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub imports: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub implements: Vec<Implementation>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceDecl>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<MethodDecl>,
}

/// The stored record of one indexed file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    /// Repository-relative path.
    pub path: String,
    pub language: String,
    /// The file's blob id (as in its document id).
    pub blob: String,
    #[serde(flatten)]
    pub relations: FileRelations,
}

impl FileRecord {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn from_json(text: &str) -> Option<FileRecord> {
        serde_json::from_str(text).ok()
    }
}

/// The relations of `text` (the file in `language`, parsed as `tree` when its language has a
/// grammar).
pub fn extract(language: &str, text: &str, tree: Option<&Tree>) -> FileRelations {
    let mut relations = FileRelations {
        imports: imports::statements(language, text)
            .into_iter()
            .take(imports::MAX_STATEMENTS)
            .collect(),
        ..Default::default()
    };
    if let (Some(tree), Some(kinds)) = (tree, declarations_of(language)) {
        walk(language, &kinds, tree, text, &mut relations);
    }
    relations
}

/// Where a language declares what a record holds: the node kinds to read (`targets`) and the
/// kinds that can contain them (`containers`). Only containers are walked into, so the walk
/// touches a file's declarations, not every node of its function bodies and expressions (a
/// tree-sitter query over the whole tree cost a fifth of the indexer's per-file time).
struct Declarations {
    targets: &'static [&'static str],
    containers: &'static [&'static str],
}

fn declarations_of(language: &str) -> Option<Declarations> {
    let (targets, containers): (&[&str], &[&str]) = match language {
        "rust" => (
            &["impl_item"],
            &["source_file", "mod_item", "declaration_list"],
        ),
        "python" => (
            &["class_definition"],
            &[
                "module",
                "block",
                "class_definition",
                "decorated_definition",
                "if_statement",
                "elif_clause",
                "else_clause",
                "try_statement",
                "except_clause",
                "finally_clause",
            ],
        ),
        "java" => (
            &[
                "class_declaration",
                "interface_declaration",
                "enum_declaration",
                "record_declaration",
            ],
            &[
                "program",
                "class_declaration",
                "interface_declaration",
                "enum_declaration",
                "record_declaration",
                "class_body",
                "interface_body",
                "enum_body",
                "enum_body_declarations",
            ],
        ),
        "javascript-typescript" => (
            &[
                "class_declaration",
                "abstract_class_declaration",
                "interface_declaration",
            ],
            &[
                "program",
                "export_statement",
                // `namespace x {}` is an expression statement holding an internal module.
                "expression_statement",
                "ambient_declaration",
                "internal_module",
                "module",
                "statement_block",
            ],
        ),
        "go" => (
            &["type_spec", "method_declaration"],
            &["source_file", "type_declaration"],
        ),
        "cpp" => (
            &["class_specifier", "struct_specifier"],
            &[
                "translation_unit",
                "namespace_definition",
                "declaration_list",
                "template_declaration",
                "linkage_specification",
                "preproc_if",
                "preproc_ifdef",
                "preproc_else",
                "preproc_elif",
                "declaration",
                "type_definition",
                "field_declaration",
                "field_declaration_list",
                "class_specifier",
                "struct_specifier",
            ],
        ),
        _ => return None,
    };
    Some(Declarations {
        targets,
        containers,
    })
}

fn lines(node: Node) -> (usize, usize) {
    (node.start_position().row + 1, node.end_position().row + 1)
}

fn name_text(node: Node, text: &str) -> Option<String> {
    let name = text.get(node.byte_range())?.trim();
    (!name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '$'))
    .then(|| name.to_string())
}

/// The last name of a type or expression node: `Foo`, `Foo<T>` → `Foo`, `a::b::Foo` → `Foo`,
/// `pkg.Base` → `Base`, `&Foo` → `Foo`.
fn type_name(node: Node, text: &str, depth: usize) -> Option<String> {
    if depth > MAX_HERITAGE_DEPTH {
        return None;
    }
    match node.kind() {
        "type_identifier" | "identifier" | "property_identifier" | "field_identifier" => {
            name_text(node, text)
        }
        // Generic types: the type before the arguments.
        "generic_type" | "template_type" | "subscript" => {
            let inner = node
                .child_by_field_name("type")
                .or_else(|| node.child_by_field_name("name"))
                .or_else(|| node.child_by_field_name("value"))
                .or_else(|| node.named_child(0))?;
            type_name(inner, text, depth + 1)
        }
        // Paths: their last part.
        "scoped_type_identifier"
        | "scoped_identifier"
        | "qualified_identifier"
        | "nested_type_identifier"
        | "attribute"
        | "member_expression" => {
            let last = node
                .child_by_field_name("name")
                .or_else(|| node.child_by_field_name("attribute"))
                .or_else(|| node.child_by_field_name("property"))
                .or_else(|| last_named_child(node))?;
            type_name(last, text, depth + 1)
        }
        "reference_type" | "pointer_type" | "abstract_type" => {
            let inner = node
                .child_by_field_name("type")
                .or_else(|| last_named_child(node))?;
            type_name(inner, text, depth + 1)
        }
        _ => None,
    }
}

fn last_named_child(node: Node) -> Option<Node> {
    let n = u32::try_from(node.named_child_count()).ok()?;
    node.named_child(n.checked_sub(1)?)
}

/// The supertypes a heritage clause names, with how (`extends` / `implements`), walking its
/// lists but never into type arguments or keyword arguments.
fn heritage(node: Node, text: &str, how: &str, depth: usize, out: &mut Vec<(String, String)>) {
    if depth > MAX_HERITAGE_DEPTH || out.len() >= MAX_IMPLEMENTATIONS {
        return;
    }
    let how = match node.kind() {
        "super_interfaces" | "implements_clause" => "implements",
        "superclass" | "extends_clause" | "extends_interfaces" | "extends_type_clause" => "extends",
        _ => how,
    };
    let mut cursor = node.walk();
    for child in node.named_children(&mut cursor) {
        match child.kind() {
            "type_arguments" | "type_parameters" | "keyword_argument" | "comment"
            | "access_specifier" | "arguments" => {}
            "type_list"
            | "argument_list"
            | "class_heritage"
            | "super_interfaces"
            | "superclass"
            | "extends_clause"
            | "implements_clause"
            | "extends_interfaces"
            | "extends_type_clause"
            | "base_class_clause" => heritage(child, text, how, depth + 1, out),
            _ => {
                if let Some(name) = type_name(child, text, depth + 1) {
                    out.push((name, how.to_string()));
                }
            }
        }
    }
}

/// Reads the declarations of `tree`, walking only into containers (its own stack: no
/// recursion, whatever the nesting).
fn walk(
    language: &str,
    kinds: &Declarations,
    tree: &Tree,
    text: &str,
    relations: &mut FileRelations,
) {
    let mut stack = vec![tree.root_node()];
    while let Some(node) = stack.pop() {
        if kinds.targets.contains(&node.kind()) {
            declaration(language, node, text, relations);
        }
        if node == tree.root_node() || kinds.containers.contains(&node.kind()) {
            let mut cursor = node.walk();
            let children: Vec<Node> = node.named_children(&mut cursor).collect();
            // In source order: the stack pops the first child first.
            stack.extend(children.into_iter().rev());
        }
    }
}

fn declaration(language: &str, node: Node, text: &str, relations: &mut FileRelations) {
    {
        {
            let (start_line, end_line) = lines(node);
            let push = |implements: &mut Vec<Implementation>,
                        type_name: String,
                        interface: String,
                        how: String| {
                if implements.len() < MAX_IMPLEMENTATIONS && type_name != interface {
                    implements.push(Implementation {
                        type_name,
                        interface,
                        how,
                        start_line,
                        end_line,
                    });
                }
            };
            match (language, node.kind()) {
                ("rust", "impl_item") => {
                    let (Some(trait_node), Some(type_node)) = (
                        node.child_by_field_name("trait"),
                        node.child_by_field_name("type"),
                    ) else {
                        return;
                    };
                    if let (Some(t), Some(ty)) = (
                        type_name(trait_node, text, 0),
                        type_name(type_node, text, 0),
                    ) {
                        push(&mut relations.implements, ty, t, "impl".into());
                    }
                }
                ("go", "type_spec") => {
                    if relations.interfaces.len() >= MAX_INTERFACES {
                        return;
                    }
                    let (Some(name), Some(body)) = (
                        node.child_by_field_name("name")
                            .and_then(|n| name_text(n, text)),
                        node.child_by_field_name("type")
                            .filter(|t| t.kind() == "interface_type"),
                    ) else {
                        return;
                    };
                    let mut methods = Vec::new();
                    let mut walk = body.walk();
                    for element in body.named_children(&mut walk) {
                        if matches!(element.kind(), "method_elem" | "method_spec")
                            && let Some(method) = element
                                .child_by_field_name("name")
                                .and_then(|n| name_text(n, text))
                            && methods.len() < MAX_INTERFACE_METHODS
                        {
                            methods.push(method);
                        }
                    }
                    relations.interfaces.push(InterfaceDecl {
                        name,
                        methods,
                        start_line,
                        end_line,
                    });
                }
                ("go", "method_declaration") => {
                    if relations.methods.len() >= MAX_METHODS {
                        return;
                    }
                    let name = node
                        .child_by_field_name("name")
                        .and_then(|n| name_text(n, text));
                    let receiver = node.child_by_field_name("receiver").and_then(|list| {
                        let mut walk = list.walk();
                        let parameter = list.named_children(&mut walk).next()?;
                        type_name(parameter.child_by_field_name("type")?, text, 0)
                    });
                    if let (Some(receiver), Some(name)) = (receiver, name) {
                        relations.methods.push(MethodDecl { receiver, name });
                    }
                }
                _ => {
                    // Classes and interfaces with heritage clauses.
                    let Some(name) = node
                        .child_by_field_name("name")
                        .and_then(|n| type_name(n, text, 0))
                    else {
                        return;
                    };
                    let mut supers = Vec::new();
                    let mut walk = node.walk();
                    for child in node.children(&mut walk) {
                        match child.kind() {
                            "argument_list"
                            | "class_heritage"
                            | "super_interfaces"
                            | "superclass"
                            | "extends_interfaces"
                            | "extends_type_clause"
                            | "base_class_clause" => {
                                let how = if language == "cpp" || language == "python" {
                                    "extends"
                                } else {
                                    "implements"
                                };
                                heritage(child, text, how, 0, &mut supers);
                            }
                            _ => {}
                        }
                    }
                    for (interface, how) in supers {
                        if interface != "object" && interface != "Object" {
                            push(&mut relations.implements, name.clone(), interface, how);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{super::intelligence, *};

    fn implementations(language: &str, text: &str) -> Vec<(String, String, String)> {
        let tree = intelligence::parse(language, text);
        extract(language, text, tree.as_ref())
            .implements
            .into_iter()
            .map(|i| (i.type_name, i.interface, i.how))
            .collect()
    }

    fn triple(t: &str, i: &str, how: &str) -> (String, String, String) {
        (t.into(), i.into(), how.into())
    }

    #[test]
    fn rust_trait_impls_but_not_inherent_ones() {
        let text = "struct Disk;\nimpl Disk { fn new() -> Self { Disk } }\nimpl Storage for Disk {\n    fn put(&self) {}\n}\nimpl<T: Clone> io::Write for Buffer<T> {}\nimpl std::fmt::Display for &Disk {}\n";
        assert_eq!(
            implementations("rust", text),
            vec![
                triple("Disk", "Storage", "impl"),
                triple("Buffer", "Write", "impl"),
                triple("Disk", "Display", "impl"),
            ]
        );
        let record = extract("rust", text, intelligence::parse("rust", text).as_ref());
        assert_eq!(
            (
                record.implements[0].start_line,
                record.implements[0].end_line
            ),
            (3, 5)
        );
    }

    #[test]
    fn java_extends_and_implements() {
        let text = "class FileStore extends BaseStore implements Store, java.io.Closeable {\n}\ninterface Store extends Readable<String> {}\nenum Mode implements Named { A }\n";
        assert_eq!(
            implementations("java", text),
            vec![
                triple("FileStore", "BaseStore", "extends"),
                triple("FileStore", "Store", "implements"),
                triple("FileStore", "Closeable", "implements"),
                triple("Store", "Readable", "extends"),
                triple("Mode", "Named", "implements"),
            ]
        );
    }

    #[test]
    fn typescript_and_javascript_heritage() {
        let text = "export class MemoryStore extends base.Store<string> implements Store, Closable {}\ninterface Store extends Reader<T>, Writer {}\nclass Plain extends Base {}\n";
        assert_eq!(
            implementations("javascript-typescript", text),
            vec![
                triple("MemoryStore", "Store", "extends"),
                triple("MemoryStore", "Store", "implements"),
                triple("MemoryStore", "Closable", "implements"),
                triple("Store", "Reader", "extends"),
                triple("Store", "Writer", "extends"),
                triple("Plain", "Base", "extends"),
            ]
        );
    }

    #[test]
    fn python_base_classes_without_keywords_or_object() {
        let text = "class DiskStore(base.Store, Generic[T], metaclass=ABCMeta):\n    pass\n\nclass Plain(object):\n    pass\n\nclass Bare:\n    pass\n";
        assert_eq!(
            implementations("python", text),
            vec![
                triple("DiskStore", "Store", "extends"),
                triple("DiskStore", "Generic", "extends"),
            ]
        );
    }

    #[test]
    fn cpp_base_classes() {
        let text =
            "class FileStore : public Store, private detail::Base<int> {};\nstruct Plain {};\n";
        assert_eq!(
            implementations("cpp", text),
            vec![
                triple("FileStore", "Store", "extends"),
                triple("FileStore", "Base", "extends"),
            ]
        );
    }

    #[test]
    fn declarations_inside_modules_namespaces_and_classes() {
        assert_eq!(
            implementations("rust", "mod inner {\n    impl Storage for Disk {}\n}\n"),
            vec![triple("Disk", "Storage", "impl")]
        );
        assert_eq!(
            implementations(
                "python",
                "if TYPE_CHECKING:\n    class A(Base):\n        pass\nclass Outer:\n    class Meta(Options):\n        pass\n"
            ),
            vec![
                triple("A", "Base", "extends"),
                triple("Meta", "Options", "extends")
            ]
        );
        assert_eq!(
            implementations(
                "java",
                "class Outer {\n  static class Inner implements Runnable {}\n}\n"
            ),
            vec![triple("Inner", "Runnable", "implements")]
        );
        assert_eq!(
            implementations(
                "javascript-typescript",
                "namespace shapes {\n  export class Square extends Shape {}\n}\n"
            ),
            vec![triple("Square", "Shape", "extends")]
        );
        assert_eq!(
            implementations("cpp", "namespace io {\nclass File : public Stream {};\n}\n"),
            vec![triple("File", "Stream", "extends")]
        );
    }

    #[test]
    fn go_interfaces_and_method_receivers() {
        let text = "package store\n\ntype Store interface {\n\tGet(key string) string\n\tPut(key, value string)\n}\n\ntype Disk struct{}\n\nfunc (d *Disk) Get(key string) string { return \"\" }\nfunc (d Disk) Put(key, value string) {}\nfunc helper() {}\n";
        let tree = intelligence::parse("go", text);
        let r = extract("go", text, tree.as_ref());
        assert_eq!(
            r.interfaces,
            vec![InterfaceDecl {
                name: "Store".into(),
                methods: vec!["Get".into(), "Put".into()],
                start_line: 3,
                end_line: 6,
            }]
        );
        assert_eq!(
            r.methods,
            vec![
                MethodDecl {
                    receiver: "Disk".into(),
                    name: "Get".into()
                },
                MethodDecl {
                    receiver: "Disk".into(),
                    name: "Put".into()
                },
            ]
        );
    }

    #[test]
    fn every_language_has_declarations_and_records_round_trip() {
        for language in [
            "rust",
            "python",
            "java",
            "javascript-typescript",
            "go",
            "cpp",
        ] {
            assert!(declarations_of(language).is_some(), "{language}");
            assert!(intelligence::intelligence(language).is_some(), "{language}");
        }
        let text = "from .store import Store\nimport os\n\nclass Disk(Store):\n    pass\n";
        let record = FileRecord {
            path: "pkg/disk.py".into(),
            language: "python".into(),
            blob: "abc".into(),
            relations: extract("python", text, intelligence::parse("python", text).as_ref()),
        };
        assert_eq!(
            record.relations.imports,
            vec!["from .store import Store", "import os"]
        );
        assert_eq!(FileRecord::from_json(&record.to_json()), Some(record));
    }

    /// `RELATIONS_COST_DIR=DIR cargo test --release -p tabby-index --lib -- --ignored
    /// relations_cost --nocapture`: what extracting the records adds to the indexer's one
    /// parse per file (parse, chunks, tags, records), on the files under DIR that pass the
    /// quality filters.
    #[test]
    #[ignore]
    fn relations_cost_in_dir() {
        let dir = std::env::var("RELATIONS_COST_DIR").expect("RELATIONS_COST_DIR");
        let languages = tabby_common::languages::LanguageTable::builtin();
        let mut files = Vec::new();
        let mut stack = vec![std::path::PathBuf::from(dir)];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                let Some(language) = languages.by_path(&path) else {
                    continue;
                };
                if let Ok(text) = std::fs::read_to_string(&path)
                    && crate::code::filter::quality_check(&text).is_ok()
                {
                    files.push((language.canonical_name().to_string(), text));
                }
            }
        }
        let bytes: usize = files.iter().map(|(_, t)| t.len()).sum();
        let started = std::time::Instant::now();
        let mut records = 0;
        for (language, text) in &files {
            let analysis = intelligence::analyze(language, text, 512);
            records += analysis.relations.implements.len() + analysis.relations.imports.len();
        }
        let whole = started.elapsed().as_secs_f64();
        let trees: Vec<_> = files
            .iter()
            .map(|(language, text)| intelligence::parse(language, text))
            .collect();
        let started = std::time::Instant::now();
        for ((language, text), tree) in files.iter().zip(&trees) {
            let _ = extract(language, text, tree.as_ref());
        }
        let relations = started.elapsed().as_secs_f64();
        println!(
            "{} files, {:.1} MB: analyze {whole:.2} s, of which relation records {relations:.2} s ({:.1} %), {records} imports and implementations",
            files.len(),
            bytes as f64 / 1e6,
            100.0 * relations / whole
        );
    }

    #[test]
    fn hostile_declarations_stay_bounded() {
        // Thousands of classes, each naming a base: the record keeps a bounded number.
        let text: String = (0..3000)
            .map(|i| format!("class C{i}(Base{i}):\n    pass\n"))
            .collect();
        let tree = intelligence::parse("python", &text);
        assert_eq!(
            extract("python", &text, tree.as_ref()).implements.len(),
            MAX_IMPLEMENTATIONS
        );
        // `Base[x][x]…`: each subscript wraps the one before it, 500 deep.
        let deep = format!("class D(Base{}):\n    pass\n", "[x]".repeat(500));
        let tree = intelligence::parse("python", &deep);
        assert!(
            extract("python", &deep, tree.as_ref())
                .implements
                .is_empty(),
            "a name nested deeper than the heritage bound is not a name"
        );
    }
}
