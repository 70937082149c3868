//! The enterprise layer's contract: the GraphQL schema (juniper types, queries, mutations,
//! subscriptions), the service traits the resolvers call, and the [`AccessPolicy`].
//!
//! Nothing here talks to a database or the network: `tabby-webserver` implements the traits
//! and hands them to the resolvers through [`ServiceLocator`] in the GraphQL [`Context`].
//! Authorization is decided here, in the resolvers (`check_user`, `check_admin`, …), so that
//! every field's rule sits next to the field.

pub mod auth;
pub mod email;
mod error;
mod id;
pub mod integration;
pub mod job;
pub mod ldap;
pub mod oauth;
pub mod policy;
pub mod relay;
pub mod repository;
mod schema;
pub mod setting;
pub mod thread;
pub mod usage;
pub mod user_group;
mod validate;

pub use error::{CoreError, Result, ValidationError};
pub use id::{AsID, AsRowid, decode_id, encode_id};
pub use policy::{AccessPolicy, AnswerSources};
/// The background jobs this server runs (upstream's names).
pub fn job_names() -> &'static [&'static str] {
    &[
        "scheduler_git",
        "scheduler_github_gitlab",
        "web_crawler",
        "third_party_repository_sync",
        "index_garbage_collection",
        "ingestion_index_sync",
        "hourly",
        "daily",
    ]
}

pub use schema::{Context, Mutation, Query, Schema, ServiceLocator, Subscription, create_schema};
