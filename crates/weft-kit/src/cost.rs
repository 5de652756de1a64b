//! Per-model rate card: price per million input and output tokens.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::provider::Usage;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ModelRate {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
}

/// Model name → rate. A lookup takes the exact name, else the longest known prefix
/// (so `gpt-4o-mini-2024-07-18` is priced as `gpt-4o-mini`); unknown models cost 0.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RateCard {
    rates: BTreeMap<String, ModelRate>,
}

impl RateCard {
    pub fn new() -> Self {
        Self::default()
    }

    /// List prices (USD per million tokens) of widely used models.
    pub fn with_common_models() -> Self {
        let mut card = RateCard::new();
        for (model, input, output) in [
            ("gpt-4o", 2.50, 10.00),
            ("gpt-4o-mini", 0.15, 0.60),
            ("gpt-4.1", 2.00, 8.00),
            ("gpt-4.1-mini", 0.40, 1.60),
            ("gpt-4.1-nano", 0.10, 0.40),
            ("o3", 2.00, 8.00),
            ("o3-mini", 1.10, 4.40),
            ("o4-mini", 1.10, 4.40),
            ("claude-opus-4", 15.00, 75.00),
            ("claude-sonnet-4", 3.00, 15.00),
            ("claude-3-7-sonnet", 3.00, 15.00),
            ("claude-3-5-sonnet", 3.00, 15.00),
            ("claude-3-5-haiku", 0.80, 4.00),
            ("claude-haiku-4", 1.00, 5.00),
        ] {
            card.set(
                model,
                ModelRate {
                    input_per_mtok: input,
                    output_per_mtok: output,
                },
            );
        }
        card
    }

    pub fn set(&mut self, model: impl Into<String>, rate: ModelRate) {
        self.rates.insert(model.into(), rate);
    }

    /// Overlay `other`'s entries on this card.
    pub fn merge(&mut self, other: &RateCard) {
        for (model, rate) in &other.rates {
            self.rates.insert(model.clone(), *rate);
        }
    }

    pub fn rate(&self, model: &str) -> Option<ModelRate> {
        if let Some(rate) = self.rates.get(model) {
            return Some(*rate);
        }
        self.rates
            .iter()
            .filter(|(name, _)| model.starts_with(name.as_str()))
            .max_by_key(|(name, _)| name.len())
            .map(|(_, rate)| *rate)
    }

    pub fn cost(&self, model: &str, usage: Usage) -> f64 {
        self.rate(model).map_or(0.0, |r| {
            (usage.input_tokens as f64 * r.input_per_mtok
                + usage.output_tokens as f64 * r.output_per_mtok)
                / 1_000_000.0
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_wins() {
        let card = RateCard::with_common_models();
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 0,
        };
        assert_eq!(card.cost("gpt-4o-mini-2024-07-18", usage), 0.15);
        assert_eq!(card.cost("gpt-4o-2024-08-06", usage), 2.50);
        assert_eq!(card.cost("unknown-model", usage), 0.0);
    }
}
