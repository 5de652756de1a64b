//! The JSON text of a frame: `{"thread_id":…,"seq":…,"type":…,…}`, its event's members after
//! the envelope's. Serde's `flatten` writes the same text, but through a map (a call and a
//! check a key, a string serializer for each key); here the envelope is written by hand and
//! the event's members follow it ([`JsonWriter::members_of`]). Text chunks and tool call
//! updates, most of a turn's frames, and the message a turn ends with (its execution tree a
//! node a call) are written part by part: each key as constant text, strings through
//! sonic-rs's escaper. The text is byte for byte what serde_json writes for a
//! [`ServerFrame`](weft_protocol::ServerFrame) (tested here and in `frame`), and the patterns
//! below name every field, so a field added to one of these events does not compile until
//! it is written here.

use weft_core::json_text::{Error, JsonWriter};
use weft_protocol::{
    ExecutionTreeNode, ExecutionTreeSnapshot, ServerEvent, StoredMessage, ToolCallStatus,
    ToolResultMetadata,
};

/// Writes the frame of `event` in `thread_id` at `seq`.
pub(crate) fn write(
    json: &mut JsonWriter<'_>,
    thread_id: Option<&str>,
    seq: Option<u64>,
    event: &ServerEvent,
) -> Result<(), Error> {
    match event {
        ServerEvent::Chunk {
            content,
            done,
            parent_id,
            depth,
        } => {
            typed(json, thread_id, seq, "\"type\":\"chunk\"");
            json.raw(",\"content\":");
            json.string(content);
            json.raw(",\"done\":");
            json.bool(*done);
            nesting(json, parent_id.as_deref(), *depth);
            json.raw("}");
        }
        ServerEvent::ToolCallUpdate {
            tool_call_id,
            name,
            status,
            args,
            result,
            is_error,
            parent_id,
            depth,
            metadata,
        } => {
            typed(json, thread_id, seq, "\"type\":\"tool_call_update\"");
            json.raw(",\"tool_call_id\":");
            json.string(tool_call_id);
            json.raw(",\"name\":");
            json.string(name);
            json.raw(match status {
                ToolCallStatus::Start => ",\"status\":\"start\"",
                ToolCallStatus::End => ",\"status\":\"end\"",
            });
            if let Some(args) = args {
                json.raw(",\"args\":");
                json.value(args)?;
            }
            if let Some(result) = result {
                json.raw(",\"result\":");
                json.string(result);
            }
            if let Some(is_error) = is_error {
                json.raw(",\"is_error\":");
                json.bool(*is_error);
            }
            nesting(json, parent_id.as_deref(), *depth);
            if let Some(metadata) = metadata {
                json.raw(",\"metadata\":");
                tool_metadata(json, metadata)?;
            }
            json.raw("}");
        }
        ServerEvent::Message { message } => {
            typed(json, thread_id, seq, "\"type\":\"message\"");
            json.raw(",\"message\":");
            stored_message(json, message)?;
            json.raw("}");
        }
        // Outside any thread: the event alone.
        other if thread_id.is_none() && seq.is_none() => json.value(other)?,
        other => {
            open(json, thread_id, seq);
            json.members_of(other)?;
        }
    }
    Ok(())
}

/// `{"thread_id":…,"seq":…`, each when present; whether either was.
fn open(json: &mut JsonWriter<'_>, thread_id: Option<&str>, seq: Option<u64>) -> bool {
    json.raw("{");
    if let Some(thread_id) = thread_id {
        json.raw("\"thread_id\":");
        json.string(thread_id);
    }
    if let Some(seq) = seq {
        json.raw(if thread_id.is_some() {
            ",\"seq\":"
        } else {
            "\"seq\":"
        });
        json.uint(seq);
    }
    thread_id.is_some() || seq.is_some()
}

/// The envelope, then the event's `"type":…` member.
fn typed(json: &mut JsonWriter<'_>, thread_id: Option<&str>, seq: Option<u64>, type_member: &str) {
    if open(json, thread_id, seq) {
        json.raw(",");
    }
    json.raw(type_member);
}

/// `,"parent_id":…,"depth":…`, closing nothing.
fn nesting(json: &mut JsonWriter<'_>, parent_id: Option<&str>, depth: u32) {
    json.raw(",\"parent_id\":");
    json.string_or_null(parent_id);
    json.raw(",\"depth\":");
    json.uint(u64::from(depth));
}

