//! A workflow graph (a wire type: `weft_protocol::graph`), as the executor and validation use it.

pub use weft_protocol::graph::{Edge, Graph, Node};
