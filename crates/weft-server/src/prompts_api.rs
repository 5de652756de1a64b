//! The prompt API (seed 003) for callers without a socket: `POST /prompt` runs a turn and
//! answers when it is done or waits on an approval; `GET /prompts/{id}` reads it back;
//! `GET /prompts/{id}/events` streams the socket's frames as Server-Sent Events;
//! `POST /prompts/{id}/approve|reject` answer its pending approval and wait again. A prompt
//! is a turn of a thread like any other (its id is the assistant message's).

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::Stream;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::mpsc;
use weft_protocol::{
    ApprovalDecision, ChatMessageData, ErrorCode, MessageContent, PermissionMode, ServerEvent,
    ServerFrame,
};
use weft_store::MessageRow;

use crate::auth::User;
use crate::commands::{Connection, Refusal};
use crate::outbox::{Outbound, Outbox};
use crate::persist::to_wire;
use crate::prompt_view::prompt_json;
use crate::rest::{internal, problem, user, KeyQuery, Rest};
use crate::runner;
use crate::state::AppState;

#[derive(Debug, Deserialize)]
pub struct PromptRequest {
    pub input: String,
    pub mode: Option<String>,
    pub agent: Option<String>,
    pub conversation_id: Option<String>,
    pub permission_mode: Option<PermissionMode>,
    /// `model`, or `provider:model`.
    pub model: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct DecisionRequest {
    pub tool_call_id: String,
    /// Accepted for the record of the caller; the model is told the call was denied.
    #[serde(default)]
    pub reason: Option<String>,
}

/// A socket-less connection: the caller's frames arrive on `frames`.
struct Listener {
    conn: Connection,
    frames: mpsc::UnboundedReceiver<Outbound>,
}

impl Listener {
    fn new(state: &Arc<AppState>, user: User) -> Listener {
        let (outbox, frames) = Outbox::new(state.config.server.max_outbound_bytes);
        Listener {
            conn: Connection {
                state: state.clone(),
                user,
                id: state.next_conn_id(),
                outbox,
                client_tools: Default::default(),
            },
            frames,
        }
    }

    /// Frames until the turn's end or an approval request other than `answered`; the thread
    /// and assistant message ids when `turn_started` was among them.
    async fn wait(&mut self, answered: Option<&str>) -> (Option<String>, Option<String>) {
        let (mut thread, mut message) = (None, None);
        while let Some(Outbound::Frame(frame)) = self.frames.recv().await {
            let Ok(frame) = serde_json::from_str::<ServerFrame>(frame.json()) else {
                continue;
            };
            match frame.event {
                ServerEvent::TurnStarted { message_id, .. } => {
                    thread = frame.thread_id.map(|t| t.to_string());
                    message = Some(message_id);
                }
                ServerEvent::ToolApprovalRequest { tool_call_id, .. }
                    if Some(tool_call_id.as_str()) != answered =>
                {
                    break
                }
                ServerEvent::Chunk { done: true, .. } => break,
                _ => {}
            }
        }
        (thread, message)
    }
}

impl Drop for Listener {
    /// Leave without stopping anything: the turn goes on (and may be resumed).
    fn drop(&mut self) {
        self.conn.state.hub.detach(self.conn.id);
    }
}

/// A refusal as an HTTP answer.
fn refused((code, message): Refusal) -> Response {
    let status = match code {
        ErrorCode::Forbidden => StatusCode::FORBIDDEN,
        ErrorCode::ThreadNotFound | ErrorCode::AgentNotFound => StatusCode::NOT_FOUND,
        ErrorCode::TurnInProgress => StatusCode::CONFLICT,
        ErrorCode::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::UNPROCESSABLE_ENTITY,
    };
    let code = serde_json::to_value(code)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "internal".to_owned());
    problem(status, &code, &message)
}

fn no_prompt() -> Response {
    problem(StatusCode::NOT_FOUND, "thread_not_found", "no such prompt")
}

/// `POST /prompt`.
pub async fn create(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
    Json(body): Json<PromptRequest>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    let (provider, model) = match body.model.as_deref() {
        Some(spec) => match weft_protocol::parse_model(spec) {
            Some((provider, model)) => (Some(provider.to_owned()), Some(model.to_owned())),
            None => (None, Some(spec.to_owned())),
        },
        None => (None, None),
    };
    let data = ChatMessageData {
        thread_id: body.conversation_id,
        role: "user".to_owned(),
        content: MessageContent::Text(body.input),
        provider,
        model,
        permission_mode: body.permission_mode,
        mode: body.mode,
        agent: body.agent,
        ..ChatMessageData::default()
    };
    weft_protocol::check_identifiers_of(&data)
        .map_err(|message| refused((ErrorCode::InvalidField, message)))?;
    let mut listener = Listener::new(&state, user);
    runner::start_turn(&listener.conn, data)
        .await
        .map_err(refused)?;
    let (thread, message) = listener.wait(None).await;
    let (Some(thread), Some(message)) = (thread, message) else {
        return Err(internal("the turn ended before it started"));
    };
    drop(listener);
    answer(&state, &thread, &message).await
}

/// `GET /prompts/{id}`.
pub async fn get(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    let message = owned_prompt(&state, &user, &id).await?;
    answer(&state, &message.thread_id, &message.id).await
}

