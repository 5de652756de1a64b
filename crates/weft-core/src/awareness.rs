//! Budget awareness (seed 004): what the model is told about its budget (`per-message`) and
//! how much context a level's prompt may take before it is compacted (`limit:<n>`).

use weft_protocol::{AgentConfig, BudgetAwareness};

use crate::message::ChatMessage;
use crate::prompts;
use crate::provider::{ToolSpec, Usage};
use crate::tokens::{bytes_bound, TokenCounter};
use crate::turn::Turn;

/// The turn's context policy: the mode, the executor's window and its token counter.
pub(crate) struct ContextBudget {
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

/// The per-message advisory, given what the level's last model call used.
pub(crate) fn advisory(turn: &Turn, last_call: Usage) -> String {
    let totals = turn.budget.totals();
    let config = &turn.config;
    prompts::budget_advisory(
        last_call.input_tokens + last_call.output_tokens,
        turn.context.window,
        config.max_total_llm_calls.saturating_sub(totals.llm_calls),
        config
            .max_total_tool_calls
            .saturating_sub(totals.tool_calls),
        totals.cost_usd,
    )
}
