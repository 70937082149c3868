//! Code search on a real small index: fusion, per-file cap, thresholds, filters, and the
//! embedding leg's bit scan agreeing with a brute force.

use std::{collections::HashMap, path::Path, sync::Arc};

use tabby_common::{
    api::code::{CodeSearch, CodeSearchError, CodeSearchQuery, CodeSearchScores},
    config::CodeSearchParams,
    languages::LanguageTable,
};
use tabby_index::{CodeIndexer, EmbeddingSetup, HashEmbedding, NoProgress, RepositoryToIndex};
use tantivy::DocAddress;

use super::*;

pub(crate) fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

struct Fixture {
    _tmp: tempfile::TempDir,
    service: CodeSearchService,
}

const DIM: usize = 64;

async fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("repo-a");
    let many: String = (0..12)
        .map(|i| format!("def parse_config_{i}(path):\n    config = load_config(path)\n    return parse_config(config, {i})\n\n\n"))
        .collect();
    write(&a, "src/many.py", &many);
    write(
        &a,
        "src/single.py",
        "def parse_config(text):\n    return dict(line.split('=') for line in text)\n",
    );
    write(
        &a,
        "src/editing.py",
        "def parse_config_here(path):\n    return parse_config(open(path).read())\n",
    );
    write(
        &a,
        "web/config.ts",
        "export function parseConfig(text: string) {\n  return JSON.parse(text);\n}\n",
    );
    write(
        &a,
        "web/legacy.js",
        "function parseConfigLegacy(text) {\n  return eval(text);\n}\n",
    );
    write(
        &a,
        "src/config.rs",
        "pub fn parse_config(text: &str) -> Config {\n    toml::from_str(text).unwrap()\n}\n",
    );
    let b = tmp.path().join("repo-b");
    write(
        &b,
        "other.py",
        "def parse_config(x):\n    return 'secret from repo b'\n",
    );

    let (service, _) = index_sources(tmp.path(), &[("config:a", &a), ("config:b", &b)], true).await;
    Fixture { _tmp: tmp, service }
}

/// Indexes each `(source id, directory)` into `root/index` (with the hash embedding, or none)
/// and returns a search service over it and each run's summary.
pub(crate) async fn index_sources(
    root: &Path,
    sources: &[(&str, &Path)],
    with_embedding: bool,
) -> (CodeSearchService, Vec<tabby_index::RepositorySummary>) {
    let index_dir = root.join("index");
    let embedding = with_embedding.then(|| {
        let embedding = HashEmbedding::new(DIM);
        CodeSearchEmbedding {
            model_id: embedding.model_id(),
            model: Arc::new(embedding),
        }
    });
    let setup = embedding.as_ref().map(|e| EmbeddingSetup {
        model: e.model.clone(),
        model_id: e.model_id.clone(),
        max_input_bytes: 5120,
    });
    let mut indexer = CodeIndexer::open(&index_dir, setup, LanguageTable::builtin())
        .await
        .unwrap();
    let mut summaries = Vec::new();
    for (id, dir) in sources {
        let repo = RepositoryToIndex {
            source_id: id.to_string(),
            git_url: format!("file://{}", dir.display()),
            refs: vec![],
        };
        summaries.push(
            indexer
                .index_repository(&repo, &root.join("repos"), &NoProgress)
                .await
                .unwrap(),
        );
    }
    drop(indexer);
    let service = CodeSearchService::new(index_dir, embedding, Arc::new(LanguageTable::builtin()));
    (service, summaries)
}

/// Twenty small unrelated files under `dir/sub`, so that word frequencies look like a
/// repository's.
fn write_unrelated(dir: &Path, sub: &str) {
    for i in 0..20 {
        write(
            dir,
            &format!("{sub}other_{i}.py"),
            &format!("def compute_{i}(value):\n    return value * {i}\n"),
        );
    }
}

fn open_params(n: usize) -> CodeSearchParams {
    CodeSearchParams {
        min_embedding_score: -1.0,
        min_bm25_score: -1.0,
        min_rrf_score: -1.0,
        num_to_return: n,
        num_to_score: 100,
        max_hits_per_file: 2,
        names_leg: true,
        members_leg: true,
    }
}

fn query(
    content: &str,
    language: Option<&str>,
    filepath: Option<&str>,
    source: &str,
) -> CodeSearchQuery {
    CodeSearchQuery {
        include_generated: false,
        filepath: filepath.map(str::to_string),
        language: language.map(str::to_string),
        content: content.into(),
        source_id: source.into(),
    }
}

#[test]
fn rrf_sums_reciprocal_ranks_and_keeps_raw_scores() {
    let a = DocAddress::new(0, 1);
    let b = DocAddress::new(0, 2);
    let c = DocAddress::new(0, 3);
    let empty = tantivy::Index::create_in_ram(IndexSchema::instance().schema.clone());
    let searcher = empty.reader().unwrap().searcher();
    let fused = rrf_merge(
        &searcher,
        &vec![(9.0, a), (5.0, b)],
        &vec![(0.9, b), (0.8, c)],
    );
    let order: Vec<_> = fused.iter().map(|f| f.address).collect();
    assert_eq!(order, vec![b, a, c]);
    let b_scores = &fused[0].scores;
    assert!((b_scores.rrf - (1.0 / 62.0 + 1.0 / 61.0)).abs() < 1e-6);
    assert_eq!((b_scores.bm25, b_scores.embedding), (5.0, 0.9));
    assert_eq!(
        fused[1].scores.embedding, 0.0,
        "missing from a leg scores 0 there"
    );
    assert!((fused[1].scores.rrf - 1.0 / 61.0).abs() < 1e-6);
}

#[test]
fn thresholds_are_strict_and_skip_a_missing_embedding_leg() {
    let scores = CodeSearchScores {
        rrf: 0.03,
        bm25: 8.0,
        embedding: 0.8,
    };
    let params = CodeSearchParams::upstream_completion();
    assert!(
        !passes(&scores, &params, true),
        "bm25 must be > 8.0, not equal"
    );
    let scores = CodeSearchScores {
        bm25: 8.1,
        ..scores
    };
    assert!(passes(&scores, &params, true));
    let no_embedding = CodeSearchScores {
        embedding: 0.0,
        ..scores
    };
    assert!(!passes(&no_embedding, &params, true));
    assert!(passes(&no_embedding, &params, false));
}

#[tokio::test]
async fn at_most_two_hits_per_file() {
    let f = fixture().await;
    let from_many = |cap: usize| {
        let search = f.service.search_in_language(
            query(
                "parse_config load_config path",
                Some("python"),
                None,
                "config:a",
            ),
            CodeSearchParams {
                max_hits_per_file: cap,
                names_leg: true,
                members_leg: true,
                ..open_params(20)
            },
        );
        async move {
            let hits = search.await.unwrap();
            let n = hits
                .iter()
                .filter(|h| h.doc.filepath == "src/many.py")
                .count();
            (n, hits)
        }
    };
    let (n, hits) = from_many(2).await;
    assert_eq!(
        n,
        2,
        "{:?}",
        hits.iter().map(|h| &h.doc.filepath).collect::<Vec<_>>()
    );
    assert!(hits.iter().any(|h| h.doc.filepath == "src/single.py"));
    // 0: no cap (the default), every matching chunk of the file may come back.
    let (n, _) = from_many(0).await;
    assert!(n > 2, "{n}");
    assert_eq!(CodeSearchParams::completion_default().max_hits_per_file, 0);
    assert_eq!(CodeSearchParams::upstream_completion().max_hits_per_file, 2);
}

#[tokio::test]
async fn own_file_language_group_and_source_are_filtered() {
    let f = fixture().await;
    let search = |q| f.service.search_in_language(q, open_params(50));
    let python = search(query(
        "parse_config",
        Some("python"),
        Some("src/editing.py"),
        "config:a",
    ))
    .await
    .unwrap();
    assert!(!python.is_empty());
    assert!(python.iter().all(|h| h.doc.language == "python"));
    assert!(
        python.iter().all(|h| h.doc.filepath != "src/editing.py"),
        "own file excluded"
    );
    assert!(
        python
            .iter()
            .all(|h| !h.doc.body.contains("secret from repo b")),
        "other source"
    );

    // typescriptreact and javascript are one group.
    let ts = search(query(
        "parseConfig text",
        Some("typescriptreact"),
        None,
        "config:a",
    ))
    .await
    .unwrap();
    let files: Vec<_> = ts.iter().map(|h| h.doc.filepath.as_str()).collect();
    assert!(
        files.contains(&"web/config.ts") && files.contains(&"web/legacy.js"),
        "{files:?}"
    );
    assert!(ts.iter().all(|h| h.doc.language == "javascript-typescript"));

    let b = search(query("parse_config", None, None, "config:b"))
        .await
        .unwrap();
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].doc.filepath, "other.py");
}

