//! The prompt API for callers without a socket: `POST /prompt` runs a turn and answers when
//! it is done or waits on an approval; `GET /prompts/{id}` reads it back;
//! `GET /prompts/{id}/events` streams its frames as Server-Sent Events; `POST
//! /prompts/{id}/approve|reject` answer its pending approval and wait again. A prompt is a
//! turn of a thread like any other (its id is the assistant message's); its frames come over
//! a channel, typed. Through another replica than the one running it, a prompt reads from the
//! store, its events follow the turn where it runs, and an answer is sent there.

use super::JsonBody;
use std::convert::Infallible;
use std::sync::Arc;

use aide::transform::TransformOperation;
use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::Stream;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use weft_frames::frame::{ChannelFrames, Delivered, SubscriberId};
use weft_protocol::{ApprovalDecision, ErrorCode, MessageContent, PermissionMode, ServerEvent};
use weft_record::views::stored_message;
use weft_runtime::{ChannelSink, FrameSink, Outgoing, Route, Runtime, SharedFrame, TurnRequest};
use weft_store::MessageRow;

use super::openapi::add_response;
use super::paths::IdPath;
use super::{ApiError, Rest};
use crate::auth::AuthUser;
use crate::state::ServerState;
use weft_record::prompt_view::{prompt_json, Prompt};

/// A prompt to run: a turn of a new thread, or of `conversation_id`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct PromptRequest {
    /// The user's message.
    pub input: String,
    /// The execution mode (`GET /modes`).
    pub mode: Option<String>,
    /// A stored agent's name.
    #[schemars(pattern(weft_protocol::IDENTIFIER_PATTERN))]
    pub agent: Option<String>,
    /// A thread of yours to continue (a new one is made under an id not yet used).
    #[schemars(pattern(weft_protocol::IDENTIFIER_PATTERN))]
    pub conversation_id: Option<String>,
    pub permission_mode: Option<PermissionMode>,
    /// `model`, or `provider:model`.
    #[schemars(length(min = 1, max = 256))]
    pub model: Option<String>,
}

/// The call to answer.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct DecisionRequest {
    pub tool_call_id: String,
    /// Why: with a rejection, the model reads it in the call's result.
    #[serde(default)]
    pub reason: Option<String>,
}

impl PromptRequest {
    fn into_turn(self) -> Rest<TurnRequest> {
        let (provider, model) = match self.model.as_deref() {
            Some(spec) => match weft_protocol::parse_model(spec) {
                Some((provider, model)) => (Some(provider.to_owned()), Some(model.to_owned())),
                None => (None, Some(spec.to_owned())),
            },
            None => (None, None),
        };
        let mut request = TurnRequest::chat(MessageContent::Text(self.input));
        request.thread_id = self.conversation_id;
        request.route = Route::Chat { mode: self.mode };
        request.provider = provider;
        request.model = model;
        request.agent = self.agent;
        request.permission_mode = self.permission_mode;
        let data = weft_protocol::ChatMessageData {
            thread_id: request.thread_id.clone(),
            agent: request.agent.clone(),
            provider: request.provider.clone(),
            model: request.model.clone(),
            ..Default::default()
        };
        weft_protocol::check_identifiers_of(&data)
            .map_err(|message| ApiError::new(ErrorCode::InvalidField, message))?;
        Ok(request)
    }
}

/// A channel to watch a turn with (every frame, for its events stream).
fn channel(runtime: &Runtime) -> (Arc<ChannelSink>, ChannelFrames) {
    ChannelSink::new(
        runtime.next_subscriber_id(),
        runtime.config.server.max_outbound_bytes,
    )
}

/// A channel to wait on a turn with: its approval requests and its end only.
fn waiter(runtime: &Runtime) -> (Arc<ChannelSink>, ChannelFrames) {
    ChannelSink::filtered(
        runtime.next_subscriber_id(),
        runtime.config.server.max_outbound_bytes,
        |event| {
            matches!(
                event,
                ServerEvent::ToolApprovalRequest { .. } | ServerEvent::Chunk { done: true, .. }
            )
        },
    )
}

/// Frames until the turn's end or an approval request other than `answered`.
async fn wait(frames: &mut ChannelFrames, answered: Option<&str>) {
    while let Some(delivered) = frames.recv().await {
        match delivered.event {
            Some(ServerEvent::ToolApprovalRequest { tool_call_id, .. })
                if Some(tool_call_id.as_str()) != answered =>
            {
                return
            }
            Some(ServerEvent::Chunk { done: true, .. }) => return,
            _ => {}
        }
    }
}

