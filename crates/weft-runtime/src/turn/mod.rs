//! Turns: [`TurnRequest`] (what is asked), [`Runtime::start_turn`] (the one way a turn
//! starts, in small steps: the mode, admission, the thread, the agent and model, the
//! toolbelt and prompt, the task), `assemble` (the one way a turn is put together, new
//! or taken up after a crash), the running turn's task, and the modes of the workflow and
//! media routes.
//!
//! [`Runtime::start_turn`]: crate::runtime::Runtime::start_turn

mod assemble;
mod compose;
mod media;
mod replace;
mod request;
mod resolve;
mod resume;
mod start;
mod task;
mod workflow;

pub use request::{Route, TurnRequest};
pub use start::TurnStarted;
pub use workflow::run_id_of;
