//! A tiny MCP server over stdio, for the tests and for trying MCP out
//! (`[[mcp.servers]] name = "fixture", command = "weft-mcp-fixture"`): `echo {text}`,
//! `count {n}` (reports progress once per step, 50 ms apart), `fail {}` (an error result),
//! `exit {}` (the process exits without answering), `reveal {}` (then lists `bonus {}` and
//! tells the client its tools changed), `picture {}` (an image); a resource `fixture://notes/loom` and a prompt
//! `greet {name}` (and an error for resource templates, as some servers answer). With
//! `--no-tools` it is a server of resources and prompts only.

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

/// An 8×8 red PNG, base64.
const RED_SQUARE_PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAgAAAAICAIAAABLbSncAAAAEUlEQVR4nGM4YGCAFTEMLQkARmxIAeJ265UAAAAASUVORK5CYII=";

const LOOM_URI: &str = "fixture://notes/loom";
const LOOM_TEXT: &str = "A loom weaves weft threads through the warp.";

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
    /// `--no-tools`: a server of resources and prompts only (no tools capability).
    no_tools: bool,
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

    #[tool(description = "A small red square (an image result)")]
    fn picture(&self) -> CallToolResult {
        CallToolResult::success(vec![
            ContentBlock::text("a red square"),
            ContentBlock::image(RED_SQUARE_PNG, "image/png"),
        ])
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
        // Names providers would refuse, and a schema that does not compile.
        let object = |schema: serde_json::Value| match schema {
            serde_json::Value::Object(map) => std::sync::Arc::new(map),
            _ => unreachable!("an object"),
        };
        let odd = |name: &str, schema| {
            rmcp::model::Tool::new(name.to_owned(), "An oddly named tool", object(schema))
        };
        tools.push(odd("notes.read/v2", serde_json::json!({"type": "object"})));
        tools.push(odd(
            &"long".repeat(20),
            serde_json::json!({"type": "object"}),
        ));
        tools.push(odd(
            "broken",
            serde_json::json!({"type": "object", "properties": {"x": {"type": "nonsense"}}}),
        ));
        Ok(rmcp::model::ListToolsResult::with_all_items(tools))
    }

    async fn list_resources(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, ErrorData> {
        let loom = rmcp::model::Resource::new(LOOM_URI, "loom notes")
            .with_mime_type("text/markdown")
            .with_description("What a loom is");
        Ok(rmcp::model::ListResourcesResult::with_all_items(vec![loom]))
    }

    /// Like some servers, it has resources but no templates, and says so with an error.
    async fn list_resource_templates(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, ErrorData> {
        Err(ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            "resources/templates/list",
            None,
        ))
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        _context: rmcp::service::RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, ErrorData> {
        if request.uri != LOOM_URI {
            return Err(ErrorData::resource_not_found(
                format!("no resource {}", request.uri),
                None,
            ));
        }
        let text = rmcp::model::ResourceContents::text(LOOM_TEXT, LOOM_URI);
        Ok(rmcp::model::ReadResourceResult::new(vec![text]).into())
    }

    async fn list_prompts(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, ErrorData> {
        let greet = rmcp::model::Prompt::new(
            "greet",
            Some("Greet someone by name"),
            Some(vec![
                rmcp::model::PromptArgument::new("name").with_required(true)
            ]),
        );
        Ok(rmcp::model::ListPromptsResult::with_all_items(vec![greet]))
    }

    async fn get_prompt(
        &self,
        request: rmcp::model::GetPromptRequestParams,
        _context: rmcp::service::RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, ErrorData> {
        let name = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("name"))
            .and_then(|n| n.as_str())
            .ok_or_else(|| ErrorData::invalid_params("`name` is required", None))?;
        let message = rmcp::model::PromptMessage::new_text(
            rmcp::model::Role::User,
            format!("Say hello to {name}, warmly."),
        );
        Ok(rmcp::model::GetPromptResult::new(vec![message]).into())
    }

    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_prompts()
            .build();
        if self.no_tools {
            capabilities.tools = None;
        }
        ServerConfig::new(capabilities)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let fixture = Fixture {
        tool_router: Fixture::tool_router(),
        revealed: Default::default(),
        no_tools: std::env::args().any(|a| a == "--no-tools"),
    };
    let service = fixture.serve(rmcp::transport::stdio()).await?;
    service.waiting().await?;
    Ok(())
}
