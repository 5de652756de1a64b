//! Weft's built-in tools (files, memory, todo list, the web). Each declares its policy class and permission category; the
//! workspace tools enforce the policy's root themselves.

pub mod args;
pub mod client;
pub mod files;
pub mod knowledge;
pub mod mcp;
pub mod media;
pub mod memory;
pub mod todo;
pub mod web;
pub mod workspace;

use std::sync::Arc;

use weft_core::Tool;

/// Every built-in tool plus `run_subtask`, ready for `compose_toolbelt`.
pub fn builtin_tools() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(weft_core::RunSubtaskTool),
        Arc::new(files::ReadFile),
        Arc::new(files::WriteFile),
        Arc::new(memory::MemoryList),
        Arc::new(memory::MemoryRead),
        Arc::new(memory::MemoryWrite),
        Arc::new(todo::TodoWrite),
    ]
}
