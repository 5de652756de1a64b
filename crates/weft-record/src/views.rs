//! The record as people read it: a thread's whole record (`/items`), one turn's trace with
//! subtasks nested under their calls, what a turn produced so far (its root text and its
//! execution tree) for snapshots and crash recovery, and stored messages with their trees.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use weft_core::TreeBuilder;
use weft_protocol::{
    ExecutionTreeSnapshot, MessageContent, RecordEntry, RecordItem, StoredMessage,
};
use weft_store::{ItemRow, MessageRow, Store, StoreError};

use crate::persist::{rfc3339, to_wire};
use crate::{entries, ItemKind};

/// The whole root-level record of a thread, in order: each user message, then its turn's
/// assistant messages and tool results.
pub fn thread_record(messages: &[MessageRow], items: &[ItemRow]) -> Vec<RecordItem> {
    let mut by_turn: HashMap<&str, Vec<&ItemRow>> = HashMap::new();
    for item in items {
        by_turn.entry(&item.message_id).or_default().push(item);
    }
    let mut out = Vec::new();
    for m in messages {
        if m.role == "user" {
            let content = serde_json::from_value::<MessageContent>(m.content.clone())
                .unwrap_or_else(|_| MessageContent::Text(m.content.to_string()));
            out.push(RecordItem {
                id: m.id.clone(),
                message_id: None,
                created_at: rfc3339(m.created_at),
                entry: RecordEntry::User { id: None, content },
            });
            continue;
        }
        for item in by_turn.remove(m.id.as_str()).unwrap_or_default() {
            let several = ItemKind::of(item) == Some(ItemKind::ToolResults);
            for (i, entry) in entries(item).into_iter().enumerate() {
                let id = if several {
                    format!("{}/{i}", item.id())
                } else {
                    item.id()
                };
                out.push(RecordItem {
                    id,
                    message_id: Some(m.id.clone()),
                    created_at: rfc3339(item.created_at),
                    entry: without_id(entry),
                });
            }
        }
    }
    out
}

/// An entry with its own id left out (a record item carries the id).
fn without_id(entry: RecordEntry) -> RecordEntry {
    match entry {
        RecordEntry::User { content, .. } => RecordEntry::User { id: None, content },
        RecordEntry::Assistant {
            text,
            tool_calls,
            partial,
            reasoning,
            ..
        } => RecordEntry::Assistant {
            id: None,
            text,
            tool_calls,
            partial,
            reasoning,
        },
        other => other,
    }
}

/// One turn's items (every depth, in record order) as a trace: root entries in order, each
/// subtask's entries nested under the call that ran it, just before that call's result.
pub fn turn_trace(items: &[ItemRow]) -> Vec<RecordEntry> {
    let mut children: HashMap<&str, Vec<&ItemRow>> = HashMap::new();
    let mut roots = Vec::new();
    for item in items {
        match crate::shown_parent(item) {
            Some(parent) => children.entry(parent).or_default().push(item),
            None => roots.push(item),
        }
    }
    nest(&roots, &mut children)
}

fn nest<'a>(
    level: &[&'a ItemRow],
    children: &mut HashMap<&'a str, Vec<&'a ItemRow>>,
) -> Vec<RecordEntry> {
    let mut out = Vec::new();
    let mut pending_calls: Vec<String> = Vec::new();
    for entry in level.iter().flat_map(|item| entries(item)) {
        match &entry {
            RecordEntry::Assistant { tool_calls, .. } => {
                pending_calls.extend(tool_calls.iter().map(|c| c.id.clone()));
            }
            RecordEntry::ToolResult { tool_call_id, .. } => {
                pending_calls.retain(|id| id != tool_call_id);
                if let Some(sub) = subtask(tool_call_id, children) {
                    out.push(sub);
                }
            }
            _ => {}
        }
        out.push(entry);
    }
    // Subtasks of calls that never got a result (a turn still running, or interrupted).
    for id in pending_calls {
        if let Some(sub) = subtask(&id, children) {
            out.push(sub);
        }
    }
    out
}

