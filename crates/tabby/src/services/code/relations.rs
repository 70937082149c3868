//! A repository's relationship graph, built from the relationship records the indexer stores
//! on each file's document row (`tabby_index::code::relations`): imports resolved to the
//! repository's files (and who imports each file), test files paired with the sources they
//! import, and implementations matched to the interfaces, traits and base classes they
//! implement (Go by method sets). Built once per index generation and source, on first use.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
};

use tabby_common::{
    api::code::CodeSearchError,
    index::{IndexSchema, code::is_test_path},
};
use tabby_index::code::{
    imports::{self, PathIndex},
    relations::FileRecord,
};
use tantivy::{
    TantivyDocument, Term,
    collector::DocSetCollector,
    query::TermQuery,
    schema::{IndexRecordOption, Value},
};

use super::CodeSearchService;

/// Records read for one repository at most (a bound on the graph's memory and build time).
const MAX_RECORDS: usize = 200_000;
/// Graphs kept (one per source).
const CACHED_GRAPHS: usize = 8;
/// Types a Go interface's method set is matched to at most.
const MAX_GO_IMPLEMENTATIONS: usize = 50;

/// Where a type implements (or extends) an interface, trait or base class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImplSite {
    pub path: String,
    pub type_name: String,
    pub interface: String,
    /// `impl`, `implements`, `extends`, or `method set` (Go).
    pub how: String,
    /// 1-based, inclusive; 0 when only the file is known (a Go type matched by its methods).
    pub start_line: usize,
    pub end_line: usize,
}

/// The relations of one repository's indexed files.
#[derive(Default)]
pub struct RelationGraph {
    paths: Vec<String>,
    by_path: HashMap<String, usize>,
    imports: Vec<Vec<usize>>,
    imported_names: Vec<Vec<String>>,
    imported_by: Vec<Vec<usize>>,
    /// Interface name → the types that implement it.
    implementations: HashMap<String, Vec<ImplSite>>,
    /// Type name → what it implements.
    supertypes: HashMap<String, Vec<ImplSite>>,
}

impl RelationGraph {
    /// Builds the graph of `records` (several refs may hold a path: the first record wins).
    pub fn build(records: Vec<FileRecord>) -> RelationGraph {
        let mut graph = RelationGraph::default();
        let mut kept = Vec::new();
        for record in records {
            if graph.by_path.contains_key(&record.path) {
                continue;
            }
            graph.by_path.insert(record.path.clone(), kept.len());
            graph.paths.push(record.path.clone());
            kept.push(record);
        }
        let index = PathIndex::new(graph.paths.iter().cloned());
        let n = kept.len();
        graph.imports = vec![Vec::new(); n];
        graph.imported_names = vec![Vec::new(); n];
        graph.imported_by = vec![Vec::new(); n];
        for (i, record) in kept.iter().enumerate() {
            let resolved = imports::resolve_statements(
                &record.language,
                &record.path,
                &record.relations.imports,
                &index,
            );
            for file in resolved.files {
                if let Some(&j) = graph.by_path.get(&file)
                    && j != i
                    && !graph.imports[i].contains(&j)
                {
                    graph.imports[i].push(j);
                    graph.imported_by[j].push(i);
                }
            }
            graph.imported_names[i] = resolved.names;
            for implementation in &record.relations.implements {
                let site = ImplSite {
                    path: record.path.clone(),
                    type_name: implementation.type_name.clone(),
                    interface: implementation.interface.clone(),
                    how: implementation.how.clone(),
                    start_line: implementation.start_line,
                    end_line: implementation.end_line,
                };
                graph
                    .implementations
                    .entry(site.interface.clone())
                    .or_default()
                    .push(site.clone());
                graph
                    .supertypes
                    .entry(site.type_name.clone())
                    .or_default()
                    .push(site);
            }
        }
        graph.match_go_interfaces(&kept);
        graph
    }

