//! The structured-doc corpus: adding, replacing and deleting documents and whole sources,
//! listing sources and document ids, next to code in the same index; and the commits of real
//! git repositories made in the test.

use std::{
    collections::HashSet,
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
};

use chrono::{TimeZone, Utc};
use serde_json::{Value, json};
use tabby_common::{
    index::{IndexSchema, corpus, stored_json},
    languages::LanguageTable,
};
use tabby_index::{
    CodeIndexer, EmbeddingSetup, HashEmbedding, NoProgress, RepositoryToIndex,
    doc::{DOC_CHUNK_SIZE, DocFields, DocIndexer, StructuredDoc, recent_commits},
};
use tantivy::{
    Index, TantivyDocument, Term,
    collector::{Count, DocSetCollector},
    query::{BooleanQuery, ExistsQuery, Occur, TermQuery},
    schema::IndexRecordOption,
};

fn git_at(dir: &Path, args: &[&str], date: Option<&str>) -> String {
    let mut command = Command::new("git");
    command
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "Ann Author")
        .env("GIT_AUTHOR_EMAIL", "ann@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid");
    if let Some(date) = date {
        command
            .env("GIT_AUTHOR_DATE", date)
            .env("GIT_COMMITTER_DATE", date);
    }
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn git(dir: &Path, args: &[&str]) -> String {
    git_at(dir, args, None)
}

/// Commits a change to `file` with `message` at `date` (seconds since the epoch); returns
/// the sha.
fn commit(repo: &Path, file: &str, text: &str, message: &str, date: i64) -> String {
    std::fs::write(repo.join(file), text).unwrap();
    let date = format!("{date} +0000");
    git_at(repo, &["add", "-A"], Some(&date));
    git_at(repo, &["commit", "-q", "-m", message], Some(&date));
    git(repo, &["rev-parse", "HEAD"])
}

fn web(source: &str, link: &str, title: &str, body: &str) -> StructuredDoc {
    StructuredDoc {
        source_id: source.into(),
        id: format!("{source}:{link}"),
        fields: DocFields::Web {
            title: title.into(),
            link: link.into(),
            body: body.into(),
        },
    }
}

fn commit_doc(source: &str, sha: &str, message: &str) -> StructuredDoc {
    StructuredDoc {
        source_id: source.into(),
        id: format!("{source}:commit:{sha}"),
        fields: DocFields::Commit {
            sha: sha.into(),
            message: message.into(),
            author_email: Some("ann@example.invalid".into()),
            author_at: Utc.with_ymd_and_hms(2024, 5, 6, 7, 8, 9).unwrap(),
        },
    }
}

fn ingested(source: &str, doc_id: &str, title: &str, body: &str) -> StructuredDoc {
    StructuredDoc {
        source_id: format!("ingested:{source}"),
        id: format!("ingested:{source}:{doc_id}"),
        fields: DocFields::Ingested {
            doc_id: doc_id.into(),
            title: title.into(),
            link: None,
            body: body.into(),
        },
    }
}

fn set(items: &[&str]) -> HashSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// What the committed index holds for one document id: its document rows' attributes and
/// its chunk rows' texts (in chunk order).
struct Rows {
    documents: Vec<Value>,
    chunks: Vec<String>,
    chunks_with_embedding: usize,
}

fn rows(dir: &Path, id: &str) -> Rows {
    let index = Index::open_in_dir(dir).unwrap();
    let schema = IndexSchema::instance();
    let searcher = index.reader().unwrap().searcher();
    let query = TermQuery::new(schema.id_term(id), IndexRecordOption::Basic);
    let mut documents = Vec::new();
    let mut chunks = Vec::new();
    // The embedding bits are a fast field only: count the rows that have them.
    let chunks_with_embedding = searcher
        .search(
            &BooleanQuery::new(vec![
                (
                    Occur::Must,
                    Box::new(query.clone()) as Box<dyn tantivy::query::Query>,
                ),
                (
                    Occur::Must,
                    Box::new(ExistsQuery::new("chunk_embedding_bits".into(), false)),
                ),
            ]),
            &Count,
        )
        .unwrap();
    for address in searcher.search(&query, &DocSetCollector).unwrap() {
        let doc: TantivyDocument = searcher.doc(address).unwrap();
        use tantivy::schema::Value as _;
        match doc
            .get_first(schema.field_chunk_id)
            .and_then(|v| v.as_str())
        {
            None => documents.push(stored_json(&doc, schema.field_attributes)),
            Some(chunk_id) => {
                let n: usize = chunk_id.rsplit('-').next().unwrap().parse().unwrap();
                let text = tantivy::schema::Value::as_str(
                    &doc.get_first(schema.field_chunk_text).unwrap(),
                )
                .unwrap()
                .to_string();
                chunks.push((n, text));
            }
        }
    }
    chunks.sort();
    Rows {
        documents,
        chunks: chunks.into_iter().map(|(_, t)| t).collect(),
        chunks_with_embedding,
    }
}

