//! Weft's runtime: it owns turns, threads, replay, the conversation record and the services
//! (knowledge, assets, media, workflows), and knows nothing of HTTP or websockets. Every turn
//! starts through [`Runtime::start_turn`], whoever asks (a socket, the prompt API, a workflow
//! run); whoever watches a turn is a [`FrameSink`].

pub mod agents;
pub mod assets;
pub mod bus;
pub mod client_tools;
pub mod config;
pub mod control;
pub mod embeddings;
pub mod error;
pub mod frame;
mod frame_text;
pub mod knowledge;
pub mod leases;
pub mod limits;
pub mod metrics;
pub mod persist;
pub mod read_artifact;
pub mod record;
pub mod recovery;
mod remote;
pub mod replay;
pub mod runtime;
pub mod starts;
pub mod threads;
mod tool_names;
pub mod turn;
pub mod workflows;

pub use config::Config;
pub use error::Refusal;
pub use frame::{ChannelSink, FrameSink, Outgoing, SharedFrame};
pub use runtime::{Runtime, StartupError, LOCAL_USER};
pub use turn::{Route, TurnRequest, TurnStarted};
pub use weft_providers::Providers;
