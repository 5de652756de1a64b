//! What a user reads and changes of their threads outside a turn: the list of them, a
//! thread's messages and whole record, one turn's trace, a new title. Every read is the
//! caller's own thread (the database says whose), and a running turn's trace holds what its
//! clients were shown, wherever it runs.

use std::sync::Arc;

use weft_frames::Refusal;
use weft_protocol::rest::{ThreadSummary, Trace};
use weft_protocol::{ErrorCode, PermissionMode, RecordItem, StoredMessage};
use weft_record::persist::rfc3339;
use weft_record::views::{thread_messages, thread_record, turn_trace};
use weft_store::ThreadRow;

use crate::runtime::Runtime;

impl Runtime {
    /// The caller's threads, the latest first.
    pub async fn threads_of(&self, user: &str) -> Result<Vec<ThreadSummary>, Refusal> {
        let threads = self
            .store
            .threads_of(user)
            .await
            .map_err(Refusal::internal)?;
        Ok(threads.iter().map(|t| self.summary(t)).collect())
    }

    /// Rename one of the caller's threads (`title` already checked: 1 to 200 characters).
    pub async fn rename_thread(
        &self,
        user: &str,
        id: &str,
        title: &str,
    ) -> Result<ThreadSummary, Refusal> {
        self.check_owner(user, id).await?;
        self.store
            .set_thread_title(id, title)
            .await
            .map_err(Refusal::internal)?;
        let row = self
            .store
            .thread(id)
            .await
            .map_err(Refusal::internal)?
            .ok_or_else(|| Refusal::new(ErrorCode::ThreadNotFound, "no such thread"))?;
        Ok(self.summary(&row))
    }

    /// The messages of one of the caller's threads, as clients see them.
    pub async fn messages_of(&self, user: &str, id: &str) -> Result<Vec<StoredMessage>, Refusal> {
        self.check_owner(user, id).await?;
        thread_messages(&self.store, id)
            .await
            .map_err(Refusal::internal)
    }

    /// The whole record of one of the caller's threads, in order.
    pub async fn record_of(&self, user: &str, id: &str) -> Result<Vec<RecordItem>, Refusal> {
        self.check_owner(user, id).await?;
        let messages = self.store.messages(id).await.map_err(Refusal::internal)?;
        let items = self.store.root_items(id).await.map_err(Refusal::internal)?;
        Ok(thread_record(&messages, &items))
    }

    /// One turn's trace (`message_id` a message of the caller's thread `id`).
    pub async fn trace_of(
        self: &Arc<Self>,
        user: &str,
        id: &str,
        message_id: &str,
    ) -> Result<Trace, Refusal> {
        self.check_owner(user, id).await?;
        // A running turn's trace holds what its clients have seen, wherever it runs.
        self.settle(user, id).await?;
        let no_message =
            || Refusal::new(ErrorCode::MessageNotFound, "no such message in this thread");
        let message = self
            .store
            .message(id, message_id)
            .await
            .map_err(Refusal::internal)?
            .ok_or_else(no_message)?;
        let items = if message.role == "assistant" {
            self.store
                .turn_items(id, message_id)
                .await
                .map_err(Refusal::internal)?
        } else {
            Vec::new()
        };
        Ok(Trace {
            message_id: message.id,
            status: message.status,
            trace: turn_trace(&items),
        })
    }

    fn summary(&self, t: &ThreadRow) -> ThreadSummary {
        ThreadSummary {
            id: t.id.clone(),
            title: t.title.clone(),
            permission_mode: PermissionMode::parse(&t.permission_mode).unwrap_or_default(),
            agent: t
                .agent
                .as_deref()
                .unwrap_or(weft_protocol::DEFAULT_AGENT)
                .to_owned(),
            created_at: rfc3339(t.created_at),
            updated_at: rfc3339(t.updated_at),
            active: self.hub.get(&t.id).is_some_and(|r| r.is_active()),
        }
    }
}