/// How many structured-doc chunk rows of `source` contain the lower-cased `word` (stemmed, as
/// the index stores it).
fn word_hits(dir: &Path, source: &str, word: &str) -> usize {
    let index = Index::open_in_dir(dir).unwrap();
    let schema = IndexSchema::instance();
    let searcher = index.reader().unwrap().searcher();
    let query = BooleanQuery::new(vec![
        (
            Occur::Must,
            IndexSchema::filter(schema.corpus_term(corpus::STRUCTURED_DOC)),
        ),
        (
            Occur::Must,
            IndexSchema::filter(schema.source_id_term(source)),
        ),
        (
            Occur::Must,
            Box::new(TermQuery::new(
                Term::from_field_text(
                    schema.field_chunk_words,
                    &tabby_common::index::stem::stem(word),
                ),
                IndexRecordOption::Basic,
            )),
        ),
    ]);
    searcher.search(&query, &Count).unwrap()
}

fn code_rows(dir: &Path, source: &str) -> usize {
    let index = Index::open_in_dir(dir).unwrap();
    let searcher = index.reader().unwrap().searcher();
    searcher
        .search(
            &IndexSchema::instance().source_query(corpus::CODE, source),
            &Count,
        )
        .unwrap()
}

#[tokio::test]
async fn documents_are_added_listed_replaced_and_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("index");
    let mut docs = DocIndexer::open(&dir, None).unwrap();
    assert!(docs.sources().unwrap().is_empty());

    // A long page is cut into chunks; each chunk is searchable by the page's title too.
    let paragraph = "Widgets are configured in the widget panel. ";
    let long_body = paragraph.repeat(3 * DOC_CHUNK_SIZE / paragraph.len());
    let page = web(
        "custom_web_document:abc",
        "http://127.0.0.1:9/docs/widgets.html",
        "Zephyrine Handbook",
        &long_body,
    );
    let chunks = docs.add(&page).await.unwrap();
    assert!(chunks >= 3, "{chunks}");
    let commit = commit_doc("git:1", "0123abcd", "Fix the frobnicator overflow");
    assert_eq!(docs.add(&commit).await.unwrap(), 1);
    let note = ingested(
        "wiki",
        "page%2F1",
        "Onboarding",
        "Welcome aboard the quokka team",
    );
    docs.add(&note).await.unwrap();

    // Nothing is visible before the commit.
    assert!(docs.sources().unwrap().is_empty());
    assert!(docs.doc_ids("git:1").unwrap().is_empty());
    docs.commit().unwrap();
    assert_eq!(
        docs.sources().unwrap(),
        set(&["custom_web_document:abc", "git:1", "ingested:wiki"])
    );
    assert_eq!(docs.doc_ids("git:1").unwrap(), set(&[&commit.id]));
    assert_eq!(docs.doc_ids("ingested:wiki").unwrap(), set(&[&note.id]));
    assert!(docs.doc_ids("git:2").unwrap().is_empty());

    // Rows: one document row with the kind's fields, the chunks with the text.
    let page_rows = rows(&dir, &page.id);
    assert_eq!(
        page_rows.documents,
        [
            json!({"kind": "web", "title": "Zephyrine Handbook", "link": "http://127.0.0.1:9/docs/widgets.html"})
        ]
    );
    assert_eq!(page_rows.chunks.len(), chunks);
    assert!(page_rows.chunks.iter().all(|c| c.len() <= DOC_CHUNK_SIZE));
    assert_eq!(page_rows.chunks_with_embedding, 0);
    assert_eq!(word_hits(&dir, &page.source_id, "zephyrine"), chunks);
    assert_eq!(word_hits(&dir, &page.source_id, "widget"), chunks);
    let commit_rows = rows(&dir, &commit.id);
    assert_eq!(
        commit_rows.documents,
        [json!({
            "kind": "commit", "sha": "0123abcd", "message": "Fix the frobnicator overflow",
            "author_email": "ann@example.invalid", "author_at": "2024-05-06T07:08:09Z"
        })]
    );
    assert_eq!(commit_rows.chunks, ["Fix the frobnicator overflow"]);
    assert_eq!(
        rows(&dir, &note.id).documents,
        [json!({"kind": "ingested", "doc_id": "page%2F1", "title": "Onboarding", "link": null})]
    );
    assert_eq!(word_hits(&dir, "ingested:wiki", "quokka"), 1);

    // Re-adding a document replaces all of its rows.
    let shorter = web(
        "custom_web_document:abc",
        "http://127.0.0.1:9/docs/widgets.html",
        "Zephyrine Handbook, 2nd edition",
        "Gadgets replaced widgets.",
    );
    assert_eq!(docs.add(&shorter).await.unwrap(), 1);
    docs.commit().unwrap();
    let replaced = rows(&dir, &page.id);
    assert_eq!(replaced.documents.len(), 1);
    assert_eq!(
        replaced.documents[0]["title"],
        "Zephyrine Handbook, 2nd edition"
    );
    assert_eq!(replaced.chunks, ["Gadgets replaced widgets."]);
    assert_eq!(word_hits(&dir, &page.source_id, "panel"), 0);
    assert_eq!(word_hits(&dir, &page.source_id, "gadgets"), 1);

    // Deleting one document takes effect at the commit, chunks included.
    docs.delete(&note.id);
    assert_eq!(docs.doc_ids("ingested:wiki").unwrap(), set(&[&note.id]));
    docs.commit().unwrap();
    assert!(docs.doc_ids("ingested:wiki").unwrap().is_empty());
    let gone = rows(&dir, &note.id);
    assert!(gone.documents.is_empty() && gone.chunks.is_empty());
    assert_eq!(
        docs.sources().unwrap(),
        set(&["custom_web_document:abc", "git:1"])
    );
    // Deleting what is not there is harmless.
    docs.delete("nothing:here");
    docs.commit().unwrap();

    // Deleting a source removes its documents only.
    let second = commit_doc("git:1", "4567ef", "Second change");
    docs.add(&second).await.unwrap();
    docs.commit().unwrap();
    assert_eq!(docs.doc_ids("git:1").unwrap().len(), 2);
    docs.delete_source("git:1").unwrap();
    docs.commit().unwrap();
    assert!(docs.doc_ids("git:1").unwrap().is_empty());
    assert!(rows(&dir, &second.id).chunks.is_empty());
    assert_eq!(docs.sources().unwrap(), set(&["custom_web_document:abc"]));
    assert_eq!(
        docs.doc_ids("custom_web_document:abc").unwrap(),
        set(&[&page.id])
    );
}

