//! The Model Context Protocol server at `/mcp`: coding agents search and read the indexed
//! repositories through read-only tools (see [`tools`]). Streamable HTTP (JSON-RPC over POST;
//! a response that sends notifications first streams as SSE), served statelessly by rmcp's
//! tower service inside our router, so the enterprise layer's token check and access policy
//! apply to it as to `/v1`. [`bridge`] is the stdio side for clients that only start commands.

pub mod bridge;
mod tools;

use std::sync::Arc;

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig,
    },
    service::RequestContext,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};
use tabby_common::{
    api::code::AllowedCodeRepository, config::CodeSearchParams, config::McpConfig,
    languages::LanguageTable,
};
use tabby_index::repo_files::RepoFiles;

use crate::services::{code::CodeSearchService, context::ContextService};

/// Largest request body `/mcp` reads.
const MAX_BODY_BYTES: usize = 1024 * 1024;

const INSTRUCTIONS: &str = "Tabby's code index: the repositories your team configured, searchable \
    and readable. Call list_repositories first; search_code finds code by meaning or words, grep \
    by exact pattern, find_definition / find_references by symbol name; read_file and list_files \
    show files; get_context assembles the evidence for a task; search_docs searches the team's \
    documentation and commit messages. Every code result cites repository, path, lines and \
    commit.";

/// What the tools read.
pub struct McpState {
    pub code_search: Option<Arc<CodeSearchService>>,
    /// The repositories every caller may read, in the open single-user mode. `None` when the
    /// enterprise layer checks tokens: each request then carries its caller's repositories,
    /// and a request without them is refused.
    pub open_repositories: Option<AllowedCodeRepository>,
    pub files: Arc<RepoFiles>,
    pub search_params: CodeSearchParams,
    pub languages: Arc<LanguageTable>,
    /// Evidence packs (`get_context`), when code search exists.
    pub context: Option<Arc<ContextService>>,
    /// The documentation corpus (`search_docs`).
    pub docs: Option<Arc<crate::services::doc::DocSearchService>>,
}

/// What one caller may read.
#[derive(Clone)]
pub struct Access {
    pub repositories: AllowedCodeRepository,
    pub docs: tabby_common::api::doc::AllowedDocSources,
}

/// One handler per request (the service is stateless).
#[derive(Clone)]
pub struct TabbyMcp {
    state: Arc<McpState>,
}

impl TabbyMcp {
    fn allowed(&self, context: &RequestContext<RoleServer>) -> Result<Access, McpError> {
        let parts = context.extensions.get::<http::request::Parts>();
        let from_request = parts
            .and_then(|parts| parts.extensions.get::<AllowedCodeRepository>())
            .cloned();
        let docs = parts
            .and_then(|parts| {
                parts
                    .extensions
                    .get::<tabby_common::api::doc::AllowedDocSources>()
            })
            .cloned();
        match (from_request, &self.state.open_repositories) {
            // The enterprise layer sets both; without its doc policy no doc is readable.
            (Some(repositories), _) => Ok(Access {
                repositories,
                docs: docs
                    .unwrap_or_else(|| tabby_common::api::doc::AllowedDocSources::new(|_| false)),
            }),
            (None, Some(open)) => Ok(Access {
                repositories: open.clone(),
                docs: tabby_common::api::doc::AllowedDocSources::all(),
            }),
            (None, None) => Err(McpError::internal_error(
                "the caller's access could not be checked",
                None,
            )),
        }
    }
}

impl ServerHandler for TabbyMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("tabby", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools::definitions()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let allowed = self.allowed(&context)?;
        let args = request.arguments.unwrap_or_default();
        tools::call(&self.state, &allowed, &request.name, args)
            .await
            .map(Into::into)
    }
}

/// The `/mcp` service. `protected`: a token check runs in front of it (the enterprise layer);
/// otherwise only loopback `Host` names are answered unless `[mcp] allowed_hosts` says more.
pub fn service(
    state: Arc<McpState>,
    config: &McpConfig,
    protected: bool,
) -> StreamableHttpService<TabbyMcp, LocalSessionManager> {
    let mut http = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_max_request_body_bytes(MAX_BODY_BYTES);
    http = if !config.allowed_hosts.is_empty() {
        http.with_allowed_hosts(config.allowed_hosts.clone())
    } else if protected {
        http.disable_allowed_hosts()
    } else {
        http
    };
    http = if config.allowed_origins.is_empty() {
        http.enforce_origin_validation()
    } else {
        http.with_allowed_origins(config.allowed_origins.clone())
    };
    StreamableHttpService::new(
        move || {
            Ok(TabbyMcp {
                state: state.clone(),
            })
        },
        Arc::new(LocalSessionManager::default()),
        http,
    )
}
