//! A thread's stored messages as the provider history, pruned to `max_history_tokens`.

use weft_core::ChatMessage;
use weft_protocol::MessageContent;
use weft_store::MessageRow;

/// Rough token estimate (4 characters a token), enough to keep a prompt under budget.
fn estimate_tokens(message: &ChatMessage) -> u64 {
    (message.text().len() as u64).div_ceil(4) + 4
}

/// User and assistant messages in order, oldest dropped first until the estimate fits;
/// the newest message is always kept. Empty assistant messages (a turn stopped before any
/// text) are skipped.
pub fn provider_history(rows: &[MessageRow], max_tokens: u64) -> Vec<ChatMessage> {
    let messages: Vec<ChatMessage> = rows
        .iter()
        .filter_map(|row| {
            let content: MessageContent = serde_json::from_value(row.content.clone()).ok()?;
            match row.role.as_str() {
                "user" => Some(ChatMessage::user(content)),
                "assistant" if !content.text().is_empty() => {
                    Some(ChatMessage::assistant(content.text(), Vec::new()))
                }
                _ => None,
            }
        })
        .collect();
    let mut total = 0u64;
    let mut keep_from = messages.len();
    for (i, m) in messages.iter().enumerate().rev() {
        total += estimate_tokens(m);
        if total > max_tokens && i + 1 < messages.len() {
            break;
        }
        keep_from = i;
    }
    messages[keep_from..].to_vec()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn row(role: &str, text: &str) -> MessageRow {
        MessageRow {
            id: "m".into(),
            thread_id: "t".into(),
            role: role.into(),
            content: json!(text),
            execution_tree: None,
            permission_mode: None,
            status: "completed".into(),
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0,
            created_at: 0,
        }
    }

    #[test]
    fn prunes_oldest_first_and_keeps_the_newest() {
        let rows = vec![
            row("user", &"a".repeat(400)),
            row("assistant", "ok"),
            row("user", &"b".repeat(400)),
        ];
        let all = provider_history(&rows, 10_000);
        assert_eq!(all.len(), 3);
        let pruned = provider_history(&rows, 150);
        assert_eq!(pruned.len(), 2);
        assert_eq!(provider_history(&rows, 1).len(), 1);
    }

    #[test]
    fn skips_empty_assistant_messages() {
        let rows = vec![
            row("user", "hi"),
            row("assistant", ""),
            row("user", "again"),
        ];
        assert_eq!(provider_history(&rows, 10_000).len(), 2);
    }
}
