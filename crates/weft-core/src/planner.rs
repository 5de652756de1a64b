//! The planner pre-pass: before the executor's first call, a quiet level with the
//! planning model and prompt, read tools only (through the gate, never asking), writes a
//! plan. Its messages and tool chatter stay here: the executor sees only the plan, in its
//! system prompt. It spends the turn's budget.

use std::sync::Arc;

use weft_protocol::{ServerEvent, ToolCategory};

use crate::level::Level;
use crate::llm::Llm;
use crate::message::{ChatMessage, Role};
use crate::prompts;
use crate::run_loop::{run_level, LevelEnd};
use crate::spec::PlannerSpec;
use crate::toolbelt::Toolbelt;
use crate::turn::Turn;

/// Longest piece of earlier conversation the planner is shown.
const EARLIER_MAX_BYTES: usize = 8_000;

/// Run the planner; the plan, or `None` when planning failed or the turn is stopping.
pub(crate) async fn plan(
    turn: &Arc<Turn>,
    spec: &PlannerSpec,
    history: &[ChatMessage],
    toolbelt: &Toolbelt,
) -> Option<String> {
    update(turn, "started", String::new());
    let tools = read_only(toolbelt);
    let specs = tools.specs(&Default::default());
    let system = if spec.instructions.trim().is_empty() {
        prompts::PLANNER_PROMPT.to_owned()
    } else {
        spec.instructions.trim().to_owned()
    };
    let level = Level {
        depth: 0,
        parent_id: None,
        record_parent: None,
        system: system.into(),
        toolbelt: tools,
        specs,
        output_schema: None,
        llm: Llm::new(spec.provider.clone(), &spec.model),
        quiet: true,
        response_schema: None,
    };
    let request = vec![ChatMessage::user(request(history))];
    let result = run_level(turn.clone(), level, request).await;
    match result.end {
        LevelEnd::Answer(plan) if !plan.trim().is_empty() => {
            let plan = plan.trim().to_owned();
            update(turn, "done", plan.clone());
            Some(plan)
        }
        LevelEnd::Answer(_) => {
            update(turn, "failed", "the planner returned no plan".into());
            None
        }
        LevelEnd::Failed(message) => {
            update(turn, "failed", message);
            None
        }
        LevelEnd::Structured(_) | LevelEnd::Stopped => {
            update(turn, "failed", prompts::STOPPED_RESULT.into());
            None
        }
    }
}

fn update(turn: &Turn, status: &str, content: String) {
    turn.events.emit(ServerEvent::PlanningUpdate {
        status: status.to_owned(),
        content,
        parent_id: None,
    });
}

/// The session's read tools, without delegation.
fn read_only(toolbelt: &Toolbelt) -> Toolbelt {
    let names: Vec<String> = toolbelt
        .names()
        .into_iter()
        .filter(|name| *name != prompts::RUN_SUBTASK && *name != prompts::RUN_PARALLEL_SUBAGENTS)
        .filter(|name| {
            toolbelt
                .get(name)
                .is_some_and(|t| t.category() == ToolCategory::Read)
        })
        .map(str::to_owned)
        .collect();
    toolbelt.narrow(&names).unwrap_or_default()
}

/// The planner's one user message: the newest request, with the text of what came before.
fn request(history: &[ChatMessage]) -> String {
    let newest = history.iter().rposition(|m| m.role == Role::User);
    let Some(newest) = newest else {
        return prompts::planner_request("", "");
    };
    let mut earlier = String::new();
    for message in &history[..newest] {
        let text = message.text();
        let who = match message.role {
            Role::User => "User",
            Role::Assistant if !text.is_empty() => "Assistant",
            _ => continue,
        };
        earlier.push_str(who);
        earlier.push_str(": ");
        earlier.push_str(&text);
        earlier.push('\n');
    }
    // The most recent part matters most.
    if earlier.len() > EARLIER_MAX_BYTES {
        let mut start = earlier.len() - EARLIER_MAX_BYTES;
        while !earlier.is_char_boundary(start) {
            start += 1;
        }
        earlier = format!("[…]{}", &earlier[start..]);
    }
    prompts::planner_request(&history[newest].text(), earlier.trim_end())
}
