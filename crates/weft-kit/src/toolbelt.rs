//! `ToolPolicy` and the `Toolbelt`: registered ∩ allowed by policy ∩ unlocked by context.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};
use weft_protocol::{ChatContext, InjectedArgs, PolicyClass, ToolCategory};

use crate::prompts;
use crate::provider::ToolSpec;
use crate::tool::{Tool, ToolContext, ToolError};

/// Which tool classes a session may use, and the boundaries they enforce.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolPolicy {
    pub classes: HashSet<PolicyClass>,
    pub workspace_root: Option<PathBuf>,
}

impl ToolPolicy {
    /// Seed 000's defaults: everything but `secrets`; `editor_mutate` only in the editor.
    pub fn for_context(context: &ChatContext, workspace_root: Option<PathBuf>) -> Self {
        let mut classes: HashSet<PolicyClass> = [
            PolicyClass::Safe,
            PolicyClass::Knowledge,
            PolicyClass::Subagent,
            PolicyClass::Network,
            PolicyClass::WorkspaceWrite,
        ]
        .into_iter()
        .collect();
        if matches!(context, ChatContext::Editor { .. }) {
            classes.insert(PolicyClass::EditorMutate);
        }
        ToolPolicy {
            classes,
            workspace_root,
        }
    }

    pub fn allows(&self, class: PolicyClass) -> bool {
        self.classes.contains(&class)
    }
}

/// The tools of one session (or one subtask), with compiled argument validators.
#[derive(Clone, Default)]
pub struct Toolbelt {
    entries: Arc<Vec<Arc<ToolEntry>>>,
    by_name: Arc<HashMap<String, usize>>,
    /// Specs without injected args, built once.
    specs: Arc<[ToolSpec]>,
}

pub struct ToolEntry {
    pub tool: Arc<dyn Tool>,
    pub schema: Value,
    /// `None` when the tool's schema does not compile; such a tool accepts any object.
    pub validator: Option<jsonschema::Validator>,
}

/// Compose a session's toolbelt: registered tools the policy allows and the context unlocks.
pub fn compose_toolbelt(
    registered: &[Arc<dyn Tool>],
    policy: &ToolPolicy,
    context: &ChatContext,
) -> Toolbelt {
    let in_editor = matches!(context, ChatContext::Editor { .. });
    Toolbelt::new(
        registered
            .iter()
            .filter(|t| policy.allows(t.policy_class()))
            .filter(|t| t.policy_class() != PolicyClass::EditorMutate || in_editor)
            .cloned()
            .collect(),
    )
}

impl Toolbelt {
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Self {
        let entries: Vec<Arc<ToolEntry>> = tools
            .into_iter()
            .map(|tool| {
                let schema = tool.parameters();
                let validator = match jsonschema::validator_for(&schema) {
                    Ok(v) => Some(v),
                    Err(e) => {
                        tracing::warn!(tool = tool.name(), error = %e, "tool schema does not compile");
                        None
                    }
                };
                Arc::new(ToolEntry { tool, schema, validator })
            })
            .collect();
        Self::from_entries(entries)
    }

    fn from_entries(entries: Vec<Arc<ToolEntry>>) -> Self {
        let by_name = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.tool.name().to_owned(), i))
            .collect();
        let specs = entries
            .iter()
            .map(|e| spec_of(e, &InjectedArgs::new()))
            .collect();
        Toolbelt {
            entries: Arc::new(entries),
            by_name: Arc::new(by_name),
            specs,
        }
    }

    pub fn entry(&self, name: &str) -> Option<&Arc<ToolEntry>> {
        self.by_name.get(name).map(|&i| &self.entries[i])
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.entry(name).map(|e| e.tool.clone())
    }

    pub fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    pub fn names(&self) -> Vec<&str> {
        self.entries.iter().map(|e| e.tool.name()).collect()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A toolbelt with only `names`, which must all be in this one: a child can only narrow.
    pub fn narrow(&self, names: &[String]) -> Result<Toolbelt, Vec<String>> {
        let missing: Vec<String> = names
            .iter()
            .filter(|n| !self.contains(n))
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Err(missing);
        }
        let keep: HashSet<&str> = names.iter().map(String::as_str).collect();
        Ok(Self::from_entries(
            self.entries
                .iter()
                .filter(|e| keep.contains(e.tool.name()))
                .cloned()
                .collect(),
        ))
    }

    /// The same toolbelt with `tool` added (replacing one of the same name).
    pub fn with(&self, tool: Arc<dyn Tool>) -> Toolbelt {
        self.merged(&Toolbelt::new(vec![tool]))
    }

    /// This toolbelt's tools, then all of `other`'s (replacing any of the same name); no
    /// schema is compiled again.
    pub fn merged(&self, other: &Toolbelt) -> Toolbelt {
        self.merged_keeping(other, |_| true)
    }

    fn merged_keeping(&self, other: &Toolbelt, keep: impl Fn(&str) -> bool) -> Toolbelt {
        if other.is_empty() && self.entries.iter().all(|e| keep(e.tool.name())) {
            return self.clone();
        }
        let mut entries: Vec<Arc<ToolEntry>> = self
            .entries
            .iter()
            .filter(|e| keep(e.tool.name()) && !other.contains(e.tool.name()))
            .cloned()
            .collect();
        entries.extend(other.entries.iter().cloned());
        Self::from_entries(entries)
    }

    /// This toolbelt's tools whose names do not start with `prefix`, then all of `other`'s
    /// (replacing any of the same name); no schema is compiled again.
    pub fn replacing_prefix(&self, prefix: &str, other: &Toolbelt) -> Toolbelt {
        self.merged_keeping(other, |name| !name.starts_with(prefix))
    }

    /// The same toolbelt without one tool (e.g. `run_subtask` at the depth limit).
    pub fn without(&self, name: &str) -> Toolbelt {
        if !self.contains(name) {
            return self.clone();
        }
        Self::from_entries(
            self.entries
                .iter()
                .filter(|e| e.tool.name() != name)
                .cloned()
                .collect(),
        )
    }

    /// Tool specs for the model, each schema extended with the schema-only injected args.
    pub fn specs(&self, injected: &InjectedArgs) -> Arc<[ToolSpec]> {
        if injected.is_empty() {
            return self.specs.clone();
        }
        self.entries.iter().map(|e| spec_of(e, injected)).collect()
    }
}

