//! End-to-end tests: the real `tabby` binary on loopback against fake model servers.

mod support;

mod agent;
mod chat;
mod completions;
mod config;
mod errors;
mod events;
mod index_cli;
mod info_routes;
mod local_models;
mod rag;
