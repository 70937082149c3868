//! The static embedding: distillation on a tiny random BERT (the whole pipeline, in
//! milliseconds), and the real table distilled from all-MiniLM-L6-v2 by `tabby download`.

mod support;

use std::{path::Path, sync::OnceLock};

use tabby_inference::Embedding;
use tabby_local::{
    embedding::{
        EmbeddingOptions, StaticEmbedding,
        adapter::{AppliedAdapter, CODE_ADAPTER, sha256_hex},
        distill::{DistillOptions, DistillOutcome, distill, ensure_distilled},
        load_any,
        static_table::{HEADER_FILE, TABLE_FILE, TableHeader},
    },
    registry::{DEFAULT_EMBEDDING_MODEL, STATIC_EMBEDDING_MODEL},
};

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn strings(texts: &[&str]) -> Vec<String> {
    texts.iter().map(|t| t.to_string()).collect()
}

// ---- a tiny random BERT ------------------------------------------------------------------

const HIDDEN: usize = 8;
const VOCAB: &[&str] = &[
    "[PAD]",
    "[unused0]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "(",
    ")",
    ".",
    "=",
    "a",
    "the",
    "read",
    "file",
    "sort",
    "list",
    "open",
    "json",
    "parse",
    "cat",
    "dog",
    "##s",
    "##ing",
];

/// Deterministic values in [-0.5, 0.5).
fn noise(seed: u64, n: usize) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

/// Writes a one-layer BERT with random weights and a WordPiece tokenizer over [`VOCAB`].
fn write_tiny_bert(dir: &Path, seed: u64) {
    use candle_core::{Device, Tensor};

    std::fs::create_dir_all(dir).unwrap();
    let (h, inner, positions) = (HIDDEN, 16, 16);
    let mut tensors = std::collections::HashMap::new();
    let mut add = |name: &str, shape: &[usize], values: Vec<f32>| {
        tensors.insert(
            name.to_string(),
            Tensor::from_vec(values, shape, &Device::Cpu).unwrap(),
        );
    };
    let mut salt = seed;
    let mut random = |n: usize| {
        salt += 1;
        noise(salt, n)
    };
    add(
        "embeddings.word_embeddings.weight",
        &[VOCAB.len(), h],
        random(VOCAB.len() * h),
    );
    add(
        "embeddings.position_embeddings.weight",
        &[positions, h],
        random(positions * h),
    );
    add(
        "embeddings.token_type_embeddings.weight",
        &[2, h],
        random(2 * h),
    );
    let p = "encoder.layer.0";
    for (name, outputs, inputs) in [
        ("attention.self.query", h, h),
        ("attention.self.key", h, h),
        ("attention.self.value", h, h),
        ("attention.output.dense", h, h),
        ("intermediate.dense", inner, h),
        ("output.dense", h, inner),
    ] {
        add(
            &format!("{p}.{name}.weight"),
            &[outputs, inputs],
            random(outputs * inputs),
        );
        add(&format!("{p}.{name}.bias"), &[outputs], random(outputs));
    }
    for norm in [
        "embeddings.LayerNorm".to_string(),
        format!("{p}.attention.output.LayerNorm"),
        format!("{p}.output.LayerNorm"),
    ] {
        add(&format!("{norm}.weight"), &[h], vec![1.0; h]);
        add(&format!("{norm}.bias"), &[h], vec![0.0; h]);
    }
    candle_core::safetensors::save(&tensors, dir.join("model.safetensors")).unwrap();

    let config = serde_json::json!({
        "vocab_size": VOCAB.len(), "hidden_size": h, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": inner,
        "max_position_embeddings": positions, "hidden_act": "gelu",
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();

    let vocab: serde_json::Map<String, serde_json::Value> = VOCAB
        .iter()
        .enumerate()
        .map(|(i, t)| (t.to_string(), i.into()))
        .collect();
    let special = |id: usize| {
        serde_json::json!({"id": id, "content": VOCAB[id], "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": true})
    };
    let tokenizer = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [special(0), special(2), special(3), special(4), special(5)],
        "normalizer": {"type": "BertNormalizer", "clean_text": true,
            "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 4], "cls": ["[CLS]", 3]},
        "decoder": null,
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
            "max_input_chars_per_word": 100, "vocab": vocab},
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
}

#[tokio::test]
async fn a_tiny_model_distils_into_a_table_that_loads_and_embeds() {
    let root = tempfile::tempdir().unwrap();
    let (source, out) = (
        root.path().join("org/tiny"),
        root.path().join("org/tiny-static"),
    );
    write_tiny_bert(&source, 1);

    let header = distill(&source, &out, &Default::default(), &|_, _| {}).unwrap();
    assert_eq!(header.vocab_size, VOCAB.len());
    // The default keeps more components than the tiny model has: all of them.
    assert_eq!(header.dimension, HIDDEN);
    assert_eq!(TableHeader::load(&out).unwrap(), header);
    assert!(out.join("tokenizer.json").is_file() && out.join("tabby.json").is_file());
    // The code adapter was asked for but was trained on another table: not applied.
    assert!(header.distillation.code_adapter.is_some());
    assert_eq!(header.code_adapter, None);

    let loaded = load_any(&out, EmbeddingOptions::default()).unwrap();
    assert_eq!(loaded.dimension, HIDDEN);
    assert!(
        loaded.model_id.starts_with("local:org/tiny-static@512#"),
        "{}",
        loaded.model_id
    );
    let texts = strings(&[
        "read the file",
        "file the read",
        "read",
        "read read",
        "read ☃",
        "",
    ]);
    let v = loaded.model.embed(&texts).await.unwrap();
    for vector in &v[..5] {
        assert_eq!(vector.len(), HIDDEN);
        assert!((dot(vector, vector).sqrt() - 1.0).abs() < 1e-5);
    }
    // A bag of tokens: order and repetition do not matter, an unknown token counts nothing.
    assert!(dot(&v[0], &v[1]) > 0.9999);
    assert!(dot(&v[2], &v[3]) > 0.9999);
    assert!(dot(&v[2], &v[4]) > 0.9999);
    // No tokens, no direction.
    assert_eq!(v[5], vec![0.0; HIDDEN]);
    // Deterministic: the same table from the same source.
    let again = distill(
        &source,
        &root.path().join("again"),
        &Default::default(),
        &|_, _| {},
    )
    .unwrap();
    assert_eq!(again.table_sha256, header.table_sha256);
}

#[test]
fn distillation_is_redone_only_when_its_inputs_change() {
    let root = tempfile::tempdir().unwrap();
    let (source, out) = (
        root.path().join("org/tiny"),
        root.path().join("org/tiny-static"),
    );
    write_tiny_bert(&source, 1);
    let ensure = || ensure_distilled(&source, &out, &|_, _| {}).unwrap();

    assert_eq!(ensure(), DistillOutcome::Distilled);
    let first = TableHeader::load(&out).unwrap();
    assert_eq!(ensure(), DistillOutcome::UpToDate);

    // Other source weights: a new table.
    write_tiny_bert(&source, 2);
    assert_eq!(ensure(), DistillOutcome::Distilled);
    let second = TableHeader::load(&out).unwrap();
    assert_ne!(second.source.weights_sha256, first.source.weights_sha256);
    assert_ne!(second.table_sha256, first.table_sha256);
    assert_eq!(ensure(), DistillOutcome::UpToDate);

    // A table made before the code adapter existed (its header has no such option): done
    // again, so an upgrade gets the adapted table where it fits.
    let text = std::fs::read_to_string(out.join(HEADER_FILE)).unwrap();
    let mut old: serde_json::Value = serde_json::from_str(&text).unwrap();
    old["distillation"]
        .as_object_mut()
        .unwrap()
        .remove("code_adapter");
    old.as_object_mut().unwrap().remove("code_adapter");
    std::fs::write(out.join(HEADER_FILE), old.to_string()).unwrap();
    assert_eq!(
        TableHeader::load(&out).unwrap().distillation.code_adapter,
        None
    );
    assert_eq!(ensure(), DistillOutcome::Distilled);
    assert_eq!(ensure(), DistillOutcome::UpToDate);

    // A damaged table, or a missing header (an interrupted run): done again.
    std::fs::write(out.join(TABLE_FILE), b"garbage").unwrap();
    assert_eq!(ensure(), DistillOutcome::Distilled);
    std::fs::remove_file(out.join(HEADER_FILE)).unwrap();
    assert!(load_any(&out, EmbeddingOptions::default()).is_err());
    assert_eq!(ensure(), DistillOutcome::Distilled);
    assert_eq!(TableHeader::load(&out).unwrap(), second);
}

#[test]
fn a_missing_source_or_table_names_tabby_download() {
    let root = tempfile::tempdir().unwrap();
    let err = ensure_distilled(
        &root.path().join("none"),
        &root.path().join("out"),
        &|_, _| {},
    )
    .unwrap_err();
    assert!(format!("{err:#}").contains("tabby download"), "{err:#}");
    let err = StaticEmbedding::load(root.path()).err().unwrap();
    assert!(err.to_string().contains("tabby download"), "{err}");
}

// ---- the real table ----------------------------------------------------------------------

fn model() -> &'static StaticEmbedding {
    static MODEL: OnceLock<StaticEmbedding> = OnceLock::new();
    MODEL.get_or_init(|| {
        let dir = support::model_dir(STATIC_EMBEDDING_MODEL);
        StaticEmbedding::load(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
    })
}

async fn embed(texts: &[&str]) -> Vec<Vec<f32>> {
    let vectors = model().embed(&strings(texts)).await.unwrap();
    assert_eq!(vectors.len(), texts.len());
    vectors
}

const OPEN_FILE: &str =
    "def load_config(path):\n    with open(path) as f:\n        return f.read()\n";
const SORT_LIST: &str =
    "def sorted_scores(scores):\n    scores.sort(reverse=True)\n    return scores[:10]\n";
const HTTP_GET: &str = "async fn fetch(url: &str) -> reqwest::Result<String> {\n    reqwest::get(url).await?.text().await\n}\n";
const PARSE_JSON: &str = "const user = JSON.parse(body);\nconsole.log(user.name);\n";

#[tokio::test]
async fn the_distilled_table_embeds_with_unit_norm_deterministically() {
    let texts = [
        "hello world",
        OPEN_FILE,
        &"x = 1\n".repeat(400),
        "Größe 日本語",
    ];
    let vectors = embed(&texts).await;
    for v in &vectors {
        assert_eq!(v.len(), model().dimension());
        assert!((dot(v, v).sqrt() - 1.0).abs() < 1e-4);
    }
    assert_eq!(embed(&texts).await, vectors);
    // Each text is embedded alone, whatever the batch.
    for (text, v) in texts.iter().zip(&vectors) {
        assert_eq!(&embed(&[text]).await[0], v);
    }
    assert!(model().embed(&[]).await.unwrap().is_empty());
}

/// Tokenising word by word through the cache gives exactly the tokenizer's ids on the whole
/// text: on texts that probe the normaliser (accents, CJK, controls, form feeds, other Unicode
/// spaces, long words, more than 512 tokens) and on every source file of this workspace, the
/// second time through from the cache.
#[test]
fn word_by_word_tokens_equal_the_whole_text_tokens() {
    let model = model();
    assert!(
        model.caches_words(),
        "all-MiniLM-L6-v2's tokenizer is BERT's"
    );
    let long_word = "a".repeat(150);
    let probes: Vec<String> = vec![
        OPEN_FILE.into(),
        HTTP_GET.into(),
        PARSE_JSON.into(),
        "Größe café naïve Ångström".into(),
        "日本語のテキスト混在 mixed中文text".into(),
        "tab\tsep\r\nline\u{000C}formfeed\u{000B}vtab\u{0000}nul\u{FFFD}repl".into(),
        "no\u{00A0}break\u{2003}em\u{3000}ideographic space".into(),
        "e\u{0301}\u{0301} combining marks".into(),
        format!("{long_word} {long_word}x y"),
        "fn f() { let x = vec![1, 2, 3]; }\n".repeat(120),
        "".into(),
        "   \n\t ".into(),
        "special [UNK] [CLS]x[SEP] [MASK][PAD] [unk] [UNK".into(),
    ];
    let mut texts = probes;
    // The crate's directory as cargo gives it to the running test, not as it was at compile
    // time: a test binary another checkout built into a shared target directory names that
    // checkout, which may be gone (its walk then found nothing to compare).
    let manifest =
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into());
    let root = Path::new(&manifest).join("../..");
    for dir in ["crates", "ee/tabby-ui", "scripts"] {
        let mut stack = vec![root.join(dir)];
        while let Some(d) = stack.pop() {
            // Other tests running beside this one create and remove scratch directories in
            // the tree (the browser test's output); one gone by now is simply skipped.
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    if !path.ends_with("node_modules") && !path.ends_with("vendor") {
                        stack.push(path);
                    }
                } else if path
                    .extension()
                    .is_some_and(|e| ["rs", "py", "js", "sh", "md"].contains(&e.to_str().unwrap()))
                    && let Ok(text) = std::fs::read_to_string(&path)
                {
                    // Chunk-sized pieces, as the indexer embeds them.
                    let mut start = 0;
                    while start < text.len() {
                        let mut end = (start + 512).min(text.len());
                        while !text.is_char_boundary(end) {
                            end += 1;
                        }
                        texts.push(text[start..end].to_string());
                        start = end;
                    }
                }
            }
        }
    }
    assert!(texts.len() > 1000, "{} texts", texts.len());
    for pass in 0..2 {
        for text in &texts {
            let (cached, whole) = model.token_ids_both_ways(text).unwrap();
            assert_eq!(cached, whole, "pass {pass}: {text:?}");
        }
    }
}

