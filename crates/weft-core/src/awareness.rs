//! Budget awareness: what the model is told about its budget after each message
//! (`per-message`). How much context a prompt may take is the `context` module's.

use crate::prompts;
use crate::provider::Usage;
use crate::turn::Turn;

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
