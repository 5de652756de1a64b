//! Model providers behind `weft_core::Provider`.
//!
//! * [`scripted`]: the deterministic test double of PROTOCOL.md.

pub mod scripted;

pub use scripted::{Script, ScriptError, ScriptedProvider};
