//! Indexing real git repositories made in the test: chunks and start lines, skip reasons,
//! incremental runs, garbage collection, refs, plain directories and settings changes.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
};

use serde_json::Value;
use tabby_common::{
    index::{IndexSchema, corpus, stored_json},
    languages::LanguageTable,
};
use tabby_index::{
    CodeIndexer, EmbeddingSetup, HashEmbedding, NoProgress, RepositorySummary, RepositoryToIndex,
};
use tantivy::{Index, TantivyDocument, collector::DocSetCollector};

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?}");
}

fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn commit_all(dir: &Path, message: &str) {
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", message]);
}

const PYTHON: &str = "import os\n\n\ndef read_config(path):\n    with open(path) as f:\n        return f.read()\n\n\nclass Loader:\n    def load(self, name):\n        return read_config(os.path.join('conf', name))\n";
const RUST: &str = "/// Adds two numbers.\npub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n\npub struct Point {\n    x: f32,\n}\n";

fn make_repo() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("project");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    write(&repo, "src/config.py", PYTHON);
    write(&repo, "src/lib.rs", RUST);
    // Many functions, so the file is cut into several chunks.
    let big: String = (0..60)
        .map(|i| format!("def handler_{i}(request):\n    return respond(request, code={i})\n\n\n"))
        .collect();
    write(&repo, "src/handlers.py", &big);
    write(
        &repo,
        "README.md",
        "# Project\n\nA project that reads configs.\n",
    );
    write(&repo, "assets/logo.png", "\u{0}PNG binary");
    write(&repo, "assets/data.bin", "no language");
    write(&repo, "dist/app.min.js", &"var a=1;".repeat(100));
    commit_all(&repo, "initial");
    (tmp, repo)
}

struct Fixture {
    _tmp: tempfile::TempDir,
    repo: PathBuf,
    index_dir: PathBuf,
    repos_dir: PathBuf,
}

impl Fixture {
    fn new() -> Self {
        let (tmp, repo) = make_repo();
        let index_dir = tmp.path().join("index");
        let repos_dir = tmp.path().join("repositories");
        Self {
            _tmp: tmp,
            repo,
            index_dir,
            repos_dir,
        }
    }

    fn source(&self, refs: &[&str]) -> RepositoryToIndex {
        RepositoryToIndex {
            source_id: "config:test".into(),
            git_url: format!("file://{}", self.repo.display()),
            refs: refs.iter().map(|s| s.to_string()).collect(),
        }
    }

    async fn index_with(&self, dim: usize, repo: &RepositoryToIndex) -> RepositorySummary {
        let embedding = HashEmbedding::new(dim);
        let setup = EmbeddingSetup {
            model_id: embedding.model_id(),
            model: Arc::new(embedding),
            max_input_bytes: 5120,
        };
        let mut indexer = CodeIndexer::open(&self.index_dir, Some(setup), LanguageTable::builtin())
            .await
            .unwrap();
        indexer
            .index_repository(repo, &self.repos_dir, &NoProgress)
            .await
            .unwrap()
    }

    async fn index(&self) -> RepositorySummary {
        self.index_with(32, &self.source(&[])).await
    }

    /// Chunk rows as (filepath, start_line, body).
    fn chunks(&self) -> Vec<(String, Option<u64>, String)> {
        let index = Index::open_in_dir(&self.index_dir).unwrap();
        let schema = IndexSchema::instance();
        let searcher = index.reader().unwrap().searcher();
        let query = tantivy::query::TermQuery::new(
            schema.corpus_term(corpus::CODE),
            tantivy::schema::IndexRecordOption::Basic,
        );
        let mut out = Vec::new();
        for address in searcher.search(&query, &DocSetCollector).unwrap() {
            let doc: TantivyDocument = searcher.doc(address).unwrap();
            if doc.get_first(schema.field_chunk_id).is_none() {
                continue;
            }
            let attrs: Value = stored_json(&doc, schema.field_chunk_attributes);
            out.push((
                attrs["chunk_filepath"].as_str().unwrap().to_string(),
                attrs["chunk_start_line"].as_u64(),
                doc.get_first(schema.field_chunk_text)
                    .and_then(|v| tantivy::schema::Value::as_str(&v))
                    .unwrap()
                    .to_string(),
            ));
        }
        out.sort();
        out
    }
}