fn no_prompt() -> ApiError {
    ApiError::new(ErrorCode::ThreadNotFound, "no such prompt")
}

/// `POST /prompt`.
pub async fn create(
    State(state): State<Arc<ServerState>>,
    user: AuthUser,
    JsonBody(body): JsonBody<PromptRequest>,
) -> Rest<Json<Prompt>> {
    let request = body.into_turn()?;
    let runtime = &state.runtime;
    let (sink, mut frames) = waiter(runtime);
    let started = runtime.start_turn(&user.id, request, sink).await?;
    wait(&mut frames, None).await;
    drop(frames);
    answer(runtime, &started.thread_id, &started.message_id).await
}

/// `GET /prompts/{id}`.
pub async fn get(
    State(state): State<Arc<ServerState>>,
    Path(IdPath { id }): Path<IdPath>,
    user: AuthUser,
) -> Rest<Json<Prompt>> {
    let message = owned_prompt(&state.runtime, &user, &id).await?;
    answer(&state.runtime, &message.thread_id, &message.id).await
}

/// `POST /prompts/{id}/approve`.
pub async fn approve(
    state: State<Arc<ServerState>>,
    id: Path<IdPath>,
    user: AuthUser,
    body: JsonBody<DecisionRequest>,
) -> Rest<Json<Prompt>> {
    decide(state, id, user, body, ApprovalDecision::Allow).await
}

/// `POST /prompts/{id}/reject`.
pub async fn reject(
    state: State<Arc<ServerState>>,
    id: Path<IdPath>,
    user: AuthUser,
    body: JsonBody<DecisionRequest>,
) -> Rest<Json<Prompt>> {
    decide(state, id, user, body, ApprovalDecision::Deny).await
}

async fn decide(
    State(state): State<Arc<ServerState>>,
    Path(IdPath { id }): Path<IdPath>,
    user: AuthUser,
    JsonBody(body): JsonBody<DecisionRequest>,
    decision: ApprovalDecision,
) -> Rest<Json<Prompt>> {
    let runtime = &state.runtime;
    let message = owned_prompt(runtime, &user, &id).await?;
    let thread = runtime.owned_thread(&user.id, &message.thread_id).await?;
    if thread.active_message().as_deref() != Some(id.as_str()) {
        if message.status != "running" {
            return Err(ApiError::new(
                ErrorCode::InvalidField,
                "this prompt is not waiting for an approval",
            ));
        }
        // Its turn runs on another replica: the answer goes there; the store says when
        // the turn has moved on.
        runtime
            .answer_approval(&user.id, &body.tool_call_id, decision, body.reason)
            .await?;
        moved_on(runtime, &message.thread_id, &id, &body.tool_call_id).await;
        return answer(runtime, &message.thread_id, &message.id).await;
    }
    // Listen before answering, so nothing that follows is missed.
    let (sink, mut frames) = waiter(runtime);
    thread.subscribe(sink);
    runtime
        .answer_approval(&user.id, &body.tool_call_id, decision, body.reason)
        .await?;
    wait(&mut frames, Some(&body.tool_call_id)).await;
    drop(frames);
    answer(runtime, &message.thread_id, &message.id).await
}