    /// Go: a type implements an interface when its methods (in its package, the file's
    /// directory) include every method of the interface.
    fn match_go_interfaces(&mut self, records: &[FileRecord]) {
        let dir = |path: &str| path.rsplit_once('/').map_or("", |(d, _)| d).to_string();
        // (package directory, receiver type) → its method names and the first file declaring one.
        let mut types: HashMap<(String, String), (HashSet<&str>, &str)> = HashMap::new();
        // Method name → the types that have it.
        let mut by_method: HashMap<&str, Vec<(String, String)>> = HashMap::new();
        for record in records.iter().filter(|r| r.language == "go") {
            for method in &record.relations.methods {
                let key = (dir(&record.path), method.receiver.clone());
                let entry = types
                    .entry(key.clone())
                    .or_insert_with(|| (HashSet::new(), record.path.as_str()));
                if entry.0.insert(method.name.as_str()) {
                    by_method.entry(method.name.as_str()).or_default().push(key);
                }
            }
        }
        for record in records.iter().filter(|r| r.language == "go") {
            for interface in &record.relations.interfaces {
                let Some(first) = interface.methods.first() else {
                    continue;
                };
                let mut found = 0;
                for key in by_method.get(first.as_str()).into_iter().flatten() {
                    let Some((methods, path)) = types.get(key) else {
                        continue;
                    };
                    if !interface
                        .methods
                        .iter()
                        .all(|m| methods.contains(m.as_str()))
                    {
                        continue;
                    }
                    let site = ImplSite {
                        path: path.to_string(),
                        type_name: key.1.clone(),
                        interface: interface.name.clone(),
                        how: "method set".into(),
                        start_line: 0,
                        end_line: 0,
                    };
                    self.implementations
                        .entry(interface.name.clone())
                        .or_default()
                        .push(site.clone());
                    self.supertypes.entry(key.1.clone()).or_default().push(site);
                    found += 1;
                    if found == MAX_GO_IMPLEMENTATIONS {
                        break;
                    }
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.paths.len()
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// The repository files `path` imports, and the names it imports from them.
    pub fn imports_of(&self, path: &str) -> (Vec<&str>, &[String]) {
        match self.by_path.get(path) {
            Some(&i) => (
                self.imports[i]
                    .iter()
                    .map(|&j| self.paths[j].as_str())
                    .collect(),
                &self.imported_names[i],
            ),
            None => (Vec::new(), &[]),
        }
    }

    /// The files that import `path`.
    pub fn imported_by(&self, path: &str) -> Vec<&str> {
        self.by_path.get(path).map_or_else(Vec::new, |&i| {
            self.imported_by[i]
                .iter()
                .map(|&j| self.paths[j].as_str())
                .collect()
        })
    }

    /// Test files that import `path`.
    pub fn tests_importing(&self, path: &str) -> Vec<&str> {
        self.imported_by(path)
            .into_iter()
            .filter(|p| is_test_path(p))
            .collect()
    }

    /// The types that implement `interface`.
    pub fn implementations_of(&self, interface: &str) -> &[ImplSite] {
        self.implementations
            .get(interface)
            .map_or(&[], Vec::as_slice)
    }

    /// What `type_name` implements or extends.
    pub fn supertypes_of(&self, type_name: &str) -> &[ImplSite] {
        self.supertypes.get(type_name).map_or(&[], Vec::as_slice)
    }
}

/// Graphs per (source, index generation).
#[derive(Default)]
pub struct GraphCache {
    graphs: Mutex<Vec<(String, u64, Arc<RelationGraph>)>>,
}

impl CodeSearchService {
    /// The relationship graph of `source_id`'s indexed files (built on first use per index
    /// generation).
    pub fn relation_graph(&self, source_id: &str) -> Result<Arc<RelationGraph>, CodeSearchError> {
        let searcher = self.loaded()?.reader.searcher();
        let generation = searcher.generation().generation_id();
        {
            let graphs = self.graphs.graphs.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, _, graph)) = graphs
                .iter()
                .find(|(s, g, _)| s == source_id && *g == generation)
            {
                return Ok(graph.clone());
            }
        }
        let schema = IndexSchema::instance();
        let query = TermQuery::new(
            Term::from_field_text(schema.field_file_source, source_id),
            IndexRecordOption::Basic,
        );
        let addresses = searcher
            .search(&query, &DocSetCollector)
            .map_err(|e| CodeSearchError::Other(e.into()))?;
        let mut addresses: Vec<_> = addresses.into_iter().collect();
        // Document order: the doc store is read block by block.
        addresses.sort();
        let records: Vec<FileRecord> = addresses
            .into_iter()
            .take(MAX_RECORDS)
            .filter_map(|address| {
                let doc: TantivyDocument = searcher.doc(address).ok()?;
                FileRecord::from_json(doc.get_first(schema.field_file_relations)?.as_str()?)
            })
            .collect();
        let graph = Arc::new(RelationGraph::build(records));
        let mut graphs = self.graphs.graphs.lock().unwrap_or_else(|e| e.into_inner());
        graphs.retain(|(s, g, _)| s != source_id && *g == generation);
        if graphs.len() >= CACHED_GRAPHS {
            graphs.remove(0);
        }
        graphs.push((source_id.to_string(), generation, graph.clone()));
        Ok(graph)
    }
}

#[cfg(test)]
mod tests {
    use tabby_index::code::relations::{FileRelations, Implementation, InterfaceDecl, MethodDecl};

    use super::*;

    fn record(path: &str, language: &str, relations: FileRelations) -> FileRecord {
        FileRecord {
            path: path.into(),
            language: language.into(),
            blob: "0".into(),
            relations,
        }
    }

    #[test]
    fn imports_resolve_both_ways_and_tests_pair_by_import() {
        let graph = RelationGraph::build(vec![
            record(
                "pkg/cart.py",
                "python",
                FileRelations {
                    imports: vec!["from .pricing import discount".into(), "import os".into()],
                    ..Default::default()
                },
            ),
            record("pkg/pricing.py", "python", FileRelations::default()),
            record(
                "tests/test_checkout.py",
                "python",
                FileRelations {
                    imports: vec!["from pkg.pricing import discount".into()],
                    ..Default::default()
                },
            ),
        ]);
        assert_eq!(
            graph.imports_of("pkg/cart.py"),
            (vec!["pkg/pricing.py"], &["discount".to_string()][..])
        );
        assert_eq!(
            graph.imported_by("pkg/pricing.py"),
            vec!["pkg/cart.py", "tests/test_checkout.py"]
        );
        assert_eq!(
            graph.tests_importing("pkg/pricing.py"),
            vec!["tests/test_checkout.py"]
        );
        assert!(graph.imports_of("nowhere.py").0.is_empty());
    }

    #[test]
    fn implementations_both_ways_and_go_method_sets() {
        let graph = RelationGraph::build(vec![
            record(
                "src/disk.rs",
                "rust",
                FileRelations {
                    implements: vec![Implementation {
                        type_name: "Disk".into(),
                        interface: "Storage".into(),
                        how: "impl".into(),
                        start_line: 3,
                        end_line: 9,
                    }],
                    ..Default::default()
                },
            ),
            record(
                "store/store.go",
                "go",
                FileRelations {
                    interfaces: vec![InterfaceDecl {
                        name: "Store".into(),
                        methods: vec!["Get".into(), "Put".into()],
                        start_line: 3,
                        end_line: 6,
                    }],
                    ..Default::default()
                },
            ),
            record(
                "store/disk.go",
                "go",
                FileRelations {
                    methods: vec![
                        MethodDecl {
                            receiver: "Disk".into(),
                            name: "Get".into(),
                        },
                        MethodDecl {
                            receiver: "Disk".into(),
                            name: "Put".into(),
                        },
                        MethodDecl {
                            receiver: "Half".into(),
                            name: "Get".into(),
                        },
                    ],
                    ..Default::default()
                },
            ),
        ]);
        let rust = graph.implementations_of("Storage");
        assert_eq!(rust.len(), 1);
        assert_eq!(
            (rust[0].path.as_str(), rust[0].start_line),
            ("src/disk.rs", 3)
        );
        assert_eq!(graph.supertypes_of("Disk").len(), 2, "Rust and Go Disk");
        let go: Vec<&str> = graph
            .implementations_of("Store")
            .iter()
            .map(|s| s.type_name.as_str())
            .collect();
        assert_eq!(go, vec!["Disk"], "Half lacks Put");
        assert_eq!(graph.implementations_of("Store")[0].how, "method set");
    }
}
