//! Where a turn whose process died goes on from, read from its record: the rounds it
//! completed (for the history), the text they streamed, what it spent, the round it was cut
//! in, and the drafts of a response that was cut while streaming (emptied: that response is
//! asked for again, so its text is never kept twice).

use std::collections::HashSet;
use std::time::Duration;

use serde_json::Value;
use weft_core::{
    parent_call, prompts, Call, ChatMessage, ChildEnded, ChildResume, CutCall, Resume, Spent,
    ToolCallRequest,
};
use weft_protocol::{RecordEntry, RecordedCall, ServerEvent, ToolCallStatus};
use weft_store::{ApprovalRow, ItemRow, ModelCallRow};

use crate::{entries, entry_row, shown_parent, ItemPlace};

/// A cut turn as its record leaves it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResumePoint {
    pub resume: Resume,
    /// The turn's rounds after its user message, the cut round's response last.
    pub tail: Vec<ChatMessage>,
    /// Its final answer is on record: it was cut while being saved, and only ends.
    pub answered: bool,
    /// Root drafts of a response cut while streaming, emptied.
    pub emptied: Vec<ItemRow>,
    /// Where its next item goes.
    pub next_position: i64,
    /// How many provider calls it has on record (their rows are numbered by it).
    pub model_calls: u32,
    /// Its calls on record (but the cut round's, which open again) as `tool_call_update`
    /// events, for its execution tree.
    pub earlier_calls: Vec<ServerEvent>,
}

