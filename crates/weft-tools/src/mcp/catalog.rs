//! MCP resources and prompts for the model: `mcp__read_resource {server, uri}` and
//! `mcp__get_prompt {server, name, arguments}`, offered when an allowed server has any, their
//! descriptions listing what there is (capped, so a server with thousands of resources cannot
//! swamp the prompt). Both reach the servers as their tools do, so they take the servers'
//! category (`external` by default: they ask in Default mode and never run in Plan).

use std::fmt::Write as _;
use std::sync::Arc;

use async_trait::async_trait;
use rmcp::model::{GetPromptRequestParams, ReadResourceRequestParams, Role};
use serde_json::{json, Map, Value};
use weft_core::{Tool, ToolContext, ToolError};
use weft_protocol::{PolicyClass, ToolCategory};

use super::server::{Catalog, Failure, Server};
use super::tool::{block_text, contents_text};

/// The name of the resource reader.
pub const READ_RESOURCE: &str = "mcp__read_resource";
/// The name of the prompt getter.
pub const GET_PROMPT: &str = "mcp__get_prompt";

/// At most this many resources (and as many templates, prompts) are listed per server.
const LISTED: usize = 40;

/// The two catalog tools for `servers` (each with what it offers); none when no server
/// offers resources (resp. prompts).
pub(super) fn tools(servers: &[(Arc<Server>, Catalog)]) -> Vec<Arc<dyn Tool>> {
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    let with_resources: Vec<_> = servers
        .iter()
        .filter(|(_, c)| !c.resources.is_empty() || !c.templates.is_empty())
        .collect();
    if !with_resources.is_empty() {
        let mut description = "Read a resource (a document, a record, a file) an MCP server \
                               offers, by its URI. Available:\n"
            .to_owned();
        for (server, catalog) in &with_resources {
            describe_resources(&mut description, &server.name, catalog);
        }
        let parameters = schema(
            &with_resources,
            "uri",
            "The resource's URI (from the list, or a template filled in).",
        );
        tools.push(Arc::new(CatalogTool::new(
            Kind::ReadResource,
            description,
            parameters,
            &with_resources,
        )));
    }
    let with_prompts: Vec<_> = servers
        .iter()
        .filter(|(_, c)| !c.prompts.is_empty())
        .collect();
    if !with_prompts.is_empty() {
        let mut description = "Get a prompt template an MCP server offers, filled in with \
                               its arguments; answers with the prompt's messages. Available:\n"
            .to_owned();
        for (server, catalog) in &with_prompts {
            describe_prompts(&mut description, &server.name, catalog);
        }
        let mut parameters = schema(&with_prompts, "name", "The prompt's name.");
        parameters["properties"]["arguments"] = json!({
            "type": "object",
            "description": "The prompt's arguments, by name.",
            "additionalProperties": {"type": "string"}
        });
        tools.push(Arc::new(CatalogTool::new(
            Kind::GetPrompt,
            description,
            parameters,
            &with_prompts,
        )));
    }
    tools
}

/// `{server: one of theirs, <key>: string}`, both required.
fn schema(servers: &[&(Arc<Server>, Catalog)], key: &str, about: &str) -> Value {
    let names: Vec<&str> = servers.iter().map(|(s, _)| s.name.as_str()).collect();
    json!({
        "type": "object",
        "properties": {
            "server": {"type": "string", "enum": names, "description": "The MCP server."},
            key: {"type": "string", "description": about}
        },
        "required": ["server", key],
        "additionalProperties": false
    })
}

fn describe_resources(out: &mut String, server: &str, catalog: &Catalog) {
    let _ = writeln!(out, "server `{server}`:");
    for resource in catalog.resources.iter().take(LISTED) {
        let _ = write!(out, "- {} ({}", resource.uri, resource.name);
        if let Some(mime) = &resource.mime_type {
            let _ = write!(out, ", {mime}");
        }
        out.push(')');
        if let Some(about) = &resource.description {
            let _ = write!(out, ": {}", first_line(about));
        }
        out.push('\n');
    }
    more(out, catalog.resources.len());
    for template in catalog.templates.iter().take(LISTED) {
        let _ = write!(
            out,
            "- template {} ({})",
            template.uri_template, template.name
        );
        if let Some(about) = &template.description {
            let _ = write!(out, ": {}", first_line(about));
        }
        out.push('\n');
    }
    more(out, catalog.templates.len());
}

