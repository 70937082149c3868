//! Tests against the real weights: SmolLM2-135M-Instruct (fast) and Qwen2.5-Coder-0.5B-Instruct.
//! They fail, naming `tabby download`, when the weights are missing: they never skip.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_openai::types::chat::{
    ChatCompletionRequestMessage, ChatCompletionRequestSystemMessage,
    ChatCompletionRequestSystemMessageContent, ChatCompletionRequestUserMessage,
    ChatCompletionRequestUserMessageContent, CreateChatCompletionRequest, FinishReason, Role,
};
use futures::StreamExt;
use tabby_inference::{
    ChatCompletionStream, CompletionOptions, CompletionStream, FirstNames, ModelError,
};

use super::engine::{Finish, Piece};
use super::{LlmConfig, LoadError, LocalChat, LocalCompletion, LocalLlm, SamplingOptions};

const SMOLLM: &str = "HuggingFaceTB/SmolLM2-135M-Instruct";
const QWEN: &str = "TabbyML/Qwen2.5-Coder-0.5B-Instruct";

/// `$TABBY_TEST_MODELS_DIR/<org>/<name>`, else `$HOME/.tabby/models/<org>/<name>`.
fn model_dir(id: &str) -> PathBuf {
    let root = match std::env::var_os("TABBY_TEST_MODELS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
            .join(".tabby")
            .join("models"),
    };
    let dir = root.join(id);
    assert!(
        dir.join("model.gguf").is_file(),
        "{}/model.gguf is missing: run `tabby download` (or set TABBY_TEST_MODELS_DIR) first",
        dir.display()
    );
    dir
}

fn load(id: &str, parallelism: usize) -> Arc<LocalLlm> {
    let config = LlmConfig {
        parallelism,
        ..LlmConfig::default()
    };
    Arc::new(LocalLlm::load(&model_dir(id), &config).unwrap_or_else(|e| panic!("{e}")))
}

fn smollm() -> Arc<LocalLlm> {
    static MODEL: OnceLock<Arc<LocalLlm>> = OnceLock::new();
    MODEL.get_or_init(|| load(SMOLLM, 1)).clone()
}

fn qwen() -> Arc<LocalLlm> {
    static MODEL: OnceLock<Arc<LocalLlm>> = OnceLock::new();
    MODEL.get_or_init(|| load(QWEN, 1)).clone()
}