#[tokio::test]
async fn thresholds_drop_weak_hits() {
    let f = fixture().await;
    let strict = CodeSearchParams {
        min_bm25_score: 1e6,
        ..open_params(20)
    };
    let hits = f
        .service
        .search_in_language(
            query("parse_config", Some("python"), None, "config:a"),
            strict,
        )
        .await
        .unwrap();
    assert!(hits.is_empty());
}

#[tokio::test]
async fn the_bit_scan_ranks_as_brute_force_over_the_filtered_rows() {
    let mut f = fixture().await;
    let q = query(
        "def parse_config(path): return load_config(path)",
        None,
        None,
        "config:a",
    );
    assert_legs_agree(&mut f.service, &q).await;
    // With every filter: language group and the query's own file.
    let filtered = query(
        "def parse_config(path): return load_config(path)",
        Some("python"),
        Some("src/many.py"),
        "config:a",
    );
    assert_legs_agree(&mut f.service, &filtered).await;
}

/// The embedding leg returns what a brute force gives: every chunk row Tantivy's own filter
/// query admits, its text embedded again as the indexer embeds it, scored by the share of
/// signs it has in common with the query's embedding; best first, ties by stable key.
async fn assert_legs_agree(service: &mut CodeSearchService, q: &CodeSearchQuery) -> usize {
    let legs = service.search_legs(q, 50).await.unwrap();
    assert!(!legs.embedding.is_empty());
    let model = HashEmbedding::new(DIM);
    let signs = |v: &[f32]| v.iter().map(|x| *x > 0.0).collect::<Vec<bool>>();
    let text = service
        .query_strategy
        .embedding_text(query::bounded(&q.content));
    let query_signs = signs(&model.embed(&[text]).await.unwrap()[0]);
    let filter = BooleanQuery::new(tabby_common::index::code::code_search_filter(
        &q.source_id,
        q.language.as_deref(),
        q.filepath.as_deref(),
    ));
    let mut expected = Vec::new();
    let rows = legs
        .searcher
        .search(&filter, &tantivy::collector::DocSetCollector)
        .unwrap();
    for address in rows {
        let Some(doc) = CodeSearchService::document(&legs.searcher, address) else {
            continue; // a document row
        };
        let input = format!("```{}\n{}\n```", doc.filepath, doc.body);
        let row_signs = signs(&model.embed(&[input]).await.unwrap()[0]);
        let same = row_signs
            .iter()
            .zip(&query_signs)
            .filter(|(a, b)| a == b)
            .count();
        expected.push((same as f32 / DIM as f32, address));
    }
    tie::sort_hits(&legs.searcher, &mut expected);
    expected.truncate(50);
    assert_eq!(legs.embedding.len(), expected.len());
    for (a, b) in legs.embedding.iter().zip(&expected) {
        assert_eq!(a.1, b.1, "same order");
        assert!((a.0 - b.0).abs() < 1e-5, "same score: {} vs {}", a.0, b.0);
    }
    legs.embedding.len()
}

#[tokio::test]
async fn deleted_rows_leave_both_legs() {
    let mut f = fixture().await;
    let q = query(
        "parse_config text line split",
        Some("python"),
        None,
        "config:a",
    );
    let files = |legs: &SearchLegs| -> Vec<String> {
        legs.bm25
            .iter()
            .chain(&legs.embedding)
            .filter_map(|(_, a)| CodeSearchService::document(&legs.searcher, *a))
            .map(|d| d.filepath)
            .collect()
    };
    let before = f.service.search_legs(&q, 50).await.unwrap();
    assert!(files(&before).contains(&"src/single.py".to_string()));
    let rows_before = assert_legs_agree(&mut f.service, &q).await;

    // Re-index repo a without src/single.py: its rows are deleted, not merged away.
    std::fs::remove_file(f._tmp.path().join("repo-a/src/single.py")).unwrap();
    let repo_a = f._tmp.path().join("repo-a");
    let (_, summaries) = index_sources(f._tmp.path(), &[("config:a", &repo_a)], true).await;
    assert_eq!(summaries[0].removed, 1);

    let mut after = f.service.search_legs(&q, 50).await.unwrap();
    for _ in 0..50 {
        if !files(&after).contains(&"src/single.py".to_string()) {
            break;
        }
        // The reader reloads shortly after a commit.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        after = f.service.search_legs(&q, 50).await.unwrap();
    }
    assert!(!files(&after).contains(&"src/single.py".to_string()));
    let rows_after = assert_legs_agree(&mut f.service, &q).await;
    assert_eq!(rows_after, rows_before - 1);
}

/// A plain directory of `files` Python files, each with a term every chunk shares, indexed
/// with the hash embedding.
async fn large_index(files: usize) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("big");
    for i in 0..files {
        let extra = if i == 7 {
            "    needle_marker = haystack_probe\n"
        } else {
            ""
        };
        write(
            &dir,
            &format!("pkg/m{i}.py"),
            &format!("def shared_helper_{i}(value):\n{extra}    return common_word(value, {i})\n"),
        );
    }
    let (service, _) = index_sources(tmp.path(), &[("config:big", &dir)], true).await;
    Fixture { _tmp: tmp, service }
}

#[tokio::test]
async fn large_indexes_drop_terms_most_chunks_contain() {
    let mut f = large_index(600).await;
    let bm25 = |legs: SearchLegs| -> Vec<(String, f32)> {
        legs.bm25
            .iter()
            .filter_map(|(s, a)| {
                CodeSearchService::document(&legs.searcher, *a).map(|d| (d.filepath, *s))
            })
            .collect()
    };
    let q = |text: &str| query(text, Some("python"), None, "config:big");
    let with_common = bm25(
        f.service
            .search_legs(&q("common_word needle_marker haystack_probe"), 10)
            .await
            .unwrap(),
    );
    let alone = bm25(
        f.service
            .search_legs(&q("needle_marker haystack_probe"), 10)
            .await
            .unwrap(),
    );
    assert_eq!(
        with_common.len(),
        1,
        "only the needle's chunk: {with_common:?}"
    );
    assert_eq!(
        with_common, alone,
        "the common term adds nothing once dropped"
    );
    assert_eq!(with_common[0].0, "pkg/m7.py");

    // A query made only of common terms keeps its rarest ones.
    let common_only = bm25(
        f.service
            .search_legs(&q("common_word value"), 10)
            .await
            .unwrap(),
    );
    assert_eq!(common_only.len(), 10);

    // The upstream strategy keeps every term: the common one matches every chunk.
    f.service.query_strategy = QueryStrategy::Upstream;
    let upstream = bm25(
        f.service
            .search_legs(&q("common_word needle_marker haystack_probe"), 10)
            .await
            .unwrap(),
    );
    assert_eq!(upstream.len(), 10);
    assert_eq!(upstream[0].0, "pkg/m7.py");
}

#[tokio::test]
async fn no_index_is_not_ready() {
    let tmp = tempfile::tempdir().unwrap();
    let service = CodeSearchService::new(
        tmp.path().join("index"),
        None,
        Arc::new(LanguageTable::builtin()),
    );
    let result = service
        .search_in_language(query("x", None, None, "config:a"), open_params(5))
        .await;
    assert!(matches!(result, Err(CodeSearchError::NotReady)));
}

#[tokio::test]
async fn a_definition_outranks_its_callers_on_its_name() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("repo");
    write(
        &dir,
        "formatting.py",
        "class HelpFormatter:\n    def write_dl(self, rows):\n        for first, second in rows:\n            self.buffer.append(first)\n",
    );
    write(
        &dir,
        "commands.py",
        "def format_commands(ctx, rows):\n    rows = sorted(rows)\n    ctx.formatter.write_dl(rows)\n",
    );
    write_unrelated(&dir, "");
    let (service, _) = index_sources(tmp.path(), &[("config:fmt", &dir)], false).await;

    let hits = service
        .search_in_language(
            query(
                "Write a definition list into the formatter",
                None,
                None,
                "config:fmt",
            ),
            open_params(5),
        )
        .await
        .unwrap();
    let files: Vec<_> = hits.iter().map(|h| h.doc.filepath.as_str()).collect();
    assert_eq!(files.first(), Some(&"formatting.py"), "{files:?}");
    // Each hit says what it defines, as the indexer stored it.
    let defines = |path: &str| {
        hits.iter()
            .find(|h| h.doc.filepath == path)
            .and_then(|h| h.doc.defines.clone())
    };
    assert_eq!(
        defines("formatting.py"),
        Some(vec!["HelpFormatter".to_string(), "write_dl".to_string()])
    );
    assert_eq!(
        defines("commands.py"),
        Some(vec!["format_commands".to_string()])
    );
}

