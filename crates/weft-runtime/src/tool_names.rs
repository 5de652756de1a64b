//! Which tool names an agent config may use: the server's tools in either chat context, the
//! tools of allowed MCP servers (any name, for a server not listed yet), and the tools that
//! join a turn beside the agent's allow-list.

use weft_core::prompts;
use weft_protocol::{AgentConfig, ChatContext, ToolAvailability};

use crate::client_tools::is_client_tool_name;
use crate::error::Refusal;
use crate::runtime::{Runtime, MCP_PREFIX};

impl Runtime {
    /// How this server knows `name`, as a tool an agent could be given.
    pub fn tool_availability(&self, name: &str) -> ToolAvailability {
        let per_turn = name == prompts::RUN_PARALLEL_SUBAGENTS
            || weft_tools::knowledge::MEMORY_TOOLS.contains(&name)
            || is_client_tool_name(name);
        if per_turn {
            return ToolAvailability::PerTurn;
        }
        let contexts = [ChatContext::Thread, crate::runtime::editor_context()];
        if contexts.iter().any(|c| self.toolbelt_for(c).contains(name)) || self.mcp_pending(name) {
            ToolAvailability::Configured
        } else {
            ToolAvailability::Unknown
        }
    }

    /// A tool of an allowed MCP server that has not listed its tools yet: it cannot be
    /// checked until the server connects (and cannot run before then either).
    fn mcp_pending(&self, name: &str) -> bool {
        name.strip_prefix(MCP_PREFIX)
            .and_then(|rest| rest.split_once("__"))
            .is_some_and(|(server, _)| self.mcp_unlisted(server))
    }

    /// An agent's tool names checked against this server as it is now (a stored agent may
    /// name a tool the configuration has dropped since it was saved).
    pub(crate) fn check_agent_tools(&self, agent: &AgentConfig) -> Result<(), Refusal> {
        agent
            .validate_tools(|name| self.tool_availability(name))
            .map_err(|e| Refusal::invalid(format!("agent `{}`: {e}", agent.name)))
    }
}