/// Reference ids from llama.cpp's tokenizer (xllamacpp 2026.10.11549, `/tokenize` with
/// `parse_special: true`, no BOS) for the same GGUF files.
const TOKENIZER_CASES: &[(&str, &[u32], &[u32])] = &[
    // (text, Qwen2.5-Coder ids, SmolLM2 ids)
    (
        "def fib(n):\n    return n",
        &[750, 15801, 1445, 982, 262, 470, 308],
        &[1604, 3987, 24, 94, 727, 472, 1003, 304],
    ),
    (
        "Hello, world! It's 2024 and we've got 1234567 tokens.",
        &[
            9707, 11, 1879, 0, 1084, 594, 220, 17, 15, 17, 19, 323, 582, 3003, 2684, 220, 16, 17,
            18, 19, 20, 21, 22, 11211, 13,
        ],
        &[
            19556, 28, 905, 17, 657, 506, 216, 34, 32, 34, 36, 284, 392, 3543, 3363, 216, 33, 34,
            35, 36, 37, 38, 39, 17837, 30,
        ],
    ),
    (
        "fn main() {\n\tlet x: Vec<u32> = vec![1, 2, 3];\n\n\n    println!(\"{x:?}\");\n}\n",
        &[
            8822, 1887, 368, 341, 10217, 856, 25, 11312, 34837, 18, 17, 29, 284, 7486, 20703, 16,
            11, 220, 17, 11, 220, 18, 52599, 262, 13751, 88928, 87, 76475, 20305, 532,
        ],
        &[
            7853, 1085, 1000, 1662, 198, 197, 2016, 1792, 42, 717, 1159, 44, 101, 35, 34, 46, 446,
            37024, 21653, 33, 28, 216, 34, 28, 216, 35, 26695, 13272, 1628, 34115, 17, 45257, 104,
            42, 47, 15201, 43, 198, 109, 198,
        ],
    ),
    (
        "  leading spaces and trailing   ",
        &[220, 6388, 12621, 323, 27748, 262],
        &[216, 2899, 5600, 284, 35079, 333],
    ),
    (
        "Unicode: café, naïve, 日本語のテキスト, emoji 🦀🚀",
        &[
            33920, 25, 51950, 11, 94880, 586, 11, 75402, 21894, 102819, 15767, 56833, 61803, 70534,
            11, 42365, 11162, 99, 222, 145836,
        ],
        &[
            3706, 15817, 42, 37366, 28, 15486, 46494, 28, 17097, 241, 115, 40993, 179, 120, 248,
            26453, 11100, 224, 10391, 251, 10391, 134, 11100, 226, 28, 649, 33777, 15107, 116, 218,
            10813, 244, 218,
        ],
    ),
    // Decomposed text stays decomposed (llama.cpp applies no NFC; Qwen's tokenizer.json would
    // give [924, 58858, 28502, 3865]).
    (
        "cafe\u{301} decomposed",
        &[924, 1859, 53839, 28502, 3865],
        &[83, 9980, 151, 219, 48304],
    ),
    (
        "<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>\n<|fim_middle|>",
        &[
            151659, 750, 912, 2877, 11, 293, 982, 257, 151661, 198, 151660,
        ],
        // SmolLM2 has no FIM tokens: the markers are plain text.
        &[
            44, 108, 86, 306, 79, 12821, 108, 46, 1604, 803, 24, 81, 28, 278, 727, 472, 2067, 108,
            86, 306, 79, 30370, 108, 46, 198, 44, 108, 86, 306, 79, 22876, 108, 46,
        ],
    ),
    (
        "<|im_start|>user\nWhat's up?<|im_end|>\n<|im_start|>assistant\n",
        &[
            151644, 872, 198, 3838, 594, 705, 30, 151645, 198, 151644, 77091, 198,
        ],
        &[1, 4093, 198, 1780, 506, 614, 47, 2, 198, 1, 520, 9531, 198],
    ),
    (
        "x = {'a': 1, \"b\": [3.14, -2e10]}  # comment\r\nwhile True:\r\n    pass",
        &[
            87, 284, 5360, 64, 1210, 220, 16, 11, 330, 65, 788, 508, 18, 13, 16, 19, 11, 481, 17,
            68, 16, 15, 13989, 220, 671, 3980, 319, 3472, 3007, 2834, 262, 1494,
        ],
        &[
            104, 446, 7353, 81, 1539, 216, 33, 28, 476, 82, 1799, 933, 35, 30, 33, 36, 28, 731, 34,
            85, 33, 32, 28852, 216, 907, 5189, 201, 198, 5627, 3635, 42, 3136, 1301,
        ],
    ),
];

#[test]
fn qwen_tokenizer_matches_llama_cpp() {
    let llm = qwen();
    let tok = llm.tokenizer();
    for (name, id) in [
        ("<|fim_prefix|>", 151659),
        ("<|fim_middle|>", 151660),
        ("<|fim_suffix|>", 151661),
        ("<|endoftext|>", 151643),
        ("<|im_end|>", 151645),
    ] {
        assert_eq!(tok.encode(name).unwrap(), [id], "{name}");
    }
    assert_eq!(tok.eos(), Some(151645));
    for (text, qwen_ids, _) in TOKENIZER_CASES {
        assert_eq!(tok.encode(text).unwrap(), *qwen_ids, "{text:?}");
        if !text.contains("<|") {
            assert_eq!(tok.decode(qwen_ids), *text, "{text:?}");
        }
    }
}

#[test]
fn smollm_tokenizer_matches_llama_cpp() {
    let llm = smollm();
    let tok = llm.tokenizer();
    for (text, _, smol_ids) in TOKENIZER_CASES {
        assert_eq!(tok.encode(text).unwrap(), *smol_ids, "{text:?}");
    }
}

async fn collect(llm: &LocalLlm, prompt: &str, options: SamplingOptions) -> (String, Finish) {
    let mut text = String::new();
    let mut stream = llm.generate(prompt.to_string(), options);
    while let Some(piece) = stream.next().await {
        match piece.unwrap() {
            Piece::Text(t) => text.push_str(&t),
            Piece::End(finish) => return (text, finish),
        }
    }
    panic!("stream ended without Piece::End");
}

