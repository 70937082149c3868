//! Where the tests find real model weights: `$TABBY_TEST_MODELS_DIR`, else `$HOME/.tabby/models`
//! (where `tabby download` puts them; `scripts/test.sh` runs it first). A missing model fails the
//! test with a message that says how to get it: these tests are never skipped silently.

#![allow(dead_code)]

use std::path::PathBuf;

pub fn models_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TABBY_TEST_MODELS_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    let home =
        std::env::var_os("HOME").expect("HOME is not set and TABBY_TEST_MODELS_DIR is not set");
    PathBuf::from(home).join(".tabby").join("models")
}

/// The directory of `model_id`, or a panic that says to run `tabby download`.
pub fn model_dir(model_id: &str) -> PathBuf {
    let models = models_dir();
    tabby_local::registry::resolve_model_dir(&models, model_id).unwrap_or_else(|e| {
        panic!(
            "this test needs the model {model_id} in {}: {e}\n\
             get it with `tabby download` (`cargo run -p tabby -- download` with TABBY_ROOT \
             unset; `bash scripts/test.sh` does it first), or point TABBY_TEST_MODELS_DIR at a \
             models directory",
            models.display()
        )
    })
}
