//! End-to-end tests: the real `tabby` binary on loopback against fake model servers.

mod ee_support;
mod support;

mod agent;
mod chat;
mod completions;
mod config;
mod ee_auth;
mod ee_auth_matrix;
mod ee_policy;
mod ee_subscriptions;
mod errors;
mod events;
mod index_cli;
mod info_routes;
mod local_models;
mod rag;