fn greedy(max_tokens: usize) -> SamplingOptions {
    SamplingOptions {
        max_tokens: Some(max_tokens),
        temperature: 0.0,
        top_p: None,
        seed: 0,
        presence_penalty: 0.0,
        frequency_penalty: 0.0,
    }
}

#[tokio::test]
async fn smollm_greedy_generation_is_deterministic() {
    let llm = smollm();
    let prompt =
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
    let (first, finish) = collect(&llm, prompt, greedy(24)).await;
    let (second, _) = collect(&llm, prompt, greedy(24)).await;
    assert_eq!(first, second);
    assert!(first.contains("Paris"), "{first:?}");
    assert!(matches!(finish, Finish::Stop | Finish::Length));
}

#[tokio::test]
async fn smollm_sampling_is_reproducible_by_seed() {
    let llm = smollm();
    let prompt = "Once upon a time";
    let sampled = |seed| SamplingOptions {
        max_tokens: Some(24),
        temperature: 1.0,
        top_p: None,
        seed,
        presence_penalty: 0.0,
        frequency_penalty: 0.0,
    };
    let (a, _) = collect(&llm, prompt, sampled(7)).await;
    let (b, _) = collect(&llm, prompt, sampled(7)).await;
    let (c, _) = collect(&llm, prompt, sampled(8)).await;
    assert_eq!(a, b);
    assert_ne!(a, c);
}

#[tokio::test]
async fn max_tokens_ends_with_length() {
    let llm = smollm();
    let mut stream = llm.generate("1, 2, 3, 4,".to_string(), greedy(3));
    let mut pieces = Vec::new();
    while let Some(p) = stream.next().await {
        pieces.push(p.unwrap());
    }
    assert_eq!(pieces.last(), Some(&Piece::End(Finish::Length)));
    assert!(pieces.len() <= 4, "{pieces:?}");
    let (none, finish) = collect(&llm, "1, 2,", greedy(0)).await;
    assert_eq!((none.as_str(), finish), ("", Finish::Length));
}

#[tokio::test]
async fn prompt_longer_than_the_context_is_clipped() {
    let config = LlmConfig {
        parallelism: 1,
        context_size: 64,
        ..LlmConfig::default()
    };
    let llm = LocalLlm::load(&model_dir(SMOLLM), &config).unwrap();
    assert_eq!(llm.context_size(), 64);
    let prompt = "word ".repeat(200);
    let (_, finish) = collect(&llm, &prompt, greedy(8)).await;
    assert_eq!(finish, Finish::Length);
}

#[tokio::test]
async fn dropping_the_stream_cancels_generation() {
    // A model of its own, so that other tests' requests don't count.
    let llm = load(SMOLLM, 1);
    let mut stream = llm.generate(
        "Count to one thousand: 1, 2, 3,".to_string(),
        greedy(100_000),
    );
    assert!(matches!(stream.next().await, Some(Ok(Piece::Text(_)))));
    assert_eq!(llm.requests_in_flight(), 1);
    drop(stream);
    // The generation notices before its next step and ends.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while llm.requests_in_flight() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "generation went on for a dropped stream"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (text, _) = collect(&llm, "Hi", greedy(2)).await;
    assert!(!text.is_empty());
}

#[tokio::test]
async fn requests_queue_and_all_complete() {
    let llm = smollm();
    let runs = (0..3).map(|i| {
        let llm = llm.clone();
        async move { collect(&llm, &format!("{i} + {i} ="), greedy(4)).await }
    });
    let results = futures::future::join_all(runs).await;
    assert_eq!(results.len(), 3);
}

fn user(text: &str) -> ChatCompletionRequestMessage {
    ChatCompletionRequestMessage::User(ChatCompletionRequestUserMessage {
        content: ChatCompletionRequestUserMessageContent::Text(text.into()),
        name: None,
    })
}

