//! A tiny MCP server over stdio, for the tests and for trying MCP out
//! (`[[mcp.servers]] name = "fixture", command = "weft-mcp-fixture"`): `echo {text}`,
//! `count {n}` (reports progress once per step, 50 ms apart), `fail {}` (an error result),
//! `exit {}` (the process exits without answering), `reveal {}` (then lists `bonus {}` and
//! tells the client its tools changed).

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, ProgressNotificationParam, RequestMetaObject, ServerCapabilities,
    ServerConfig,
};
use rmcp::{
    schemars, tool, tool_handler, tool_router, ErrorData, Peer, RoleServer, ServerHandler,
    ServiceExt,
};

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    /// What to say back.
    text: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct CountArgs {
    /// How far to count.
    n: u32,
}

#[derive(Clone)]
struct Fixture {
    tool_router: ToolRouter<Self>,
    /// `bonus` is listed only after `reveal`.
    revealed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

#[tool_router]
impl Fixture {
    #[tool(description = "Say the text back")]
    fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
        format!("echo: {text}")
    }

    #[tool(description = "Count to n, reporting progress at each step")]
    async fn count(
        &self,
        Parameters(CountArgs { n }): Parameters<CountArgs>,
        meta: RequestMetaObject,
        client: Peer<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let token = meta.get_progress_token();
        for step in 1..=n {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            if let Some(token) = &token {
                let _ = client
                    .notify_progress(
                        ProgressNotificationParam::new(token.clone(), f64::from(step))
                            .with_total(f64::from(n))
                            .with_message(format!("step {step}")),
                    )
                    .await;
            }
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "counted to {n}"
        ))]))
    }

    #[tool(description = "Exit the server process at once (to test restarts)")]
    fn exit(&self) -> String {
        std::process::exit(3)
    }

    #[tool(description = "List the `bonus` tool from now on (tells the client the list changed)")]
    async fn reveal(&self, client: Peer<RoleServer>) -> String {
        self.revealed
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = client.notify_tool_list_changed().await;
        "revealed".to_owned()
    }

    #[tool(description = "A tool that appears after `reveal`")]
    fn bonus(&self) -> String {
        "bonus!".to_owned()
    }

    #[tool(description = "Always fails")]
    fn fail(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::error(vec![ContentBlock::text(
            "the fixture failed on purpose",
        )]))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Fixture {
    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, ErrorData> {
        let revealed = self.revealed.load(std::sync::atomic::Ordering::SeqCst);
        let mut tools = self.tool_router.list_all();
        tools.retain(|t| revealed || t.name != "bonus");
        Ok(rmcp::model::ListToolsResult::with_all_items(tools))
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let fixture = Fixture {
        tool_router: Fixture::tool_router(),
        revealed: Default::default(),
    };
    let service = fixture.serve(rmcp::transport::stdio()).await?;
    service.waiting().await?;
    Ok(())
}
