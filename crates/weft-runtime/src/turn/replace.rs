//! A message that replaces an earlier exchange (`replaces`, for regenerate and edit): the
//! answer it names checked before anything is sent, and where the thread is cut.

use weft_protocol::ErrorCode;
use weft_store::{MessageRow, ThreadRow};

use crate::runtime::Runtime;
use weft_frames::Refusal;

impl Runtime {
    /// The place in its thread of the answer `replaces` names: a finished assistant message
    /// of `thread`. `None` when nothing is replaced.
    pub(super) async fn replaced_answer(
        &self,
        thread: Option<&ThreadRow>,
        replaces: Option<&str>,
    ) -> Result<Option<i64>, Refusal> {
        let Some(id) = replaces else {
            return Ok(None);
        };
        let not_found = || {
            Refusal::new(
                ErrorCode::MessageNotFound,
                format!("replaces: no answer `{id}` in this thread"),
            )
        };
        let Some(thread) = thread else {
            return Err(not_found());
        };
        let answer = self
            .store
            .message(&thread.id, id)
            .await
            .map_err(Refusal::internal)?
            .ok_or_else(not_found)?;
        if answer.role != "assistant" {
            return Err(Refusal::invalid(
                "replaces must name an answer (an assistant message), not a user message",
            ));
        }
        if answer.status == "running" {
            return Err(Refusal::new(
                ErrorCode::TurnInProgress,
                format!("answer `{id}` is still running; send stop first"),
            ));
        }
        Ok(Some(answer.position))
    }
}

/// Where the thread is cut for a turn that replaces the answer at `answer`: at the user
/// message before it (the answer's own place when there is none). Messages from there on go.
pub(super) fn cut_position(messages: &[MessageRow], answer: i64) -> i64 {
    messages
        .iter()
        .rev()
        .find(|m| m.position < answer && m.role == "user")
        .map_or(answer, |m| m.position)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(role: &str, position: i64) -> MessageRow {
        MessageRow {
            id: format!("m{position}"),
            thread_id: "t".into(),
            role: role.into(),
            content: serde_json::json!(""),
            execution_tree: None,
            permission_mode: None,
            status: "completed".into(),
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0,
            created_at: 0,
            position,
            metadata: None,
        }
    }

    #[test]
    fn the_cut_is_the_user_message_the_answer_answered() {
        let thread = [
            message("user", 0),
            message("assistant", 1),
            message("user", 2),
            message("assistant", 3),
        ];
        assert_eq!(cut_position(&thread, 3), 2);
        assert_eq!(cut_position(&thread, 1), 0);
        // Gaps left by earlier replacements do not matter.
        let gaps = [
            message("user", 0),
            message("assistant", 1),
            message("user", 6),
            message("assistant", 7),
        ];
        assert_eq!(cut_position(&gaps, 7), 6);
        // An answer with no question before it goes alone.
        assert_eq!(cut_position(&[message("assistant", 4)], 4), 4);
    }
}