fn describe_prompts(out: &mut String, server: &str, catalog: &Catalog) {
    let _ = writeln!(out, "server `{server}`:");
    for prompt in catalog.prompts.iter().take(LISTED) {
        let _ = write!(out, "- {}", prompt.name);
        let arguments: Vec<String> = prompt
            .arguments
            .iter()
            .flatten()
            .map(|a| {
                let mark = if a.required == Some(true) { "" } else { "?" };
                format!("{}{mark}", a.name)
            })
            .collect();
        let _ = write!(out, "({})", arguments.join(", "));
        if let Some(about) = &prompt.description {
            let _ = write!(out, ": {}", first_line(about));
        }
        out.push('\n');
    }
    more(out, catalog.prompts.len());
}

fn more(out: &mut String, count: usize) {
    if count > LISTED {
        let _ = writeln!(out, "- … and {} more", count - LISTED);
    }
}

fn first_line(text: &str) -> &str {
    let line = text.lines().next().unwrap_or_default();
    match line.char_indices().nth(200) {
        Some((at, _)) => &line[..at],
        None => line,
    }
}

/// Which of the two catalog tools.
#[derive(Clone, Copy)]
enum Kind {
    ReadResource,
    GetPrompt,
}

/// `mcp__read_resource` or `mcp__get_prompt`, over the servers that offer such things.
struct CatalogTool {
    kind: Kind,
    description: String,
    schema: Value,
    servers: Vec<Arc<Server>>,
    /// Its servers' category: reading from them reaches outside as their tools do.
    category: ToolCategory,
}

impl CatalogTool {
    fn new(
        kind: Kind,
        description: String,
        schema: Value,
        servers: &[&(Arc<Server>, Catalog)],
    ) -> Self {
        let categories: Vec<ToolCategory> = servers.iter().map(|(s, _)| s.category).collect();
        // One category for every server it reaches: theirs when they agree, else `external`.
        let category = match categories.split_first() {
            Some((first, rest)) if rest.iter().all(|c| c == first) => *first,
            _ => ToolCategory::External,
        };
        CatalogTool {
            kind,
            description,
            schema,
            servers: servers.iter().map(|(s, _)| s.clone()).collect(),
            category,
        }
    }

    /// The server the arguments name (one of this tool's).
    fn pick(&self, args: &Value) -> Result<&Arc<Server>, ToolError> {
        let name = args["server"].as_str().unwrap_or_default();
        self.servers
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| ToolError::model(format!("no MCP server `{name}` offers this")))
    }
}

/// A resource's contents as text, several separated by a blank line.
async fn read_resource(
    server: &Arc<Server>,
    args: &Value,
    ctx: &ToolContext,
) -> Result<String, String> {
    let uri = args["uri"].as_str().unwrap_or_default().to_owned();
    let result = server
        .request(ctx, |service| async move {
            service
                .read_resource(ReadResourceRequestParams::new(uri))
                .await
                .map_err(Failure::from)
        })
        .await?;
    Ok(result
        .contents
        .iter()
        .map(contents_text)
        .collect::<Vec<_>>()
        .join("\n\n"))
}

/// A prompt filled in: its description, then its messages as `role: text` lines.
async fn get_prompt(
    server: &Arc<Server>,
    args: &Value,
    ctx: &ToolContext,
) -> Result<String, String> {
    let arguments = match args.get("arguments") {
        Some(Value::Object(given)) => given.clone(),
        _ => Map::new(),
    };
    let params = GetPromptRequestParams::new(args["name"].as_str().unwrap_or_default())
        .with_arguments(arguments);
    let result = server
        .request(ctx, |service| async move {
            service.get_prompt(params).await.map_err(Failure::from)
        })
        .await?;
    let mut text = String::new();
    if let Some(about) = &result.description {
        let _ = writeln!(text, "{about}\n");
    }
    for message in &result.messages {
        let role = match message.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        let _ = writeln!(text, "{role}: {}", block_text(&message.content));
    }
    Ok(text.trim_end().to_owned())
}

#[async_trait]
impl Tool for CatalogTool {
    fn name(&self) -> &str {
        match self.kind {
            Kind::ReadResource => READ_RESOURCE,
            Kind::GetPrompt => GET_PROMPT,
        }
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.schema.clone()
    }

    fn policy_class(&self) -> PolicyClass {
        PolicyClass::Network
    }

    fn category(&self) -> ToolCategory {
        self.category
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let server = self.pick(&args)?;
        let answer = match self.kind {
            Kind::ReadResource => read_resource(server, &args, ctx).await,
            Kind::GetPrompt => get_prompt(server, &args, ctx).await,
        };
        answer.map_err(|e| ToolError::model(format!("{e} (MCP server `{}`)", server.name)))
    }
}
