//! End-to-end tests: the real `tabby` binary on loopback against fake model servers.

mod ee_support;
mod support;

mod agent;
mod chat;
mod completions;
mod config;
mod ee_answer;
mod ee_answer_limits;
mod ee_auth;
mod ee_auth_matrix;
mod ee_browse;
mod ee_browser;
mod ee_graphql_ws_client;
mod ee_integrations;
mod ee_jobs;
mod ee_ldap;
mod ee_mail;
mod ee_oauth;
mod ee_policy;
mod ee_postgres;
mod ee_provided;
mod ee_security;
mod ee_subscriptions;
mod ee_usage;
mod ee_web_security;
mod errors;
mod eval_cli;
mod events;
mod index_cli;
mod info_routes;
mod local_models;
mod mcp;
mod rag;
mod roles;