fn subtask<'a>(
    call_id: &str,
    children: &mut HashMap<&'a str, Vec<&'a ItemRow>>,
) -> Option<RecordEntry> {
    let items = children.remove(call_id)?;
    Some(RecordEntry::Subtask {
        tool_call_id: call_id.to_owned(),
        trace: nest(&items, children),
    })
}

/// The text a turn streamed at its root, from its items (partial drafts included).
pub fn root_text(items: &[ItemRow]) -> String {
    items
        .iter()
        .filter(|i| i.depth == 0)
        .flat_map(entries)
        .filter_map(|e| match e {
            RecordEntry::Assistant { text, .. } => Some(text),
            _ => None,
        })
        .collect()
}

/// The execution tree of a turn rebuilt from its items, by the builder a running turn uses:
/// one node per call, with its result when it has one.
pub fn tree_from_items(items: &[ItemRow]) -> ExecutionTreeSnapshot {
    let mut tree = TreeBuilder::default();
    for item in items {
        let depth = u32::try_from(item.depth).unwrap_or(0);
        for entry in entries(item) {
            match entry {
                RecordEntry::Assistant { tool_calls, .. } => {
                    for call in tool_calls {
                        let args: Value = serde_json::from_str(&call.arguments)
                            .unwrap_or_else(|_| Value::String(call.arguments.clone()));
                        tree.start(
                            &call.id,
                            crate::shown_parent(item),
                            &call.name,
                            Some(&args),
                            depth,
                        );
                    }
                }
                RecordEntry::ToolResult {
                    tool_call_id,
                    result,
                    is_error,
                    metadata,
                    ..
                } => tree.end(
                    &tool_call_id,
                    Some(&result),
                    Some(is_error),
                    metadata.as_ref(),
                ),
                _ => {}
            }
        }
    }
    tree.take().0
}

/// Whether `row` is a finished turn's message whose tree is to be rebuilt: a turn's row keeps
/// no tree (every call and result is in the record, so the tree is written once), rows
/// written by earlier versions kept theirs, and a running turn's message shows none.
fn needs_tree(row: &MessageRow) -> bool {
    row.role == "assistant" && row.status != "running" && row.execution_tree.is_none()
}

/// `row` as clients see it, with its tree rebuilt from `items` (its turn's) when it keeps none.
fn with_tree(row: &MessageRow, items: &[ItemRow]) -> StoredMessage {
    let mut message = to_wire(row);
    if needs_tree(row) {
        message.execution_tree = Some(Arc::new(tree_from_items(items)));
    }
    message
}

/// A stored message as clients see it, a finished turn's with its execution tree.
pub async fn stored_message(store: &Store, row: &MessageRow) -> Result<StoredMessage, StoreError> {
    let items = if needs_tree(row) {
        store.turn_items(&row.thread_id, &row.id).await?
    } else {
        Vec::new()
    };
    Ok(with_tree(row, &items))
}

/// A thread's messages as clients see them, in order, finished turns' with their execution
/// trees (one read of the thread's items, when a tree is to be rebuilt).
pub async fn thread_messages(
    store: &Store,
    thread_id: &str,
) -> Result<Vec<StoredMessage>, StoreError> {
    let rows = store.messages(thread_id).await?;
    let items = if rows.iter().any(needs_tree) {
        store.thread_items(thread_id).await?
    } else {
        Vec::new()
    };
    // Turn by turn in record order: each turn's items are one run.
    let by_turn: HashMap<&str, &[ItemRow]> = items
        .chunk_by(|a, b| a.message_id == b.message_id)
        .map(|run| (&*run[0].message_id, run))
        .collect();
    Ok(rows
        .iter()
        .map(|row| {
            let items = by_turn.get(row.id.as_str()).copied().unwrap_or_default();
            with_tree(row, items)
        })
        .collect())
}
