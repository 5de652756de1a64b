//! The conversation record, owned here. A turn's record is a series of stored items at every
//! depth: a response (`assistant`: its text and tool calls), a round's results
//! (`tool_results`), a compaction's `summary`, a plan, a workflow node's progress. [`item`]
//! says what an item is, builds one and reads one back; the writer side is [`TurnLog`],
//! which writes only while its [`WriteLease`] holds; the readings are the provider history
//! ([`history`]), where a cut turn goes on from ([`resume_point`]), the views people read
//! ([`views`], [`prompt_view`]) and the audit log ([`audit`]); [`persist`] turns a turn's
//! start and end into rows.

pub mod audit;
pub mod history;
pub mod item;
pub mod lease;
mod log;
pub mod persist;
pub mod prompt_view;
pub mod resume_point;
mod stored;
pub mod views;

pub use item::{
    entries, entry_row, response_row, results_row, round_row, shown_parent, ItemKind, ItemPlace,
};
pub use lease::WriteLease;
pub use log::{TurnLog, FLUSH_EVERY, LEASE_LOST};
