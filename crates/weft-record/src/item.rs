//! What a stored item of the record is ([`ItemKind`]), how one is built ([`entry_row`],
//! [`response_row`], [`round_row`], [`results_row`]) and read back ([`entries`], the only
//! parser).

use std::sync::Arc;

use serde::Serialize;
use weft_core::json_text::{self, JsonWriter};
use weft_core::{Call, RecordedResult};
use weft_protocol::RecordEntry;
use weft_store::{now_ms, ItemRow};

use crate::stored::{self, StoredResponse};

/// What one stored item holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemKind {
    /// One response: an `Assistant` entry.
    Assistant,
    /// One round's results: an array of `ToolResult` entries, in the order of the calls.
    ToolResults,
    /// A compaction: a `Summary` entry.
    Summary,
    /// The planner's plan: a `Plan` entry.
    Plan,
    /// A workflow node's progress: a `Node` entry.
    Node,
}

impl ItemKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ItemKind::Assistant => "assistant",
            ItemKind::ToolResults => "tool_results",
            ItemKind::Summary => "summary",
            ItemKind::Plan => "plan",
            ItemKind::Node => "node",
        }
    }

    pub fn of(item: &ItemRow) -> Option<ItemKind> {
        match item.kind.as_str() {
            "assistant" => Some(ItemKind::Assistant),
            "tool_results" => Some(ItemKind::ToolResults),
            "summary" => Some(ItemKind::Summary),
            "plan" => Some(ItemKind::Plan),
            "node" => Some(ItemKind::Node),
            _ => None,
        }
    }
}

/// Where an item goes: its turn, its position in the turn, its level.
#[derive(Debug, Clone, Copy)]
pub struct ItemPlace<'a> {
    pub thread_id: &'a Arc<str>,
    pub message_id: &'a Arc<str>,
    pub position: i64,
    pub parent_id: Option<&'a str>,
    pub depth: u32,
}

impl ItemPlace<'_> {
    /// An item of `kind` here, its body `value` written out (by sonic-rs at its exact size,
    /// [`json_text`]; an empty object or array should it fail).
    fn written(&self, kind: ItemKind, value: &impl Serialize) -> ItemRow {
        self.written_with(kind, |json| json.value(value))
    }

    /// An item of `kind` here, its body the text `fill` writes.
    fn written_with(
        &self,
        kind: ItemKind,
        fill: impl FnOnce(&mut JsonWriter<'_>) -> Result<(), json_text::Error>,
    ) -> ItemRow {
        let empty = if kind == ItemKind::ToolResults {
            "[]"
        } else {
            "{}"
        };
        let body = json_text::write_with(fill, str::to_owned).unwrap_or_else(|_| empty.to_owned());
        ItemRow {
            thread_id: self.thread_id.clone(),
            message_id: self.message_id.clone(),
            position: self.position,
            kind: kind.as_str().to_owned(),
            parent_id: self.parent_id.map(str::to_owned),
            depth: i64::from(self.depth),
            body,
            created_at: now_ms(),
        }
    }
}

/// An item holding one entry (a response or a summary).
pub fn entry_row(place: ItemPlace<'_>, entry: &RecordEntry) -> ItemRow {
    let kind = match entry {
        RecordEntry::Summary { .. } => ItemKind::Summary,
        RecordEntry::Plan { .. } => ItemKind::Plan,
        RecordEntry::Node { .. } => ItemKind::Node,
        _ => ItemKind::Assistant,
    };
    place.written(kind, entry)
}

/// An item holding a complete response: its text and its calls (an `Assistant` entry).
pub fn response_row(
    place: ItemPlace<'_>,
    text: &str,
    calls: &[Call],
    reasoning: Option<&str>,
) -> ItemRow {
    let stored = StoredResponse {
        text,
        tool_calls: calls,
        reasoning,
    };
    place.written_with(ItemKind::Assistant, |json| {
        stored.write(json);
        Ok(())
    })
}

/// An item holding one round's results as the loop lends them (in their stored form, see
/// [`stored`]). Rows are written at their exact size ([`json_text`]), as frames are, byte for
/// byte as serde_json would write them (tested in [`stored`]).
pub fn round_row(place: ItemPlace<'_>, results: &[RecordedResult<'_>]) -> ItemRow {
    place.written_with(ItemKind::ToolResults, |json| {
        stored::write_results(json, results)
    })
}

/// An item holding results the record makes itself (an interrupted call's), as
/// [`round_row`] stores a round's.
pub fn results_row(place: ItemPlace<'_>, results: &[RecordEntry]) -> ItemRow {
    place.written_with(ItemKind::ToolResults, |json| {
        stored::write_entries(json, results)
    })
}

/// The entries one stored item holds (none, with a warning, for an item that cannot be read).
pub fn entries(item: &ItemRow) -> Vec<RecordEntry> {
    let parsed = match ItemKind::of(item) {
        Some(ItemKind::ToolResults) => serde_json::from_str::<Vec<RecordEntry>>(&item.body),
        _ => serde_json::from_str::<RecordEntry>(&item.body).map(|e| vec![e]),
    };
    parsed.unwrap_or_else(|e| {
        tracing::warn!(item = %item.id(), error = %e, "unreadable record item");
        Vec::new()
    })
}

/// The call an item sits under, as clients know it: a parallel job's items sit under their
/// job's own place in the record, which names the call.
pub fn shown_parent(item: &ItemRow) -> Option<&str> {
    item.parent_id
        .as_deref()
        .map(|p| weft_core::parent_call(p).0)
}
