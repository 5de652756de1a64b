//! `Llm`: a model to sample from — its provider, its name, and what it can do.

use std::sync::Arc;

use crate::provider::{Capabilities, Provider};

/// A model to sample from: its provider, its name and what it can do.
#[derive(Clone)]
pub struct Llm {
    pub provider: Arc<dyn Provider>,
    pub model: Arc<str>,
    pub capabilities: Capabilities,
}

impl Llm {
    pub fn new(provider: Arc<dyn Provider>, model: &str) -> Self {
        Llm {
            capabilities: provider.capabilities(model),
            model: model.into(),
            provider,
        }
    }
}