#[tokio::test]
async fn a_definition_outranks_the_tests_that_call_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("repo");
    write(
        &dir,
        "src/render.py",
        "def render_markdown(text):\n    return convert(text)\n",
    );
    // More tests naming it than the leg fetches at first (3 × its limit).
    for i in 0..10 {
        write(
            &dir,
            &format!("tests/test_render_{i}.py"),
            "def test_render_markdown():\n    assert render_markdown('# a') == render_markdown('# a')\n    assert render_markdown('') == ''\n",
        );
    }
    write_unrelated(&dir, "src/");
    let (mut service, _) = index_sources(tmp.path(), &[("config:r", &dir)], false).await;
    let q = query("Render markdown", None, None, "config:r");
    let first = |hits: Vec<CodeSearchHit>| hits.first().map(|h| h.doc.filepath.clone());
    let tuned = service
        .search_in_language(q.clone(), open_params(5))
        .await
        .unwrap();
    assert_eq!(first(tuned).as_deref(), Some("src/render.py"));
    let legs = service.search_legs(&q, 2).await.unwrap();
    let top = CodeSearchService::document(&legs.searcher, legs.bm25[0].1).unwrap();
    assert_eq!(
        top.filepath, "src/render.py",
        "found beyond the first fetch"
    );
    // Upstream's scoring has no penalty: the test that names it three times wins.
    service.query_strategy = QueryStrategy::Upstream;
    let q = query("render_markdown", None, None, "config:r");
    let upstream = service.search_in_language(q, open_params(5)).await.unwrap();
    let top = first(upstream).unwrap();
    assert!(top.starts_with("tests/test_render_"), "{top}");
}

#[tokio::test]
async fn fusion_halves_test_chunks_and_chunks_where_no_definition_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("repo");
    write(&dir, "mirror.py", &long_mirror_function());
    write(
        &dir,
        "tests/test_mirror.py",
        "def test_fetch_remote_mirror_refs():\n    assert sync_remote_mirror('url', ['main'], 'mirror')\n",
    );
    write_unrelated(&dir, "");
    let (mut service, _) = index_sources(tmp.path(), &[("config:m", &dir)], true).await;
    let q = query("fetch remote mirror refs", None, None, "config:m");
    let legs = service.search_legs(&q, 40).await.unwrap();
    let raw: HashMap<_, _> = rrf_merge(&legs.searcher, &legs.bm25, &legs.embedding)
        .into_iter()
        .map(|f| (f.address, f.scores.rrf))
        .collect();
    let fused = service.fuse_rrf(&legs);
    assert_eq!(fused.len(), raw.len());
    assert!(fused.windows(2).all(|w| w[0].scores.rrf >= w[1].scores.rrf));
    let (mut bodies, mut tests) = (0, 0);
    for candidate in &fused {
        let doc = CodeSearchService::document(&legs.searcher, candidate.address).unwrap();
        // In this repository only the body chunks of mirror.py start no definition.
        let defines = doc.filepath != "mirror.py" || doc.start_line == Some(1);
        let test = doc.filepath.starts_with("tests/");
        let expected = raw[&candidate.address]
            * if defines { 1.0 } else { 0.5 }
            * if test { 0.5 } else { 1.0 };
        assert_eq!(
            candidate.scores.rrf, expected,
            "{}:{:?}",
            doc.filepath, doc.start_line
        );
        bodies += usize::from(!defines);
        tests += usize::from(test);
    }
    assert!(
        bodies >= 2 && tests == 1,
        "the body chunks and the test were fused"
    );
    // Upstream's fusion is plain RRF.
    service.query_strategy = QueryStrategy::Upstream;
    let legs = service.search_legs(&q, 40).await.unwrap();
    let plain: Vec<_> = rrf_merge(&legs.searcher, &legs.bm25, &legs.embedding)
        .iter()
        .map(|f| (f.address, f.scores.rrf))
        .collect();
    let fused: Vec<_> = service
        .fuse(&legs)
        .iter()
        .map(|f| (f.address, f.scores.rrf))
        .collect();
    assert_eq!(fused, plain);
}

#[tokio::test]
async fn learned_fusion_orders_the_union_by_its_weights_and_keeps_the_raw_scores() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("repo");
    write(&dir, "mirror.py", &long_mirror_function());
    write_unrelated(&dir, "");
    let (mut service, _) = index_sources(tmp.path(), &[("config:m", &dir)], true).await;
    let q = query("fetch remote mirror refs", None, None, "config:m");
    let legs = service.search_legs(&q, 40).await.unwrap();
    assert!(!legs.bm25.is_empty() && !legs.embedding.is_empty());
    let raw: HashMap<_, _> = rrf_merge(&legs.searcher, &legs.bm25, &legs.embedding)
        .into_iter()
        .map(|f| (f.address, f.scores))
        .collect();
    // A ranker that only reads the BM25 rank gives the BM25 leg's order, then the chunks only
    // the embedding leg found; one that only reads the embedding rank, the embedding order.
    for (feature, leg) in [("bm25_rr", &legs.bm25), ("emb_rr", &legs.embedding)] {
        service.ranker = Some(ranker_reading_only(feature));
        let fused = service.fuse(&legs);
        assert_eq!(fused.len(), raw.len(), "the union of both legs");
        let order: Vec<_> = fused.iter().take(leg.len()).map(|f| f.address).collect();
        let expected: Vec<_> = leg.iter().map(|(_, a)| *a).collect();
        assert_eq!(order, expected, "{feature}");
        for f in &fused {
            let scores = &raw[&f.address];
            assert_eq!(
                (f.scores.rrf, f.scores.bm25, f.scores.embedding),
                (scores.rrf, scores.bm25, scores.embedding),
                "thresholds read the unscaled scores"
            );
        }
    }
    // The upstream strategy ignores the ranker.
    service.query_strategy = QueryStrategy::Upstream;
    let legs = service.search_legs(&q, 40).await.unwrap();
    let plain: Vec<_> = rrf_merge(&legs.searcher, &legs.bm25, &legs.embedding)
        .iter()
        .map(|f| f.address)
        .collect();
    let fused: Vec<_> = service.fuse(&legs).iter().map(|f| f.address).collect();
    assert_eq!(fused, plain);
}

/// A ranker whose score, for both kinds of query, is one feature.
fn ranker_reading_only(feature: &str) -> Arc<ranker::Ranker> {
    let names = serde_json::to_string(&ranker::FEATURES[..]).unwrap();
    let w: Vec<f32> = ranker::FEATURES
        .iter()
        .map(|f| if *f == feature { 1.0 } else { 0.0 })
        .collect();
    let w = serde_json::to_string(&w).unwrap();
    let text = format!(
        r#"{{"version":"test-{feature}","features":{names},"weights":{{"code":{w},"nl":{w}}}}}"#
    );
    Arc::new(ranker::Ranker::parse(&text).unwrap())
}

/// A function longer than one chunk: its header, then a body that repeats the words
/// "remote", "mirror", "fetch" and "refs".
fn long_mirror_function() -> String {
    let body: String = (0..12)
        .map(|i| format!("    state_{i} = remote.fetch_mirror_ref(url, refs[{i}], mirror)\n"))
        .collect();
    format!(
        "def sync_remote_mirror(url, refs, mirror):\n    remote = connect(url)\n{body}    return mirror\n"
    )
}

/// The start line of the BM25 leg's first chunk (and that the leg found several).
async fn first_bm25_start(service: &CodeSearchService, q: &CodeSearchQuery) -> Option<usize> {
    let legs = service.search_legs(q, 10).await.unwrap();
    assert!(
        legs.bm25.len() >= 2,
        "the function is cut into several chunks"
    );
    CodeSearchService::document(&legs.searcher, legs.bm25[0].1)
        .unwrap()
        .start_line
}

#[tokio::test]
async fn the_chunk_where_a_definition_starts_outranks_the_rest_of_its_body() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("repo");
    let text = long_mirror_function();
    assert!(text.len() > 700);
    write(&dir, "mirror.py", &text);
    write_unrelated(&dir, "");
    let (mut service, _) = index_sources(tmp.path(), &[("config:m", &dir)], false).await;
    let q = query("Fetch the remote mirror refs", None, None, "config:m");
    assert_eq!(
        first_bm25_start(&service, &q).await,
        Some(1),
        "the header's chunk comes first"
    );
    // Upstream's scoring has no such factor: a chunk of the body, which says "remote" and
    // "mirror" more often, comes first.
    service.query_strategy = QueryStrategy::Upstream;
    let q = query("fetch remote mirror refs", None, None, "config:m");
    assert_ne!(first_bm25_start(&service, &q).await, Some(1));
}

