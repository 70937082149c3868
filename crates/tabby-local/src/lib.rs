//! The embedded model runtime: models that run inside the `tabby` process on the CPU, with
//! weights from `$TABBY_ROOT/models` (fetched by `tabby download`), behind the
//! `tabby-inference` traits.

pub mod embedding;
pub mod llm;
pub mod pool;
pub mod registry;
