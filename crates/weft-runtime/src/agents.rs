//! Agents: the server's own (`[agent]`, named `default`) and each user's stored ones (the
//! agent config as JSON): which agent a turn runs, and whether a config may be stored (the
//! operator's `[agent]` is the ceiling of its limits).

use std::sync::Arc;

use serde_json::Value;
use weft_protocol::{clip, AgentConfig, AgentConfigError, ErrorCode, DEFAULT_AGENT};

use crate::runtime::Runtime;
use weft_frames::Refusal;

/// The agent a turn runs: the one the message names, else the thread's, else the default.
pub async fn resolve(
    state: &Runtime,
    user: &str,
    requested: Option<&str>,
    thread_agent: Option<&str>,
) -> Result<Arc<AgentConfig>, Refusal> {
    let name = requested.or(thread_agent).unwrap_or(DEFAULT_AGENT);
    if name == DEFAULT_AGENT {
        return Ok(state.agent.clone());
    }
    let row = state
        .store
        .agent(user, name)
        .await
        .map_err(Refusal::internal)?
        .ok_or_else(|| {
            Refusal::new(
                ErrorCode::AgentNotFound,
                format!("no agent `{}`; see GET /agents", clip(name, 64)),
            )
        })?;
    let mut config = serde_json::from_str::<AgentConfig>(&row.config).map_err(Refusal::internal)?;
    // The operator may have lowered `[agent]` since the agent was stored; its `hitl_tools`
    // bind every agent.
    let mut lowered = config.clamp_to(&state.agent);
    lowered.retain(|field| *field != "hitl_tools");
    if !lowered.is_empty() {
        tracing::info!(agent = %config.name, ?lowered, "a stored agent's limits lowered to [agent]");
    }
    Ok(Arc::new(config))
}

/// A config from a request body: unknown fields and invalid values are errors naming the
/// field (`Err((field, message))`); tool names must be tools this server has. The operator's
/// `[agent]` is the ceiling: a limit left out is the operator's, one above it is an error
/// naming the field.
pub fn parse(state: &Runtime, body: &Value) -> Result<AgentConfig, (String, String)> {
    let mut unknown = Vec::new();
    let mut config: AgentConfig =
        serde_ignored::deserialize(body, |path| unknown.push(path.to_string()))
            .map_err(|e| ("body".to_owned(), e.to_string()))?;
    if let Some(field) = unknown.into_iter().next() {
        return Err((field.clone(), format!("unknown field `{field}`")));
    }
    let check = |e: AgentConfigError| (e.field().to_owned(), e.to_string());
    config.inherit_limits(&state.agent, |field| body.get(field).is_some());
    config.validate().map_err(check)?;
    config.check_within(&state.agent).map_err(check)?;
    config
        .validate_tools(|name| state.tool_availability(name))
        .map_err(check)?;
    Ok(config)
}
