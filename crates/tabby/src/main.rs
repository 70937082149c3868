//! The `tabby` command line: a self-hosted AI coding assistant server.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use tabby::serve::{ServeOptions, serve};

#[derive(Parser)]
#[command(
    name = "tabby",
    version,
    about = "Self-hosted AI coding assistant: code completion and chat for Tabby editor plugins",
    long_about = "Self-hosted AI coding assistant server, compatible with Tabby's editor plugins \
                  (tabby-agent). Data lives under $TABBY_ROOT (default ~/.tabby); the server is \
                  configured by $TABBY_ROOT/config.toml (see config.toml.example)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start the HTTP server: /v1/completions, /v1/chat/completions, /v1/events, /v1/health,
    /// /v1beta/models, /v1beta/server_setting, /metrics and /api-docs/openapi.json.
    Serve {
        /// Address to listen on.
        #[arg(long, default_value = "0.0.0.0")]
        host: String,
        /// Port to listen on.
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// Config file to use instead of $TABBY_ROOT/config.toml.
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// Run without the enterprise web server: no accounts, no authentication (single user).
        #[arg(long)]
        no_webserver: bool,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
                .unwrap_or_else(|_| "tabby=info,warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve {
                host,
                port,
                config,
                no_webserver,
            } => {
                serve(ServeOptions {
                    host,
                    port,
                    config,
                    no_webserver,
                })
                .await
            }
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