/// `POST /prompts/{id}/approve`.
pub async fn approve(
    state: State<Arc<AppState>>,
    id: Path<String>,
    headers: HeaderMap,
    q: Query<KeyQuery>,
    body: Json<DecisionRequest>,
) -> Rest<Response> {
    decide(state, id, headers, q, body, ApprovalDecision::Allow).await
}

/// `POST /prompts/{id}/reject`.
pub async fn reject(
    state: State<Arc<AppState>>,
    id: Path<String>,
    headers: HeaderMap,
    q: Query<KeyQuery>,
    body: Json<DecisionRequest>,
) -> Rest<Response> {
    decide(state, id, headers, q, body, ApprovalDecision::Deny).await
}

async fn decide(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
    Json(body): Json<DecisionRequest>,
    decision: ApprovalDecision,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    let message = owned_prompt(&state, &user, &id).await?;
    if let Some(reason) = body.reason.as_deref() {
        tracing::info!(prompt = %id, reason = %weft_protocol::clip(reason, 200), "approval rejected");
    }
    let mut listener = Listener::new(&state, user);
    let runtime = listener
        .conn
        .owned_runtime(&message.thread_id)
        .await
        .map_err(refused)?;
    if runtime.active_message().as_deref() != Some(id.as_str()) {
        return Err(refused((
            ErrorCode::InvalidField,
            "this prompt is not waiting for an approval".to_owned(),
        )));
    }
    // Listen before answering, so nothing that follows is missed.
    runtime.subscribe(listener.conn.id, listener.conn.outbox.clone());
    listener
        .conn
        .answer_approval(&body.tool_call_id, decision)
        .map_err(refused)?;
    listener.wait(Some(&body.tool_call_id)).await;
    drop(listener);
    answer(&state, &message.thread_id, &message.id).await
}

/// `GET /prompts/{id}/events`: the turn's frames so far, then live, until it ends (a
/// finished prompt: its stored message and the final chunk).
pub async fn events(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    let message = owned_prompt(&state, &user, &id).await?;
    let listener = Listener::new(&state, user);
    let live = state
        .hub
        .get(&message.thread_id)
        .is_some_and(|r| r.active_message().as_deref() == Some(id.as_str()));
    if live {
        listener
            .conn
            .resume(&message.thread_id, 0)
            .await
            .map_err(refused)?;
    } else {
        let runtime = listener
            .conn
            .owned_runtime(&message.thread_id)
            .await
            .map_err(refused)?;
        let done = ServerEvent::Chunk {
            content: String::new(),
            done: true,
            parent_id: None,
            depth: 0,
        };
        let stored = ServerEvent::Message {
            message: to_wire(&message),
        };
        runtime.send_to(&listener.conn.outbox, 0, vec![stored, done]);
    }
    Ok(Sse::new(sse(listener))
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// The listener's frames as SSE events, ending after the turn's final chunk.
fn sse(listener: Listener) -> impl Stream<Item = Result<Event, Infallible>> {
    futures::stream::unfold(Some(listener), |listener| async move {
        let mut listener = listener?;
        let Some(Outbound::Frame(frame)) = listener.frames.recv().await else {
            return None;
        };
        let json = frame.json().to_owned();
        let last = serde_json::from_str::<Value>(&json)
            .is_ok_and(|v| v["type"] == "chunk" && v["done"] == true);
        let event = Event::default().data(json);
        Some((Ok(event), (!last).then_some(listener)))
    })
}

/// The caller's prompt `id` (another user's reads as missing).
async fn owned_prompt(state: &AppState, user: &User, id: &str) -> Rest<MessageRow> {
    if !weft_protocol::is_identifier(id) {
        return Err(no_prompt());
    }
    let message = state
        .store
        .message_by_id(id)
        .await
        .map_err(internal)?
        .filter(|m| m.role == "assistant")
        .ok_or_else(no_prompt)?;
    let owner = match state.hub.get(&message.thread_id) {
        Some(runtime) => Some(runtime.owner.clone()),
        None => state
            .store
            .thread(&message.thread_id)
            .await
            .map_err(internal)?
            .map(|t| t.owner),
    };
    if owner.as_deref() != Some(user.id.as_str()) {
        return Err(no_prompt());
    }
    Ok(message)
}

/// The prompt as stored once everything shown so far is committed.
async fn answer(state: &AppState, thread_id: &str, message_id: &str) -> Rest<Response> {
    let runtime = state.hub.get(thread_id);
    let live = runtime
        .as_ref()
        .filter(|r| r.active_message().as_deref() == Some(message_id));
    if let Some(log) = live.and_then(|r| r.active_log()) {
        log.settled().await;
    }
    let waiting = live.is_some_and(|r| !r.gate.pending().is_empty());
    let store = &state.store;
    let message = store
        .message(thread_id, message_id)
        .await
        .map_err(internal)?
        .ok_or_else(no_prompt)?;
    let messages = store.messages(thread_id).await.map_err(internal)?;
    let input = messages
        .iter()
        .filter(|m| m.role == "user" && m.position < message.position)
        .max_by_key(|m| m.position);
    let items = store
        .turn_items(thread_id, message_id)
        .await
        .map_err(internal)?;
    Ok(Json(prompt_json(&message, input, &items, waiting)).into_response())
}