/// Import-aware candidates on a real index: for a file in each of Python, Rust, Go and
/// TypeScript, the chunk defining the imported function comes back, from the imported file
/// only, never from another source or from a file the editor's file does not import.
#[tokio::test]
async fn import_search_finds_the_imported_definitions() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("repo-a");
    let files = [
        (
            "shop/pricing.py",
            "def apply_discount(price, rate):\n    return price * (1 - rate)\n",
        ),
        (
            "shop/other.py",
            "def apply_discount_other(price, rate):\n    return price\n",
        ),
        (
            "shop/checkout.py",
            "from shop.pricing import apply_discount\n\n\ndef total(items):\n    return sum(items)\n",
        ),
        (
            "src/pricing.rs",
            "pub fn apply_discount(price: f64, rate: f64) -> f64 {\n    price * (1.0 - rate)\n}\n",
        ),
        (
            "src/checkout.rs",
            "use crate::pricing::apply_discount;\n\npub fn total(items: &[f64]) -> f64 {\n    items.iter().sum()\n}\n",
        ),
        (
            "internal/pricing/pricing.go",
            "package pricing\n\nfunc ApplyDiscount(price float64, rate float64) float64 {\n\treturn price * (1 - rate)\n}\n",
        ),
        (
            "cmd/shop/main.go",
            "package main\n\nimport (\n\t\"example.com/shop/internal/pricing\"\n)\n\nfunc main() {\n}\n",
        ),
        (
            "web/pricing.ts",
            "export function applyDiscount(price: number, rate: number): number {\n  return price * (1 - rate);\n}\n",
        ),
        (
            "web/app.ts",
            "import { applyDiscount } from './pricing';\n\nexport function total(items: number[]) {\n  return 0;\n}\n",
        ),
    ];
    for (path, text) in files {
        write(&a, path, text);
    }
    let b = tmp.path().join("repo-b");
    write(
        &b,
        "shop/pricing.py",
        "def apply_discount(price, rate):\n    return 'other source'\n",
    );
    let (service, _) = index_sources(tmp.path(), &[("config:a", &a), ("config:b", &b)], true).await;

    for (language, filepath, prefix, expected) in [
        (
            "python",
            "shop/checkout.py",
            "    price = ",
            "shop/pricing.py",
        ),
        (
            "rust",
            "src/checkout.rs",
            "    let price = ",
            "src/pricing.rs",
        ),
        (
            "go",
            "cmd/shop/main.go",
            "\tprice := pricing.",
            "internal/pricing/pricing.go",
        ),
        (
            "typescript",
            "web/app.ts",
            "  const price = ",
            "web/pricing.ts",
        ),
    ] {
        let query = CodeSearchQuery {
            include_generated: false,
            filepath: Some(filepath.into()),
            language: Some(language.into()),
            content: prefix.into(),
            source_id: "config:a".into(),
        };
        let hits = service.search_imports(&query, 4).await.unwrap();
        let paths: Vec<&str> = hits.iter().map(|h| h.doc.filepath.as_str()).collect();
        assert_eq!(paths, vec![expected], "{language}");
        assert!(
            hits[0].doc.body.to_lowercase().contains("discount"),
            "{language}"
        );
    }

    // Without a filepath, or for a file that imports nothing indexed: no candidates.
    let none = CodeSearchQuery {
        include_generated: false,
        filepath: Some("shop/other.py".into()),
        language: Some("python".into()),
        content: "import os\n".into(),
        source_id: "config:a".into(),
    };
    assert!(service.search_imports(&none, 4).await.unwrap().is_empty());
    let no_file = CodeSearchQuery {
        include_generated: false,
        filepath: None,
        ..none
    };
    assert!(
        service
            .search_imports(&no_file, 4)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Outlines on a real index, in Python, Rust, Go and TypeScript: what the chain before the
/// cursor leads to (an imported module, a package's re-exports, a type named or held by a
/// variable), as signature lines read from the repository; never from another source.
#[tokio::test]
async fn receiver_outlines_follow_imports_and_types() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("repo-a");
    let files = [
        (
            "shop/util.py",
            "def format_money(amount):\n    return str(amount)\n\n\ndef parse_money(text):\n    return float(text)\n",
        ),
        (
            "shop/__init__.py",
            "from shop.util import format_money\nfrom shop.util import parse_money\n",
        ),
        (
            "shop/chars.py",
            "class Char(str):\n    def is_ws(self):\n        return self in ' \\t'\n\n    def is_digit_char(self):\n        return self.isdigit()\n",
        ),
        (
            "shop/parser.py",
            "from shop import util\nfrom shop.chars import Char\nimport shop\n\n\nclass Parser:\n    def __init__(self, text):\n        self._current = Char(text[0])\n\n    def step(self):\n        pass\n",
        ),
        (
            "shop/base.py",
            "class Processor:\n    def last_child(self, parent):\n        return parent[-1]\n\n    def run(self, parent):\n        pass\n",
        ),
        (
            "shop/admonition.py",
            "from shop.base import Processor\n\n\nclass AdmonitionProcessor(Processor):\n    def test(self, block):\n        return True\n\n    def run(self, parent):\n        sibling = None\n",
        ),
        (
            "src/error.rs",
            "pub struct Error {\n    kind: u8,\n}\n\nimpl Error {\n    pub(super) fn new_closed() -> Error {\n        Error { kind: 1 }\n    }\n}\n",
        ),
        ("src/lib.rs", "mod error;\npub use crate::error::Error;\n"),
        ("src/body.rs", "pub fn send() {}\n"),
        (
            "src/json.rs",
            "pub struct Json;\n\nimpl Json {\n    pub fn dumps(&self) {}\n}\n",
        ),
        (
            "internal/pricing/pricing.go",
            "package pricing\n\nfunc ApplyDiscount(price float64) float64 {\n\treturn price\n}\n",
        ),
        (
            "cmd/shop/main.go",
            "package main\n\nimport (\n\tp \"example.com/shop/internal/pricing\"\n)\n\nfunc main() {\n}\n",
        ),
        // Go declares a type's methods in any file of its package.
        (
            "internal/cart/cart.go",
            "package cart\n\ntype Cart struct {\n\tlines []float64\n}\n\nfunc (c *Cart) Add(price float64) {\n\tc.lines = append(c.lines, price)\n}\n",
        ),
        (
            "internal/cart/cart_total.go",
            "package cart\n\nfunc (c *Cart) Total() float64 {\n\treturn 0\n}\n\nfunc (c Cart) Empty() bool {\n\treturn len(c.lines) == 0\n}\n",
        ),
        (
            "internal/cart/cart_test.go",
            "package cart\n\nfunc (c *Cart) mustTotal() float64 {\n\treturn c.Total()\n}\n",
        ),
        (
            "internal/cart/checkout.go",
            "package cart\n\nfunc Checkout(c *Cart) float64 {\n\treturn 0\n}\n",
        ),
        (
            "internal/orders/cart.go",
            "package orders\n\nfunc (c *Cart) Ship() {\n}\n",
        ),
        (
            "web/store.ts",
            "export class Store {\n    dispatch(action: string) {\n        return action\n    }\n}\n\nexport function createStore() {\n    return new Store()\n}\n",
        ),
        (
            "web/app.ts",
            "import * as store from './store';\nimport { Store } from './store';\n\nexport function main() {}\n",
        ),
        (
            "web/widget.ts",
            "import { Store } from './store';\n\nexport class Widget extends Store {\n    render() {\n        return 1\n    }\n}\n",
        ),
    ];
    for (path, text) in files {
        write(&a, path, text);
    }
    let b = tmp.path().join("repo-b");
    write(
        &b,
        "shop/util.py",
        "def secret_of_b(amount):\n    return 'other source'\n",
    );
    write(&b, "shop/main.py", "from shop import util\n");
    let (mut service, _) =
        index_sources(tmp.path(), &[("config:a", &a), ("config:b", &b)], true).await;
    service.files = Some(Arc::new(tabby_index::repo_files::RepoFiles::new(
        tmp.path().join("repos"),
    )));
    let outline = |language: &str, filepath: &str, prefix: &str| {
        let query = CodeSearchQuery {
            filepath: Some(filepath.into()),
            language: Some(language.into()),
            content: prefix.into(),
            source_id: "config:a".into(),
            include_generated: false,
        };
        service
            .receiver_outline(&query, 512)
            .unwrap()
            .into_iter()
            .map(|o| (o.filepath, o.body))
            .collect::<Vec<_>>()
    };
    let one = |path: &str, body: &str| vec![(path.to_string(), body.to_string())];

    assert_eq!(
        outline("python", "shop/parser.py", "def f(x):\n    return util."),
        one(
            "shop/util.py",
            "def format_money(amount):\ndef parse_money(text):\n"
        )
    );
    // A package's `__init__.py` offers what it imports, one module's statements as one.
    assert_eq!(
        outline("python", "shop/parser.py", "    y = shop."),
        one(
            "shop/__init__.py",
            "from shop.util import format_money, parse_money\n"
        )
    );
    // `self._current` is assigned far above the cursor: the file says its type.
    assert_eq!(
        outline("python", "shop/parser.py", "        while self._current."),
        one(
            "shop/chars.py",
            "class Char(str):\n    def is_ws(self):\n    def is_digit_char(self):\n"
        )
    );
    assert_eq!(
        outline("rust", "src/body.rs", "    return Err(crate::Error::"),
        one(
            "src/error.rs",
            "pub struct Error {\nimpl Error {\n    pub(super) fn new_closed() -> Error {\n"
        )
    );
    assert_eq!(
        outline("go", "cmd/shop/main.go", "\tprice := p."),
        one(
            "internal/pricing/pricing.go",
            "func ApplyDiscount(price float64) float64 {\n"
        )
    );
    // After `c.` with `c *Cart`: the type's file, then its package's other files with methods
    // of it; not its tests, nor another package's `Cart`. Asked twice: the second answer
    // comes from the package's files kept for the index generation.
    let cart = || {
        outline(
            "go",
            "internal/cart/checkout.go",
            "func Checkout(c *Cart) float64 {\n\treturn c.",
        )
    };
    let expected = vec![
        (
            "internal/cart/cart.go".to_string(),
            "type Cart struct {\nfunc (c *Cart) Add(price float64) {\n".to_string(),
        ),
        (
            "internal/cart/cart_total.go".to_string(),
            "func (c *Cart) Total() float64 {\nfunc (c Cart) Empty() bool {\n".to_string(),
        ),
    ];
    assert_eq!(cart(), expected);
    assert_eq!(cart(), expected);
    assert_eq!(
        outline("typescript", "web/app.ts", "    const s = store."),
        one(
            "web/store.ts",
            "export class Store {\nexport function createStore() {\n"
        )
    );
    assert_eq!(
        outline("typescript", "web/app.ts", "    const s: Store = x\n    s."),
        one(
            "web/store.ts",
            "export class Store {\n    dispatch(action: string) {\n"
        )
    );
    // A constructor's call leads to its type.
    assert_eq!(
        outline("typescript", "web/app.ts", "    return new Store()."),
        one(
            "web/store.ts",
            "export class Store {\n    dispatch(action: string) {\n"
        )
    );
    assert_eq!(
        outline("python", "shop/parser.py", "    ok = Char(text[0]).is_"),
        one(
            "shop/chars.py",
            "class Char(str):\n    def is_ws(self):\n    def is_digit_char(self):\n"
        )
    );
    // After `self.` / `this.`: the class around the cursor, what it inherits from another file
    // first; after `super().` / `super.`, the bases alone.
    let base = (
        "shop/base.py",
        "class Processor:\n    def last_child(self, parent):\n    def run(self, parent):\n",
    );
    let admonition = (
        "shop/admonition.py",
        "class AdmonitionProcessor(Processor):\n    def test(self, block):\n    def run(self, parent):\n",
    );
    let store = (
        "web/store.ts",
        "export class Store {\n    dispatch(action: string) {\n",
    );
    let widget = (
        "web/widget.ts",
        "export class Widget extends Store {\n    render() {\n",
    );
    let json = (
        "src/json.rs",
        "pub struct Json;\nimpl Json {\n    pub fn dumps(&self) {}\n",
    );
    let in_run = "class AdmonitionProcessor(Processor):\n    def run(self, parent):\n        ";
    let in_render = "export class Widget extends Store {\n    render() {\n        ";
    // (language, file, prefix, the outlines expected: path and body)
    type Case<'a> = (&'a str, &'a str, String, Vec<(&'a str, &'a str)>);
    let cases: [Case; 7] = [
        (
            "python",
            "shop/admonition.py",
            format!("{in_run}sibling = self."),
            vec![base, admonition],
        ),
        // The class header above the editor's window: the indexed file places the cursor.
        (
            "python",
            "shop/admonition.py",
            "    def run(self, parent):\n        sibling = self.last".into(),
            vec![base, admonition],
        ),
        // A function outside any class.
        (
            "python",
            "shop/util.py",
            "def format_money(self):\n    return self.".into(),
            vec![],
        ),
        (
            "typescript",
            "web/widget.ts",
            format!("{in_render}this."),
            vec![store, widget],
        ),
        (
            "python",
            "shop/admonition.py",
            format!("{in_run}super()."),
            vec![base],
        ),
        (
            "typescript",
            "web/widget.ts",
            format!("{in_render}super."),
            vec![store],
        ),
        // In Rust, the type of the `impl` the cursor is in.
        (
            "rust",
            "src/json.rs",
            "impl Json {\n    pub fn pretty(&self) {\n        self.".into(),
            vec![json],
        ),
    ];
    for (language, path, prefix, expected) in cases {
        let expected: Vec<(String, String)> = expected
            .into_iter()
            .map(|(p, b)| (p.to_string(), b.to_string()))
            .collect();
        assert_eq!(outline(language, path, &prefix), expected, "{prefix:?}");
    }
    // Nothing before the cursor to follow, or a name that leads nowhere.
    assert!(outline("python", "shop/parser.py", "    x = ").is_empty());
    assert!(outline("python", "shop/parser.py", "    x = util.parse_money(t).").is_empty());
    assert!(outline("python", "shop/parser.py", "    x = os.").is_empty());
    // `json.` guesses the type `Json`: only a Python file's definition counts.
    assert!(outline("python", "shop/parser.py", "    s = json.").is_empty());
    assert!(!outline("rust", "src/body.rs", "    let s = json.").is_empty());
    // Each source reads its own file of the same path.
    let other = CodeSearchQuery {
        filepath: Some("shop/main.py".into()),
        language: Some("python".into()),
        content: "    util.".into(),
        source_id: "config:b".into(),
        include_generated: false,
    };
    let found = service.receiver_outline(&other, 512).unwrap();
    assert_eq!(
        found,
        vec![tabby_common::api::code::CodeOutline {
            filepath: "shop/util.py".into(),
            body: "def secret_of_b(amount):\n".into()
        }]
    );
}

