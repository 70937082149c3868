//! `/v1/completions` end to end: the prompt each backend receives, stop words, CRLF, debug data.

use serde_json::{Value, json};

use crate::support::*;

fn last_body(server: &FakeServer, path: &str) -> Value {
    server
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.path == path)
        .unwrap_or_else(|| panic!("fake received no request on {path}"))
        .body
}

#[tokio::test]
async fn llama_cpp_prompt_has_snippets_as_comments_and_template() {
    let fake = FakeServer::start(
        Protocol::LlamaCpp,
        Script::default().pieces(["    return", " a + b", "\n\n", "def other():"]),
    )
    .await;
    let server = TabbyServer::start(&llama_completion_config(&fake.url()));
    let (status, body) = post_json(
        &server.url("/v1/completions"),
        &json!({
            "language": "python",
            "segments": {
                "prefix": "def add(a, b):\n",
                "suffix": "\nprint(add(1, 2))",
                "filepath": "src/math.py",
                "declarations": [{"filepath": "src/util.py", "body": "def helper():\n    pass"}],
                "relevant_snippets_from_recently_opened_files": [
                    {"filepath": "src/other.py", "body": "X = 1", "score": 0.5}
                ]
            },
            "seed": 7,
            "temperature": 0.3,
            "debug_options": {"return_prompt": true, "return_snippets": true}
        }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let id = body["id"].as_str().unwrap();
    assert!(id.starts_with("cmpl-") && id.len() == 5 + 36, "{id}");
    assert_eq!(
        body["choices"],
        json!([{"index": 0, "text": "    return a + b"}])
    );
    assert_eq!(body["mode"], "standard");
    let expected_prompt = "<PRE> # Path: src/util.py\n# def helper():\n#     pass\n#\n# Path: src/other.py\n# X = 1\ndef add(a, b):\n <SUF>\nprint(add(1, 2)) <MID>";
    assert_eq!(body["debug_data"]["prompt"], expected_prompt);
    assert_eq!(
        body["debug_data"]["snippets"],
        json!([
            {"filepath": "src/util.py", "body": "def helper():\n    pass", "score": 1.0},
            {"filepath": "src/other.py", "body": "X = 1", "score": 0.5}
        ])
    );

    let sent = last_body(&fake, "/completion");
    assert_eq!(sent["prompt"], expected_prompt);
    assert_eq!(sent["n_predict"], 64);
    assert_eq!(sent["seed"], 7);
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["penalty_last_n"], 0);
    assert!((sent["temperature"].as_f64().unwrap() - 0.3).abs() < 1e-6);
}

#[tokio::test]
async fn openai_completion_splits_prefix_and_suffix() {
    let fake = FakeServer::start(Protocol::OpenAi, Script::default().pieces(["x = 1", "\n"])).await;
    let server = TabbyServer::start(&format!(
        r#"
[model.completion.http]
kind = "openai/completion"
api_endpoint = "{}/v1"
api_key = "sk-test"
model_name = "fim-model"
"#,
        fake.url()
    ));
    let (status, body) = post_json(
        &server.url("/v1/completions"),
        &json!({"language": "rust", "segments": {"prefix": "fn main() {\n", "suffix": "}\n"}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["text"], "x = 1\n");
    assert!(
        body.get("debug_data").is_none(),
        "no debug_options → no debug_data: {body}"
    );
    let request = fake
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with("/completions"))
        .expect("fake got a completion request");
    assert_eq!(request.authorization(), Some("Bearer sk-test"));
    assert_eq!(request.body["prompt"], "fn main() {\n");
    assert_eq!(request.body["suffix"], "}\n");
    assert_eq!(request.body["model"], "fim-model");
    assert_eq!(request.body["max_tokens"], 64);
}

#[tokio::test]
async fn ollama_completion_uses_raw_prompt_and_options() {
    let fake = FakeServer::start(Protocol::Ollama, Script::default().pieces(["1", " + 2"])).await;
    let server = TabbyServer::start(&format!(
        r#"
[model.completion.http]
kind = "ollama/completion"
api_endpoint = "{}"
model_name = "qwen"
prompt_template = "<|fim_prefix|>{{prefix}}<|fim_suffix|>{{suffix}}<|fim_middle|>"
"#,
        fake.url()
    ));
    let (status, body) = post_json(
        &server.url("/v1/completions"),
        &json!({"language": "python", "segments": {"prefix": "x = "}, "seed": 3}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["text"], "1 + 2");
    let sent = last_body(&fake, "/api/generate");
    assert_eq!(
        sent["prompt"],
        "<|fim_prefix|>x = <|fim_suffix|>\n<|fim_middle|>"
    );
    assert_eq!(sent["model"], "qwen");
    assert_eq!(sent["options"]["num_predict"], 64);
    assert_eq!(sent["options"]["seed"], 3);
}

#[tokio::test]
async fn crlf_in_lf_to_model_and_crlf_out() {
    let fake = FakeServer::start(
        Protocol::LlamaCpp,
        Script::default().pieces(["a = 1\n", "b = 2"]),
    )
    .await;
    let server = TabbyServer::start(&llama_completion_config(&fake.url()));
    let (status, body) = post_json(
        &server.url("/v1/completions"),
        &json!({"language": "python", "segments": {"prefix": "x = 0\r\ny = 1\r\n", "suffix": "\r\nz\r\n"}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["text"], "a = 1\r\nb = 2");
    let prompt = last_body(&fake, "/completion")["prompt"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!prompt.contains('\r'), "{prompt:?}");
    assert_eq!(prompt, "<PRE> x = 0\ny = 1\n <SUF>\nz\n <MID>");
}

#[tokio::test]
async fn language_and_additional_stop_words_cut_the_output() {
    let fake = FakeServer::start(
        Protocol::LlamaCpp,
        Script::default().pieces(["let v = 1;", "\n// trailing comment", "\nmore"]),
    )
    .await;
    let config = llama_completion_config(&fake.url()) + "additional_stop_words = [\"<STOP>\"]\n";
    let server = TabbyServer::start(&config);
    let (_, body) = post_json(
        &server.url("/v1/completions"),
        &json!({"language": "rust", "segments": {"prefix": "fn f() {\n"}}),
    )
    .await;
    assert_eq!(body["choices"][0]["text"], "let v = 1;");

    fake.update_script(|s| s.pieces = vec!["abc<STOP>".into(), "def".into()]);
    let (_, body) = post_json(
        &server.url("/v1/completions"),
        &json!({"language": "rust", "segments": {"prefix": "fn f() {\n"}}),
    )
    .await;
    assert_eq!(body["choices"][0]["text"], "abc");
}

#[tokio::test]
async fn raw_prompt_is_sent_as_is() {
    let fake = FakeServer::start(Protocol::LlamaCpp, Script::default().pieces(["ok"])).await;
    let server = TabbyServer::start(&llama_completion_config(&fake.url()));
    let (status, body) = post_json(
        &server.url("/v1/completions"),
        &json!({"language": "python", "debug_options": {"raw_prompt": "RAW {not a template}", "return_prompt": true}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["debug_data"],
        json!({"prompt": "RAW {not a template}"})
    );
    assert_eq!(
        last_body(&fake, "/completion")["prompt"],
        "RAW {not a template}"
    );
}

#[tokio::test]
async fn huge_prefix_is_clipped_keeping_the_template_head() {
    let fake = FakeServer::start(Protocol::LlamaCpp, Script::default().pieces(["ok"])).await;
    let server = TabbyServer::start(&llama_completion_config(&fake.url()));
    let prefix = "x".repeat(900 * 1024) + "CURSOR";
    let (status, body) = post_json(
        &server.url("/v1/completions"),
        &json!({"language": "python", "segments": {"prefix": prefix, "suffix": "after"}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let prompt = last_body(&fake, "/completion")["prompt"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(prompt.len() <= 1536, "prompt is {} bytes", prompt.len());
    assert!(prompt.starts_with("<PRE> "), "{}", &prompt[..20]);
    assert!(prompt.ends_with("CURSOR <SUF>after <MID>"));
}

#[tokio::test]
async fn next_edit_mode_builds_the_edit_prompt_without_stop_words() {
    let fake = FakeServer::start(
        Protocol::LlamaCpp,
        Script::default().pieces(["a = 2\n", "\n", "b = 3\n"]),
    )
    .await;
    let server = TabbyServer::start(&llama_completion_config(&fake.url()));
    let (status, body) = post_json(
        &server.url("/v1/completions"),
        &json!({
            "language": "python",
            "mode": "next_edit_suggestion",
            "segments": {"prefix": "", "edit_history": {
                "original_code": "a = 1\n", "edits_diff": "-a = 1\n+a = 2\n", "current_version": "a = 2\n"
            }},
            "debug_options": {"return_prompt": true}
        }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["mode"], "next_edit_suggestion");
    assert_eq!(body["choices"][0]["text"], "a = 2\n\nb = 3\n");
    let sent = last_body(&fake, "/completion");
    assert_eq!(
        sent["prompt"],
        "<|original_code|>\na = 1\n<|edits_diff|>\n-a = 1\n+a = 2\n<|current_version|>\na = 2\n<|next_version|>\n"
    );
    assert_eq!(sent["n_predict"], 128);

    let (status, body) = post_json(
        &server.url("/v1/completions"),
        &json!({"mode": "next_edit_suggestion", "segments": {"prefix": ""}}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("edit_history"));
}
