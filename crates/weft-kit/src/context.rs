//! `ContextBudget`: a turn's context policy — the `budget_awareness` mode, the model's window
//! and a token counter — and how many tokens a prompt takes against it (`limit:<n>`).

use weft_protocol::{AgentConfig, BudgetAwareness};

use crate::message::ChatMessage;
use crate::provider::ToolSpec;
use crate::tokens::{bytes_bound, TokenCounter};

/// The turn's context policy: the mode, the executor's window and its token counter.
pub struct ContextBudget {
    pub mode: Option<BudgetAwareness>,
    pub window: u64,
    counter: TokenCounter,
}

impl ContextBudget {
    pub fn new(config: &AgentConfig, model: &str, window: u64) -> Self {
        let mode = config.budget_awareness();
        ContextBudget {
            mode,
            window: window.max(1),
            // Only the limit mode counts tokens; skip loading a tokenizer otherwise.
            counter: match mode {
                Some(BudgetAwareness::Limit(_)) => TokenCounter::for_model(model),
                _ => TokenCounter::Estimate,
            },
        }
    }

    pub fn per_message(&self) -> bool {
        self.mode == Some(BudgetAwareness::PerMessage)
    }

    /// The most tokens a prompt may take (`limit:<n>`), if limited.
    pub fn limit(&self) -> Option<u64> {
        match self.mode {
            Some(BudgetAwareness::Limit(percent)) => Some(self.window * u64::from(percent) / 100),
            _ => None,
        }
    }

    pub fn message_tokens(&self, message: &ChatMessage) -> u64 {
        self.counter.message(message)
    }

    /// Tokens of what a prompt carries besides its messages.
    pub fn fixed_tokens(&self, system: &str, specs: &[ToolSpec]) -> u64 {
        let tools: u64 = specs
            .iter()
            .map(|s| {
                self.counter.text(&s.name)
                    + self.counter.text(&s.description)
                    + self.counter.text(&s.parameters.to_string())
            })
            .sum();
        self.counter.text(system) + tools
    }

    /// The prompt's size in tokens, or `None` when a free upper bound already shows it
    /// fits under `limit`.
    pub fn prompt_tokens_over(
        &self,
        limit: u64,
        system: &str,
        specs: &[ToolSpec],
        history: &[ChatMessage],
    ) -> Option<u64> {
        let specs_bytes: usize = specs
            .iter()
            .map(|s| s.name.len() + s.description.len() + s.parameters.to_string().len())
            .sum();
        let bound =
            (system.len() + specs_bytes) as u64 + history.iter().map(bytes_bound).sum::<u64>();
        if bound <= limit {
            return None;
        }
        let tokens = self.fixed_tokens(system, specs)
            + history.iter().map(|m| self.message_tokens(m)).sum::<u64>();
        (tokens > limit).then_some(tokens)
    }
}
