//! Frames on their way out of Weft, whichever door they leave by: each encoded once
//! ([`SharedFrame`]), watched by [`FrameSink`]s, kept for `resume_chat` ([`Replay`]); and the
//! [`Refusal`] every door reports when the runtime will not do what it was asked.

pub mod frame;
mod frame_text;
pub mod refusal;
pub mod replay;

pub use frame::{ChannelSink, FrameSink, Outgoing, SharedFrame};
pub use frame_text::open_metadata;
pub use refusal::Refusal;
pub use replay::{Missed, Replay};
