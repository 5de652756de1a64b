//! A round's results as the record stores them: each result's metadata leaves out the fields
//! still at their defaults (no approval id, no injected arguments, nothing offloaded). Readers
//! fill them back in (the metadata's own serde defaults), so every view and every REST shape
//! shows them as before; a W1 round's row is ~11 % smaller, and so is what it costs to write.

use serde::{Serialize, Serializer};
use serde_json::{Map, Value};
use weft_protocol::{ApprovalStatus, RecordEntry, ToolResultMetadata, ToolResultStatus};

/// One entry of a results item, as stored.
pub(super) struct StoredEntry<'a>(pub &'a RecordEntry);

impl Serialize for StoredEntry<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            RecordEntry::ToolResult {
                tool_call_id,
                call_id,
                name,
                result,
                is_error,
                metadata,
            } => StoredResult {
                tool_call_id,
                call_id,
                name,
                result,
                is_error: *is_error,
                metadata: metadata.as_ref().map(StoredMetadata::of),
            }
            .serialize(serializer),
            other => other.serialize(serializer),
        }
    }
}

/// `RecordEntry::ToolResult`, field for field.
#[derive(Serialize)]
#[serde(tag = "kind", rename = "tool_result")]
struct StoredResult<'a> {
    tool_call_id: &'a str,
    call_id: &'a str,
    name: &'a str,
    result: &'a str,
    is_error: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<StoredMetadata<'a>>,
}

/// [`ToolResultMetadata`] without its defaults.
#[derive(Serialize)]
struct StoredMetadata<'a> {
    status: ToolResultStatus,
    started_at: f64,
    completed_at: f64,
    execution_time_ms: f64,
    approval_status: ApprovalStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    approval_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    injected_args: &'a Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    offloaded_artifact_id: Option<&'a str>,
}

impl<'a> StoredMetadata<'a> {
    fn of(metadata: &'a ToolResultMetadata) -> Self {
        // Every field named: a field added to the metadata does not compile here until it is
        // stored too.
        let ToolResultMetadata {
            status,
            started_at,
            completed_at,
            execution_time_ms,
            approval_status,
            approval_id,
            injected_args,
            offloaded_artifact_id,
        } = metadata;
        StoredMetadata {
            status: *status,
            started_at: *started_at,
            completed_at: *completed_at,
            execution_time_ms: *execution_time_ms,
            approval_status: *approval_status,
            approval_id: approval_id.as_deref(),
            injected_args,
            offloaded_artifact_id: offloaded_artifact_id.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn result(metadata: ToolResultMetadata) -> RecordEntry {
        RecordEntry::ToolResult {
            tool_call_id: "call_1~x".into(),
            call_id: "call_1".into(),
            name: "memory_write".into(),
            result: "stored k0".into(),
            is_error: false,
            metadata: Some(metadata),
        }
    }

    fn plain() -> ToolResultMetadata {
        ToolResultMetadata {
            status: ToolResultStatus::Success,
            started_at: 1.5,
            completed_at: 2.25,
            execution_time_ms: 750.0,
            approval_status: ApprovalStatus::NotRequired,
            approval_id: None,
            injected_args: Map::new(),
            offloaded_artifact_id: None,
        }
    }

    #[test]
    fn defaults_are_left_out_and_read_back() {
        let entry = result(plain());
        let stored = serde_json::to_string(&StoredEntry(&entry)).unwrap();
        assert!(!stored.contains("approval_id"), "{stored}");
        assert!(!stored.contains("injected_args"), "{stored}");
        assert!(!stored.contains("offloaded_artifact_id"), "{stored}");
        assert!(stored.len() < serde_json::to_string(&entry).unwrap().len());
        assert_eq!(serde_json::from_str::<RecordEntry>(&stored).unwrap(), entry);
    }

    #[test]
    fn every_field_set_is_kept() {
        let mut metadata = plain();
        metadata.status = ToolResultStatus::Error;
        metadata.approval_status = ApprovalStatus::Approved;
        metadata.approval_id = Some("call_1~x".into());
        metadata
            .injected_args
            .insert("user".into(), Value::from("u1"));
        metadata.offloaded_artifact_id = Some("art_1".into());
        let entries = [result(metadata), result(plain())];
        let stored: Vec<StoredEntry<'_>> = entries.iter().map(StoredEntry).collect();
        let text = serde_json::to_string(&stored).unwrap();
        assert_eq!(
            serde_json::from_str::<Vec<RecordEntry>>(&text).unwrap(),
            entries
        );
    }

    /// What the record's rows are written with (sonic-rs) writes them as serde_json does.
    #[test]
    fn rows_are_written_as_serde_json_writes_them() {
        let mut metadata = plain();
        metadata.started_at = 1764320000.123456;
        metadata.execution_time_ms = f64::NAN;
        metadata
            .injected_args
            .insert("user".into(), Value::from("u\"1\n\u{1}é😀"));
        let mut entries = vec![result(metadata), result(plain())];
        entries.push(
            serde_json::from_str(
                r#"{"kind":"assistant","text":"a \"b\"\n\u2028","tool_calls":[{"id":"c~1","call_id":"c","name":"memory_write","arguments":"{\"key\":\"k0\",\"value\":\"r\\n\"}"}]}"#,
            )
            .unwrap(),
        );
        let stored: Vec<StoredEntry<'_>> = entries.iter().map(StoredEntry).collect();
        assert_eq!(
            weft_core::json_text::to_string(&stored).unwrap(),
            serde_json::to_string(&stored).unwrap()
        );
        for entry in &entries {
            assert_eq!(
                weft_core::json_text::to_string(entry).unwrap(),
                serde_json::to_string(entry).unwrap()
            );
        }
    }

    #[test]
    fn other_entries_are_stored_as_they_are() {
        let entry = RecordEntry::Summary {
            summary: "so far".into(),
            kept_messages: 3,
        };
        assert_eq!(
            serde_json::to_string(&StoredEntry(&entry)).unwrap(),
            serde_json::to_string(&entry).unwrap()
        );
    }
}
