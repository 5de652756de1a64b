//! `RunHost`: what a run needs from the turn it belongs to — tool calls through the gate,
//! model calls on the turn's budget, frames to the user, stopping. A turn's [`CallSite`] is
//! the host, so nodes are gated, budgeted and recorded exactly as tool calls.

use async_trait::async_trait;
use serde_json::Value;
use weft_core::{CallSite, ChatMessage, ModelError};
use weft_protocol::ServerEvent;

#[async_trait]
pub trait RunHost: Send + Sync {
    /// A tool call (through the gate); `Err` carries the error result.
    async fn call_tool(&self, name: &str, args: Value) -> Result<String, String>;
    /// One model call: `system` and one user message.
    async fn complete(&self, system: &str, prompt: &str) -> Result<String, String>;
    fn emit(&self, event: ServerEvent);
    fn is_stopped(&self) -> bool;
    /// Resolves when the run must stop.
    async fn stopped(&self);
    /// The call the run's frames nest under (`run_workflow`), if any.
    fn parent_id(&self) -> Option<String> {
        None
    }
    fn depth(&self) -> u32 {
        0
    }
}

#[async_trait]
impl RunHost for CallSite {
    async fn call_tool(&self, name: &str, args: Value) -> Result<String, String> {
        let outcome = CallSite::call_tool(self, name, args.to_string()).await;
        if outcome.is_error {
            Err(outcome.content)
        } else {
            Ok(outcome.content)
        }
    }

    async fn complete(&self, system: &str, prompt: &str) -> Result<String, String> {
        CallSite::complete(self, system, vec![ChatMessage::user(prompt)])
            .await
            .map_err(|e| match e {
                ModelError::Stopped => "stopped".to_owned(),
                ModelError::Provider(message) => message,
            })
    }

    fn emit(&self, event: ServerEvent) {
        self.events().emit(event);
    }

    fn is_stopped(&self) -> bool {
        CallSite::is_stopped(self)
    }

    async fn stopped(&self) {
        CallSite::stopped(self).await
    }

    fn parent_id(&self) -> Option<String> {
        CallSite::parent_id(self).map(str::to_owned)
    }

    fn depth(&self) -> u32 {
        CallSite::depth(self)
    }
}