/// What may follow `module.`: every name a repository module offers, in TypeScript (through a
/// namespace import only), Python, Rust and Go; none where the module may offer more than its
/// text names (`export *`, a package's `__init__.py`), for a default import, a type or `this.`.
#[tokio::test]
async fn receiver_names_are_all_a_module_offers_or_none() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("repo-a");
    let files = [
        (
            "web/duration.ts",
            "const hidden = 1\nexport const toMillis = (d: number) => d\nexport function toSeconds(d: number) {\n  return d / 1000\n}\nexport class Duration {}\n",
        ),
        ("web/facade.ts", "export * from './duration'\n"),
        (
            "web/app.ts",
            "import * as Duration from './duration';\nimport * as Facade from './facade';\nimport dflt from './duration';\nimport { Duration as D } from './duration';\n\nexport function main() {}\n",
        ),
        (
            "shop/util.py",
            "import os\n\ndef format_money(amount):\n    local = 1\n    return str(amount)\n\n\ndef parse_money(text):\n    return float(text)\n",
        ),
        ("shop/__init__.py", "from shop.util import format_money\n"),
        (
            "shop/parser.py",
            "from shop import util\nimport shop\n\n\ndef f():\n    pass\n",
        ),
        (
            "src/error.rs",
            "pub struct Error {\n    kind: u8,\n}\n\npub fn closed() -> Error {\n    Error { kind: 1 }\n}\n",
        ),
        ("src/lib.rs", "mod error;\npub use crate::error::Error;\n"),
        (
            "internal/pricing/pricing.go",
            "package pricing\n\nfunc ApplyDiscount(price float64) float64 {\n\treturn price\n}\n\nfunc round(x float64) float64 {\n\treturn x\n}\n",
        ),
        (
            "cmd/shop/main.go",
            "package main\n\nimport (\n\tp \"example.com/shop/internal/pricing\"\n)\n\nfunc main() {\n}\n",
        ),
    ];
    for (path, text) in files {
        write(&a, path, text);
    }
    let (mut service, _) = index_sources(tmp.path(), &[("config:a", &a)], true).await;
    service.files = Some(Arc::new(tabby_index::repo_files::RepoFiles::new(
        tmp.path().join("repos"),
    )));
    let names = |language: &str, filepath: &str, prefix: &str| {
        let query = CodeSearchQuery {
            filepath: Some(filepath.into()),
            language: Some(language.into()),
            content: prefix.into(),
            source_id: "config:a".into(),
            include_generated: false,
        };
        service.receiver_names(&query).unwrap().and_then(|found| {
            // The edited file's indexed text comes with the names, or without any.
            let indexed = std::fs::read_to_string(a.join(filepath)).unwrap();
            assert_eq!(found.indexed_text.as_deref(), Some(indexed.as_str()));
            found.names
        })
    };
    // A value's or `this.`'s members are not all known: the indexed text comes alone; a file
    // the index does not hold has no text; no access before the cursor: nothing.
    let found = |filepath: &str, prefix: &str| {
        service
            .receiver_names(&CodeSearchQuery {
                filepath: Some(filepath.into()),
                language: Some("typescript".into()),
                content: prefix.into(),
                source_id: "config:a".into(),
                include_generated: false,
            })
            .unwrap()
    };
    let this = found("web/app.ts", "  this.").unwrap();
    assert_eq!(this.names, None);
    assert!(this.indexed_text.unwrap().contains("import * as Duration"));
    let new = found("web/new.ts", "  Duration.").unwrap();
    assert_eq!((new.names, new.indexed_text), (None, None));
    assert_eq!(found("web/app.ts", "  return main"), None);
    let ts = "typescript";
    let duration = names(
        ts,
        "web/app.ts",
        "export function main() {\n  return Duration.",
    )
    .unwrap();
    assert_eq!(duration, ["Duration", "toMillis", "toSeconds"]);
    // What is typed after the access does not filter the names (the completion service does).
    assert_eq!(names(ts, "web/app.ts", "  Duration.toM"), Some(duration));
    assert_eq!(names(ts, "web/app.ts", "  Facade."), None);
    assert_eq!(names(ts, "web/app.ts", "  dflt."), None);
    assert_eq!(names(ts, "web/app.ts", "  D."), None);
    assert_eq!(names(ts, "web/app.ts", "  this."), None);
    assert_eq!(names(ts, "web/app.ts", "  return main"), None);
    // A parameter or a local of the module's name is not the module.
    assert_eq!(
        names(
            ts,
            "web/app.ts",
            "export const f = (Duration: number) =>\n  Duration."
        ),
        None
    );
    assert_eq!(
        names("python", "shop/parser.py", "for util in items:\n    util."),
        None
    );
    // Another name's member, a comment, a type's place: not a binding.
    assert!(
        names(
            "python",
            "shop/parser.py",
            "x = util.parse_money(t)\nself.util = 1\ny = util."
        )
        .is_some()
    );
    assert!(
        names(
            ts,
            "web/app.ts",
            "/**\n * Adds a `Duration`.\n */\nconst f = (d: number): Duration =>\n  Duration."
        )
        .is_some()
    );

    let util = names("python", "shop/parser.py", "def f():\n    return util.").unwrap();
    for name in ["format_money", "parse_money", "os", "__name__"] {
        assert!(util.iter().any(|n| n == name), "{name} in {util:?}");
    }
    assert!(!util.iter().any(|n| n == "local"), "{util:?}");
    assert_eq!(names("python", "shop/parser.py", "    shop."), None);

    let error = names("rust", "src/lib.rs", "fn f() {\n    crate::error::").unwrap();
    assert!(error.iter().any(|n| n == "Error") && error.iter().any(|n| n == "closed"));
    assert!(!error.iter().any(|n| n == "kind"), "{error:?}");

    assert_eq!(
        names("go", "cmd/shop/main.go", "func main() {\n\tx := p."),
        Some(vec!["ApplyDiscount".to_string()])
    );
}

