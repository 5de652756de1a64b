//! The model catalogue beside the rate card: each model's context window, in tokens.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The window assumed for a model the catalogue does not know.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;

/// Model name → context window. A lookup takes the exact name, else the longest known
/// prefix (as the rate card does), else [`DEFAULT_CONTEXT_WINDOW`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ContextWindows {
    windows: BTreeMap<String, u64>,
}

impl ContextWindows {
    /// Published windows of widely used models.
    pub fn with_common_models() -> Self {
        let mut windows = ContextWindows::default();
        for (model, tokens) in [
            ("gpt-4o", 128_000),
            ("gpt-4o-mini", 128_000),
            ("gpt-4.1", 1_047_576),
            ("gpt-4.1-mini", 1_047_576),
            ("gpt-4.1-nano", 1_047_576),
            ("gpt-5", 400_000),
            ("o3", 200_000),
            ("o3-mini", 200_000),
            ("o4-mini", 200_000),
            ("claude-opus-4", 200_000),
            ("claude-sonnet-4", 200_000),
            ("claude-3-7-sonnet", 200_000),
            ("claude-3-5-sonnet", 200_000),
            ("claude-3-5-haiku", 200_000),
            ("claude-haiku-4", 200_000),
        ] {
            windows.set(model, tokens);
        }
        windows
    }

    pub fn set(&mut self, model: impl Into<String>, tokens: u64) {
        self.windows.insert(model.into(), tokens);
    }

    /// Overlay `other`'s entries on this catalogue.
    pub fn merge(&mut self, other: &ContextWindows) {
        for (model, tokens) in &other.windows {
            self.windows.insert(model.clone(), *tokens);
        }
    }

    pub fn window(&self, model: &str) -> u64 {
        if let Some(tokens) = self.windows.get(model) {
            return *tokens;
        }
        self.windows
            .iter()
            .filter(|(name, _)| model.starts_with(name.as_str()))
            .max_by_key(|(name, _)| name.len())
            .map_or(DEFAULT_CONTEXT_WINDOW, |(_, tokens)| *tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_then_longest_prefix_then_default() {
        let mut windows = ContextWindows::with_common_models();
        windows.set("scripted", 2_000);
        assert_eq!(windows.window("scripted"), 2_000);
        assert_eq!(windows.window("gpt-4.1-mini-2025-04-14"), 1_047_576);
        assert_eq!(windows.window("claude-sonnet-4-0"), 200_000);
        assert_eq!(windows.window("llama-3"), DEFAULT_CONTEXT_WINDOW);
    }
}
