//! The REST API, one file per resource: threads (and the record, traces, deletion), agents,
//! assets, collections, workflows, the prompt API, and health, metrics and modes. Every
//! error is an [`ApiError`].

pub mod agents;
pub mod assets;
pub mod body;
pub mod collections;
pub mod health;
pub mod prompt_view;
pub mod prompts;
pub mod threads;
pub mod workflows;

pub use crate::error::{identifier, ApiError, Rest};
pub use body::JsonBody;
