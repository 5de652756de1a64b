//! Which tool names an agent config may use: the server's tools in either chat context, the
//! tools of allowed MCP servers (any name, for a server not listed yet), and the tools that
//! join a turn beside the agent's allow-list.

use weft_core::prompts;
use weft_protocol::{AgentConfig, ChatContext, ToolAvailability};

use crate::runtime::{Runtime, MCP_PREFIX};
use weft_frames::Refusal;
use weft_tools::client::is_client_tool_name;

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
        if contexts.iter().any(|c| self.toolbelt_for(c).contains(name)) || self.mcp_may_offer(name)
        {
            ToolAvailability::Configured
        } else {
            ToolAvailability::Unknown
        }
    }

    /// A tool an allowed MCP server may offer: servers connect late, and rename or drop
    /// their tools while running, so such a name is left out while it is absent (a
    /// `hitl_tools` entry asks nothing then) rather than refusing every turn.
    fn mcp_may_offer(&self, name: &str) -> bool {
        name.strip_prefix(MCP_PREFIX)
            .and_then(|rest| rest.split_once("__"))
            .is_some_and(|(server, _)| self.mcp_allowed(server))
    }

    /// Warn of each tool `agent` names that an allowed MCP server does not offer now.
    pub(crate) fn warn_of_absent_mcp_tools(&self, agent: &AgentConfig) {
        let named = agent.tools.iter().flatten().chain(&agent.hitl_tools);
        for name in named.filter(|name| name.starts_with(MCP_PREFIX)) {
            let contexts = [ChatContext::Thread, crate::runtime::editor_context()];
            if !contexts.iter().any(|c| self.toolbelt_for(c).contains(name)) {
                tracing::warn!(agent = %agent.name, tool = %name, "an MCP tool the agent names is not offered now; left out until its server offers it");
            }
        }
    }

    /// An agent's tool names checked against this server as it is now (a stored agent may
    /// name a tool the configuration has dropped since it was saved).
    pub(crate) fn check_agent_tools(&self, agent: &AgentConfig) -> Result<(), Refusal> {
        agent
            .validate_tools(|name| self.tool_availability(name))
            .map_err(|e| Refusal::invalid(format!("agent `{}`: {e}", agent.name)))
    }
}
