//! [`ENGINE`]: the loop's own [`Recursion`] — delegations run as child levels
//! (`run_subtask`, `run_parallel_subagents`), and lazily built nested call sites for tools
//! that make calls of their own.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use serde_json::Value;

use crate::calls::Nested;
use crate::level::Level;
use crate::parallel;
use crate::record::Call;
use crate::subtask;
use crate::tool::NestedCalls;
use crate::toolbelt::Toolbelt;
use crate::turn::{Delegation, Recursion, Turn};

pub(crate) struct Engine;

/// The one [`Recursion`] every turn uses.
pub(crate) static ENGINE: Engine = Engine;

impl Recursion for Engine {
    fn delegate<'a>(
        &'a self,
        turn: &'a Arc<Turn>,
        level: &'a Level,
        call: &'a Call,
        kind: Delegation,
        args: &'a Value,
    ) -> BoxFuture<'a, Result<String, String>> {
        match kind {
            Delegation::Subtask => subtask::run(turn, level, call, args).boxed(),
            Delegation::Parallel => parallel::run(turn, level, call, args).boxed(),
        }
    }

    fn nested(
        &self,
        turn: &Arc<Turn>,
        parent_id: &str,
        depth: u32,
        toolbelt: &Toolbelt,
    ) -> Arc<dyn NestedCalls> {
        Arc::new(Nested::new(turn, parent_id, depth, toolbelt))
    }
}