#[tokio::test]
async fn first_run_indexes_code_and_counts_skips() {
    let f = Fixture::new();
    let summary = f.index().await;
    assert_eq!(summary.files_seen, 7, "{summary}");
    assert_eq!(summary.files_indexed, 4, "{summary}");
    let skipped: Vec<String> = summary.skipped.keys().map(|r| format!("{r:?}")).collect();
    assert_eq!(
        skipped,
        vec!["UnknownLanguage", "MaxLineTooLong"],
        "{summary}"
    );
    assert_eq!(summary.skipped_total(), 3);
    assert_eq!(summary.chunks_embedded, summary.chunks);

    let chunks = f.chunks();
    // Whole small files carry no start line; chunks of split files carry exact ones.
    let config: Vec<_> = chunks.iter().filter(|c| c.0 == "src/config.py").collect();
    assert_eq!(config.len(), 1);
    assert_eq!(config[0].1, None);
    assert!(config[0].2.contains("def read_config"));

    let big_text = std::fs::read_to_string(f.repo.join("src/handlers.py")).unwrap();
    let handlers: Vec<_> = chunks.iter().filter(|c| c.0 == "src/handlers.py").collect();
    assert!(handlers.len() > 3);
    for (_, start, body) in &handlers {
        let line = start.expect("split file chunks have a start line") as usize;
        let first = big_text.lines().nth(line - 1).unwrap();
        assert!(
            body.starts_with(first),
            "line {line}: {first:?} vs {body:?}"
        );
        assert!(body.starts_with("def handler_"), "{body:?}");
    }
}

#[tokio::test]
async fn second_run_reembeds_nothing_and_an_edit_reembeds_only_its_file() {
    let f = Fixture::new();
    let first = f.index().await;
    let again = f.index().await;
    assert_eq!(again.chunks_embedded, 0, "{again}");
    assert_eq!(again.files_indexed, 0);
    assert_eq!(
        again
            .skipped
            .get(&tabby_index::code::filter::SkipReason::Unchanged),
        Some(&4)
    );
    assert_eq!(f.chunks().len(), first.chunks);

    write(
        &f.repo,
        "src/config.py",
        &PYTHON.replace("conf", "settings"),
    );
    commit_all(&f.repo, "edit");
    let edit = f.index().await;
    assert_eq!(edit.files_indexed, 1, "{edit}");
    assert_eq!(edit.chunks_embedded, 1);
    assert_eq!(edit.removed, 1, "the old version is garbage-collected");
    let chunks = f.chunks();
    assert_eq!(chunks.len(), first.chunks);
    let body = &chunks.iter().find(|c| c.0 == "src/config.py").unwrap().2;
    assert!(body.contains("settings") && !body.contains("'conf'"));
}

/// The test embedding, failing every batch that holds a chunk containing `fail_on`.
struct FailingEmbedding {
    inner: HashEmbedding,
    fail_on: &'static str,
}

#[async_trait::async_trait]
impl tabby_inference::Embedding for FailingEmbedding {
    async fn embed(&self, inputs: &[String]) -> Result<Vec<Vec<f32>>, tabby_inference::ModelError> {
        if inputs.iter().any(|t| t.contains(self.fail_on)) {
            return Err(tabby_inference::ModelError::Backend(
                "the backend is down".into(),
            ));
        }
        tabby_inference::Embedding::embed(&self.inner, inputs).await
    }
}

#[tokio::test]
async fn files_with_failed_chunks_are_indexed_again_by_the_next_run() {
    let f = Fixture::new();
    let inner = HashEmbedding::new(32);
    let model_id = inner.model_id();
    let failing = FailingEmbedding {
        inner,
        fail_on: "def handler_",
    };
    let setup = EmbeddingSetup {
        model_id,
        model: Arc::new(failing),
        max_input_bytes: 5120,
    };
    assert_eq!(f.index().await.files_indexed, 4);
    // An edit, indexed while the backend fails: its batch holds only that file's chunks.
    let handlers = std::fs::read_to_string(f.repo.join("src/handlers.py")).unwrap();
    write(
        &f.repo,
        "src/handlers.py",
        &format!("{handlers}\ndef handler_new():\n    return 1\n"),
    );
    commit_all(&f.repo, "edit");
    let mut indexer = CodeIndexer::open(&f.index_dir, Some(setup), LanguageTable::builtin())
        .await
        .unwrap();
    let first = indexer
        .index_repository(&f.source(&[]), &f.repos_dir, &NoProgress)
        .await
        .unwrap();
    drop(indexer);
    assert_eq!(first.files_indexed, 1, "{first}");
    assert_eq!(first.chunks_failed, first.chunks, "{first}");
    // The backend is back: only the file whose chunks failed is indexed again, in full.
    let second = f.index().await;
    assert_eq!(second.files_indexed, 1, "{second}");
    assert_eq!(second.chunks_failed, 0, "{second}");
    assert_eq!(second.chunks_embedded, second.chunks, "{second}");
    let third = f.index().await;
    assert_eq!(third.files_indexed, 0, "{third}");
    assert_eq!(third.removed, 0, "{third}");
    let handlers = f
        .chunks()
        .iter()
        .filter(|c| c.0 == "src/handlers.py")
        .count();
    assert!(handlers > 3);
}