#[tokio::test]
async fn an_empty_document_is_found_by_its_title() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("index");
    let mut docs = DocIndexer::open(&dir, None).unwrap();
    let empty = ingested("wiki", "blank", "Marmalade recipe", "");
    assert_eq!(docs.add(&empty).await.unwrap(), 1);
    docs.commit().unwrap();
    assert_eq!(rows(&dir, &empty.id).chunks, ["Marmalade recipe"]);
    assert_eq!(word_hits(&dir, "ingested:wiki", "marmalade"), 1);
}

#[tokio::test]
async fn chunks_carry_embeddings_when_a_model_is_set() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("index");
    let embedding = HashEmbedding::new(16);
    let setup = EmbeddingSetup {
        model_id: embedding.model_id(),
        model: Arc::new(embedding),
        max_input_bytes: 64,
    };
    let mut docs = DocIndexer::open(&dir, Some(setup)).unwrap();
    let page = web(
        "web:x",
        "http://127.0.0.1:9/",
        "Title",
        &"word ".repeat(600),
    );
    let n = docs.add(&page).await.unwrap();
    docs.commit().unwrap();
    let page_rows = rows(&dir, &page.id);
    assert!(n > 1);
    assert_eq!(page_rows.chunks_with_embedding, n);
}

#[tokio::test]
async fn one_writer_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("index");
    let first = DocIndexer::open(&dir, None).unwrap();
    let err = DocIndexer::open(&dir, None)
        .err()
        .expect("the index is locked");
    assert!(format!("{err:#}").contains("locked"), "{err:#}");
    drop(first);
    DocIndexer::open(&dir, None).unwrap();
}

fn make_repo(root: &Path) -> PathBuf {
    let repo = root.join("project");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    repo
}

