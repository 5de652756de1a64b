//! The `classic` execution mode's turn: the planner pre-pass when the agent plans, then the
//! unified loop at depth 0, all under the turn's wall clock.

use std::future::Future;
use std::sync::Arc;

use crate::level::Level;
use crate::planner;
use crate::recursion::ENGINE;
use crate::run_loop::{run_level, LevelEnd};
use crate::spec::{TurnEnd, TurnOutcome, TurnSpec};
use crate::turn::{finish, Turn};

/// Run one turn of the unified loop (the `classic` execution mode): the planner pre-pass
/// when the agent plans, then the loop at depth 0, under the wall clock. An `async` block, not
/// an `async fn`: the latter keeps a second copy of `spec` in the turn's future.
#[allow(clippy::manual_async_fn)] // an `async fn` would hold `spec` twice
pub fn run_classic_turn(mut spec: TurnSpec) -> impl Future<Output = TurnOutcome> + Send {
    async move {
        let turn = Arc::new(Turn::new(&spec, &ENGINE));
        let history = std::mem::take(&mut spec.history);
        let run = async {
            // A resumed turn acts on the plan its first life made (kept in the record).
            let plan = match (&spec.planner, &spec.resume) {
                (_, Some(resume)) => resume.plan.clone(),
                (Some(planner), None) => {
                    let plan = planner::plan(&turn, planner, &history, &spec.toolbelt).await;
                    if let Some(plan) = &plan {
                        turn.recorder.plan(plan);
                    }
                    plan
                }
                (None, None) => None,
            };
            let root = Level::root(&turn.config, &turn.llm, &spec, plan.as_deref());
            (run_level(turn.clone(), root, history).await, plan)
        };
        tokio::pin!(run);
        let (result, plan) = tokio::select! {
            result = &mut run => result,
            () = turn.budget.wall_clock_out() => {
                if let Err(trip) = turn.budget.check_wall_clock() {
                    turn.trip(trip);
                }
                run.await
            }
        };
        let end = match turn.end() {
            Some(end) => end,
            None if spec.cancel.is_cancelled() => TurnEnd::Cancelled,
            None => match result.end {
                LevelEnd::Answer(_) | LevelEnd::Structured(_) => TurnEnd::Completed,
                LevelEnd::Failed(message) => TurnEnd::Failed(message),
                LevelEnd::Stopped => TurnEnd::Cancelled,
            },
        };
        let mut outcome = finish(&turn, end, result.all_text, result.history);
        outcome.plan = plan;
        outcome
    }
}