#[tokio::test]
async fn chat_streams_role_then_content_then_stop() {
    let chat = LocalChat::from_llm(smollm()).unwrap();
    let system = ChatCompletionRequestMessage::System(ChatCompletionRequestSystemMessage {
        content: ChatCompletionRequestSystemMessageContent::Text(
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face".into(),
        ),
        name: None,
    });
    #[allow(deprecated)]
    let request = CreateChatCompletionRequest {
        messages: vec![system, user("Say hello.")],
        temperature: Some(0.0),
        max_completion_tokens: Some(200),
        seed: Some(1),
        ..Default::default()
    };
    let chunks: Vec<_> = chat
        .chat_stream(request)
        .await
        .unwrap()
        .map(|c| c.unwrap())
        .collect()
        .await;
    assert!(chunks.len() >= 3, "{chunks:?}");
    let first = &chunks[0].choices[0];
    assert_eq!(first.delta.role, Some(Role::Assistant));
    let last = &chunks.last().unwrap().choices[0];
    assert_eq!(last.finish_reason, Some(FinishReason::Stop));
    assert_eq!(last.delta.content, None);
    let text: String = chunks[1..chunks.len() - 1]
        .iter()
        .map(|c| {
            assert_eq!(c.choices[0].finish_reason, None);
            assert_eq!(c.object, "chat.completion.chunk");
            c.choices[0].delta.content.clone().unwrap()
        })
        .collect();
    assert!(!text.trim().is_empty());
    assert!(!text.contains("<|im_end|>"), "{text:?}");
    assert!(
        chunks
            .iter()
            .all(|c| c.id == chunks[0].id && c.model == SMOLLM)
    );
}

#[tokio::test]
async fn chat_stop_string_and_length() {
    let chat = LocalChat::from_llm(smollm()).unwrap();
    #[allow(deprecated)]
    let request = CreateChatCompletionRequest {
        messages: vec![user("List the numbers from 1 to 20, comma separated.")],
        temperature: Some(0.0),
        max_completion_tokens: Some(5),
        ..Default::default()
    };
    let chunks: Vec<_> = chat.chat_stream(request).await.unwrap().collect().await;
    let last = chunks.last().unwrap().as_ref().unwrap();
    assert_eq!(last.choices[0].finish_reason, Some(FinishReason::Length));
}

#[tokio::test]
async fn missing_weights_name_tabby_download() {
    let dir = tempfile::tempdir().unwrap();
    let err = LocalCompletion::new(dir.path(), 1).err().unwrap();
    assert!(matches!(err, LoadError::Missing(_)));
    assert!(err.to_string().contains("tabby download"), "{err}");
    let err = LocalChat::new(dir.path(), 1).err().unwrap();
    assert!(err.to_string().contains("tabby download"), "{err}");

    std::fs::write(dir.path().join("model.gguf"), b"not a gguf").unwrap();
    let err = LocalCompletion::new(dir.path(), 1).err().unwrap();
    assert!(matches!(err, LoadError::Invalid { .. }), "{err}");
}

async fn fim(prefix: &str, suffix: &str) -> String {
    fim_with(prefix, suffix, 0.0, None).await
}

async fn fim_with(
    prefix: &str,
    suffix: &str,
    temperature: f32,
    first_names: Option<Arc<FirstNames>>,
) -> String {
    let completion = LocalCompletion::from_llm(qwen());
    let prompt = format!("<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>");
    let options = CompletionOptions {
        max_decoding_tokens: 64,
        sampling_temperature: temperature,
        seed: 7,
        presence_penalty: 0.0,
        first_names,
    };
    let pieces: Vec<Result<String, ModelError>> =
        completion.generate(&prompt, options).await.collect().await;
    pieces.into_iter().map(|p| p.unwrap()).collect()
}

const FIM_PYTHON: (&str, &str) = ("def fibonacci(n):\n    ", "\n\nprint(fibonacci(10))\n");
const FIM_RUST: (&str, &str) = (
    "fn is_even(n: u32) -> bool {\n    ",
    "\n}\n\nfn main() {\n    println!(\"{}\", is_even(4));\n}\n",
);

#[tokio::test]
async fn qwen_fim_completes_python() {
    let text = fim(FIM_PYTHON.0, FIM_PYTHON.1).await;
    assert!(text.contains("return"), "{text:?}");
    assert!(text.contains("if n"), "{text:?}");
    assert!(!text.contains("<|"), "{text:?}");
}

