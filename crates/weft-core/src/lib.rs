//! Weft's engine: one agent loop for every depth, running the parts `weft-kit` defines
//! (re-exported here, so a caller needs this one crate) — tools, the permission gate, budgets.
//!
//! Nothing here touches sockets or SQL; events leave through an [`EventSink`] and the caller
//! persists what [`TurnOutcome`] hands back.

pub use weft_kit::*;

pub mod calls;
pub mod hosted;
pub mod modes;

mod awareness;
mod classic;
mod compact;
mod dispatch;
mod level;
mod parallel;
mod planner;
mod recursion;
mod run_loop;
mod sample;
mod subtask;
mod turn;

pub use calls::CallSite;
pub use classic::run_classic_turn;
pub use hosted::{HostedTurn, OpenCall};
pub use modes::{ClassicMode, ExecutionMode, ModeRegistry, UnknownMode};
pub use sample::CHUNK_MAX_BYTES;
