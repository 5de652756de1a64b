//! The built-in node types.

pub mod control;
pub mod extract;
pub mod io;
pub mod llm;
pub mod map;
pub mod template;

use std::sync::Arc;

use crate::node::NodeType;

pub fn builtins() -> Vec<Arc<dyn NodeType>> {
    vec![
        Arc::new(io::Input::text()),
        Arc::new(io::Input::number()),
        Arc::new(io::Input::json()),
        Arc::new(io::Output),
        Arc::new(template::Template),
        Arc::new(llm::Prompt),
        Arc::new(extract::JsonExtract),
        Arc::new(control::If),
        Arc::new(map::ListMap),
    ]
}