/// After `Duration.` the model writes a name of its own; told the names the module offers,
/// it writes one of them whole and goes on freely, greedy or sampled.
#[tokio::test]
async fn qwen_completion_starts_with_one_of_the_names_it_is_given() {
    let prefix = "import * as Duration from \"./Duration.js\"\n\nexport const timeout = (d: Duration.Duration): number =>\n  Duration.";
    let suffix = "\n";
    let names = ["unsafeFromRecord", "zeroPadded", "sumAll"];
    let free = fim(prefix, suffix).await;
    assert!(
        !names.iter().any(|n| free.starts_with(n)),
        "the model already writes one of the names unconstrained: {free:?}"
    );
    let set = Arc::new(FirstNames::new(names).unwrap());
    for temperature in [0.0, 0.8] {
        let text = fim_with(prefix, suffix, temperature, Some(set.clone())).await;
        assert!(set.accepts(&text), "{temperature}: {text:?}");
        assert!(!text.contains("<|"), "{text:?}");
    }
    // The part of a name the editor has typed is the prompt's: what is left of it follows.
    let typed = Arc::new(FirstNames::new(["Padded", "Filled"]).unwrap());
    let text = fim_with(&format!("{prefix}zero"), suffix, 0.0, Some(typed.clone())).await;
    assert!(typed.accepts(&text), "{text:?}");
}

/// A prior over the names (the file's own habit) moves the model's choice by its weight: the
/// name the model picks alone, then, with all the prior's mass on another name, that name
/// (greedy and sampled), still a whole name followed by what the model writes.
#[tokio::test]
async fn qwen_first_name_follows_the_prior_by_its_weight() {
    let prefix = "import * as Duration from \"./Duration.js\"\n\nexport const timeout = (d: Duration.Duration): number =>\n  Duration.";
    let suffix = "\n";
    let names = ["toMillis", "toSeconds", "zeroPadded"];
    let set = FirstNames::new(names).unwrap();
    let alone = fim_with(prefix, suffix, 0.0, Some(Arc::new(set.clone()))).await;
    let picked = names
        .iter()
        .find(|n| alone.starts_with(*n))
        .unwrap_or_else(|| panic!("constrained: {alone:?}"));
    let other = names
        .iter()
        .find(|n| *n != picked && **n != "zeroPadded")
        .unwrap();
    // Weight 0 is no prior: the same answer.
    let none = set.clone().with_prior([(*other, 5.0)], 0.0);
    assert_eq!(
        fim_with(prefix, suffix, 0.0, Some(Arc::new(none))).await,
        alone
    );
    let led = Arc::new(set.with_prior([(*other, 5.0)], 1.0));
    for temperature in [0.0, 0.8] {
        let text = fim_with(prefix, suffix, temperature, Some(led.clone())).await;
        assert!(
            text.starts_with(other),
            "{temperature}: {text:?} ({alone:?} alone)"
        );
        assert!(led.accepts(&text), "{text:?}");
    }
    // An open prior (a value's members, not all known) masks nothing, and leads all the same:
    // at weight 0.5 a lone name holds at least half of the mass of its first token.
    let made_up = "zeroPadded";
    let free = fim(prefix, suffix).await;
    assert!(!free.starts_with(made_up), "{free:?}");
    let open = Arc::new(FirstNames::open_prior([(made_up, 1.0)], 0.5).unwrap());
    let led = fim_with(prefix, suffix, 0.0, Some(open)).await;
    assert!(led.starts_with(made_up), "{led:?}");
    assert!(!led.contains("<|"), "{led:?}");
}

#[tokio::test]
async fn qwen_fim_completes_rust() {
    let text = fim(FIM_RUST.0, FIM_RUST.1).await;
    assert!(text.contains("n % 2"), "{text:?}");
    assert!(!text.contains("<|"), "{text:?}");
}

/// Greedy output token for token as llama.cpp's (xllamacpp 2026.10.11549, `/completion`,
/// temperature 0, `n_predict` 64) on the same file: the Python one stops at the token limit,
/// the Rust one at `<|endoftext|>`.
///
/// After the Python `else:` the two best next tokens (`a` of `a, b = 0, 1` and `return` of the
/// recursive call) are nearly tied: llama.cpp (on an AVX-512 machine and on an AVX2-only AMD
/// EPYC alike) picks `a`. Our kernels, which all compute the same sums bit for bit, must too.
#[tokio::test]
async fn qwen_greedy_fim_matches_llama_cpp() {
    let python = fim(FIM_PYTHON.0, FIM_PYTHON.1).await;
    assert_eq!(
        python,
        "if n <= 0:\n        return \"Input must be a positive integer.\"\n    \
         elif n == 1:\n        return 0\n    elif n == 2:\n        return 1\n    else:\n        \
         a, b = 0, 1\n        for _ in range(3, n +"
    );
    let rust = fim(FIM_RUST.0, FIM_RUST.1).await;
    assert_eq!(
        rust,
        "if n % 2 == 0 {\n        return true;\n    }\n    return false;\n}\n"
    );
}

