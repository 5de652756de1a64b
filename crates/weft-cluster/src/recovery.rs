//! What a dead replica (or this one's former life) left: every turn still `running` whose
//! lease expired is taken (one taker) and, with `[cluster] recovery = "resume"`, handed to
//! the [`Resumer`] to go on from its last completed round; otherwise (or when it cannot go
//! on: a workflow run, a media generation, code mode) it is closed as `interrupted`, keeping
//! the text it had streamed, every call it left without a result answered "interrupted" (so
//! the next turn's history stays valid), and the thread's pending approvals `expired`. Turns
//! other replicas hold, and turns this one runs, are left alone. The sweep runs as often as
//! the heartbeat that renews this replica's leases, on a task of its own.

use std::collections::HashSet;
use std::sync::{Arc, Weak};

use futures::StreamExt;
use serde_json::json;
use weft_protocol::{
    ApprovalStatus, RecordEntry, ToolResultMetadata, ToolResultStatus, INTERRUPTED_RESULT,
};
use weft_store::{now_ms, Backend, ItemRow, LeaseRenewer, MessageRow, Store, StoreError, WriteOp};

use crate::leases::Leases;
use weft_record::views::root_text;
use weft_record::{entries, results_row, ItemPlace};

/// Takes up a turn whose lease this replica took.
#[async_trait::async_trait]
pub trait Resumer: Send + Sync {
    /// Go on with `message`, taken over for the `takeovers`th time; `Ok(false)` when it
    /// cannot go on here (it is then closed).
    async fn resume(
        self: Arc<Self>,
        message: &MessageRow,
        takeovers: u32,
    ) -> Result<bool, StoreError>;

    /// Whether this replica is shutting down: it takes no turns up then (it hands its own
    /// over, and others' would only be handed on again).
    fn draining(&self) -> bool {
        false
    }
}

/// Every heartbeat: renew this replica's leases (stopping the turns whose lease is gone) on
/// a thread of its own, with its own connection, so a saturated runtime cannot make this
/// replica miss its renewals and stop its own turns; apart from that, on the runtime and
/// never holding the renewals up, take up what dead replicas left. Both end when the leases
/// go with the runtime. Nothing runs where no other process shares the database (SQLite):
/// nobody can take this process's leases, and what a former life left is taken up at
/// start-up.
pub fn spawn_heartbeat(leases: &Arc<Leases>, store: Store, resumer: Option<Weak<dyn Resumer>>) {
    if !leases.shared() {
        return;
    }
    let every = leases.heartbeat();
    if let Err(e) = spawn_renewals(Arc::downgrade(leases), store.lease_renewer(), every) {
        tracing::error!(error = %e, "cannot start the lease renewals: every turn will stop at its lease's end");
    }
    let me: Weak<Leases> = Arc::downgrade(leases);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(leases) = me.upgrade() else { return };
            let resumer = resumer.as_ref().and_then(Weak::upgrade);
            if resumer.as_ref().is_some_and(|r| r.draining()) {
                continue;
            }
            let swept = recover_orphaned_turns(&store, &leases, Sweep::Heartbeat, resumer);
            if let Err(e) = swept.await {
                tracing::warn!(error = %e, "cannot look for turns dead replicas left");
            }
        }
    });
}

/// Renew every `every` on a thread of its own (its own runtime, its own connection).
fn spawn_renewals(
    leases: Weak<Leases>,
    mut renewer: LeaseRenewer,
    every: std::time::Duration,
) -> std::io::Result<()> {
    let renewals = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("weft-leases".into())
        .spawn(move || {
            renewals.block_on(async move {
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let Some(leases) = leases.upgrade() else {
                        return;
                    };
                    leases.renew(&mut renewer).await;
                }
            });
        })?;
    Ok(())
}

/// When the sweep runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sweep {
    /// At start-up: also the turns this replica's former life (same id) held; on SQLite every
    /// running turn (one process per database file).
    Startup,
    /// On a heartbeat: turns whose lease expired.
    Heartbeat,
}

/// What the sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovered {
    pub resumed: usize,
    pub closed: usize,
}

/// Take every turn nobody runs: resume it through `resumer` when there is one and it can,
/// close it otherwise.
pub async fn recover_orphaned_turns(
    store: &Store,
    leases: &Leases,
    sweep: Sweep,
    resumer: Option<Arc<dyn Resumer>>,
) -> Result<Recovered, StoreError> {
    let startup = sweep == Sweep::Startup;
    let now = if startup && store.backend() == Backend::Sqlite {
        i64::MAX
    } else {
        now_ms()
    };
    let former = startup.then(|| leases.replica_id());
    let orphans = store.orphaned_turns(now, former).await?;
    // Several at a time: each takes a few reads of its record, and a dead replica may
    // leave thousands.
    let outcomes: Vec<Result<Option<bool>, StoreError>> = futures::stream::iter(orphans)
        .map(|message| {
            let resumer = resumer.clone();
            async move {
                if leases.is_live(&message.id) {
                    return Ok(None);
                }
                let Some(takeovers) = leases.take_orphan(store, &message.id, now, former).await?
                else {
                    return Ok(None);
                };
                if let Some(resumer) = resumer {
                    if resumer.resume(&message, takeovers).await? {
                        return Ok(Some(true));
                    }
                }
                close(store, &message).await?;
                Ok(Some(false))
            }
        })
        .buffer_unordered(RECOVERED_AT_ONCE)
        .collect()
        .await;
    let mut recovered = Recovered::default();
    for outcome in outcomes {
        match outcome? {
            Some(true) => recovered.resumed += 1,
            Some(false) => recovered.closed += 1,
            None => {}
        }
    }
    Ok(recovered)
}

