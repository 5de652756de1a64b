//! The prompt API for callers without a socket: `POST /prompt` runs a turn and answers when
//! it is done or waits on an approval; `GET /prompts/{id}` reads it back;
//! `GET /prompts/{id}/events` streams its frames as Server-Sent Events; `POST
//! /prompts/{id}/approve|reject` answer its pending approval and wait again. A prompt is a
//! turn of a thread like any other (its id is the assistant message's); its frames come over
//! a channel, typed. The lifecycle (waiting, following the turn wherever it runs, answering
//! there) is the runtime's (`weft_runtime::prompts`); this is its door.

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
use weft_frames::frame::{ChannelFrames, Delivered};
use weft_protocol::{ApprovalDecision, ErrorCode, MessageContent, PermissionMode, ServerEvent};
use weft_runtime::prompts::{is_final_chunk, PromptFrames};
use weft_runtime::{ChannelSink, Route, TurnRequest};

use super::openapi::add_response;
use super::paths::IdPath;
use super::{ApiError, Rest};
use crate::auth::AuthUser;
use crate::state::ServerState;
use weft_record::prompt_view::Prompt;

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

/// `POST /prompt`.
pub async fn create(
    State(state): State<Arc<ServerState>>,
    user: AuthUser,
    JsonBody(body): JsonBody<PromptRequest>,
) -> Rest<Json<Prompt>> {
    let request = body.into_turn()?;
    Ok(Json(state.runtime.run_prompt(&user.id, request).await?))
}

/// `GET /prompts/{id}`.
pub async fn get(
    State(state): State<Arc<ServerState>>,
    Path(IdPath { id }): Path<IdPath>,
    user: AuthUser,
) -> Rest<Json<Prompt>> {
    Ok(Json(state.runtime.prompt(&user.id, &id).await?))
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
    let prompt = state
        .runtime
        .decide_prompt(&user.id, &id, &body.tool_call_id, decision, body.reason)
        .await?;
    Ok(Json(prompt))
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
    let (sink, frames) = ChannelSink::new(
        runtime.next_subscriber_id(),
        runtime.config.server.max_outbound_bytes,
    );
    match runtime.prompt_frames(&user.id, &id, sink).await? {
        PromptFrames::Following => Ok(Sse::new(sse(frames))
            .keep_alive(KeepAlive::default())
            .into_response()),
        PromptFrames::Finished(kept) => {
            let events: Vec<Result<Event, Infallible>> = kept
                .iter()
                .map(|f| Ok(Event::default().data(f.json())))
                .collect();
            Ok(Sse::new(futures::stream::iter(events)).into_response())
        }
    }
}

/// Whether a frame is the turn's final chunk.
fn is_done(delivered: &Delivered) -> bool {
    match &delivered.event {
        Some(event) => matches!(event, ServerEvent::Chunk { done: true, .. }),
        // A replayed frame is only encoded.
        None => is_final_chunk(delivered.frame.json()),
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