/// Read the turn's record: its `items` (every depth, in order), the thread's `approvals`, the
/// turn's `model_calls` and when it started (Unix ms).
pub fn resume_point(
    items: &[ItemRow],
    approvals: &[ApprovalRow],
    model_calls: &[ModelCallRow],
    started_at: i64,
) -> ResumePoint {
    let is_draft = |item: &ItemRow| {
        item.depth == 0
            && entries(item)
                .iter()
                .any(|e| matches!(e, RecordEntry::Assistant { partial: true, .. }))
    };
    let (drafts, kept): (Vec<&ItemRow>, Vec<&ItemRow>) = items.iter().partition(|i| is_draft(i));
    let root: Vec<RecordEntry> = kept
        .iter()
        .filter(|i| i.depth == 0)
        .flat_map(|i| entries(i))
        .collect();
    let (tail, cut_calls, answered) = rounds(&root);
    let pending: Vec<&ApprovalRow> = approvals.iter().filter(|a| a.status == "pending").collect();
    let cut = cut_calls_of(&kept, cut_calls, &pending);
    let text = root
        .iter()
        .filter_map(|e| match e {
            RecordEntry::Assistant { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let emptied = drafts.iter().map(|d| emptied_draft(d)).collect();
    let resume = Resume {
        text,
        spent: spent(&kept, approvals, model_calls, started_at),
        cut,
        memory: memory_of(&kept),
        plan: root.iter().find_map(|e| match e {
            RecordEntry::Plan { plan } => Some(plan.clone()),
            _ => None,
        }),
    };
    let earlier_calls = call_events(&kept, &resume.all_cut());
    ResumePoint {
        resume,
        tail,
        answered,
        emptied,
        next_position: items.iter().map(|i| i.position + 1).max().unwrap_or(0),
        model_calls: u32::try_from(model_calls.len()).unwrap_or(u32::MAX),
        earlier_calls,
    }
}

/// The calls of a cut round: when each was asked for approval (if it still waited), whether
/// it had started work of its own, and for a subtask, where it goes on from.
fn cut_calls_of(kept: &[&ItemRow], calls: Vec<Call>, pending: &[&ApprovalRow]) -> Vec<CutCall> {
    calls
        .into_iter()
        .map(|call| {
            // Its own items, or a job's of it, sit under it.
            let started = kept.iter().any(|i| {
                i.parent_id
                    .as_deref()
                    .is_some_and(|p| parent_call(p).0 == call.wire_id)
            });
            // A subtask goes on from its last round; a code run is redone meeting its calls.
            let nests = [prompts::RUN_SUBTASK, weft_codemode::CODE_EXECUTE];
            let child = nests
                .contains(&call.request.name.as_str())
                .then(|| Box::new(child_resume(kept, &call.wire_id, pending, started)));
            let jobs = if call.request.name == prompts::RUN_PARALLEL_SUBAGENTS {
                jobs_of(kept, &call.wire_id, pending)
            } else {
                Vec::new()
            };
            CutCall {
                asked_at_ms: pending
                    .iter()
                    .find(|a| a.id == call.wire_id)
                    .map(|a| a.created_at),
                started,
                child,
                jobs,
                call,
            }
        })
        .collect()
}

/// The jobs of a cut parallel call (`call_id`) that had left items, by number, each where
/// it goes on from.
fn jobs_of(
    kept: &[&ItemRow],
    call_id: &str,
    pending: &[&ApprovalRow],
) -> Vec<(usize, ChildResume)> {
    let mut places: Vec<(usize, &str)> = kept
        .iter()
        .filter_map(|i| i.parent_id.as_deref())
        .filter_map(|p| match parent_call(p) {
            (call, Some(job)) if call == call_id => Some((job, p)),
            _ => None,
        })
        .collect();
    places.sort_unstable();
    places.dedup();
    places
        .into_iter()
        .map(|(job, place)| (job, child_resume(kept, place, pending, true)))
        .collect()
}

/// A subtask or code run cut mid-way (its items under `call_id`), from the items it left.
fn child_resume(
    kept: &[&ItemRow],
    call_id: &str,
    pending: &[&ApprovalRow],
    started: bool,
) -> ChildResume {
    let own: Vec<RecordEntry> = kept
        .iter()
        .filter(|i| i.parent_id.as_deref() == Some(call_id))
        .flat_map(|i| entries(i))
        .collect();
    let (tail, open, answered) = rounds(&own);
    let responses = own.iter().filter_map(|e| match e {
        RecordEntry::Assistant { text, .. } => Some(text.as_str()),
        _ => None,
    });
    let ended = if answered {
        responses
            .clone()
            .next_back()
            .map(|t| ChildEnded::Answer(t.to_owned()))
    } else {
        finished_with(&own).map(ChildEnded::Structured)
    };
    ChildResume {
        text: responses.collect(),
        cut: cut_calls_of(kept, open, pending),
        tail,
        ended,
        charged: started,
    }
}

/// The payload a subtask gave `finish_subtask`, when that call's result is on record and
/// says it finished.
fn finished_with(own: &[RecordEntry]) -> Option<Value> {
    let finished = own.iter().find_map(|e| match e {
        RecordEntry::ToolResult {
            tool_call_id,
            name,
            is_error: false,
            ..
        } if name == prompts::FINISH_SUBTASK => Some(tool_call_id),
        _ => None,
    })?;
    own.iter().find_map(|e| match e {
        RecordEntry::Assistant { tool_calls, .. } => tool_calls
            .iter()
            .find(|c| &c.id == finished)
            .and_then(|c| serde_json::from_str(&c.arguments).ok()),
        _ => None,
    })
}

/// The turn's shared memory as its recorded calls left it: each `memory_write` that
/// succeeded, and each subtask's result (`task:<call id>`, a parallel job's
/// `task:<call id>:<job>`), in the order they happened.
fn memory_of(items: &[&ItemRow]) -> Vec<(String, String)> {
    let mut calls = std::collections::HashMap::new();
    let mut memory = Vec::new();
    for entry in items.iter().flat_map(|i| entries(i)) {
        match entry {
            RecordEntry::Assistant { tool_calls, .. } => {
                for call in tool_calls {
                    calls.insert(call.id.clone(), call);
                }
            }
            RecordEntry::ToolResult {
                tool_call_id,
                name,
                result,
                is_error,
                ..
            } => {
                let Some(call) = calls.get(&tool_call_id) else {
                    continue;
                };
                memory.extend(remembered(call, &name, result, is_error));
            }
            _ => {}
        }
    }
    memory
}

/// What one call with its result had put in the turn's memory.
fn remembered(
    call: &RecordedCall,
    name: &str,
    result: String,
    is_error: bool,
) -> Vec<(String, String)> {
    let task = format!("task:{}", call.call_id);
    match name {
        MEMORY_WRITE if !is_error => {
            let args: Value = serde_json::from_str(&call.arguments).unwrap_or_default();
            match (args["key"].as_str(), args["value"].as_str()) {
                (Some(key), Some(value)) => vec![(key.to_owned(), value.to_owned())],
                _ => Vec::new(),
            }
        }
        prompts::RUN_SUBTASK => vec![(task, result)],
        prompts::RUN_PARALLEL_SUBAGENTS if !is_error => {
            let results: Value = serde_json::from_str(&result).unwrap_or_default();
            results["results"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|job| {
                    let output = job.get("output")?;
                    Some((format!("{task}:{}", job["job"]), output.to_string()))
                })
                .collect()
        }
        _ => Vec::new(),
    }
}

/// The tool that writes the turn's shared memory.
const MEMORY_WRITE: &str = "memory_write";

/// The calls on record, as the `tool_call_update` events that built their tree nodes; the
/// cut rounds' calls (a cut subtask's included) are left to the resumed turn.
fn call_events(items: &[&ItemRow], cut: &[&CutCall]) -> Vec<ServerEvent> {
    let is_cut = |id: &str| cut.iter().any(|c| c.call.wire_id == id);
    let mut events = Vec::new();
    for item in items {
        let depth = u32::try_from(item.depth).unwrap_or(0);
        for entry in entries(item) {
            match entry {
                RecordEntry::Assistant { tool_calls, .. } => {
                    events.extend(tool_calls.into_iter().filter(|c| !is_cut(&c.id)).map(|c| {
                        let args = serde_json::from_str(&c.arguments)
                            .unwrap_or(serde_json::Value::String(c.arguments));
                        ServerEvent::ToolCallUpdate {
                            tool_call_id: c.id,
                            name: c.name,
                            status: ToolCallStatus::Start,
                            args: Some(args),
                            result: None,
                            is_error: None,
                            parent_id: shown_parent(item).map(str::to_owned),
                            depth,
                            metadata: None,
                        }
                    }));
                }
                RecordEntry::ToolResult {
                    tool_call_id,
                    name,
                    result,
                    is_error,
                    metadata,
                    ..
                } => events.push(ServerEvent::ToolCallUpdate {
                    tool_call_id,
                    name,
                    status: ToolCallStatus::End,
                    args: None,
                    result: Some(result),
                    is_error: Some(is_error),
                    parent_id: shown_parent(item).map(str::to_owned),
                    depth,
                    metadata: metadata.map(Box::new),
                }),
                _ => {}
            }
        }
    }
    events
}

/// The root rounds as history, the calls of a last response that has no results (the cut
/// round), and whether the last response is a final answer.
fn rounds(root: &[RecordEntry]) -> (Vec<ChatMessage>, Vec<Call>, bool) {
    let mut tail = Vec::new();
    let mut open: Vec<Call> = Vec::new();
    let mut answered = false;
    for entry in root {
        match entry {
            RecordEntry::Assistant {
                text, tool_calls, ..
            } => {
                open = tool_calls
                    .iter()
                    .map(|c| Call {
                        wire_id: c.id.clone(),
                        request: ToolCallRequest {
                            id: c.call_id.clone(),
                            name: c.name.clone(),
                            arguments: c.arguments.as_str().into(),
                        },
                    })
                    .collect();
                answered = open.is_empty();
                let requests = open.iter().map(|c| c.request.clone()).collect();
                tail.push(ChatMessage::assistant(text.clone(), requests));
            }
            RecordEntry::ToolResult {
                tool_call_id,
                call_id,
                result,
                is_error,
                ..
            } => {
                if open.iter().any(|c| &c.wire_id == tool_call_id) {
                    tail.push(ChatMessage::tool_result(
                        call_id.clone(),
                        result.clone(),
                        *is_error,
                    ));
                    open.retain(|c| &c.wire_id != tool_call_id);
                }
            }
            RecordEntry::Summary { .. }
            | RecordEntry::Plan { .. }
            | RecordEntry::Node { .. }
            | RecordEntry::User { .. }
            | RecordEntry::Subtask { .. } => {}
        }
    }
    (tail, open, answered)
}

/// What the turn spent, from its record: provider calls with their tokens and cost, tool
/// results and their bytes, subtasks, streamed text, and the wall clock up to its last
/// recorded step (waits for a person left out).
fn spent(
    items: &[&ItemRow],
    approvals: &[ApprovalRow],
    model_calls: &[ModelCallRow],
    started_at: i64,
) -> Spent {
    let all: Vec<RecordEntry> = items.iter().flat_map(|i| entries(i)).collect();
    let results: Vec<&String> = all
        .iter()
        .filter_map(|e| match e {
            RecordEntry::ToolResult { result, .. } => Some(result),
            _ => None,
        })
        .collect();
    let subtasks: HashSet<&str> = items
        .iter()
        .filter(|i| i.depth > 0)
        .filter_map(|i| i.parent_id.as_deref())
        .collect();
    let last = items
        .iter()
        .map(|i| i.created_at)
        .chain(model_calls.iter().map(|m| m.created_at))
        .max()
        .unwrap_or(started_at);
    let waited: i64 = approvals
        .iter()
        .filter(|a| a.created_at >= started_at)
        .map(|a| a.decided_at.unwrap_or(last).min(last) - a.created_at)
        .filter(|w| *w > 0)
        .sum();
    let elapsed = u64::try_from(last - started_at - waited).unwrap_or(0);
    Spent {
        llm_calls: model_calls.len() as u64,
        tool_calls: results.len() as u64,
        subtasks: subtasks.len() as u64,
        input_tokens: model_calls
            .iter()
            .map(|m| m.input_tokens.max(0) as u64)
            .sum(),
        output_tokens: model_calls
            .iter()
            .map(|m| m.output_tokens.max(0) as u64)
            .sum(),
        cost_usd: model_calls.iter().map(|m| m.cost_usd).sum(),
        result_bytes: results.iter().map(|r| r.len() as u64).sum(),
        output_bytes: all
            .iter()
            .filter_map(|e| match e {
                RecordEntry::Assistant { text, .. } => Some(text.len() as u64),
                _ => None,
            })
            .sum(),
        elapsed: Duration::from_millis(elapsed),
    }
}

/// A draft of a cut response with its text gone (the same row, so it stays one).
fn emptied_draft(draft: &ItemRow) -> ItemRow {
    let place = ItemPlace {
        thread_id: &draft.thread_id,
        message_id: &draft.message_id,
        position: draft.position,
        parent_id: None,
        depth: 0,
    };
    let empty = RecordEntry::Assistant {
        id: None,
        text: String::new(),
        tool_calls: Vec::new(),
        partial: true,
        reasoning: None,
    };
    entry_row(place, &empty)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, LazyLock};

    use weft_protocol::RecordedCall;

    use super::*;
    use crate::results_row;

    fn place(position: i64, parent_id: Option<&str>, depth: u32) -> ItemPlace<'_> {
        static THREAD: LazyLock<Arc<str>> = LazyLock::new(|| "t".into());
        static MESSAGE: LazyLock<Arc<str>> = LazyLock::new(|| "m".into());
        ItemPlace {
            thread_id: &THREAD,
            message_id: &MESSAGE,
            position,
            parent_id,
            depth,
        }
    }

    fn response(text: &str, calls: &[(&str, &str)], partial: bool) -> RecordEntry {
        RecordEntry::Assistant {
            id: None,
            text: text.to_owned(),
            tool_calls: calls
                .iter()
                .map(|(id, name)| RecordedCall {
                    id: (*id).to_owned(),
                    call_id: format!("p{id}"),
                    name: (*name).to_owned(),
                    arguments: "{}".to_owned(),
                })
                .collect(),
            partial,
            reasoning: None,
        }
    }

    fn result(id: &str, name: &str) -> RecordEntry {
        RecordEntry::ToolResult {
            tool_call_id: id.to_owned(),
            call_id: format!("p{id}"),
            name: name.to_owned(),
            result: "ok".to_owned(),
            is_error: false,
            metadata: None,
        }
    }

    #[test]
    fn a_cut_round_and_a_cut_draft_are_read_back() {
        let items = vec![
            entry_row(
                place(0, None, 0),
                &response("one ", &[("a", "look")], false),
            ),
            results_row(place(1, None, 0), &[result("a", "look")]),
            entry_row(
                place(2, None, 0),
                &response("two ", &[("b", "write_file"), ("c", "run_subtask")], false),
            ),
            entry_row(
                place(3, Some("c"), 1),
                &response("", &[("d", "look")], false),
            ),
            results_row(place(4, Some("c"), 1), &[result("d", "look")]),
        ];
        let asked = ApprovalRow {
            id: "b".into(),
            thread_id: "t".into(),
            tool: "write_file".into(),
            arguments: "{}".into(),
            status: "pending".into(),
            created_at: 5,
            decided_at: None,
            injected_args: None,
        };
        let point = resume_point(&items, &[asked], &[], 0);
        assert_eq!(point.resume.text, "one two ");
        assert!(!point.answered);
        assert_eq!(point.next_position, 5);
        let cut: Vec<(&str, Option<i64>, bool)> = point
            .resume
            .cut
            .iter()
            .map(|c| (c.call.wire_id.as_str(), c.asked_at_ms, c.started))
            .collect();
        assert_eq!(cut, [("b", Some(5), false), ("c", None, true)]);
        assert!(point.resume.cut[0].child.is_none());
        let child = point.resume.cut[1].child.as_deref().unwrap();
        assert_eq!(child.tail.len(), 2, "the subtask's round with its result");
        assert!(child.cut.is_empty() && child.ended.is_none() && child.charged);
        assert_eq!(
            point.tail.len(),
            3,
            "one round with its result, then the cut response"
        );
        assert_eq!(point.resume.spent.tool_calls, 2);
        assert_eq!(point.resume.spent.subtasks, 1);
        // Four tree events: a and d start and end; the cut calls open again.
        assert_eq!(point.earlier_calls.len(), 4);

        // Cut while streaming its next response: that draft is emptied, the round before
        // is complete.
        let mut drafted = items[..2].to_vec();
        drafted.push(entry_row(place(2, None, 0), &response("tw", &[], true)));
        let point = resume_point(&drafted, &[], &[], 0);
        assert_eq!(point.resume.text, "one ");
        assert!(point.resume.cut.is_empty());
        assert!(!point.answered);
        assert_eq!(point.emptied.len(), 1);
        assert_eq!(point.emptied[0].position, 2);
        assert_eq!(root_text_of(&point.emptied), "");

        // Its final answer on record: it only ends.
        let mut answered = items[..2].to_vec();
        answered.push(entry_row(place(2, None, 0), &response("done", &[], false)));
        assert!(resume_point(&answered, &[], &[], 0).answered);
    }

    #[test]
    fn the_plan_made_at_the_start_is_read_back_and_is_no_round() {
        let plan = RecordEntry::Plan {
            plan: "1. look".into(),
        };
        let items = vec![
            entry_row(place(0, None, 0), &plan),
            entry_row(
                place(1, None, 0),
                &response("", &[("a", "read_file")], false),
            ),
        ];
        let point = resume_point(&items, &[], &[], 0);
        assert_eq!(point.resume.plan.as_deref(), Some("1. look"));
        assert_eq!(point.tail.len(), 1, "the plan is not in the history");
        assert_eq!(point.resume.cut.len(), 1);
    }

    #[test]
    fn a_result_kept_ahead_of_its_round_is_not_a_cut_call() {
        let items = vec![
            entry_row(
                place(0, None, 0),
                &response("", &[("a", "write_file"), ("b", "write_file")], false),
            ),
            results_row(place(1, None, 0), &[result("b", "write_file")]),
        ];
        let point = resume_point(&items, &[], &[], 0);
        let cut: Vec<&str> = point
            .resume
            .cut
            .iter()
            .map(|c| c.call.wire_id.as_str())
            .collect();
        assert_eq!(cut, ["a"]);
        assert_eq!(point.tail.len(), 2, "the response, then b's result");
        assert_eq!(point.resume.spent.tool_calls, 1);
    }

    #[test]
    fn a_subtask_that_finished_before_its_parent_kept_the_result_only_ends() {
        let items = vec![
            entry_row(
                place(0, None, 0),
                &response("", &[("s", "run_subtask")], false),
            ),
            entry_row(
                place(1, Some("s"), 1),
                &response("", &[("w", "write_file")], false),
            ),
            results_row(place(2, Some("s"), 1), &[result("w", "write_file")]),
            entry_row(place(3, Some("s"), 1), &response("all written", &[], false)),
        ];
        let point = resume_point(&items, &[], &[], 0);
        let child = point.resume.cut[0].child.as_deref().unwrap();
        assert_eq!(
            child.ended,
            Some(ChildEnded::Answer("all written".to_owned()))
        );
        assert_eq!(child.text, "all written");
    }

    #[test]
    fn each_job_of_a_cut_parallel_call_is_read_back_on_its_own() {
        let items = vec![
            entry_row(
                place(0, None, 0),
                &response("", &[("p", "run_parallel_subagents")], false),
            ),
            entry_row(
                place(1, Some("p#job1"), 1),
                &response("", &[("b", "write_file")], false),
            ),
            entry_row(
                place(2, Some("p#job0"), 1),
                &response("", &[("a", "write_file")], false),
            ),
            results_row(place(3, Some("p#job0"), 1), &[result("a", "write_file")]),
            entry_row(place(4, Some("p#job0"), 1), &response("a done", &[], false)),
        ];
        let point = resume_point(&items, &[], &[], 0);
        let cut = &point.resume.cut[0];
        let jobs: Vec<(usize, usize, usize, bool)> = cut
            .jobs
            .iter()
            .map(|(n, j)| (*n, j.tail.len(), j.cut.len(), j.ended.is_some()))
            .collect();
        assert_eq!(jobs, [(0, 3, 0, true), (1, 1, 1, false)]);
        assert_eq!(point.resume.spent.subtasks, 2, "each job was charged");
        // Their calls show under the parallel call, as clients know it.
        assert!(point.earlier_calls.iter().all(|e| match e {
            ServerEvent::ToolCallUpdate { parent_id, .. } => parent_id.as_deref() == Some("p"),
            _ => false,
        }));
    }

    #[test]
    fn the_memory_its_calls_wrote_is_read_back() {
        let write = RecordEntry::Assistant {
            id: None,
            text: String::new(),
            tool_calls: vec![RecordedCall {
                id: "w".into(),
                call_id: "pw".into(),
                name: "memory_write".into(),
                arguments: r#"{"key":"plan","value":"three steps"}"#.into(),
            }],
            partial: false,
            reasoning: None,
        };
        let items = vec![
            entry_row(place(0, None, 0), &write),
            results_row(place(1, None, 0), &[result("w", "memory_write")]),
            entry_row(
                place(2, None, 0),
                &response("", &[("s", "run_subtask")], false),
            ),
            results_row(place(3, None, 0), &[result("s", "run_subtask")]),
        ];
        let point = resume_point(&items, &[], &[], 0);
        assert_eq!(
            point.resume.memory,
            [
                ("plan".to_owned(), "three steps".to_owned()),
                ("task:ps".to_owned(), "ok".to_owned())
            ]
        );
    }

    fn root_text_of(items: &[ItemRow]) -> String {
        crate::views::root_text(items)
    }
}
