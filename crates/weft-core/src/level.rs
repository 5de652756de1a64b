//! `Level`: one level of the recursion — its place in the tree, prompt, tools and model.

use std::sync::Arc;

use serde_json::Value;
use weft_protocol::AgentConfig;

use crate::llm::Llm;
use crate::prompts;
use crate::provider::ToolSpec;
use crate::record::Place;
use crate::spec::TurnSpec;
use crate::toolbelt::Toolbelt;

/// The JSON Schema a structured subtask must satisfy, compiled once.
pub(crate) struct OutputSchema {
    pub validator: jsonschema::Validator,
}

/// One level of the recursion: its place in the tree, prompt, tools and model.
pub(crate) struct Level {
    pub depth: u32,
    /// The `run_subtask` call this level runs under; `None` at the root.
    pub parent_id: Option<String>,
    /// Where its items go in the record when that is not under `parent_id`: a parallel
    /// job's own place under its call (see [`job_parent`]), so each job can be read back.
    pub record_parent: Option<String>,
    pub system: Arc<str>,
    pub toolbelt: Toolbelt,
    pub specs: Arc<[ToolSpec]>,
    pub output_schema: Option<OutputSchema>,
    pub llm: Llm,
    /// A level nobody sees (the planner, a summarizer): no events, nothing recorded, and
    /// tools that would need an approval are refused.
    pub quiet: bool,
    /// The JSON Schema answers must follow (structured output), if any.
    pub response_schema: Option<Arc<Value>>,
}

impl Level {
    /// The executor's level at depth 0; its system prompt carries the plan, if any.
    pub fn root(config: &AgentConfig, llm: &Llm, spec: &TurnSpec, plan: Option<&str>) -> Self {
        let toolbelt = if config.max_depth == 0 {
            spec.toolbelt
                .without(prompts::RUN_SUBTASK)
                .without(prompts::RUN_PARALLEL_SUBAGENTS)
        } else {
            spec.toolbelt.clone()
        };
        let specs = toolbelt.specs(&config.injected_tool_args);
        let system = match plan {
            Some(plan) => format!("{}{}", spec.system_prompt, prompts::plan_section(plan)).into(),
            None => spec.system_prompt.clone(),
        };
        Level {
            depth: 0,
            parent_id: None,
            record_parent: None,
            system,
            toolbelt,
            specs,
            output_schema: None,
            llm: llm.clone(),
            quiet: false,
            response_schema: None,
        }
    }

    /// The executor's top level (its failures end the turn).
    pub fn is_root(&self) -> bool {
        self.depth == 0 && !self.quiet
    }

    pub fn place(&self) -> Place<'_> {
        Place {
            parent_id: self.record_parent.as_deref().or(self.parent_id.as_deref()),
            depth: self.depth,
        }
    }
}
