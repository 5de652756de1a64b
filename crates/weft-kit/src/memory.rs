//! `AgentMemory`: a key/value scratchpad shared by every depth of one turn.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

#[derive(Debug, Clone, Default)]
pub struct AgentMemory {
    entries: Arc<Mutex<BTreeMap<String, String>>>,
}

impl AgentMemory {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn set(&self, key: impl Into<String>, value: impl Into<String>) {
        self.entries.lock().insert(key.into(), value.into());
    }

    pub fn get(&self, key: &str) -> Option<String> {
        self.entries.lock().get(key).cloned()
    }

    pub fn keys(&self) -> Vec<String> {
        self.entries.lock().keys().cloned().collect()
    }
}
