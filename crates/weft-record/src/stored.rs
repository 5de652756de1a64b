//! A response and a round's results as the record stores them, written straight from what the
//! loop lends (no copies of its ids, names, arguments and results first). Each result's
//! metadata leaves out the fields still at their defaults (no approval id, no injected
//! arguments, nothing offloaded). Readers fill them back in (the metadata's own serde
//! defaults), so every view and every REST shape shows them as before; a W1 round's row is
//! ~11 % smaller, and so is what it costs to write. A round's results and a response are
//! written part by part ([`JsonWriter`]: keys as constant text, not serde's call a field),
//! byte for byte what serde_json writes for them (tested below).

use serde::Serialize;
use serde_json::{Map, Value};
use weft_core::json_text::{Error, JsonWriter};
use weft_core::{Call, RecordedResult};
use weft_protocol::{ApprovalStatus, RecordEntry, ToolResultMetadata, ToolResultStatus};

use weft_frames::open_metadata;

/// One entry of a results item, as stored.
pub(super) struct StoredEntry<'a>(pub &'a RecordEntry);

impl StoredEntry<'_> {
    /// A tool result as a lent one is stored ([`StoredResult::write`]); another entry as
    /// serde writes it.
    fn write(&self, json: &mut JsonWriter<'_>) -> Result<(), Error> {
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
            .write(json),
            other => json.value(other),
        }
    }
}

/// Entries the record makes itself (an interrupted call's), `[…]`, stored as a round's
/// results are.
pub(super) fn write_entries(
    json: &mut JsonWriter<'_>,
    entries: &[RecordEntry],
) -> Result<(), Error> {
    write_array(json, entries, |json, entry| StoredEntry(entry).write(json))
}

/// `items` as a JSON array, each written by `each`.
fn write_array<T>(
    json: &mut JsonWriter<'_>,
    items: &[T],
    each: impl Fn(&mut JsonWriter<'_>, &T) -> Result<(), Error>,
) -> Result<(), Error> {
    json.raw("[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            json.raw(",");
        }
        each(json, item)?;
    }
    json.raw("]");
    Ok(())
}

/// `RecordEntry::ToolResult`, field for field: from an entry, or lent by the loop. Written by
/// [`StoredResult::write`]; its `Serialize` is the reference that text is tested against.
#[derive(Serialize)]
#[serde(tag = "kind", rename = "tool_result")]
pub(super) struct StoredResult<'a> {
    tool_call_id: &'a str,
    call_id: &'a str,
    name: &'a str,
    result: &'a str,
    is_error: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<StoredMetadata<'a>>,
}

/// A round's results, `[…]`, each as [`StoredResult::write`] writes it.
pub(super) fn write_results(
    json: &mut JsonWriter<'_>,
    results: &[RecordedResult<'_>],
) -> Result<(), Error> {
    write_array(json, results, |json, result| {
        StoredResult::of(result).write(json)
    })
}

impl<'a> StoredResult<'a> {
    pub(super) fn of(result: &RecordedResult<'a>) -> Self {
        StoredResult {
            tool_call_id: result.id,
            call_id: result.call_id,
            name: result.name,
            result: result.content,
            is_error: result.is_error,
            metadata: Some(StoredMetadata::of(result.metadata)),
        }
    }

    /// What its `Serialize` writes, part by part.
    fn write(&self, json: &mut JsonWriter<'_>) -> Result<(), Error> {
        let StoredResult {
            tool_call_id,
            call_id,
            name,
            result,
            is_error,
            metadata,
        } = self;
        json.raw("{\"kind\":\"tool_result\",\"tool_call_id\":");
        json.string(tool_call_id);
        json.raw(",\"call_id\":");
        json.string(call_id);
        json.raw(",\"name\":");
        json.string(name);
        json.raw(",\"result\":");
        json.string(result);
        json.raw(",\"is_error\":");
        json.bool(*is_error);
        if let Some(metadata) = metadata {
            json.raw(",\"metadata\":");
            metadata.write(json)?;
        }
        json.raw("}");
        Ok(())
    }
}

/// A complete response as stored: `RecordEntry::Assistant` (no id, not partial), field for
/// field, written from the loop's calls rather than from copies of them.
pub(super) struct StoredResponse<'a> {
    pub text: &'a str,
    pub tool_calls: &'a [Call],
    pub reasoning: Option<&'a str>,
}