/// Chat text and finish reason of one request; panics on any stream error.
async fn chat_text(
    chat: &LocalChat,
    request: CreateChatCompletionRequest,
) -> (String, FinishReason) {
    let chunks: Vec<_> = chat.chat_stream(request).await.unwrap().collect().await;
    let mut text = String::new();
    let mut finish = None;
    for chunk in chunks {
        let chunk = chunk.unwrap_or_else(|e| panic!("stream failed: {e}"));
        text.push_str(chunk.choices[0].delta.content.as_deref().unwrap_or(""));
        finish = finish.or(chunk.choices[0].finish_reason);
    }
    (text, finish.expect("the last chunk has a finish reason"))
}

#[allow(deprecated)]
fn counting_request() -> CreateChatCompletionRequest {
    CreateChatCompletionRequest {
        messages: vec![user(
            "Write the word 'data' twenty times, separated by spaces, then explain what data is.",
        )],
        temperature: Some(0.0),
        max_completion_tokens: Some(24),
        seed: Some(5),
        ..Default::default()
    }
}

/// Each sampling parameter on the default chat model: the answer streams to its end (no
/// invalid weights, no NaN), and the penalties change what greedy decoding says.
#[tokio::test]
#[allow(deprecated)]
async fn qwen_chat_with_each_sampling_parameter() {
    let chat = LocalChat::from_llm(qwen()).unwrap();
    let (plain, _) = chat_text(&chat, counting_request()).await;
    assert!(!plain.trim().is_empty());
    let variants: [(&str, CreateChatCompletionRequest); 6] = [
        (
            "presence_penalty",
            CreateChatCompletionRequest {
                presence_penalty: Some(1.0),
                ..counting_request()
            },
        ),
        (
            "frequency_penalty",
            CreateChatCompletionRequest {
                frequency_penalty: Some(1.0),
                ..counting_request()
            },
        ),
        (
            "temperature",
            CreateChatCompletionRequest {
                temperature: Some(0.8),
                ..counting_request()
            },
        ),
        (
            "top_p",
            CreateChatCompletionRequest {
                temperature: Some(0.8),
                top_p: Some(0.5),
                ..counting_request()
            },
        ),
        (
            "seed",
            CreateChatCompletionRequest {
                temperature: Some(1.0),
                seed: Some(99),
                ..counting_request()
            },
        ),
        (
            "all at once",
            CreateChatCompletionRequest {
                temperature: Some(0.7),
                top_p: Some(0.9),
                presence_penalty: Some(0.5),
                frequency_penalty: Some(0.5),
                ..counting_request()
            },
        ),
    ];
    for (name, request) in variants {
        let (text, finish) = chat_text(&chat, request).await;
        assert!(!text.trim().is_empty(), "{name}: empty answer");
        assert!(
            matches!(finish, FinishReason::Stop | FinishReason::Length),
            "{name}: {finish:?}"
        );
        if name.ends_with("penalty") {
            assert_ne!(text, plain, "{name} changed nothing");
        }
    }
    // The same seed gives the same sampled answer.
    let seeded = || CreateChatCompletionRequest {
        temperature: Some(1.0),
        seed: Some(99),
        ..counting_request()
    };
    assert_eq!(
        chat_text(&chat, seeded()).await.0,
        chat_text(&chat, seeded()).await.0
    );
}

#[tokio::test]
async fn out_of_range_sampling_parameters_are_refused_before_streaming() {
    let chat = LocalChat::from_llm(smollm()).unwrap();
    for (name, request) in [
        (
            "presence_penalty",
            CreateChatCompletionRequest {
                presence_penalty: Some(5.0),
                ..counting_request()
            },
        ),
        (
            "temperature",
            CreateChatCompletionRequest {
                temperature: Some(-1.0),
                ..counting_request()
            },
        ),
        (
            "top_p",
            CreateChatCompletionRequest {
                top_p: Some(0.0),
                ..counting_request()
            },
        ),
    ] {
        match chat.chat_stream(request).await {
            Err(ModelError::InvalidRequest(message)) => {
                assert!(message.contains(name), "{message}")
            }
            Err(e) => panic!("{name}: {e}"),
            Ok(_) => panic!("{name}: accepted"),
        }
    }
}

