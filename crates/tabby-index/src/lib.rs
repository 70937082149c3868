//! Repository indexing: sync repositories, chunk their files with tree-sitter, and write one
//! Tantivy index whose chunk rows carry BM25 tokens and binarized embedding tokens.

pub mod code;
pub mod crawl;
pub mod doc;
mod fetch_guard;
mod git;
mod hash_embedding;
pub mod meta;
mod read_directory;
pub mod repo_files;
pub mod snapshot;
mod summary;

pub use code::{CodeIndexer, EmbeddingSetup, RepositoryToIndex, document_id};
pub use git::{GitHttpAuth, ref_commits, remove_stale_mirrors};
pub use hash_embedding::HashEmbedding;
pub use summary::{IndexProgress, NoProgress, RepositorySummary};