#[tokio::test]
async fn deleted_files_are_removed_and_working_tree_is_not_read() {
    let f = Fixture::new();
    f.index().await;
    git(&f.repo, &["rm", "-q", "src/lib.rs"]);
    commit_all(&f.repo, "delete");
    // An uncommitted edit in the working tree must not be indexed: HEAD's tree is.
    write(&f.repo, "src/config.py", "def uncommitted():\n    pass\n");
    let summary = f.index().await;
    assert_eq!(summary.removed, 1, "{summary}");
    let chunks = f.chunks();
    assert!(chunks.iter().all(|c| c.0 != "src/lib.rs"));
    assert!(chunks.iter().all(|c| !c.2.contains("uncommitted")));
    // ...and the user's working tree is untouched.
    assert_eq!(
        std::fs::read_to_string(f.repo.join("src/config.py")).unwrap(),
        "def uncommitted():\n    pass\n"
    );
}

#[tokio::test]
async fn stale_removal_stays_within_its_source_and_counts_live_rows_only() {
    let f = Fixture::new();
    f.index().await;
    // A source whose id extends this one's: its rows share the id prefix "config:test".
    let other_dir = f._tmp.path().join("other");
    write(
        &other_dir,
        "other.py",
        "def other_function(x):\n    return x\n",
    );
    let other = RepositoryToIndex {
        source_id: "config:test2".into(),
        git_url: format!("file://{}", other_dir.display()),
        refs: vec![],
    };
    assert_eq!(f.index_with(32, &other).await.files_indexed, 1);

    git(&f.repo, &["rm", "-q", "src/lib.rs", "src/config.py"]);
    commit_all(&f.repo, "delete two");
    let summary = f.index().await;
    assert_eq!(summary.removed, 2, "{summary}");
    // The deleted rows' ids stay in the term dictionary until a merge; they are not stale
    // again.
    assert_eq!(f.index().await.removed, 0);
    let chunks = f.chunks();
    assert!(chunks.iter().any(|c| c.0 == "other.py"), "{chunks:?}");
    assert!(
        chunks
            .iter()
            .all(|c| c.0 != "src/lib.rs" && c.0 != "src/config.py")
    );
    // Re-indexing the other source removes nothing of this one.
    assert_eq!(f.index_with(32, &other).await.removed, 0);
    assert!(f.chunks().iter().any(|c| c.0 == "src/handlers.py"));
}