/// A typing session replayed on Qwen with and without the prompt cache: the outputs are the
/// same token for token (greedy), and with the cache each keystroke's prompt reads only what
/// follows the start it shares with the previous one.
#[tokio::test]
async fn reusing_cached_prompts_never_changes_the_output() {
    let fim = |prefix: &str, suffix: &str| {
        format!("<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>")
    };
    let head = "import math\n\n\ndef area_of_circle(radius):\n    \"\"\"The area of a circle.\"\"\"\n    return math.pi * radius ** 2\n\n\ndef circumference(radius):\n    ";
    let suffix = "\n\n\ndef main():\n    print(area_of_circle(2.0), circumference(2.0))\n";
    // Each keystroke group the agent would send a request for, then an edit further up
    // (the docstring), then that prompt again (a request repeated, e.g. after a cancel).
    let prompts = [
        fim(head, suffix),
        fim(&format!("{head}ret"), suffix),
        fim(&format!("{head}return 2"), suffix),
        fim(&format!("{head}return 2 * math"), suffix),
        fim(&head.replace("The area", "Area"), suffix),
        fim(&head.replace("The area", "Area"), suffix),
        // Back where the typing was: that session was kept (the edit took a copy).
        fim(&format!("{head}return 2 * math"), suffix),
    ];
    let cached = load(QWEN, 1);
    let uncached = Arc::new(
        LocalLlm::load(
            &model_dir(QWEN),
            &LlmConfig {
                prompt_cache_bytes: 0,
                ..LlmConfig::default()
            },
        )
        .unwrap(),
    );
    let mut computed_per_prompt = Vec::new();
    for prompt in &prompts {
        let before = cached.prompt_stats();
        let with = collect(&cached, prompt, greedy(12)).await;
        let after = cached.prompt_stats();
        let without = collect(&uncached, prompt, greedy(12)).await;
        assert_eq!(with, without, "{prompt:?}");
        // Every request reads at least one prompt token and generates at most 12.
        let generated = after.generated - before.generated;
        assert!((1..=12).contains(&generated), "{generated}");
        assert!(after.prompt_seconds > before.prompt_seconds);
        if generated > 1 {
            assert!(after.decode_seconds > before.decode_seconds);
        }
        computed_per_prompt.push((
            after.computed - before.computed,
            after.reused - before.reused,
        ));
    }
    let total = |i: usize| computed_per_prompt[i].0 + computed_per_prompt[i].1;
    // The first prompt is read whole; each keystroke after it reuses all but its tail (the
    // typed word, the suffix and the FIM markers).
    assert_eq!(computed_per_prompt[0].1, 0, "{computed_per_prompt:?}");
    for i in 1..4 {
        let (computed, reused) = computed_per_prompt[i];
        assert!(reused * 2 > total(i), "{i}: {computed_per_prompt:?}");
        assert!(computed < 40, "{i}: {computed_per_prompt:?}");
    }
    // The edit near the top reuses only what precedes it.
    assert!(
        computed_per_prompt[4].0 > computed_per_prompt[1].0,
        "{computed_per_prompt:?}"
    );
    // The same prompt again reads one token (its logits start the reply).
    assert_eq!(computed_per_prompt[5].0, 1, "{computed_per_prompt:?}");
    assert_eq!(computed_per_prompt[6].0, 1, "{computed_per_prompt:?}");
    let stats = cached.prompt_stats();
    assert!(stats.cached_bytes > 0 && stats.cached_bytes <= super::DEFAULT_PROMPT_CACHE_BYTES);
    assert_eq!(uncached.prompt_stats().reused, 0);
    assert_eq!(uncached.prompt_stats().cached_bytes, 0);
}

/// The cache keeps no more than its budget: with room for about one session, each request
/// evicts the previous one.
#[tokio::test]
async fn the_prompt_cache_stays_within_its_budget() {
    let llm = LocalLlm::load(
        &model_dir(SMOLLM),
        &LlmConfig {
            prompt_cache_bytes: 1,
            ..LlmConfig::default()
        },
    )
    .unwrap();
    for prompt in [
        "The quick brown fox",
        "Once upon a time",
        "The quick brown fox",
    ] {
        collect(&llm, prompt, greedy(4)).await;
        assert_eq!(llm.prompt_stats().cached_bytes, 0);
    }
    assert_eq!(llm.prompt_stats().reused, 0);
}

