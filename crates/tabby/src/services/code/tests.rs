//! Code search on a real small index: fusion, per-file cap, thresholds, filters, and the two
//! forms of the embedding leg agreeing.

use std::{path::Path, sync::Arc};

use tabby_common::{
    api::code::{CodeSearch, CodeSearchError, CodeSearchQuery, CodeSearchScores},
    config::CodeSearchParams,
    languages::LanguageTable,
};
use tabby_index::{CodeIndexer, EmbeddingSetup, HashEmbedding, NoProgress, RepositoryToIndex};
use tantivy::DocAddress;

use super::*;

fn write(dir: &Path, rel: &str, text: &str) {
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

    let index_dir = tmp.path().join("index");
    let embedding = HashEmbedding::new(DIM);
    let model_id = embedding.model_id();
    let model: Arc<dyn tabby_inference::Embedding> = Arc::new(embedding);
    let mut indexer = CodeIndexer::open(
        &index_dir,
        Some(EmbeddingSetup {
            model: model.clone(),
            model_id: model_id.clone(),
            max_input_bytes: 5120,
        }),
        LanguageTable::builtin(),
    )
    .await
    .unwrap();
    for (id, dir) in [("config:a", &a), ("config:b", &b)] {
        let repo = RepositoryToIndex {
            source_id: id.into(),
            git_url: format!("file://{}", dir.display()),
            refs: vec![],
        };
        indexer
            .index_repository(&repo, &tmp.path().join("repos"), &NoProgress)
            .await
            .unwrap();
    }
    drop(indexer);
    let service = CodeSearchService::new(
        index_dir,
        Some(CodeSearchEmbedding { model, model_id }),
        Arc::new(LanguageTable::builtin()),
    );
    Fixture { _tmp: tmp, service }
}

fn open_params(n: usize) -> CodeSearchParams {
    CodeSearchParams {
        min_embedding_score: -1.0,
        min_bm25_score: -1.0,
        min_rrf_score: -1.0,
        num_to_return: n,
        num_to_score: 100,
    }
}

fn query(
    content: &str,
    language: Option<&str>,
    filepath: Option<&str>,
    source: &str,
) -> CodeSearchQuery {
    CodeSearchQuery {
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
    let fused = rrf_merge(&vec![(9.0, a), (5.0, b)], &vec![(0.9, b), (0.8, c)]);
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
    let params = CodeSearchParams::completion_default();
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
    let hits = f
        .service
        .search_in_language(
            query(
                "parse_config load_config path",
                Some("python"),
                None,
                "config:a",
            ),
            open_params(20),
        )
        .await
        .unwrap();
    let from_many = hits
        .iter()
        .filter(|h| h.doc.filepath == "src/many.py")
        .count();
    assert_eq!(
        from_many,
        2,
        "{:?}",
        hits.iter().map(|h| &h.doc.filepath).collect::<Vec<_>>()
    );
    assert!(hits.iter().any(|h| h.doc.filepath == "src/single.py"));
    for pair in hits.windows(2) {
        assert!(pair[0].scores.rrf >= pair[1].scores.rrf);
    }
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
async fn bits_and_tokens_rank_identically() {
    let mut f = fixture().await;
    let q = query(
        "def parse_config(path): return load_config(path)",
        None,
        None,
        "config:a",
    );
    f.service.embedding_leg = EmbeddingLeg::Bits;
    let bits = f.service.search_legs(&q, 50).await.unwrap();
    f.service.embedding_leg = EmbeddingLeg::Tokens;
    let tokens = f.service.search_legs(&q, 50).await.unwrap();
    assert!(!bits.embedding.is_empty());
    assert_eq!(bits.embedding.len(), tokens.embedding.len());
    for (a, b) in bits.embedding.iter().zip(tokens.embedding.iter()) {
        assert_eq!(a.1, b.1, "same order");
        assert!((a.0 - b.0).abs() < 1e-5, "same score: {} vs {}", a.0, b.0);
    }
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