/// How many orphaned turns one sweep takes up at once.
const RECOVERED_AT_ONCE: usize = 16;

/// Close one turn as `interrupted` (its lease is this replica's now).
async fn close(store: &Store, message: &MessageRow) -> Result<(), StoreError> {
    let mut items = store.turn_items(&message.thread_id, &message.id).await?;
    let waiting = store.pending_approval_ids(&message.thread_id).await?;
    let synthetic = unanswered_calls(&items, &waiting);
    items.extend(synthetic.iter().cloned());
    let mut closed = message.clone();
    let text = root_text(&items);
    closed.content = json!(match interrupted_notice(message) {
        Some(notice) if text.is_empty() => notice.to_owned(),
        _ => text,
    });
    closed.status = "interrupted".to_owned();
    // Its approvals expire before it shows closed: whoever sees it `interrupted` sees them
    // expired too.
    let expired = store.expire_pending_approvals(&message.thread_id).await?;
    if !synthetic.is_empty() {
        store.submit(WriteOp::Items(synthetic), None);
    }
    store.write(WriteOp::FinishTurn { message: closed }).await?;
    tracing::warn!(thread = %message.thread_id, message = %message.id, expired, "closed a turn its replica left unfinished");
    Ok(())
}

/// What a closed turn says when it had said nothing: a media generation cut mid-way is not
/// generated again (it may have been paid for once already).
fn interrupted_notice(message: &MessageRow) -> Option<&'static str> {
    let metadata: serde_json::Value = message
        .metadata
        .as_deref()
        .and_then(|m| serde_json::from_str(m).ok())
        .unwrap_or_default();
    match metadata["mode"].as_str() {
        Some("media") => Some(MEDIA_CUT),
        Some("workflow") => Some(WORKFLOW_CUT),
        _ => None,
    }
}

/// A media turn's answer when its server stopped mid-generation.
pub const MEDIA_CUT: &str = "The generation was cut off when the server stopped, and it was \
not started again so that it is not paid for twice. Ask again to generate it.";

/// A workflow turn's answer when its server stopped mid-run.
pub const WORKFLOW_CUT: &str = "The workflow run was cut off when the server stopped; its \
nodes were not run again. Run it again to finish it.";

/// A synthetic "interrupted" result for every call in `items` that has none, one row per
/// level of the turn that has such calls. A call that was `waiting` for its approval says
/// so in its metadata: the approval expired.
fn unanswered_calls(items: &[ItemRow], waiting: &[String]) -> Vec<ItemRow> {
    let answered: HashSet<String> = items
        .iter()
        .flat_map(entries)
        .filter_map(|e| match e {
            RecordEntry::ToolResult { tool_call_id, .. } => Some(tool_call_id),
            _ => None,
        })
        .collect();
    let mut position = items.iter().map(|i| i.position).max().unwrap_or(-1) + 1;
    let mut out = Vec::new();
    for item in items {
        let results: Vec<RecordEntry> = entries(item)
            .into_iter()
            .filter_map(|e| match e {
                RecordEntry::Assistant { tool_calls, .. } => Some(tool_calls),
                _ => None,
            })
            .flatten()
            .filter(|c| !answered.contains(&c.id))
            .map(|call| RecordEntry::ToolResult {
                metadata: waiting.contains(&call.id).then(|| expired(&call.id)),
                tool_call_id: call.id,
                call_id: call.call_id,
                name: call.name,
                result: INTERRUPTED_RESULT.to_owned(),
                is_error: true,
            })
            .collect();
        if results.is_empty() {
            continue;
        }
        let place = ItemPlace {
            thread_id: &item.thread_id,
            message_id: &item.message_id,
            position,
            parent_id: item.parent_id.as_deref(),
            depth: u32::try_from(item.depth).unwrap_or(0),
        };
        out.push(results_row(place, &results));
        position += 1;
    }
    out
}

/// The metadata of a call whose approval was still pending when the server stopped.
fn expired(id: &str) -> ToolResultMetadata {
    ToolResultMetadata {
        status: ToolResultStatus::Error,
        started_at: 0.0,
        completed_at: 0.0,
        execution_time_ms: 0.0,
        approval_status: ApprovalStatus::Expired,
        approval_id: Some(id.to_owned()),
        injected_args: Default::default(),
        offloaded_artifact_id: None,
    }
}