/// An editor's next keystroke aborts the previous request: that generation stops at its next
/// step, and its session (the prompt it read) serves the new request.
#[tokio::test]
async fn a_cancelled_request_leaves_its_prompt_for_the_next_one() {
    let llm = load(SMOLLM, 1);
    let prompt = "def parse_arguments(argv):\n    parser = argparse.ArgumentParser()\n    parser.add_argument(";
    let mut stream = llm.generate(prompt.to_string(), greedy(2000));
    assert!(matches!(stream.next().await, Some(Ok(Piece::Text(_)))));
    drop(stream);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while llm.requests_in_flight() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the cancelled generation went on"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = llm.prompt_stats();
    collect(&llm, &format!("{prompt}\"--verbose\""), greedy(4)).await;
    let after = llm.prompt_stats();
    let prompt_tokens = llm.tokenizer().encode(prompt).unwrap().len() as u64;
    assert!(
        after.reused - before.reused >= prompt_tokens - 2,
        "reused {} of a {prompt_tokens}-token prompt",
        after.reused - before.reused
    );
}

/// The next keystroke's request arrives while the aborted one is still inside its step (the
/// editor sends it at once): it must still find the aborted request's session, not queue
/// behind it and read its whole prompt again.
#[tokio::test]
async fn a_request_right_after_a_cancelled_one_reuses_its_prompt() {
    let llm = load(SMOLLM, 1);
    let prompt = "def parse_arguments(argv):\n    parser = argparse.ArgumentParser()\n    parser.add_argument(";
    let prompt_tokens = llm.tokenizer().encode(prompt).unwrap().len() as u64;
    for round in 0..3 {
        let first = format!("{prompt}\"--round{round}\"");
        let mut stream = llm.generate(first.clone(), greedy(2000));
        assert!(matches!(stream.next().await, Some(Ok(Piece::Text(_)))));
        // Dropped while the next token's forward pass runs; no waiting before the next one.
        drop(stream);
        let before = llm.prompt_stats();
        collect(&llm, &format!("{first}, action"), greedy(2)).await;
        let reused = llm.prompt_stats().reused - before.reused;
        assert!(
            reused >= prompt_tokens,
            "round {round}: reused {reused} of a prompt of more than {prompt_tokens} tokens"
        );
    }
}

/// Drafting from the context changes how many passes a reply takes, never the reply: on
/// Qwen, greedy FIM and chat prompts (one with a presence penalty, which drafts are checked
/// under too) give the same text and finish with drafts as without, and drafts were accepted.
#[tokio::test]
async fn drafted_tokens_never_change_the_output() {
    let fim = |prefix: &str, suffix: &str| {
        format!("<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>")
    };
    let code = "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        self.items.append(item)\n\n    def pop(self):\n        return self.items.pop()\n\n";
    let prompts = [
        // The rest of the line is in the suffix: the reply copies it.
        fim(&format!("{code}    def peek(self):\n        return self.it"), "\n\n    def size(self):\n        return len(self.items)\n"),
        fim(&format!("{code}    def is_empty(self):\n        "), "\n"),
        fim(FIM_RUST.0, FIM_RUST.1),
        "<|im_start|>user\nRepeat exactly: the quick brown fox jumps over the lazy dog, the quick brown fox jumps over the lazy dog.<|im_end|>\n<|im_start|>assistant\n".to_string(),
    ];
    let drafting = qwen();
    let plain = Arc::new(
        LocalLlm::load(
            &model_dir(QWEN),
            &LlmConfig {
                draft_tokens: 0,
                prompt_cache_bytes: 0,
                ..LlmConfig::default()
            },
        )
        .unwrap(),
    );
    let before = drafting.prompt_stats();
    for prompt in &prompts {
        for options in [
            greedy(40),
            SamplingOptions {
                presence_penalty: 0.5,
                ..greedy(40)
            },
        ] {
            let with = collect(&drafting, prompt, options).await;
            let without = collect(&plain, prompt, options).await;
            assert_eq!(with, without, "{prompt:?} {options:?}");
        }
    }
    let after = drafting.prompt_stats();
    let (drafted, accepted) = (
        after.drafted - before.drafted,
        after.accepted - before.accepted,
    );
    assert!(
        accepted > 0 && accepted <= drafted,
        "{accepted} of {drafted}"
    );
    assert_eq!(plain.prompt_stats().drafted, 0);
}