/// An outline that does not fit keeps the members its repository uses most (chunks that hold
/// the name without defining it, in the request's own source only), written in file order.
#[tokio::test]
async fn outlines_that_do_not_fit_keep_the_members_the_repository_uses_most() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("repo-a");
    // `convert` twice, as overloads are written: one name, counted once.
    let core = "class Markdown:\n    def build_parser(self):\n        pass\n\n    def register_extensions(self, extensions):\n        pass\n\n    def convert(self, source):\n        pass\n\n    def convert(self):\n        pass\n\n    def reset(self):\n        pass\n";
    write(&a, "md/core.py", core);
    for i in 0..6 {
        write(
            &a,
            &format!("md/use_{i}.py"),
            &format!("def render_{i}(md, text):\n    md.reset()\n    return md.convert(text)\n"),
        );
    }
    // Subclasses that override `build_parser` define the name; they do not use it.
    for i in 0..8 {
        write(
            &a,
            &format!("md/sub_{i}.py"),
            &format!("class Sub{i}(Markdown):\n    def build_parser(self):\n        return {i}\n"),
        );
    }
    // Another source calls `build_parser` everywhere: its uses do not count for source a.
    let b = tmp.path().join("repo-b");
    write(&b, "md/core.py", core);
    for i in 0..12 {
        write(
            &b,
            &format!("md/use_{i}.py"),
            &format!("def build_{i}(md):\n    return md.build_parser()\n"),
        );
    }
    let (service, _) = index_sources(tmp.path(), &[("config:a", &a), ("config:b", &b)], true).await;
    let outline = |source: &str, max_bytes: usize| {
        let query = CodeSearchQuery {
            filepath: Some("md/use_0.py".into()),
            language: Some("python".into()),
            content: "def f(md: Markdown):\n    html = md.".into(),
            source_id: source.into(),
            include_generated: false,
        };
        let found = service.receiver_outline(&query, max_bytes).unwrap();
        found.into_iter().map(|o| o.body).collect::<Vec<_>>()
    };
    // Room for the header and two members: the two most used names, not one name twice.
    let budget = "class Markdown:\n    def convert(self, source):\n    def convert(self):\n".len();
    assert_eq!(
        outline("config:a", budget),
        vec!["class Markdown:\n    def convert(self, source):\n    def reset(self):\n"]
    );
    assert_eq!(
        outline("config:b", budget),
        vec!["class Markdown:\n    def build_parser(self):\n    def convert(self):\n"],
        "source b's own uses"
    );
    // When everything fits, nothing is counted or reordered.
    assert_eq!(
        outline("config:a", 4096),
        vec![
            "class Markdown:\n    def build_parser(self):\n    def register_extensions(self, extensions):\n    def convert(self, source):\n    def convert(self):\n    def reset(self):\n"
        ]
    );
}

/// The content features of real candidates: the chunk sides the indexer stored (definition
/// name, head, path, module) and the query terms found through the postings.
#[tokio::test]
async fn content_features_read_the_indexed_chunk_sides_and_postings() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("repo");
    write(
        &dir,
        "pkg/items.py",
        "def make_integer(value):\n    return Integer(value)\n",
    );
    write(
        &dir,
        "pkg/container.py",
        "def append_value(items, value):\n    items.append(value)\n",
    );
    write(
        &dir,
        "pkg/editing.py",
        "from pkg import items\n\n\ndef build(value):\n    return items.",
    );
    write_unrelated(&dir, "");
    let (service, _) = index_sources(tmp.path(), &[("config:c", &dir)], true).await;
    let q = query(
        "from pkg import items\n\n\ndef build(value):\n    return items.",
        None,
        Some("pkg/editing.py"),
        "config:c",
    );
    let legs = service.search_legs(&q, 40).await.unwrap();
    let candidates = ranker::candidates(
        &legs.searcher,
        &legs.bm25,
        &legs.embedding,
        (&legs.names, &legs.members),
        Some(service.content_of(&legs)),
    );
    let feature = |name: &str| ranker::FEATURES.iter().position(|f| *f == name).unwrap();
    let of = |path: &str| {
        candidates
            .iter()
            .find(|c| {
                CodeSearchService::document(&legs.searcher, c.address)
                    .is_some_and(|d| d.filepath == path)
            })
            .unwrap_or_else(|| panic!("{path} is a candidate"))
            .features
    };
    let items = of("pkg/items.py");
    let container = of("pkg/container.py");
    assert_eq!(
        items[feature("module_named")],
        1.0,
        "`items` names items.py"
    );
    assert_eq!(container[feature("module_named")], 0.0);
    assert_eq!(items[feature("path_in_q")], 1.0);
    assert_eq!(
        items[feature("has_name")],
        1.0,
        "make_integer is defined there"
    );
    assert!(
        items[feature("q_cov")] > 0.0,
        "the query's words, from the postings"
    );
    assert!(items[feature("log_lines")] > 0.0 && items[feature("log_words")] > 0.0);
    // `value` is a query term and a word of append_value's head.
    assert!(container[feature("head_cov")] > 0.0);

    // A ranker that reads only `module_named` puts items.py first.
    let mut service = service;
    service.ranker = Some(ranker_reading_only("module_named"));
    let fused = service.fuse(&legs);
    let first = CodeSearchService::document(&legs.searcher, fused[0].address).unwrap();
    assert_eq!(first.filepath, "pkg/items.py");
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A copy of the index in `from` with every segment merged into one, `order`'s segments first.
fn merged_copy(from: &Path, to: &Path, order: &[tantivy::index::SegmentId]) {
    copy_tree(from, to);
    let index = tantivy::Index::open_in_dir(to).unwrap();
    let mut writer: tantivy::IndexWriter = index.writer(15_000_000).unwrap();
    writer.merge(order).wait().unwrap();
    writer.wait_merging_threads().unwrap();
    assert_eq!(index.searchable_segment_ids().unwrap().len(), 1);
}

/// The address of the chunk row of `path` in a one-segment index.
fn chunk_address(searcher: &Searcher, path: &str) -> DocAddress {
    let schema = IndexSchema::instance();
    let term = schema.chunk_attribute_term(fields::CHUNK_FILEPATH, path);
    let rows = searcher
        .search(
            &TermQuery::new(term, IndexRecordOption::Basic),
            &tantivy::collector::DocSetCollector,
        )
        .unwrap();
    assert_eq!(rows.len(), 1, "{path} is one chunk");
    rows.into_iter().next().unwrap()
}

