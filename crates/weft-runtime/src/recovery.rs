//! Start-up recovery: every turn a stopped process left `running` is closed as
//! `interrupted`, keeping the text it had streamed; every call it left without a result gets
//! the result "interrupted" (so the next turn's history stays valid), and every approval
//! still pending becomes `expired`.
//!
//! This assumes one server per database: a second live replica's running turns would be
//! closed too.

use std::collections::HashSet;

use serde_json::json;
use weft_protocol::{
    ApprovalStatus, RecordEntry, ToolResultMetadata, ToolResultStatus, INTERRUPTED_RESULT,
};
use weft_store::{ItemRow, Store, StoreError, WriteOp};

use crate::record::views::{root_text, tree_from_items};
use crate::record::{entries, results_row, ItemPlace};

/// Close every interrupted turn; returns how many there were.
pub async fn close_interrupted_turns(store: &Store) -> Result<usize, StoreError> {
    let running = store.running_turns().await?;
    for message in &running {
        let mut items = store.turn_items(&message.thread_id, &message.id).await?;
        let waiting = store.pending_approval_ids(&message.thread_id).await?;
        let synthetic = unanswered_calls(&items, &waiting);
        items.extend(synthetic.iter().cloned());
        let mut closed = message.clone();
        closed.content = json!(root_text(&items));
        closed.execution_tree = Some(std::sync::Arc::new(tree_from_items(&items)));
        closed.status = "interrupted".to_owned();
        if !synthetic.is_empty() {
            store.submit(WriteOp::Items(synthetic), None);
        }
        store
            .write(WriteOp::FinishTurn { message: closed })
            .await?;
        tracing::warn!(thread = %message.thread_id, message = %message.id, "closed a turn the last run left unfinished");
    }
    let expired = store.expire_pending_approvals().await?;
    if expired > 0 {
        tracing::warn!(expired, "approvals left pending by the last run expired");
    }
    Ok(running.len())
}

/// A synthetic "interrupted" result for every call in `items` that has none, one row per
/// level of the turn that has such calls. A call that was `waiting` for its approval says
/// so in its metadata: the approval expired.
fn unanswered_calls(items: &[ItemRow], waiting: &[String]) -> Vec<ItemRow> {
    let answered: HashSet<String> = items
        .iter()
        .flat_map(entries)
        .filter_map(|e| match e {
            RecordEntry::ToolResult { tool_call_id, .. } => Some(tool_call_id),
            _ => None,
        })
        .collect();
    let mut position = items.iter().map(|i| i.position).max().unwrap_or(-1) + 1;
    let mut out = Vec::new();
    for item in items {
        let results: Vec<RecordEntry> = entries(item)
            .into_iter()
            .filter_map(|e| match e {
                RecordEntry::Assistant { tool_calls, .. } => Some(tool_calls),
                _ => None,
            })
            .flatten()
            .filter(|c| !answered.contains(&c.id))
            .map(|call| RecordEntry::ToolResult {
                metadata: waiting.contains(&call.id).then(|| expired(&call.id)),
                tool_call_id: call.id,
                call_id: call.call_id,
                name: call.name,
                result: INTERRUPTED_RESULT.to_owned(),
                is_error: true,
            })
            .collect();
        if results.is_empty() {
            continue;
        }
        let place = ItemPlace {
            thread_id: &item.thread_id,
            message_id: &item.message_id,
            position,
            parent_id: item.parent_id.as_deref(),
            depth: u32::try_from(item.depth).unwrap_or(0),
        };
        out.push(results_row(place, &results));
        position += 1;
    }
    out
}

/// The metadata of a call whose approval was still pending when the server stopped.
fn expired(id: &str) -> ToolResultMetadata {
    ToolResultMetadata {
        status: ToolResultStatus::Error,
        started_at: 0.0,
        completed_at: 0.0,
        execution_time_ms: 0.0,
        approval_status: ApprovalStatus::Expired,
        approval_id: Some(id.to_owned()),
        injected_args: Default::default(),
        offloaded_artifact_id: None,
    }
}