impl StoredResponse<'_> {
    /// `{"kind":"assistant","text":…,"tool_calls":[…],"reasoning"?:…}`, each call as
    /// `RecordedCall`.
    pub(super) fn write(&self, json: &mut JsonWriter<'_>) {
        json.raw("{\"kind\":\"assistant\",\"text\":");
        json.string(self.text);
        json.raw(",\"tool_calls\":[");
        for (i, call) in self.tool_calls.iter().enumerate() {
            json.raw(if i == 0 { "{\"id\":" } else { ",{\"id\":" });
            json.string(&call.wire_id);
            json.raw(",\"call_id\":");
            json.string(&call.request.id);
            json.raw(",\"name\":");
            json.string(&call.request.name);
            json.raw(",\"arguments\":");
            json.string(&call.request.arguments);
            json.raw("}");
        }
        json.raw("]");
        if let Some(reasoning) = self.reasoning {
            json.raw(",\"reasoning\":");
            json.string(reasoning);
        }
        json.raw("}");
    }
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
    /// The metadata these fields are of.
    #[serde(skip)]
    whole: &'a ToolResultMetadata,
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
            whole: metadata,
        }
    }

    /// What its `Serialize` writes, part by part.
    fn write(&self, json: &mut JsonWriter<'_>) -> Result<(), Error> {
        open_metadata(json, self.whole);
        let StoredMetadata {
            approval_id,
            injected_args,
            offloaded_artifact_id,
            ..
        } = self;
        if let Some(approval_id) = approval_id {
            json.raw(",\"approval_id\":");
            json.string(approval_id);
        }
        if !injected_args.is_empty() {
            json.raw(",\"injected_args\":");
            json.value(injected_args)?;
        }
        if let Some(offloaded) = offloaded_artifact_id {
            json.raw(",\"offloaded_artifact_id\":");
            json.string(offloaded);
        }
        json.raw("}");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use weft_core::ToolCallRequest;
    use weft_protocol::RecordedCall;

    use super::*;

    fn lent(metadata: &ToolResultMetadata) -> RecordedResult<'_> {
        RecordedResult {
            id: "call_1~x",
            call_id: "call_1",
            name: "memory_write",
            content: "stored k0",
            is_error: false,
            metadata,
        }
    }

    /// The entry the record reads back for `lent(metadata)`.
    fn read_back(metadata: &ToolResultMetadata) -> RecordEntry {
        RecordEntry::ToolResult {
            tool_call_id: "call_1~x".into(),
            call_id: "call_1".into(),
            name: "memory_write".into(),
            result: "stored k0".into(),
            is_error: false,
            metadata: Some(metadata.clone()),
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

    fn calls() -> Vec<Call> {
        ["{\"key\":\"k0\",\"value\":\"r\\n\"}", "not json \u{1}"]
            .iter()
            .enumerate()
            .map(|(i, arguments)| Call {
                wire_id: format!("c{i}~1"),
                request: ToolCallRequest {
                    id: format!("c{i}"),
                    name: "memory_write".into(),
                    arguments: (*arguments).into(),
                },
            })
            .collect()
    }

    #[test]
    fn defaults_are_left_out_and_read_back() {
        let metadata = plain();
        let stored = serde_json::to_string(&StoredResult::of(&lent(&metadata))).unwrap();
        assert!(!stored.contains("approval_id"), "{stored}");
        assert!(!stored.contains("injected_args"), "{stored}");
        assert!(!stored.contains("offloaded_artifact_id"), "{stored}");
        let entry = read_back(&metadata);
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
        let other = plain();
        let stored = [
            StoredResult::of(&lent(&metadata)),
            StoredResult::of(&lent(&other)),
        ];
        let text = serde_json::to_string(&stored).unwrap();
        assert_eq!(
            serde_json::from_str::<Vec<RecordEntry>>(&text).unwrap(),
            [read_back(&metadata), read_back(&other)]
        );
    }

    /// A result the record makes itself (an interrupted call's) is stored as a lent one is.
    #[test]
    fn an_entry_is_stored_as_a_lent_result_is() {
        let metadata = plain();
        assert_eq!(
            text_of(|json| StoredEntry(&read_back(&metadata)).write(json)),
            serde_json::to_string(&StoredResult::of(&lent(&metadata))).unwrap()
        );
        let bare = RecordEntry::ToolResult {
            tool_call_id: "call_1~x".into(),
            call_id: "call_1".into(),
            name: "memory_write".into(),
            result: "interrupted".into(),
            is_error: true,
            metadata: None,
        };
        let stored = text_of(|json| StoredEntry(&bare).write(json));
        assert!(!stored.contains("metadata"), "{stored}");
        assert_eq!(serde_json::from_str::<RecordEntry>(&stored).unwrap(), bare);
        let summary = RecordEntry::Summary {
            summary: "so far".into(),
            kept_messages: 3,
        };
        assert_eq!(
            text_of(|json| StoredEntry(&summary).write(json)),
            serde_json::to_string(&summary).unwrap()
        );
    }

    /// A response is stored as the record's own entry for it writes it, byte for byte.
    #[test]
    fn a_response_is_stored_as_its_entry() {
        let calls = calls();
        let cases = [
            ("a \"b\"\n\u{2028}", &calls[..], None),
            ("", &[][..], Some("first \"this\", then\nthat")),
        ];
        for (text, calls, reasoning) in cases {
            let entry = RecordEntry::Assistant {
                id: None,
                text: text.to_owned(),
                tool_calls: calls
                    .iter()
                    .map(|c| RecordedCall {
                        id: c.wire_id.clone(),
                        call_id: c.request.id.clone(),
                        name: c.request.name.clone(),
                        arguments: c.request.arguments.to_string(),
                    })
                    .collect(),
                partial: false,
                reasoning: reasoning.map(str::to_owned),
            };
            let stored = StoredResponse {
                text,
                tool_calls: calls,
                reasoning,
            };
            assert_eq!(
                text_of(|json| {
                    stored.write(json);
                    Ok(())
                }),
                serde_json::to_string(&entry).unwrap()
            );
        }
    }

    /// The text `fill` writes.
    fn text_of(fill: impl FnOnce(&mut JsonWriter<'_>) -> Result<(), Error>) -> String {
        weft_core::json_text::write_with(fill, str::to_owned).unwrap()
    }

    /// The record's rows, written part by part, are what serde_json writes for them: every
    /// status, a metadata field set or left out, numbers not finite, strings to escape.
    #[test]
    fn rows_are_written_as_serde_json_writes_them() {
        let mut metadata = plain();
        metadata.started_at = 1764320000.123456;
        metadata.execution_time_ms = f64::NAN;
        metadata.approval_id = Some("a\"1".into());
        metadata
            .injected_args
            .insert("user".into(), Value::from("u\"1\n\u{1}é😀"));
        metadata.offloaded_artifact_id = Some("art\u{2028}".into());
        let mut all = vec![metadata, plain()];
        let statuses = [
            ToolResultStatus::Error,
            ToolResultStatus::Rejected,
            ToolResultStatus::TimedOut,
        ];
        for (status, approval_status) in statuses.into_iter().zip([
            ApprovalStatus::Approved,
            ApprovalStatus::Rejected,
            ApprovalStatus::TimedOut,
        ]) {
            all.push(ToolResultMetadata {
                status,
                approval_status,
                completed_at: f64::INFINITY,
                ..plain()
            });
        }
        all.push(ToolResultMetadata {
            approval_status: ApprovalStatus::Expired,
            ..plain()
        });
        let mut results: Vec<RecordedResult<'_>> = all.iter().map(lent).collect();
        results[1].content = "line\n\"quoted\" \\ </script>";
        results[1].is_error = true;
        let stored: Vec<StoredResult<'_>> = results.iter().map(StoredResult::of).collect();
        assert_eq!(
            text_of(|json| write_results(json, &results)),
            serde_json::to_string(&stored).unwrap()
        );
        assert_eq!(text_of(|json| write_results(json, &[])), "[]");
        let bare = StoredResult {
            metadata: None,
            ..StoredResult::of(&results[0])
        };
        assert_eq!(
            text_of(|json| bare.write(json)),
            serde_json::to_string(&bare).unwrap()
        );
        assert_eq!(
            weft_core::json_text::to_string(&stored).unwrap(),
            serde_json::to_string(&stored).unwrap()
        );
        let summary = RecordEntry::Summary {
            summary: "so \"far\"".into(),
            kept_messages: 3,
        };
        assert_eq!(
            weft_core::json_text::to_string(&summary).unwrap(),
            serde_json::to_string(&summary).unwrap()
        );
    }
}