/// Two builds of one corpus whose rows lie in opposite orders answer the same, although a dozen
/// chunks score the same in both legs and only a few of them fit: equal scores are ordered by
/// the chunks' stable keys (source, path, line), not by their document addresses, which
/// depend on the order the parallel indexer wrote the rows in.
#[tokio::test]
async fn equal_scores_give_one_order_whatever_order_the_rows_were_written_in() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    let body = "def refresh_token_cache(session):\n    session.token_cache.clear()\n    return session.token_cache\n";
    write_unrelated(&repo, "misc/");
    // A test file: the tuned BM25 leg's row factors then apply (its over-fetch path).
    write(
        &repo,
        "tests/test_misc.py",
        "def test_compute():\n    assert compute_1(2) == 2\n",
    );
    for i in 0..6 {
        write(&repo, &format!("first/dup_{i}.py"), body);
    }
    drop(index_sources(tmp.path(), &[("dup", &repo)], true).await);
    let index_dir = tmp.path().join("index");
    let segments = || {
        tantivy::Index::open_in_dir(&index_dir)
            .unwrap()
            .searchable_segment_ids()
            .unwrap()
    };
    let first_run = segments();
    // A second run adds six more copies: its rows go to new segments.
    for i in 0..6 {
        write(&repo, &format!("second/dup_{i}.py"), body);
    }
    drop(index_sources(tmp.path(), &[("dup", &repo)], true).await);
    let all = segments();
    assert!(first_run.iter().all(|s| all.contains(s)));
    let second_run: Vec<_> = all
        .iter()
        .filter(|s| !first_run.contains(s))
        .cloned()
        .collect();
    assert!(!second_run.is_empty());

    let forward = tmp.path().join("forward");
    let backward = tmp.path().join("backward");
    merged_copy(
        &index_dir,
        &forward,
        &[first_run.clone(), second_run.clone()].concat(),
    );
    merged_copy(&index_dir, &backward, &[second_run, first_run].concat());

    let embedding = HashEmbedding::new(DIM);
    let embedding = CodeSearchEmbedding {
        model_id: embedding.model_id(),
        model: Arc::new(embedding),
    };
    let languages = Arc::new(LanguageTable::builtin());
    let mut services = [&forward, &backward]
        .map(|dir| CodeSearchService::new(dir.clone(), Some(embedding.clone()), languages.clone()));

    // The premise: the copies hold the tied rows in opposite address orders.
    let mut before = Vec::new();
    for service in &services {
        let searcher = service.loaded().unwrap().reader.searcher();
        before.push(
            chunk_address(&searcher, "first/dup_0.py")
                < chunk_address(&searcher, "second/dup_0.py"),
        );
    }
    assert_eq!(before, vec![true, false]);

    let located = |searcher: &Searcher, hits: &LegHits| -> Vec<String> {
        hits.iter()
            .map(|(_, a)| CodeSearchService::document(searcher, *a).unwrap().filepath)
            .collect()
    };
    // Both BM25 paths: the tuned one re-scores an over-fetch (row factors); upstream's keeps
    // Tantivy's top hits.
    for (strategy, content, filepath) in [
        (
            QueryStrategy::Tuned,
            "def handle(session):\n    refresh_token_cache(session)\n    token_cache = session.token_cache\n",
            Some("misc/editing.py"),
        ),
        (
            QueryStrategy::Tuned,
            "clear the session's token cache",
            None,
        ),
        (
            QueryStrategy::Upstream,
            "def handle(session):\n    refresh_token_cache(session)\n    token_cache = session.token_cache\n",
            Some("misc/editing.py"),
        ),
    ] {
        let q = query(content, Some("python"), filepath, "dup");
        let mut answers = Vec::new();
        for service in &mut services {
            service.query_strategy = strategy;
            // Three of twelve tied chunks: the BM25 leg's first fetch (three times as many)
            // ends inside the tied group.
            let legs = service.search_legs(&q, 3).await.unwrap();
            assert_eq!(legs.bm25.len(), 3);
            assert_eq!(legs.embedding.len(), 3);
            let bm25 = located(&legs.searcher, &legs.bm25);
            let embedding = located(&legs.searcher, &legs.embedding);
            assert!(bm25.iter().all(|p| p.contains("dup_")), "{bm25:?}");
            let params = CodeSearchParams {
                num_to_score: 3,
                ..open_params(6)
            };
            let hits: Vec<String> = service
                .search_in_language(q.clone(), params)
                .await
                .unwrap()
                .into_iter()
                .map(|h| h.doc.filepath)
                .collect();
            answers.push((bm25, embedding, hits));
        }
        assert_eq!(answers[0], answers[1], "{strategy:?} {content:?}");
    }
    // The symbol lookup (definitions for the agents' tools and the outlines) too.
    let defined: Vec<Vec<String>> = services
        .iter()
        .map(|service| {
            service
                .symbol_chunks(
                    "dup",
                    "refresh_token_cache",
                    symbols::SymbolUse::Definition,
                    3,
                )
                .unwrap()
                .into_iter()
                .map(|d| d.filepath)
                .collect()
        })
        .collect();
    assert_eq!(defined[0].len(), 3);
    assert_eq!(defined[0], defined[1]);
}

/// Chunks put back at their lines give one text whatever order they come in (a search's
/// document set has none): where two start on the same line, the longer one's lines stay.
#[test]
fn stitched_text_does_not_depend_on_the_order_of_the_chunks() {
    let chunks = vec![
        (Some(1), "use crate::body::Incoming;".to_string()),
        (Some(3), "impl Builder {".to_string()),
        (
            Some(3),
            "    impl Builder {\n        fn new() -> Self {\n        }".to_string(),
        ),
        (Some(6), "}".to_string()),
    ];
    let expected = "use crate::body::Incoming;\n\n    impl Builder {\n        fn new() -> Self {\n        }\n}";
    let mut reversed = chunks.clone();
    reversed.reverse();
    assert_eq!(stitch(chunks), expected);
    assert_eq!(stitch(reversed), expected);
}

#[tokio::test]
async fn a_question_finds_code_through_the_code_words_its_words_point_to() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("repo");
    let target = "class Line:\n    def vacant(self) -> bool:\n        return self.count == 0\n";
    write(&dir, "line.py", target);
    write_unrelated(&dir, "");
    let (mut service, _) = index_sources(tmp.path(), &[("config:q", &dir)], false).await;

    // None of the question's words is in the definition: only the learned expansion
    // ("whether" → `bool`) reaches it.
    let question = "Tell whether nothing is waiting";
    let words = tabby_common::index::code::search_words(target);
    for w in tabby_common::index::code::search_words(question) {
        assert!(!words.contains(&w), "{w} is in the definition");
    }
    let q = query(question, None, None, "config:q");
    let legs = service.search_legs(&q, 10).await.unwrap();
    let first = legs
        .bm25
        .first()
        .and_then(|(_, address)| CodeSearchService::document(&legs.searcher, *address));
    assert_eq!(first.map(|d| d.filepath), Some("line.py".to_string()));

    // Code before a cursor is not expanded: the same words as a prefix find nothing.
    let code = query(question, Some("python"), Some("other.py"), "config:q");
    let legs = service.search_legs(&code, 10).await.unwrap();
    assert!(legs.bm25.is_empty(), "{:?}", legs.bm25.len());

    // Without the table, or under upstream's strategy, the question finds nothing either.
    service.nl_expansion = None;
    assert!(service.search_legs(&q, 10).await.unwrap().bm25.is_empty());
    service.nl_expansion = expansion::NlExpansion::builtin();
    service.query_strategy = QueryStrategy::Upstream;
    assert!(service.search_legs(&q, 10).await.unwrap().bm25.is_empty());
}

