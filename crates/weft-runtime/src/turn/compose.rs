//! A turn's toolbelt and system prompt: the session's tools narrowed to the agent's, the
//! client's `ui_*` tools in the editor, memory tools and recalled facts when memory is on,
//! the mode's prompt and the agent's instructions.

use std::sync::Arc;
use std::time::Duration;

use weft_core::{prompts, ExecutionMode, RunParallelSubagentsTool, Toolbelt};
use weft_protocol::{AgentConfig, PermissionMode};
use weft_tools::knowledge::KnowledgeBase;

use super::request::TurnRequest;
use crate::runtime::Runtime;

/// Facts recalled into the system prompt of a turn with memory.
const RECALLED_FACTS: usize = 3;

impl Runtime {
    /// The turn's tools and system prompt.
    pub(super) async fn compose(
        &self,
        user: &str,
        request: &TurnRequest,
        agent: &AgentConfig,
        mode: &dyn ExecutionMode,
        permission_mode: PermissionMode,
        editor_prompt: Option<&str>,
    ) -> (Toolbelt, String) {
        let toolbelt = self.toolbelt_of(user, request, agent);
        let can_delegate = agent.max_depth > 0 && toolbelt.contains(prompts::RUN_SUBTASK);
        let mut system_prompt = mode.system_prompt(&toolbelt, permission_mode, can_delegate);
        if let Some(editor) = editor_prompt {
            system_prompt.push_str("\n\n");
            system_prompt.push_str(editor);
        }
        if !agent.instructions.trim().is_empty() {
            system_prompt.push_str("\n\n");
            system_prompt.push_str(agent.instructions.trim());
        }
        if request.memory {
            self.recall_into(user, &request.content.text(), &mut system_prompt)
                .await;
        }
        (toolbelt, system_prompt)
    }

    fn toolbelt_of(&self, user: &str, request: &TurnRequest, agent: &AgentConfig) -> Toolbelt {
        let mut toolbelt = agent_toolbelt(self.toolbelt_for(&request.context), agent);
        if let Some(client) = request
            .client_tools
            .as_ref()
            .filter(|_| self.editor_available(&request.context))
        {
            // The client's own `ui_*` tools join editor turns after the agent's allow-list:
            // they are the page's, not the agent's.
            let timeout = Duration::from_millis(agent.client_tool_timeout_ms);
            let proxies = client.proxies(user, &self.client_calls, timeout);
            toolbelt = toolbelt.merged(&Toolbelt::new(proxies));
        }
        if request.memory {
            let knowledge: Arc<dyn KnowledgeBase> = self.knowledge.clone();
            let tools = weft_tools::knowledge::memory_tools(&knowledge);
            toolbelt = toolbelt.merged(&Toolbelt::new(tools));
        }
        toolbelt
    }

    /// What long-term memory recalls of `text`, appended to the prompt.
    async fn recall_into(&self, user: &str, text: &str, system_prompt: &mut String) {
        match self.knowledge.recall(user, text, RECALLED_FACTS).await {
            Ok(facts) if !facts.is_empty() => {
                system_prompt.push_str("\n\n");
                system_prompt.push_str(prompts::REMEMBERED);
                for fact in facts {
                    system_prompt.push_str("\n- ");
                    system_prompt.push_str(fact.chunk.trim());
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot recall memories for a turn"),
        }
    }
}

/// The session's toolbelt narrowed to the agent's allow-list (names the context lacks, such
/// as editor-only tools outside the editor, are left out).
fn agent_toolbelt(toolbelt: Toolbelt, agent: &AgentConfig) -> Toolbelt {
    let toolbelt = match &agent.tools {
        None => toolbelt,
        Some(names) => {
            let present: Vec<String> = names
                .iter()
                .filter(|n| toolbelt.contains(n))
                .cloned()
                .collect();
            toolbelt.narrow(&present).unwrap_or(toolbelt)
        }
    };
    // Registered only for agents that allow it.
    if agent.allow_parallel_subagents && agent.max_depth > 0 {
        toolbelt.with(Arc::new(RunParallelSubagentsTool))
    } else {
        toolbelt
    }
}
