//! Execution modes: a turn runs through a mode looked up by name. `classic` (the
//! unified tool-calling loop) is registered by default; others plug in without touching it.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;

use weft_protocol::{AgentConfig, PermissionMode};

use crate::classic::run_classic_turn;
use crate::prompts;
use crate::spec::{TurnOutcome, TurnSpec};
use crate::toolbelt::Toolbelt;

#[async_trait]
pub trait ExecutionMode: Send + Sync {
    /// The id clients name it by (`chat_message.data.mode`).
    fn name(&self) -> &str;
    /// How it reads in a mode picker.
    fn display_name(&self) -> &str;
    /// The most model rounds of a turn's top level; an agent's `max_steps` overrides it.
    fn max_rounds(&self, config: &AgentConfig) -> u32;
    /// The system prompt for a session with `tools`, before the agent's instructions.
    fn system_prompt(&self, tools: &Toolbelt, mode: PermissionMode, can_delegate: bool) -> String {
        prompts::root_system_prompt(&tools.names(), mode, can_delegate)
    }
    async fn run(&self, spec: TurnSpec) -> TurnOutcome;
}

/// The unified tool-calling loop.
pub struct ClassicMode;

pub const CLASSIC: &str = "classic";

#[async_trait]
impl ExecutionMode for ClassicMode {
    fn name(&self) -> &str {
        CLASSIC
    }

    fn display_name(&self) -> &str {
        "Classic (text + tools)"
    }

    /// Classic keeps DESIGN's per-level limit (`max_iterations_per_level`, default 20).
    fn max_rounds(&self, config: &AgentConfig) -> u32 {
        config.iterations_per_level()
    }

    /// The loop's future boxed as it is (an `async fn` here would box a future holding the
    /// spec beside the loop's own copy of it: ~500 bytes a running turn).
    fn run<'life0, 'async_trait>(
        &'life0 self,
        spec: TurnSpec,
    ) -> Pin<Box<dyn Future<Output = TurnOutcome> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(run_classic_turn(spec))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown execution mode `{name}`; registered modes: {}", available.join(", "))]
pub struct UnknownMode {
    pub name: String,
    pub available: Vec<String>,
}

#[derive(Clone)]
pub struct ModeRegistry {
    modes: BTreeMap<String, Arc<dyn ExecutionMode>>,
}

impl Default for ModeRegistry {
    fn default() -> Self {
        let mut registry = ModeRegistry {
            modes: BTreeMap::new(),
        };
        registry.register(Arc::new(ClassicMode));
        registry
    }
}

impl ModeRegistry {
    /// A registry holding `classic`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add (or replace) a mode under its own name.
    pub fn register(&mut self, mode: Arc<dyn ExecutionMode>) {
        self.modes.insert(mode.name().to_owned(), mode);
    }

    /// The mode called `name`; `None` means `classic`.
    pub fn get(&self, name: Option<&str>) -> Result<Arc<dyn ExecutionMode>, UnknownMode> {
        let name = name.unwrap_or(CLASSIC);
        self.modes.get(name).cloned().ok_or_else(|| UnknownMode {
            name: name.to_owned(),
            available: self.names(),
        })
    }

    pub fn names(&self) -> Vec<String> {
        self.modes.keys().cloned().collect()
    }

    /// Every registered mode, by name.
    pub fn list(&self) -> Vec<Arc<dyn ExecutionMode>> {
        self.modes.values().cloned().collect()
    }
}
