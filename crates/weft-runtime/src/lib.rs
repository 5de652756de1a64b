//! Weft's runtime: it owns turns, threads, replay, the conversation record and the services
//! (knowledge, assets, media, workflows), and knows nothing of HTTP or websockets. Every turn
//! starts through [`Runtime::start_turn`], whoever asks (a socket, the prompt API, a workflow
//! run); whoever watches a turn is a [`FrameSink`].

pub mod agents;
pub mod control;
pub mod conversations;
pub mod limits;
pub mod metrics;
pub mod prompts;
mod remote;
pub mod runtime;
pub mod starts;
pub mod threads;
mod tool_names;
pub mod turn;

pub use runtime::{Runtime, StartupError, LOCAL_USER};
pub use turn::{Route, TurnRequest, TurnStarted};
pub use weft_config::{self as config, Config};
pub use weft_frames::{ChannelSink, FrameSink, Outgoing, Refusal, SharedFrame};
pub use weft_providers::Providers;