#[tokio::test]
async fn documents_and_code_of_one_source_live_side_by_side() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("index");
    let repo = make_repo(tmp.path());
    commit(
        &repo,
        "lib.py",
        "def frobnicate(x):\n    return x * 2\n",
        "Add frobnicate",
        1_700_000_000,
    );
    let source = "git:7";
    {
        let mut code = CodeIndexer::open(&dir, None, LanguageTable::builtin())
            .await
            .unwrap();
        code.index_repository(
            &RepositoryToIndex {
                source_id: source.into(),
                git_url: format!("file://{}", repo.display()),
                refs: vec![],
            },
            &tmp.path().join("repositories"),
            &NoProgress,
        )
        .await
        .unwrap();
    }
    let code_before = code_rows(&dir, source);
    assert!(code_before > 0);
    {
        let mut docs = DocIndexer::open(&dir, None).unwrap();
        // Code is not a document of the source.
        assert!(docs.doc_ids(source).unwrap().is_empty());
        assert!(docs.sources().unwrap().is_empty());
        docs.add(&commit_doc(source, "abc", "Add frobnicate"))
            .await
            .unwrap();
        docs.commit().unwrap();
        docs.delete_source(source).unwrap();
        docs.commit().unwrap();
        assert!(docs.doc_ids(source).unwrap().is_empty());
    }
    assert_eq!(code_rows(&dir, source), code_before, "code stays");

    // And dropping the repository's code leaves its documents.
    {
        let mut docs = DocIndexer::open(&dir, None).unwrap();
        docs.add(&commit_doc(source, "abc", "Add frobnicate"))
            .await
            .unwrap();
        docs.commit().unwrap();
    }
    {
        let mut code = CodeIndexer::open(&dir, None, LanguageTable::builtin())
            .await
            .unwrap();
        assert_eq!(code.remove_other_sources(&[]).unwrap(), [source]);
    }
    assert_eq!(code_rows(&dir, source), 0);
    let docs = DocIndexer::open(&dir, None).unwrap();
    assert_eq!(docs.doc_ids(source).unwrap().len(), 1);
}

#[tokio::test]
async fn recent_commits_of_a_real_repository() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = make_repo(tmp.path());
    let repos_dir = tmp.path().join("repositories");
    let c1 = commit(&repo, "a.txt", "1", "First: add a", 1_700_000_000);
    let c2 = commit(
        &repo,
        "a.txt",
        "2",
        "Second: change a\n\nWith a body line.\n",
        1_700_000_100,
    );
    git(&repo, &["checkout", "-q", "-b", "feature"]);
    let f1 = commit(&repo, "b.txt", "f", "Feature work", 1_700_000_150);
    git(&repo, &["checkout", "-q", "main"]);
    let c3 = commit(&repo, "a.txt", "3", "Third: change a again", 1_700_000_200);
    let url = format!("file://{}", repo.display());

    let shas = |refs: &[&str], limit| {
        let refs: Vec<String> = refs.iter().map(|r| r.to_string()).collect();
        recent_commits(&url, &repos_dir, &refs, limit)
            .unwrap()
            .into_iter()
            .map(|c| c.sha)
            .collect::<Vec<_>>()
    };
    // HEAD (main), newest first.
    assert_eq!(shas(&[], 10), [c3.clone(), c2.clone(), c1.clone()]);
    assert_eq!(shas(&[], 2), [c3.clone(), c2.clone()]);
    assert_eq!(shas(&["feature"], 10), [f1.clone(), c2.clone(), c1.clone()]);
    // Several refs: their union, by time, each commit once.
    assert_eq!(
        shas(&["main", "feature"], 10),
        [c3.clone(), f1.clone(), c2.clone(), c1.clone()]
    );
    assert!(recent_commits(&url, &repos_dir, &["no-such-branch".into()], 10).is_err());

    let all = recent_commits(&url, &repos_dir, &[], 10).unwrap();
    let second = all.iter().find(|c| c.sha == c2).unwrap();
    assert_eq!(second.message, "Second: change a\n\nWith a body line.");
    assert_eq!(second.author_email.as_deref(), Some("ann@example.invalid"));
    assert_eq!(second.author_at.timestamp(), 1_700_000_100);

    // A remote repository is read from its mirror under the repositories directory (no
    // network: the URL does not resolve).
    let remote = "https://git.example.invalid/team/project.git";
    let mirror = repos_dir.join(tabby_common::git_url::mirror_dir_name(remote));
    std::fs::create_dir_all(&repos_dir).unwrap();
    let out = Command::new("git")
        .args(["clone", "-q", "--mirror"])
        .arg(&repo)
        .arg(&mirror)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mirrored: Vec<String> = recent_commits(remote, &repos_dir, &[], 10)
        .unwrap()
        .into_iter()
        .map(|c| c.sha)
        .collect();
    assert_eq!(mirrored, [c3, c2, c1]);

    // Neither a plain directory nor a missing path has commits.
    let plain = tmp.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    for path in [plain, tmp.path().join("missing")] {
        assert!(
            recent_commits(&format!("file://{}", path.display()), &repos_dir, &[], 10).is_err(),
            "{}",
            path.display()
        );
    }
}