#[tokio::test]
async fn queries_are_closest_to_the_code_that_does_what_they_say() {
    let code = embed(&[OPEN_FILE, SORT_LIST, HTTP_GET, PARSE_JSON]).await;
    for (query, expected) in [
        ("read a file", 0),
        ("sort a list in descending order", 1),
        ("download a web page over http", 2),
        ("parse json", 3),
    ] {
        let q = &embed(&[query]).await[0];
        let scores: Vec<f32> = code.iter().map(|c| dot(q, c)).collect();
        let best = (0..scores.len())
            .max_by(|&a, &b| scores[a].total_cmp(&scores[b]))
            .unwrap();
        assert_eq!(best, expected, "{query:?}: scores {scores:?}");
    }
    let [cat, kitten, car] = &embed(&[
        "a cat sits on the mat",
        "a kitten rests on a rug",
        "the car needs new tyres",
    ])
    .await[..] else {
        unreachable!()
    };
    assert!(
        dot(cat, kitten) > dot(cat, car) + 0.1,
        "{} vs {}",
        dot(cat, kitten),
        dot(cat, car)
    );
}

/// The shipped code adapter fits the table `tabby download` distils here and is folded into
/// it. Fails where the distillation comes out different from the one the adapter was trained
/// on (the download then warns and keeps the plain table).
#[test]
fn the_default_table_has_the_code_adapter_folded_in() {
    let header = TableHeader::load(&support::model_dir(STATIC_EMBEDDING_MODEL)).unwrap();
    assert_eq!(header.distillation, DistillOptions::default());
    assert_eq!(
        header.code_adapter,
        Some(AppliedAdapter {
            sha256: sha256_hex(CODE_ADAPTER)
        })
    );
}

#[test]
fn load_any_tells_the_table_from_the_encoder() {
    let static_dir = support::model_dir(STATIC_EMBEDDING_MODEL);
    let minilm_dir = support::model_dir(DEFAULT_EMBEDDING_MODEL);
    let table = load_any(&static_dir, EmbeddingOptions::default()).unwrap();
    let encoder = load_any(&minilm_dir, EmbeddingOptions::default()).unwrap();
    assert_eq!(table.model_id, model().model_id());
    assert!(
        encoder.model_id.contains("all-MiniLM-L6-v2@"),
        "{}",
        encoder.model_id
    );
    assert_ne!(table.model_id, encoder.model_id);
    assert_eq!(encoder.dimension, 384);
    // Made from the encoder that is installed now.
    let header = TableHeader::load(&static_dir).unwrap();
    assert_eq!(header.source.model, DEFAULT_EMBEDDING_MODEL);
}
