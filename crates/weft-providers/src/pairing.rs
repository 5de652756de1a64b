//! History hygiene shared by the adapters: a tool call is sent only with its result, and a
//! result only with its call (providers reject orphans either way).

use std::collections::HashSet;

use weft_core::{ChatMessage, Role, ToolCallRequest};

/// Ids of tool calls that have both a call and a result in `messages`.
pub fn paired_ids(messages: &[ChatMessage]) -> HashSet<String> {
    let results: HashSet<&str> = messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .filter_map(|m| m.tool_call_id.as_deref())
        .collect();
    messages
        .iter()
        .flat_map(|m| m.tool_calls.iter())
        .filter(|c| results.contains(c.id.as_str()))
        .map(|c| c.id.clone())
        .collect()
}

/// The calls of an assistant message that have results.
pub fn kept_calls<'a>(
    message: &'a ChatMessage,
    paired: &HashSet<String>,
) -> Vec<&'a ToolCallRequest> {
    message
        .tool_calls
        .iter()
        .filter(|c| paired.contains(&c.id))
        .collect()
}

/// Whether a tool result answers a call that is being sent.
pub fn keeps_result(message: &ChatMessage, paired: &HashSet<String>) -> bool {
    message
        .tool_call_id
        .as_ref()
        .is_some_and(|id| paired.contains(id))
}
