//! What the model is told in the editor context: how to work on workflows there, and the
//! saved workflow the editor has open (its graph, when it is small enough to show).

use std::fmt::Write as _;

use crate::tools::SavedWorkflow;

/// The largest graph shown in the prompt, as JSON; a bigger one is named, for `get_workflow`.
pub const OPEN_GRAPH_MAX_BYTES: usize = 16 * 1024;

pub const EDITOR_GUIDANCE: &str = "You are working with the user in the workflow editor. A \
workflow is a graph of typed nodes joined by edges from an output port to an input port. To draft \
a graph for an objective, call build_workflow: it returns a validated graph that is neither saved \
nor shown yet. When the page offers ui_* tools, ui_paste_graph puts a graph on the user's screen, \
ui_add_node and ui_connect_nodes change the open graph a step at a time, and ui_get_graph reads \
what is on screen now, unsaved changes included. list_node_types describes the node types. Saving \
is the user's decision.";

/// The editor's guidance, then the open workflow (if any) as last saved.
pub fn editor_prompt(open: Option<&SavedWorkflow>) -> String {
    let mut prompt = String::from(EDITOR_GUIDANCE);
    let Some(workflow) = open else {
        prompt.push_str("\n\nNo saved workflow is open: the user is starting a new one.");
        return prompt;
    };
    let _ = write!(
        prompt,
        "\n\nThe workflow open in the editor is \"{}\" (workflow_id `{}`)",
        workflow.name, workflow.id
    );
    if !workflow.description.trim().is_empty() {
        let _ = write!(prompt, ": {}", workflow.description.trim());
    }
    let graph = serde_json::to_string(&workflow.graph).unwrap_or_default();
    if graph.len() <= OPEN_GRAPH_MAX_BYTES {
        let _ = write!(
            prompt,
            ". Its graph as last saved (the screen may hold unsaved changes):\n```json\n{graph}\n```"
        );
    } else {
        let _ = write!(
            prompt,
            ". Its graph ({} bytes) is too large to show here: get_workflow reads it.",
            graph.len()
        );
    }
    prompt
}