#[tokio::test]
async fn configured_refs_are_indexed_without_checkout() {
    let f = Fixture::new();
    git(&f.repo, &["checkout", "-q", "-b", "feature"]);
    write(
        &f.repo,
        "src/feature.rs",
        "pub fn feature_flag() -> bool {\n    true\n}\n",
    );
    commit_all(&f.repo, "feature");
    git(&f.repo, &["checkout", "-q", "main"]);
    let summary = f.index_with(32, &f.source(&["main", "feature"])).await;
    assert_eq!(summary.files_indexed, 5, "{summary}");
    assert!(f.chunks().iter().any(|c| c.0 == "src/feature.rs"));
    let head = String::from_utf8(
        Command::new("git")
            .arg("-C")
            .arg(&f.repo)
            .args(["branch", "--show-current"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert_eq!(head.trim(), "main", "the user's checkout did not move");
}

/// `git daemon` serving `base` on a free loopback port; killed on drop.
struct GitDaemon {
    child: std::process::Child,
    port: u16,
}

impl GitDaemon {
    fn start(base: &Path) -> GitDaemon {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("git")
            .arg("daemon")
            .arg("--export-all")
            .arg("--reuseaddr")
            .arg("--listen=127.0.0.1")
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={}", base.display()))
            .arg(base)
            // Its per-connection children outlive a kill of the daemon: none may hold the
            // test's output open (nextest reports that as a leak).
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("git daemon");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "git daemon did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        GitDaemon { child, port }
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn remote_repositories_are_mirrored_and_fetched() {
    let f = Fixture::new();
    // A remote (git:// on loopback) is cloned into repositories/, then fetched.
    let daemon = GitDaemon::start(f.repo.parent().unwrap());
    let name = f.repo.file_name().unwrap().to_str().unwrap();
    let remote = RepositoryToIndex {
        source_id: "config:remote".into(),
        git_url: format!("git://127.0.0.1:{}/{name}", daemon.port),
        refs: vec![],
    };
    let first = f.index_with(32, &remote).await;
    assert_eq!(first.files_indexed, 4, "{first}");
    assert_eq!(std::fs::read_dir(&f.repos_dir).unwrap().count(), 1);
    write(&f.repo, "src/new.py", "def brand_new():\n    return 42\n");
    commit_all(&f.repo, "new file");
    let second = f.index_with(32, &remote).await;
    assert_eq!(
        second.files_indexed, 1,
        "fetch brought the new commit: {second}"
    );
}

#[tokio::test]
async fn absolute_paths_are_read_in_place_like_file_urls() {
    let f = Fixture::new();
    let local = RepositoryToIndex {
        source_id: "config:local".into(),
        git_url: f.repo.display().to_string(),
        refs: vec![],
    };
    let summary = f.index_with(32, &local).await;
    assert_eq!(summary.files_indexed, 4, "{summary}");
    assert!(
        !f.repos_dir.exists(),
        "no mirror is made of a local repository"
    );
}

#[tokio::test]
async fn plain_directories_honour_gitignore() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("plain");
    write(&dir, "keep.py", PYTHON);
    write(&dir, "build/generated.py", PYTHON);
    write(&dir, ".gitignore", "build/\n");
    let f = Fixture::new();
    let repo = RepositoryToIndex {
        source_id: "config:plain".into(),
        git_url: format!("file://{}", dir.display()),
        refs: vec![],
    };
    let summary = f.index_with(32, &repo).await;
    assert_eq!(summary.files_indexed, 1, "{summary}");
    assert!(f.chunks().iter().any(|c| c.0 == "keep.py"));
}

/// A plain directory's unchanged files are known by their metadata on the next run (a file
/// cache under the index directory), not read and hashed again; any edit is still seen.
#[tokio::test]
async fn plain_directories_remember_file_ids_by_metadata() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("plain");
    write(&dir, "a.py", PYTHON);
    write(&dir, "b.rs", RUST);
    let f = Fixture::new();
    let repo = RepositoryToIndex {
        source_id: "config:plain".into(),
        git_url: format!("file://{}", dir.display()),
        refs: vec![],
    };
    // Files changed in the last two seconds are not remembered (their timestamps could hide a
    // second edit), so they are hashed again.
    assert_eq!(f.index_with(32, &repo).await.files_indexed, 2);
    let cache_dir = f.index_dir.join("stat-cache");
    let cache_file = std::fs::read_dir(&cache_dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert_eq!(
        std::fs::read_to_string(&cache_file)
            .unwrap()
            .lines()
            .count(),
        1
    );
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let summary = f.index_with(32, &repo).await;
    assert_eq!(
        (summary.files_indexed, summary.removed),
        (0, 0),
        "{summary}"
    );
    let cached = std::fs::read_to_string(&cache_file).unwrap();
    let a_line = cached.lines().find(|l| l.ends_with("\ta.py")).unwrap();
    assert!(cached.lines().any(|l| l.ends_with("\tb.rs")), "{cached}");

    // The recorded id is used without reading the file: an id the index lacks makes it
    // indexed again, under that id.
    let fields: Vec<&str> = a_line.split('\t').collect();
    let forged = "0000000000000000000000000000000000000001";
    let forged_line = a_line.replace(fields[4], forged);
    std::fs::write(&cache_file, cached.replace(a_line, &forged_line)).unwrap();
    let summary = f.index_with(32, &repo).await;
    assert_eq!(
        (summary.files_indexed, summary.removed),
        (1, 1),
        "{summary}"
    );

    // An edit changes the metadata, so the file is read and its new text indexed.
    std::fs::write(dir.join("a.py"), PYTHON.replace("conf", "settings")).unwrap();
    let summary = f.index_with(32, &repo).await;
    assert_eq!(
        (summary.files_indexed, summary.removed),
        (1, 1),
        "{summary}"
    );
    assert!(
        f.chunks()
            .iter()
            .any(|c| c.0 == "a.py" && c.2.contains("settings"))
    );

    // A damaged cache costs a re-read, nothing else.
    std::fs::write(&cache_file, "garbage\n\t\t\n").unwrap();
    let summary = f.index_with(32, &repo).await;
    assert_eq!(
        (summary.files_indexed, summary.removed),
        (0, 0),
        "{summary}"
    );
}

#[tokio::test]
async fn embedding_change_rebuilds_the_code_corpus() {
    let f = Fixture::new();
    let first = f.index_with(32, &f.source(&[])).await;
    let rebuilt = f.index_with(48, &f.source(&[])).await;
    assert_eq!(
        rebuilt.chunks_embedded, first.chunks,
        "every chunk re-embedded: {rebuilt}"
    );
    assert_eq!(
        f.chunks().len(),
        first.chunks,
        "no mix of old and new records"
    );
}

#[tokio::test]
async fn repositories_removed_from_config_leave_the_index() {
    let f = Fixture::new();
    f.index().await;
    let embedding = HashEmbedding::new(32);
    let setup = EmbeddingSetup {
        model_id: embedding.model_id(),
        model: Arc::new(embedding),
        max_input_bytes: 5120,
    };
    let mut indexer = CodeIndexer::open(&f.index_dir, Some(setup), LanguageTable::builtin())
        .await
        .unwrap();
    assert!(
        indexer
            .remove_other_sources(&["config:test".into()])
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        indexer.remove_other_sources(&[]).unwrap(),
        vec!["config:test".to_string()]
    );
    drop(indexer);
    assert!(f.chunks().is_empty());
}

#[tokio::test]
async fn runs_leave_at_most_four_segments_and_keep_every_row() {
    let f = Fixture::new();
    // The first repository holds most of the rows (more than the six small ones below
    // together), so compaction keeps its segment and merges only what later runs add.
    for n in 0..12 {
        write(
            &f.repo,
            &format!("src/module_{n}.py"),
            &format!("def function_{n}(x):\n    return x * {n}\n"),
        );
    }
    commit_all(&f.repo, "more modules");
    let first = f.index().await;
    let largest = || {
        let metas = Index::open_in_dir(&f.index_dir)
            .unwrap()
            .searchable_segment_metas()
            .unwrap();
        metas
            .iter()
            .max_by_key(|m| m.num_docs())
            .map(|m| m.id())
            .unwrap()
    };
    // One commit spreads its rows over the segments of the writer's threads (one per core),
    // and a loaded machine splits them evenly: merge the first run's into one, so that the
    // premise (one segment holds most rows) holds.
    {
        let index = Index::open_in_dir(&f.index_dir).unwrap();
        let ids = index.searchable_segment_ids().unwrap();
        if ids.len() > 1 {
            let mut writer: tantivy::IndexWriter<tantivy::TantivyDocument> =
                index.writer(15_000_000).unwrap();
            writer.merge(&ids).wait().unwrap();
            writer.wait_merging_threads().unwrap();
        }
    }
    // The first run's rows: most of the index, and never merged again by small runs.
    let big = largest();
    // Each further repository's run commits at least one new segment.
    let mut sources = vec![f.source(&[])];
    for i in 0..6 {
        let dir = f._tmp.path().join(format!("extra-{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        write(
            &dir,
            "extra.py",
            &format!("def extra_function_{i}(x):\n    return x + {i}\n"),
        );
        let repo = RepositoryToIndex {
            source_id: format!("config:extra{i}"),
            git_url: format!("file://{}", dir.display()),
            refs: vec![],
        };
        f.index_with(32, &repo).await;
        sources.push(repo);
        let segments = Index::open_in_dir(&f.index_dir)
            .unwrap()
            .searchable_segment_ids()
            .unwrap()
            .len();
        assert!(segments <= 4, "{segments} segments after run {i}");
        assert_eq!(largest(), big, "run {i} merged the big segment again");
    }
    let chunks = f.chunks();
    let extra = chunks
        .iter()
        .filter(|(path, ..)| path == "extra.py")
        .count();
    assert_eq!(extra, 6, "every extra repository's chunk is still there");
    assert_eq!(chunks.len(), first.chunks + 6);
}
