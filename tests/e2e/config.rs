//! Start-up failures are clear messages and a non-zero exit, never a fallback to defaults.

use crate::support::*;

fn start_fails(config: &str) -> String {
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("config.toml"), config).unwrap();
    let (status, _, stderr) = run_tabby(root.path(), &["serve", "--port", "0", "--no-webserver"]);
    assert!(
        !status.success(),
        "tabby should refuse to start; stderr:\n{stderr}"
    );
    stderr
}

#[test]
fn malformed_config_names_file_line_and_key() {
    let stderr = start_fails("[server]\ncompletion_timeout = \"soon\"\n");
    assert!(stderr.contains("config.toml"), "{stderr}");
    assert!(stderr.contains("line 2"), "{stderr}");
    assert!(stderr.contains("server.completion_timeout"), "{stderr}");
}

#[test]
fn unknown_model_kind_lists_the_known_kinds() {
    let stderr = start_fails(
        "[model.completion.http]\nkind = \"llama.cpp/complete\"\napi_endpoint = \"http://127.0.0.1:1\"\n",
    );
    assert!(stderr.contains("llama.cpp/complete"), "{stderr}");
    for known in [
        "llama.cpp/completion",
        "ollama/completion",
        "openai/completion",
    ] {
        assert!(stderr.contains(known), "should list {known}: {stderr}");
    }
}

#[test]
fn bad_prompt_template_is_a_start_up_error() {
    let stderr = start_fails(
        "[model.completion.http]\nkind = \"llama.cpp/completion\"\napi_endpoint = \"http://127.0.0.1:1\"\nprompt_template = \"{prefix}{middle}\"\n",
    );
    assert!(stderr.contains("prompt_template"), "{stderr}");
}

#[test]
fn config_flag_overrides_the_default_path() {
    let root = tempfile::tempdir().unwrap();
    let other = root.path().join("elsewhere.toml");
    std::fs::write(&other, "[server\n").unwrap();
    let (status, _, stderr) = run_tabby(
        root.path(),
        &["serve", "--port", "0", "--config", other.to_str().unwrap()],
    );
    assert!(!status.success());
    assert!(stderr.contains("elsewhere.toml"), "{stderr}");
}

#[test]
fn help_explains_each_command() {
    let root = tempfile::tempdir().unwrap();
    let (status, stdout, _) = run_tabby(root.path(), &["--help"]);
    assert!(status.success());
    assert!(stdout.contains("serve"), "{stdout}");
    let (status, stdout, _) = run_tabby(root.path(), &["serve", "--help"]);
    assert!(status.success());
    for flag in ["--host", "--port", "--config", "--no-webserver"] {
        assert!(stdout.contains(flag), "{flag} in {stdout}");
    }
}