fn spec_of(entry: &ToolEntry, injected: &InjectedArgs) -> ToolSpec {
    ToolSpec {
        name: entry.tool.name().to_owned(),
        description: entry.tool.description().to_owned(),
        parameters: with_injected_args(&entry.schema, injected),
    }
}

/// A deep copy of `schema` with every injected arg added as an optional string property.
fn with_injected_args(schema: &Value, injected: &InjectedArgs) -> Value {
    let mut schema = schema.clone();
    if injected.is_empty() {
        return schema;
    }
    if let Some(obj) = schema.as_object_mut() {
        let props = obj.entry("properties").or_insert_with(|| json!({}));
        if let Some(props) = props.as_object_mut() {
            for (key, description) in injected {
                props
                    .entry(key.clone())
                    .or_insert_with(|| json!({"type": "string", "description": description}));
            }
        }
    }
    schema
}

/// `run_subtask`: only a schema; the loop intercepts its calls (it needs the runner's state).
pub struct RunSubtaskTool;

#[async_trait]
impl Tool for RunSubtaskTool {
    fn name(&self) -> &str {
        prompts::RUN_SUBTASK
    }

    fn description(&self) -> &str {
        prompts::RUN_SUBTASK_DESCRIPTION
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "title": {"type": "string", "description": "Short label for the subtask card."},
                "instructions": {"type": "string", "description": "What the subtask should accomplish; it sees nothing else."},
                "tools": {"type": "array", "items": {"type": "string"}, "description": "Optional subset of your tools to give the subtask."},
                "output_schema": {"type": "object", "description": "Optional JSON Schema the result must satisfy (the subtask ends via finish_subtask)."}
            },
            "required": ["title", "instructions"]
        })
    }

    fn policy_class(&self) -> PolicyClass {
        PolicyClass::Subagent
    }

    fn category(&self) -> ToolCategory {
        ToolCategory::Read
    }

    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        Err(ToolError::Fatal(
            "run_subtask must be intercepted by the agent loop".into(),
        ))
    }
}

/// `run_parallel_subagents` (only for agents that allow it): only a schema; the loop
/// intercepts its calls.
pub struct RunParallelSubagentsTool;

#[async_trait]
impl Tool for RunParallelSubagentsTool {
    fn name(&self) -> &str {
        prompts::RUN_PARALLEL_SUBAGENTS
    }

    fn description(&self) -> &str {
        prompts::RUN_PARALLEL_SUBAGENTS_DESCRIPTION
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "jobs": {
                    "type": "array",
                    "description": "The jobs, run concurrently; each sub-agent sees only its own job.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "task": {"type": "string", "description": "What this sub-agent must do."},
                            "additional_context": {"type": "string", "description": "Facts the sub-agent needs."},
                            "tool_names": {"type": "array", "items": {"type": "string"}, "description": "Optional subset of your tools for this job."},
                            "output_schema": {"type": "object", "description": "Optional JSON Schema the job's output must satisfy."},
                            "system_prompt": {"type": "string", "description": "Optional framing for this sub-agent."}
                        },
                        "required": ["task"]
                    }
                }
            },
            "required": ["jobs"]
        })
    }

    fn policy_class(&self) -> PolicyClass {
        PolicyClass::Subagent
    }

    fn category(&self) -> ToolCategory {
        ToolCategory::Read
    }

    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        Err(ToolError::Fatal(
            "run_parallel_subagents must be intercepted by the agent loop".into(),
        ))
    }
}
