//! Shared foundations of the tabby server: configuration, paths, the languages table, git URL
//! handling, and the API types that services and routes exchange. No I/O beyond reading config.

pub mod api;
pub mod config;
pub mod git_url;
pub mod index;
pub mod languages;
pub mod net;
pub mod path;

/// The header that carries the authenticated user id to services.
pub const USER_HEADER_FIELD_NAME: &str = "x-tabby-user";