/// Until the prompt's turn, run by another replica, has ended or asks another approval than
/// `answered` (both are committed before the turn's clients hear of them).
async fn moved_on(runtime: &Runtime, thread_id: &str, message_id: &str, answered: &str) {
    let store = &runtime.store;
    loop {
        let running = store
            .message(thread_id, message_id)
            .await
            .ok()
            .flatten()
            .is_some_and(|m| m.status == "running");
        let asking = store
            .pending_approval_ids(thread_id)
            .await
            .is_ok_and(|ids| ids.iter().any(|id| id != answered));
        if !running || asking {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// `GET /prompts/{id}/events` as the OpenAPI document describes it.
pub fn describe_events(operation: TransformOperation<'_>) -> TransformOperation<'_> {
    operation
        .id("promptEvents")
        .tag("prompts")
        .summary("Its frames as Server-Sent Events, until it ends")
        .with(|mut operation| {
            add_response(
                operation.inner_mut(),
                200,
                "Each event's data is a server frame (docs/schema/server_frame.json).",
                Some("text/event-stream"),
            );
            operation
        })
}

/// `GET /prompts/{id}/events`: the turn's frames so far, then live, until it ends (a
/// finished prompt: its stored message and the final chunk).
pub async fn events(
    State(state): State<Arc<ServerState>>,
    Path(IdPath { id }): Path<IdPath>,
    user: AuthUser,
) -> Rest<Response> {
    let runtime = &state.runtime;
    let message = owned_prompt(runtime, &user, &id).await?;
    let thread = runtime.owned_thread(&user.id, &message.thread_id).await?;
    // Running here, or on another replica (`resume` follows it there).
    if thread.active_message().as_deref() == Some(id.as_str()) || message.status == "running" {
        let (sink, frames) = channel(runtime);
        runtime
            .resume(&user.id, &message.thread_id, 0, sink)
            .await?;
        return Ok(Sse::new(sse(frames))
            .keep_alive(KeepAlive::default())
            .into_response());
    }
    // A finished prompt: its stored message and the final chunk, as they are.
    let done = ServerEvent::Chunk {
        content: String::new(),
        done: true,
        parent_id: None,
        depth: 0,
    };
    let stored = ServerEvent::Message {
        message: stored_message(&runtime.store, &message)
            .await
            .map_err(ApiError::internal)?,
    };
    let collected = Arc::new(Collected::default());
    thread.send_to(collected.as_ref(), 0, vec![stored, done]);
    let events: Vec<Result<Event, Infallible>> = collected
        .frames
        .lock()
        .iter()
        .map(|f| Ok(Event::default().data(f.json())))
        .collect();
    Ok(Sse::new(futures::stream::iter(events)).into_response())
}

/// Frames kept as they come (what a finished prompt's stream is made of).
#[derive(Default)]
struct Collected {
    frames: parking_lot::Mutex<Vec<Arc<SharedFrame>>>,
}

impl FrameSink for Collected {
    fn id(&self) -> SubscriberId {
        0
    }

    fn send(&self, out: Outgoing<'_>) -> bool {
        self.frames.lock().push(out.frame.clone());
        true
    }
}

/// Whether a frame is the turn's final chunk.
fn is_done(delivered: &Delivered) -> bool {
    match &delivered.event {
        Some(event) => matches!(event, ServerEvent::Chunk { done: true, .. }),
        // A replayed frame is only encoded.
        None => serde_json::from_str::<Value>(delivered.frame.json())
            .is_ok_and(|v| v["type"] == "chunk" && v["done"] == true),
    }
}

/// The frames as SSE events, ending after the turn's final chunk.
fn sse(frames: ChannelFrames) -> impl Stream<Item = Result<Event, Infallible>> {
    futures::stream::unfold(Some(frames), |frames| async move {
        let mut frames = frames?;
        let delivered = frames.recv().await?;
        let last = is_done(&delivered);
        let event = Event::default().data(delivered.frame.json());
        Some((Ok(event), (!last).then_some(frames)))
    })
}

/// The caller's prompt `id` (another user's reads as missing).
async fn owned_prompt(runtime: &Runtime, user: &AuthUser, id: &str) -> Rest<MessageRow> {
    if !weft_protocol::is_identifier(id) {
        return Err(no_prompt());
    }
    let message = runtime
        .store
        .message_by_id(id)
        .await
        .map_err(ApiError::internal)?
        .filter(|m| m.role == "assistant")
        .ok_or_else(no_prompt)?;
    runtime
        .check_owner(&user.id, &message.thread_id)
        .await
        .map_err(|_| no_prompt())?;
    Ok(message)
}

/// The prompt as stored once everything shown so far is committed.
async fn answer(runtime: &Runtime, thread_id: &str, message_id: &str) -> Rest<Json<Prompt>> {
    let live = runtime
        .hub
        .get(thread_id)
        .filter(|r| r.active_message().as_deref() == Some(message_id));
    if let Some(log) = live.as_ref().and_then(|r| r.active_log()) {
        log.settled().await;
    }
    let store = &runtime.store;
    let message = store
        .message(thread_id, message_id)
        .await
        .map_err(ApiError::internal)?
        .ok_or_else(no_prompt)?;
    let waiting = match &live {
        Some(thread) => !thread.gate.pending().is_empty(),
        // Run by another replica: its pending approvals are committed before it asks.
        None => {
            message.status == "running"
                && !store
                    .pending_approval_ids(thread_id)
                    .await
                    .map_err(ApiError::internal)?
                    .is_empty()
        }
    };
    let messages = store
        .messages(thread_id)
        .await
        .map_err(ApiError::internal)?;
    let input = messages
        .iter()
        .filter(|m| m.role == "user" && m.position < message.position)
        .max_by_key(|m| m.position);
    let items = store
        .turn_items(thread_id, message_id)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(prompt_json(&message, input, &items, waiting)))
}
