//! The embedded sentence encoder against the real all-MiniLM-L6-v2 weights.

mod support;

use std::sync::OnceLock;

use tabby_inference::Embedding;
use tabby_local::{
    embedding::{EmbeddingOptions, LocalEmbedding},
    registry::DEFAULT_EMBEDDING_MODEL,
};

fn model() -> &'static LocalEmbedding {
    static MODEL: OnceLock<LocalEmbedding> = OnceLock::new();
    MODEL.get_or_init(|| {
        let dir = support::model_dir(DEFAULT_EMBEDDING_MODEL);
        let options = EmbeddingOptions {
            parallelism: 2,
            max_batch_size: 4,
        };
        LocalEmbedding::load(&dir, options).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
    })
}

async fn embed(texts: &[&str]) -> Vec<Vec<f32>> {
    let inputs: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
    let vectors = model().embed(&inputs).await.unwrap();
    assert_eq!(vectors.len(), inputs.len());
    vectors
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

const OPEN_FILE: &str =
    "def load_config(path):\n    with open(path) as f:\n        return f.read()\n";
const SORT_LIST: &str =
    "def sorted_scores(scores):\n    scores.sort(reverse=True)\n    return scores[:10]\n";
const HTTP_GET: &str = "async fn fetch(url: &str) -> reqwest::Result<String> {\n    reqwest::get(url).await?.text().await\n}\n";
const PARSE_JSON: &str = "const user = JSON.parse(body);\nconsole.log(user.name);\n";

#[tokio::test]
async fn vectors_have_384_dimensions_and_unit_norm() {
    let vectors = embed(&["hello world", "", OPEN_FILE, &"x = 1\n".repeat(400)]).await;
    assert_eq!(model().dimension(), 384);
    for v in &vectors {
        assert_eq!(v.len(), 384);
        let norm = dot(v, v).sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    }
}

#[tokio::test]
async fn queries_are_closest_to_the_code_that_does_what_they_say() {
    let code = embed(&[OPEN_FILE, SORT_LIST, HTTP_GET, PARSE_JSON]).await;
    let queries = [
        ("read a file", 0),
        ("sort a list in descending order", 1),
        ("download a web page over http", 2),
        ("parse json", 3),
    ];
    for (query, expected) in queries {
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
        dot(cat, kitten) > dot(cat, car) + 0.2,
        "{} vs {}",
        dot(cat, kitten),
        dot(cat, car)
    );
}

#[tokio::test]
async fn a_batch_embeds_each_text_as_if_alone() {
    // Different lengths, more texts than one sub-batch, and a duplicate: padding, reordering and
    // splitting must not change any vector.
    let texts = [
        SORT_LIST,
        "short",
        &OPEN_FILE.repeat(30),
        HTTP_GET,
        PARSE_JSON,
        "short",
        "fn main() {}",
    ];
    let batched = embed(&texts).await;
    for (text, from_batch) in texts.iter().zip(&batched) {
        let alone = &embed(&[text]).await[0];
        let max_diff = alone
            .iter()
            .zip(from_batch)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(max_diff < 1e-4, "{text:?}: max difference {max_diff}");
    }
    assert_eq!(batched[1], batched[5]);
}

#[tokio::test]
async fn long_inputs_are_truncated_not_rejected() {
    assert_eq!(model().max_tokens(), 256);
    let long = "let value = compute(value);\n".repeat(2000);
    let head: String = long.chars().take(2000).collect();
    let vectors = embed(&[&long, &head]).await;
    assert!(dot(&vectors[0], &vectors[1]) > 0.999);
}

#[tokio::test]
async fn no_inputs_no_vectors() {
    assert!(model().embed(&[]).await.unwrap().is_empty());
    assert!(
        model().model_id().contains("all-MiniLM-L6-v2"),
        "{}",
        model().model_id()
    );
}

/// The reference: candle-transformers' `BertModel` on one text at a time, mean-pooled over all
/// tokens and normalised (what sentence-transformers computes).
fn reference_embedding(text: &str) -> Vec<f32> {
    use candle_core::{DType, Device, Tensor};
    use candle_transformers::models::bert::{BertModel, Config};

    let dir = support::model_dir(DEFAULT_EMBEDDING_MODEL);
    let config: Config =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let mut tokenizer = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    tokenizer.with_padding(None);
    tokenizer
        .with_truncation(Some(tokenizers::TruncationParams {
            max_length: 256,
            ..Default::default()
        }))
        .unwrap();
    let ids = tokenizer.encode(text, true).unwrap().get_ids().to_vec();
    let device = Device::Cpu;
    let tensors = candle_core::safetensors::load(dir.join("model.safetensors"), &device).unwrap();
    let vb = candle_nn::VarBuilder::from_tensors(tensors, DType::F32, &device);
    let model = BertModel::load(vb, &config).unwrap();
    let ids = Tensor::new(ids.as_slice(), &device)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let hidden = model
        .forward(&ids, &ids.zeros_like().unwrap(), None)
        .unwrap();
    let mean = hidden.mean(1).unwrap().squeeze(0).unwrap();
    let norm = mean.sqr().unwrap().sum_all().unwrap().sqrt().unwrap();
    mean.broadcast_div(&norm).unwrap().to_vec1().unwrap()
}

#[tokio::test]
async fn matches_the_candle_transformers_bert_model() {
    let long = "for (i, line) in text.lines().enumerate() { total += line.len(); }\n".repeat(30);
    let texts = [
        "read a file",
        OPEN_FILE,
        "Größe, café, 日本語 and ünïcödé",
        long.as_str(),
    ];
    let ours = embed(&texts).await;
    for (text, v) in texts.iter().zip(&ours) {
        let reference = reference_embedding(text);
        let max_diff = v
            .iter()
            .zip(&reference)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(max_diff < 1e-5, "{text:?}: max difference {max_diff}");
    }
}