fn tool_metadata(json: &mut JsonWriter<'_>, metadata: &ToolResultMetadata) -> Result<(), Error> {
    let ToolResultMetadata {
        approval_id,
        injected_args,
        offloaded_artifact_id,
        ..
    } = metadata;
    open_metadata(json, metadata);
    json.raw(",\"approval_id\":");
    json.string_or_null(approval_id.as_deref());
    json.raw(",\"injected_args\":");
    json.value(injected_args)?;
    json.raw(",\"offloaded_artifact_id\":");
    json.string_or_null(offloaded_artifact_id.as_deref());
    json.raw("}");
    Ok(())
}

/// A stored message as clients see it: the one frame a turn ends with carries its execution
/// tree, a node a tool call.
fn stored_message(json: &mut JsonWriter<'_>, message: &StoredMessage) -> Result<(), Error> {
    let StoredMessage {
        id,
        role,
        content,
        permission_mode,
        execution_tree,
        input_tokens,
        output_tokens,
        cost_usd,
        status,
        metadata,
        created_at,
    } = message;
    json.raw("{\"id\":");
    json.string(id);
    json.raw(",\"role\":");
    json.string(role);
    json.raw(",\"content\":");
    json.value(content)?;
    if let Some(mode) = permission_mode {
        json.raw(",\"permission_mode\":");
        json.value(mode)?;
    }
    if let Some(tree) = execution_tree {
        json.raw(",\"execution_tree\":");
        execution_tree_text(json, tree);
    }
    if let Some(tokens) = input_tokens {
        json.raw(",\"input_tokens\":");
        json.uint(*tokens);
    }
    if let Some(tokens) = output_tokens {
        json.raw(",\"output_tokens\":");
        json.uint(*tokens);
    }
    if let Some(cost) = cost_usd {
        json.raw(",\"cost_usd\":");
        json.float(*cost);
    }
    if let Some(status) = status {
        json.raw(",\"status\":");
        json.string(status);
    }
    if let Some(metadata) = metadata {
        json.raw(",\"metadata\":");
        json.value(metadata)?;
    }
    json.raw(",\"created_at\":");
    json.string(created_at);
    json.raw("}");
    Ok(())
}

fn execution_tree_text(json: &mut JsonWriter<'_>, tree: &ExecutionTreeSnapshot) {
    let ExecutionTreeSnapshot { version, nodes } = tree;
    json.raw("{\"version\":");
    json.uint(u64::from(*version));
    json.raw(",\"nodes\":[");
    for (i, node) in nodes.iter().enumerate() {
        let ExecutionTreeNode {
            id,
            parent_id,
            name,
            title,
            args_preview,
            result_preview,
            is_error,
            duration_ms,
        } = node;
        json.raw(if i == 0 { "{\"id\":" } else { ",{\"id\":" });
        json.string(id);
        json.raw(",\"parent_id\":");
        json.string_or_null(parent_id.as_deref());
        json.raw(",\"name\":");
        json.string(name);
        for (key, text) in [
            (",\"title\":", title),
            (",\"args_preview\":", args_preview),
            (",\"result_preview\":", result_preview),
        ] {
            if let Some(text) = text {
                json.raw(key);
                json.string(text);
            }
        }
        if let Some(is_error) = is_error {
            json.raw(",\"is_error\":");
            json.bool(*is_error);
        }
        json.raw(",\"duration_ms\":");
        json.float(*duration_ms);
        json.raw("}");
    }
    json.raw("]}");
}

