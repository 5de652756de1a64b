//! A prompt's lifecycle for callers without a socket (the prompt API): a turn started and
//! waited on until it ends or asks for an approval, read back as stored, its approvals
//! answered and waited on again, its frames followed wherever it runs. A prompt is a turn
//! like any other; its id is the assistant message's. Waiting follows the turn's frames (on
//! another replica, through the bus), never polls the database.

use std::sync::Arc;

use weft_frames::frame::{ChannelFrames, SubscriberId};
use weft_frames::{ChannelSink, FrameSink, Outgoing, Refusal, SharedFrame};
use weft_protocol::{ApprovalDecision, ErrorCode, ServerEvent};
use weft_record::prompt_view::{read_prompt, Prompt};
use weft_record::views::stored_message;
use weft_store::MessageRow;

use crate::runtime::Runtime;
use crate::turn::TurnRequest;

/// Where a prompt's frames come from.
pub enum PromptFrames {
    /// Its turn runs: they come to the sink given.
    Following,
    /// It has ended: its stored message and the final chunk.
    Finished(Vec<Arc<SharedFrame>>),
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

/// What another user's prompt, or one that does not exist, reads as.
fn no_prompt() -> Refusal {
    Refusal::new(ErrorCode::ThreadNotFound, "no such prompt")
}

impl Runtime {
    /// Run `request` for `user` and answer once it has ended or waits for an approval.
    pub async fn run_prompt(
        self: &Arc<Self>,
        user: &str,
        request: TurnRequest,
    ) -> Result<Prompt, Refusal> {
        let (sink, mut frames) = self.prompt_waiter();
        let started = self.start_turn(user, request, sink).await?;
        self.wait_prompt(&mut frames, &started.thread_id, None)
            .await;
        drop(frames);
        self.answer_prompt(&started.thread_id, &started.message_id)
            .await
    }

    /// The caller's prompt `id` as it stands.
    pub async fn prompt(&self, user: &str, id: &str) -> Result<Prompt, Refusal> {
        let message = self.owned_prompt(user, id).await?;
        self.answer_prompt(&message.thread_id, &message.id).await
    }

    /// Answer the approval `tool_call_id` of the caller's prompt `id`, wherever its turn
    /// runs, and answer once the turn has ended or asks for another.
    pub async fn decide_prompt(
        self: &Arc<Self>,
        user: &str,
        id: &str,
        tool_call_id: &str,
        decision: ApprovalDecision,
        reason: Option<String>,
    ) -> Result<Prompt, Refusal> {
        let message = self.owned_prompt(user, id).await?;
        let thread = self.owned_thread(user, &message.thread_id).await?;
        let here = thread.active_message().as_deref() == Some(id);
        if !here && message.status != "running" {
            return Err(Refusal::invalid(
                "this prompt is not waiting for an approval",
            ));
        }
        // Follow the turn (here or where it runs) before answering, so nothing that
        // follows is missed.
        let (sink, mut frames) = self.prompt_waiter();
        self.resume(user, &message.thread_id, 0, sink).await?;
        self.answer_approval(user, tool_call_id, decision, reason)
            .await?;
        self.wait_prompt(&mut frames, &message.thread_id, Some(tool_call_id))
            .await;
        drop(frames);
        self.answer_prompt(&message.thread_id, &message.id).await
    }

    /// The caller's prompt `id`'s frames: a running one's, so far and then live (wherever it
    /// runs), go to `sink`; a finished one's are its stored message and final chunk.
    pub async fn prompt_frames(
        self: &Arc<Self>,
        user: &str,
        id: &str,
        sink: Arc<dyn FrameSink>,
    ) -> Result<PromptFrames, Refusal> {
        let message = self.owned_prompt(user, id).await?;
        let thread = self.owned_thread(user, &message.thread_id).await?;
        if thread.active_message().as_deref() == Some(id) || message.status == "running" {
            self.resume(user, &message.thread_id, 0, sink).await?;
            return Ok(PromptFrames::Following);
        }
        let stored = stored_message(&self.store, &message)
            .await
            .map_err(Refusal::internal)?;
        let done = ServerEvent::Chunk {
            content: String::new(),
            done: true,
            parent_id: None,
            depth: 0,
        };
        let collected = Collected::default();
        thread.send_to(
            &collected,
            0,
            vec![ServerEvent::Message { message: stored }, done],
        );
        Ok(PromptFrames::Finished(collected.frames.into_inner()))
    }

    /// A channel to wait on a turn with: its approval requests and its end only.
    fn prompt_waiter(&self) -> (Arc<ChannelSink>, ChannelFrames) {
        ChannelSink::filtered(
            self.next_subscriber_id(),
            self.config.server.max_outbound_bytes,
            |event| {
                matches!(
                    event,
                    ServerEvent::ToolApprovalRequest { .. } | ServerEvent::Chunk { done: true, .. }
                )
            },
        )
    }

    /// Until the turn's end, or an approval request other than `answered` that still waits
    /// (frames replayed from the turn's start bring the ones answered before).
    async fn wait_prompt(
        &self,
        frames: &mut ChannelFrames,
        thread_id: &str,
        answered: Option<&str>,
    ) {
        while let Some(delivered) = frames.recv().await {
            match delivered.event {
                Some(ServerEvent::ToolApprovalRequest { tool_call_id, .. })
                    if Some(tool_call_id.as_str()) != answered
                        && self.still_asks(thread_id, &tool_call_id).await =>
                {
                    return
                }
                Some(ServerEvent::Chunk { done: true, .. }) => return,
                // A replayed frame is only encoded.
                None if is_final_chunk(delivered.frame.json()) => return,
                _ => {}
            }
        }
    }

    /// Whether the approval of `tool_call_id` is still waiting for its answer.
    async fn still_asks(&self, thread_id: &str, tool_call_id: &str) -> bool {
        self.store
            .pending_approval_ids(thread_id)
            .await
            .map_or(true, |ids| ids.iter().any(|id| id == tool_call_id))
    }

    /// The caller's prompt `id` (another user's reads as missing).
    async fn owned_prompt(&self, user: &str, id: &str) -> Result<MessageRow, Refusal> {
        if !weft_protocol::is_identifier(id) {
            return Err(no_prompt());
        }
        let message = self
            .store
            .message_by_id(id)
            .await
            .map_err(Refusal::internal)?
            .filter(|m| m.role == "assistant")
            .ok_or_else(no_prompt)?;
        self.check_owner(user, &message.thread_id)
            .await
            .map_err(|_| no_prompt())?;
        Ok(message)
    }

    /// The prompt as stored once everything shown so far is committed.
    async fn answer_prompt(&self, thread_id: &str, message_id: &str) -> Result<Prompt, Refusal> {
        let live = self
            .hub
            .get(thread_id)
            .filter(|r| r.active_message().as_deref() == Some(message_id));
        if let Some(log) = live.as_ref().and_then(|r| r.active_log()) {
            log.settled().await;
        }
        let waiting = live.map(|thread| !thread.gate.pending().is_empty());
        read_prompt(&self.store, thread_id, message_id, waiting)
            .await
            .map_err(Refusal::internal)?
            .ok_or_else(no_prompt)
    }
}

/// Whether an encoded frame is a turn's final chunk.
pub fn is_final_chunk(json: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(json)
        .is_ok_and(|v| v["type"] == "chunk" && v["done"] == true)
}
