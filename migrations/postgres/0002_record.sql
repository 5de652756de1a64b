-- The conversation record: every round of every level of a turn (an assistant message with
-- its tool calls, or a round's tool results), in order within the turn's assistant message.
-- Root-level items (depth 0) are the history the next turn replays; deeper ones serve the
-- trace API. The primary key is the only index: items are read turn by turn.
CREATE TABLE items (
    message_id   TEXT NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    position     BIGINT NOT NULL,
    thread_id    TEXT NOT NULL,
    kind         TEXT NOT NULL,
    parent_id    TEXT,
    depth        BIGINT NOT NULL,
    body         TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (message_id, position)
);

-- Messages are ordered by position within their thread (a user message, then its turn's
-- assistant message, which exists from the start of the turn with status `running`).
ALTER TABLE messages ADD COLUMN position BIGINT NOT NULL DEFAULT 0;
CREATE INDEX messages_running ON messages(status) WHERE status = 'running';

-- Tool calls are audited from the record now; this table keeps what older turns wrote.