/// `{"status":…,"started_at":…,"completed_at":…,"execution_time_ms":…,"approval_status":…`:
/// a tool call's metadata as far as the fields it always has, the object left open (the
/// record's rows write the rest only when set). Every field is named: one added does not
/// compile until it is written here or after.
pub fn open_metadata(json: &mut JsonWriter<'_>, metadata: &ToolResultMetadata) {
    let ToolResultMetadata {
        status,
        started_at,
        completed_at,
        execution_time_ms,
        approval_status,
        approval_id: _,
        injected_args: _,
        offloaded_artifact_id: _,
    } = metadata;
    json.raw("{\"status\":\"");
    json.raw(status.as_str());
    json.raw("\",\"started_at\":");
    json.float(*started_at);
    json.raw(",\"completed_at\":");
    json.float(*completed_at);
    json.raw(",\"execution_time_ms\":");
    json.float(*execution_time_ms);
    json.raw(",\"approval_status\":\"");
    json.raw(approval_status.as_str());
    json.raw("\"");
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use proptest::collection::{btree_map, vec};
    use proptest::prelude::*;
    use serde_json::{Map, Value};
    use weft_core::json_text;
    use weft_protocol::{
        ApprovalStatus, ContentPart, ErrorCode, ExecutionTreeNode, ExecutionTreeSnapshot,
        MessageContent, PermissionMode, ServerFrame, StoredMessage, ToolResultStatus,
    };

    use super::*;

    /// What [`write`] makes of `frame`.
    fn written(frame: &ServerFrame) -> String {
        let thread_id = frame.thread_id.as_deref();
        json_text::write_with(
            |json| write(json, thread_id, frame.seq, &frame.event),
            str::to_owned,
        )
        .unwrap()
    }

    fn small_map() -> impl Strategy<Value = Map<String, Value>> {
        btree_map(any::<String>(), any::<String>(), 0..3)
            .prop_map(|m| m.into_iter().map(|(k, v)| (k, Value::String(v))).collect())
    }

    fn metadata() -> impl Strategy<Value = ToolResultMetadata> {
        let status = prop_oneof![
            Just(ToolResultStatus::Success),
            Just(ToolResultStatus::Error),
            Just(ToolResultStatus::Rejected),
            Just(ToolResultStatus::TimedOut),
        ];
        let approval = prop_oneof![
            Just(ApprovalStatus::NotRequired),
            Just(ApprovalStatus::Approved),
            Just(ApprovalStatus::Rejected),
            Just(ApprovalStatus::TimedOut),
            Just(ApprovalStatus::Expired),
        ];
        let times = (any::<f64>(), any::<f64>(), any::<f64>());
        let ids = (any::<Option<String>>(), any::<Option<String>>());
        (status, approval, times, ids, small_map()).prop_map(
            |(
                status,
                approval_status,
                (started_at, completed_at, ms),
                (approval_id, offloaded),
                injected_args,
            )| {
                ToolResultMetadata {
                    status,
                    started_at,
                    completed_at,
                    execution_time_ms: ms,
                    approval_status,
                    approval_id,
                    injected_args,
                    offloaded_artifact_id: offloaded,
                }
            },
        )
    }

    fn chunk() -> impl Strategy<Value = ServerEvent> {
        (
            any::<String>(),
            any::<bool>(),
            any::<Option<String>>(),
            any::<u32>(),
        )
            .prop_map(|(content, done, parent_id, depth)| ServerEvent::Chunk {
                content,
                done,
                parent_id,
                depth,
            })
    }

    fn tool_call_update() -> impl Strategy<Value = ServerEvent> {
        let call = (any::<String>(), any::<String>(), any::<bool>());
        let outcome = (
            proptest::option::of(small_map()),
            any::<Option<String>>(),
            any::<Option<bool>>(),
        );
        let nesting = (any::<Option<String>>(), any::<u32>());
        (call, outcome, nesting, proptest::option::of(metadata())).prop_map(
            |(
                (tool_call_id, name, start),
                (args, result, is_error),
                (parent_id, depth),
                metadata,
            )| {
                ServerEvent::ToolCallUpdate {
                    tool_call_id,
                    name,
                    status: if start {
                        ToolCallStatus::Start
                    } else {
                        ToolCallStatus::End
                    },
                    args: args.map(Value::Object),
                    result,
                    is_error,
                    parent_id,
                    depth,
                    metadata: metadata.map(Box::new),
                }
            },
        )
    }

    fn tree_node() -> impl Strategy<Value = ExecutionTreeNode> {
        let names = (any::<String>(), any::<Option<String>>(), any::<String>());
        let previews = (
            any::<Option<String>>(),
            any::<Option<String>>(),
            any::<Option<String>>(),
        );
        (names, previews, any::<Option<bool>>(), any::<f64>()).prop_map(
            |((id, parent_id, name), (title, args_preview, result_preview), is_error, ms)| {
                ExecutionTreeNode {
                    id,
                    parent_id,
                    name,
                    title,
                    args_preview,
                    result_preview,
                    is_error,
                    duration_ms: ms,
                }
            },
        )
    }

    fn message() -> impl Strategy<Value = ServerEvent> {
        let mode = prop_oneof![
            Just(None),
            Just(Some(PermissionMode::Plan)),
            Just(Some(PermissionMode::Auto)),
        ];
        let tree = proptest::option::of((any::<u32>(), vec(tree_node(), 0..4)));
        let spending = (
            any::<Option<u64>>(),
            any::<Option<u64>>(),
            any::<Option<f64>>(),
        );
        let ids = (any::<String>(), any::<String>(), any::<String>());
        let rest = (any::<Option<String>>(), proptest::option::of(small_map()));
        (ids, any::<String>(), mode, tree, spending, rest).prop_map(
            |((id, role, created_at), text, permission_mode, tree, spending, rest)| {
                let (input_tokens, output_tokens, cost_usd) = spending;
                ServerEvent::Message {
                    message: StoredMessage {
                        id,
                        role,
                        content: MessageContent::Text(text),
                        permission_mode,
                        execution_tree: tree.map(|(version, nodes)| {
                            Arc::new(ExecutionTreeSnapshot { version, nodes })
                        }),
                        input_tokens,
                        output_tokens,
                        cost_usd,
                        status: rest.0,
                        metadata: rest.1.map(Value::Object),
                        created_at,
                    },
                }
            },
        )
    }

    proptest! {
        /// Any chunk, tool call update or message, in or out of a thread, with or without its
        /// parts, strings of any characters and numbers of any kind: the text is
        /// serde_json's.
        #[test]
        fn the_frames_written_by_hand_are_written_as_serde_json_writes_them(
            thread_id in proptest::option::of(any::<String>()),
            seq in any::<Option<u64>>(),
            event in prop_oneof![chunk(), tool_call_update(), message()],
            args_in_vec in vec(any::<i64>(), 0..3),
        ) {
            let mut event = event;
            if let ServerEvent::ToolCallUpdate { args: Some(Value::Object(args)), .. } = &mut event {
                args.insert("n".into(), args_in_vec.into());
            }
            let frame = ServerFrame { thread_id: thread_id.map(Arc::from), seq, event };
            prop_assert_eq!(written(&frame), serde_json::to_string(&frame).unwrap());
        }
    }

    /// Every other event through serde, after an envelope of each shape (or none), and a
    /// message written by hand with its parts of other types (content in parts).
    #[test]
    fn other_frames_are_their_envelope_then_the_event_members() {
        let message = ServerEvent::Message {
            message: StoredMessage {
                id: "m\"1".into(),
                role: "assistant".into(),
                content: MessageContent::Parts(vec![
                    ContentPart::Text {
                        text: "hé\n".into(),
                    },
                    ContentPart::ImageUrl {
                        image_url: "https://x/y.png".into(),
                    },
                ]),
                permission_mode: Some(PermissionMode::Default),
                execution_tree: Some(Arc::new(ExecutionTreeSnapshot {
                    version: 1,
                    nodes: vec![ExecutionTreeNode {
                        id: "c1".into(),
                        parent_id: None,
                        name: "memory_write".into(),
                        title: None,
                        args_preview: Some("{\"k\":1}".into()),
                        result_preview: None,
                        is_error: Some(false),
                        duration_ms: 0.25,
                    }],
                })),
                input_tokens: Some(3),
                output_tokens: None,
                cost_usd: Some(0.1),
                status: Some("completed".into()),
                metadata: Some(serde_json::json!({"mode": "agent"})),
                created_at: "2026-11-29".into(),
            },
        };
        let events = [
            ServerEvent::Pong,
            ServerEvent::error(ErrorCode::Internal, "x\u{1}", Some("r".into())),
            message,
            ServerEvent::TurnStarted {
                message_id: "m".into(),
                permission_mode: PermissionMode::Plan,
                mode: "agent".into(),
            },
        ];
        let envelopes = [
            (None, None),
            (Some("t\"1"), None),
            (None, Some(0)),
            (Some("t"), Some(7)),
        ];
        for event in events {
            for (thread_id, seq) in envelopes {
                let frame = ServerFrame {
                    thread_id: thread_id.map(Arc::from),
                    seq,
                    event: event.clone(),
                };
                assert_eq!(written(&frame), serde_json::to_string(&frame).unwrap());
            }
        }
    }
}
