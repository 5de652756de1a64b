//! Client-run `ui_*` tools (editor context): the manifest a connection advertises, a proxy
//! tool per entry that sends a `tool_call` frame after the gate and waits for the client's
//! `tool_result`, and the calls still waiting for their answer.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use weft_core::{Tool, ToolContext, ToolError};
use weft_protocol::{ClientTool, PolicyClass, ServerEvent, ToolCategory};

/// Most tools one manifest may advertise.
pub const MAX_CLIENT_TOOLS: usize = 64;
/// Longest tool name and description a manifest may carry.
const MAX_NAME_CHARS: usize = 64;
const MAX_DESCRIPTION_CHARS: usize = 4_096;

/// What the client answered: its result, or its error.
type Answer = Result<Value, String>;

/// One connection's client-run tools and whether it is still open.
#[derive(Default)]
pub struct ClientToolset {
    tools: Mutex<Arc<[ClientTool]>>,
    closed: CancellationToken,
}

impl ClientToolset {
    /// Replace the manifest (a later manifest wins), after checking every entry.
    pub fn set(&self, tools: Vec<ClientTool>) -> Result<(), String> {
        check_manifest(&tools)?;
        *self.tools.lock() = tools.into();
        Ok(())
    }

    pub fn current(&self) -> Arc<[ClientTool]> {
        self.tools.lock().clone()
    }

    /// The connection has gone: calls waiting on it fail.
    pub fn close(&self) {
        self.closed.cancel();
    }

    /// Proxies for this connection's tools, for one turn of `owner`.
    pub fn proxies(
        &self,
        owner: &str,
        pending: &Arc<PendingClientCalls>,
        timeout: Duration,
    ) -> Vec<Arc<dyn Tool>> {
        self.current()
            .iter()
            .map(|spec| {
                Arc::new(ClientToolProxy {
                    spec: spec.clone(),
                    owner: Arc::from(owner),
                    pending: pending.clone(),
                    closed: self.closed.clone(),
                    timeout,
                }) as Arc<dyn Tool>
            })
            .collect()
    }
}

/// A name a client may give its tool: `ui_` then lowercase letters, digits and `_`.
pub fn is_client_tool_name(name: &str) -> bool {
    name.starts_with("ui_")
        && name.len() > 3
        && name.len() <= MAX_NAME_CHARS
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Every entry is named `ui_…`, at most once, and has an object schema that compiles.
fn check_manifest(tools: &[ClientTool]) -> Result<(), String> {
    if tools.len() > MAX_CLIENT_TOOLS {
        return Err(format!(
            "a manifest may list at most {MAX_CLIENT_TOOLS} tools, not {}",
            tools.len()
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for tool in tools {
        let name = &tool.name;
        if !is_client_tool_name(name) {
            return Err(format!(
                "client tool `{}`: names are `ui_` then lowercase letters, digits and `_` (at most {MAX_NAME_CHARS})",
                weft_protocol::echo(name)
            ));
        }
        if !seen.insert(name.as_str()) {
            return Err(format!("client tool `{name}` is listed twice"));
        }
        if tool.description.chars().count() > MAX_DESCRIPTION_CHARS {
            return Err(format!(
                "client tool `{name}`: the description is over {MAX_DESCRIPTION_CHARS} characters"
            ));
        }
        let schema = schema_of(tool);
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(format!(
                "client tool `{name}`: `parameters` must be a JSON Schema of type object"
            ));
        }
        if let Err(e) = jsonschema::validator_for(&schema) {
            return Err(format!(
                "client tool `{name}`: `parameters` is not a valid JSON Schema: {e}"
            ));
        }
    }
    Ok(())
}

/// The tool's parameters; none given means no arguments.
fn schema_of(tool: &ClientTool) -> Value {
    if tool.parameters.is_null() {
        json!({"type": "object", "properties": {}})
    } else {
        tool.parameters.clone()
    }
}

/// Client-run calls waiting for their `tool_result`, by (server-unique) call id.
#[derive(Default)]
pub struct PendingClientCalls {
    calls: Mutex<HashMap<String, Waiting>>,
}

struct Waiting {
    owner: Arc<str>,
    answer: oneshot::Sender<Answer>,
}

impl PendingClientCalls {
    fn wait_for(&self, call_id: &str, owner: &Arc<str>) -> oneshot::Receiver<Answer> {
        let (answer, receiver) = oneshot::channel();
        self.calls.lock().insert(
            call_id.to_owned(),
            Waiting {
                owner: owner.clone(),
                answer,
            },
        );
        receiver
    }

    fn forget(&self, call_id: &str) {
        self.calls.lock().remove(call_id);
    }

    /// The client's answer to `call_id`; false when no call of `user`'s has that id.
    pub fn answer(&self, user: &str, call_id: &str, answer: Answer) -> bool {
        let waiting = {
            let mut calls = self.calls.lock();
            if calls.get(call_id).is_none_or(|w| &*w.owner != user) {
                return false;
            }
            match calls.remove(call_id) {
                Some(waiting) => waiting,
                None => return false,
            }
        };
        // The call may have given up a moment ago; the answer then has nowhere to go.
        let _ = waiting.answer.send(answer);
        true
    }

    pub fn len(&self) -> usize {
        self.calls.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One client tool as the model sees it.
struct ClientToolProxy {
    spec: ClientTool,
    owner: Arc<str>,
    pending: Arc<PendingClientCalls>,
    closed: CancellationToken,
    timeout: Duration,
}

/// Removes a call from the waiting list however the wait ends.
struct Forget<'a>(&'a PendingClientCalls, &'a str);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.0.forget(self.1);
    }
}

#[async_trait]
impl Tool for ClientToolProxy {
    fn name(&self) -> &str {
        &self.spec.name
    }

    fn description(&self) -> &str {
        &self.spec.description
    }

    fn parameters(&self) -> Value {
        schema_of(&self.spec)
    }

    fn policy_class(&self) -> PolicyClass {
        PolicyClass::EditorMutate
    }

    fn category(&self) -> ToolCategory {
        self.spec.category
    }

    /// The page applies changes in the order they are asked for.
    fn parallel_safe(&self) -> bool {
        false
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let call_id = ctx.tool_call_id.as_str();
        let answer = self.pending.wait_for(call_id, &self.owner);
        let _forget = Forget(&self.pending, call_id);
        if self.closed.is_cancelled() {
            return Err(ToolError::model(gone(&self.spec.name)));
        }
        ctx.events.emit(ServerEvent::ToolCall {
            tool_call_id: call_id.to_owned(),
            name: self.spec.name.clone(),
            args,
            parent_id: ctx.parent_id.clone(),
            depth: ctx.depth,
        });
        tokio::select! {
            answer = answer => match answer {
                Ok(Ok(result)) => Ok(match result {
                    Value::String(text) => text,
                    other => other.to_string(),
                }),
                Ok(Err(error)) => Err(ToolError::model(format!(
                    "the client could not run `{}`: {error}",
                    self.spec.name
                ))),
                Err(_) => Err(ToolError::model(gone(&self.spec.name))),
            },
            () = self.closed.cancelled() => Err(ToolError::model(gone(&self.spec.name))),
            () = tokio::time::sleep(self.timeout) => Err(ToolError::model(format!(
                "the client did not answer `{}` within {} ms",
                self.spec.name,
                self.timeout.as_millis()
            ))),
        }
    }
}

fn gone(name: &str) -> String {
    format!("the client disconnected before answering `{name}`")
}