/// The names leg on a real index: a code query in a file finds the definitions, in other files
/// of its source, of the names the file uses above the editor's lines, nearest first, where
/// neither the words near the cursor nor the embedding lead; the answer keeps at most the
/// ranker's `names_cap` of them. Another source's definition of the same name never comes,
/// nor the file's own; a query whose lines the file does not hold, or a ranker that does not
/// weigh the leg, runs no names leg.
#[tokio::test]
async fn the_names_leg_finds_what_the_file_used_above_the_window() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("repo-a");
    write(
        &a,
        "shop/pricing.py",
        "def apply_discount_rate(price, rate):\n    return price * (1 - rate)\n",
    );
    write(
        &a,
        "shop/receipt.py",
        "def format_receipt_line(entry):\n    return '%-20s' % entry\n",
    );
    write(
        &a,
        "shop/footer.py",
        "def print_receipt_footer(out):\n    out.append('thanks')\n",
    );
    let mut checkout = String::from(
        "from shop.pricing import apply_discount_rate\n\
         from shop.receipt import format_receipt_line\n\
         from shop.footer import print_receipt_footer\n\n\
         def discounted(price):\n    return apply_discount_rate(price, 0.1)\n\n\
         def receipt(lines):\n    out = [format_receipt_line(l) for l in lines]\n    \
         print_receipt_footer(out)\n    return out\n\n",
    );
    for i in 0..12 {
        checkout.push_str(&format!("def filler_{i}(x):\n    return x + {i}\n\n"));
    }
    checkout.push_str(
        "def total(items):\n    subtotal = sum(items)\n    count = len(items)\n    \
         return subtotal / count\n",
    );
    write(&a, "shop/checkout.py", &checkout);
    write_unrelated(&a, "misc/");
    let b = tmp.path().join("repo-b");
    write(
        &b,
        "other/footer.py",
        "def print_receipt_footer(out):\n    return 'other source'\n",
    );
    let (mut service, _) =
        index_sources(tmp.path(), &[("config:a", &a), ("config:b", &b)], false).await;
    // What the editor sends: the lines near the cursor (the first may be cut).
    let window = "(items):\n    subtotal = sum(items)\n    count = len(items)\n    ";
    let q = query(window, Some("python"), Some("shop/checkout.py"), "config:a");

    let legs = service.search_legs(&q, 40).await.unwrap();
    let path = |a: DocAddress| {
        CodeSearchService::document(&legs.searcher, a)
            .unwrap()
            .filepath
    };
    let named: Vec<String> = legs.names.iter().map(|h| path(h.address)).collect();
    // Nearest the window first; names the window shows (`items`) and names only the file
    // defines (`filler_*`) are not the leg's.
    assert_eq!(
        named,
        ["shop/footer.py", "shop/receipt.py", "shop/pricing.py"]
    );
    // A name's rank counts the names found before it. A one-word name matches the names
    // that hold its word (`receipt` those of footer.py and receipt.py, found already), so
    // pricing.py comes after more than two names.
    let ranks: Vec<usize> = legs.names.iter().map(|h| h.rank).collect();
    assert_eq!(ranks[..2], [0, 1]);
    assert!(ranks[2] > 1, "{ranks:?}");
    // The premise: the other legs do not find them.
    for hits in [&legs.bm25, &legs.embedding] {
        assert!(hits.iter().all(|(_, a)| !named.contains(&path(*a))));
    }
    let answer: Vec<String> = service
        .fuse(&legs)
        .iter()
        .map(|f| path(f.address))
        .collect();
    // The built-in ranker keeps two of them (`names_cap`), and nothing of the other source.
    let names_only: Vec<&String> = answer.iter().filter(|p| named.contains(p)).collect();
    assert_eq!(names_only.len(), 2, "{answer:?}");
    assert!(!answer.iter().any(|p| p == "other/footer.py"), "{answer:?}");

    // Lines the file does not hold place no window: no names.
    let elsewhere = query(
        "x\n    grand_total = compute_everything(items)\n    return ",
        Some("python"),
        Some("shop/checkout.py"),
        "config:a",
    );
    assert!(
        service
            .search_legs(&elsewhere, 40)
            .await
            .unwrap()
            .names
            .is_empty()
    );
    // A path that climbs out of the repository, or one the index does not hold, reads
    // nothing: no names, no error.
    for path in [
        "../repo-b/other/footer.py",
        "/etc/passwd",
        "shop/../../repo-b/x.py",
    ] {
        let q = query(window, Some("python"), Some(path), "config:a");
        assert!(
            service.search_legs(&q, 40).await.unwrap().names.is_empty(),
            "{path}"
        );
    }
    // No ranker that weighs the leg: it does not run.
    service.ranker = None;
    assert!(service.search_legs(&q, 40).await.unwrap().names.is_empty());
}

/// The members leg: after `basket.`, where the file (as indexed, far above the editor's lines)
/// says `basket = Cart()`, the chunks that define `Cart`'s members in another file, which
/// neither the words near the cursor nor the embedding lead to; the built-in ranker puts one
/// of them in the answer. Another source's `Cart` never comes; a chain that leads nowhere, a
/// line that ends in no access, a path outside the repository or a ranker that does not weigh
/// the leg runs no members leg.
#[tokio::test]
async fn the_members_leg_finds_the_members_of_what_the_chain_before_the_cursor_leads_to() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("repo-a");
    // Another class of the file has a member of the same name, first.
    let mut cart = String::from(
        "class Wishlist:\n    def add_line_item(self, code, qty=1):\n        \
         return 'wishlist'\n\n\nclass Cart:\n    def __init__(self):\n        self.rows = []\n\n",
    );
    for (name, body) in [
        ("add_line_item", "self.rows.append((code, qty))"),
        (
            "drop_line_item",
            "self.rows = [r for r in self.rows if r[0] != code]",
        ),
        ("grand_total", "return sum(q for _, q in self.rows)"),
    ] {
        cart.push_str(&format!("    def {name}(self, code, qty=1):\n"));
        for i in 0..12 {
            cart.push_str(&format!("        step_{i} = qty * {i}\n"));
        }
        cart.push_str(&format!("        {body}\n\n"));
    }
    write(&a, "shop/cart.py", &cart);
    let mut checkout = String::from("from shop.cart import Cart\n\n\ndef checkout(order):\n");
    checkout.push_str("    basket = Cart()\n");
    for i in 0..30 {
        checkout.push_str(&format!("    log_{i} = order.get({i})\n"));
    }
    checkout.push_str("    for sku in order:\n        basket.add_line_item(sku)\n");
    write(&a, "shop/checkout.py", &checkout);
    write_unrelated(&a, "misc/");
    let b = tmp.path().join("repo-b");
    write(
        &b,
        "other/cart.py",
        "class Cart:\n    def add_line_item(self, code):\n        return 'other source'\n",
    );
    let (mut service, _) =
        index_sources(tmp.path(), &[("config:a", &a), ("config:b", &b)], false).await;
    // Files read as the repository has them, as the server reads them.
    service.files = Some(Arc::new(tabby_index::repo_files::RepoFiles::new(
        tmp.path().join("repos"),
    )));
    // What the editor sends: the lines near the cursor, which do not say what `basket` is.
    let window = "    log_29 = order.get(29)\n    for sku in order:\n        basket.";
    let q = query(window, Some("python"), Some("shop/checkout.py"), "config:a");

    let legs = service.search_legs(&q, 40).await.unwrap();
    let path = |a: DocAddress| {
        CodeSearchService::document(&legs.searcher, a)
            .unwrap()
            .filepath
    };
    let found: Vec<String> = legs.members.iter().map(|h| path(h.address)).collect();
    assert!(!found.is_empty());
    assert!(found.iter().all(|p| p == "shop/cart.py"), "{found:?}");
    assert_eq!(legs.members[0].rank, 0);
    // `add_line_item`, `drop_line_item`, `grand_total` (an outline has no `__init__`), one
    // chunk each: `Cart`'s, not `Wishlist`'s `add_line_item`.
    assert_eq!(found.len(), 3, "{:?}", legs.members);
    for hit in &legs.members {
        let body = CodeSearchService::document(&legs.searcher, hit.address)
            .unwrap()
            .body;
        assert!(!body.contains("'wishlist'"), "{body}");
    }
    assert!(
        legs.members.iter().all(|h| h.members == 3),
        "{:?}",
        legs.members
    );
    // The premise: the other legs do not find the class.
    for hits in [&legs.bm25, &legs.embedding] {
        assert!(hits.iter().all(|(_, a)| path(*a) != "shop/cart.py"));
    }
    let answer: Vec<String> = service
        .fuse(&legs)
        .iter()
        .map(|f| path(f.address))
        .collect();
    assert!(answer.iter().any(|p| p == "shop/cart.py"), "{answer:?}");
    assert!(!answer.iter().any(|p| p == "other/cart.py"), "{answer:?}");

    // A chain the file does not say, and a line that ends in no access: no members.
    for content in [
        "    for sku in order:\n        shelf_unknown.",
        "    for sku in order:\n        basket = ",
    ] {
        let q = query(
            content,
            Some("python"),
            Some("shop/checkout.py"),
            "config:a",
        );
        let legs = service.search_legs(&q, 40).await.unwrap();
        assert!(legs.members.is_empty(), "{content}: {:?}", legs.members);
    }
    // A path that climbs out of the repository, or one the index does not hold, reads
    // nothing: no members, no error.
    for path in [
        "../repo-b/other/cart.py",
        "/etc/passwd",
        "shop/../../repo-b/x.py",
    ] {
        let q = query(window, Some("python"), Some(path), "config:a");
        assert!(
            service
                .search_legs(&q, 40)
                .await
                .unwrap()
                .members
                .is_empty(),
            "{path}"
        );
    }
    // No ranker that weighs the leg: it does not run.
    service.ranker = None;
    assert!(
        service
            .search_legs(&q, 40)
            .await
            .unwrap()
            .members
            .is_empty()
    );
}
