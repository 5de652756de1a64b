//! What a run needs from the turn it belongs to is the turn's [`NestedCalls`] — tool calls
//! through the gate, model calls on the turn's budget, frames to the user, stopping — so
//! nodes are gated, budgeted and recorded exactly as tool calls. These helpers put its
//! answers in the shape nodes use.

use serde_json::Value;
use weft_core::{ChatMessage, ModelError, NestedCalls};

/// A tool call (through the gate); `Err` carries the error result.
pub async fn call_tool(host: &dyn NestedCalls, name: &str, args: Value) -> Result<String, String> {
    let outcome = host.call_tool(name, args.to_string()).await;
    if outcome.is_error {
        Err(outcome.content)
    } else {
        Ok(outcome.content)
    }
}

/// One model call: `system` and one user message.
pub async fn complete(
    host: &dyn NestedCalls,
    system: &str,
    prompt: &str,
) -> Result<String, String> {
    host.complete(system, vec![ChatMessage::user(prompt)])
        .await
        .map_err(|e| match e {
            ModelError::Stopped => "stopped".to_owned(),
            ModelError::Provider(message) => message,
        })
}
