-- A turn writes many record rows (each round's response and results, each model call), and a
-- foreign key checked per row is a lookup in the parent table per row. These rows are written
-- only by the turn that created their message, and deleted with it by the store
-- (`delete_thread`, `drop_messages`), never by a cascade; so their keys go, as on PostgreSQL.
-- SQLite cannot drop a constraint: both tables are built again without it.
CREATE TABLE items_unchecked (
    message_id   TEXT NOT NULL,
    position     INTEGER NOT NULL,
    thread_id    TEXT NOT NULL,
    kind         TEXT NOT NULL,
    parent_id    TEXT,
    depth        INTEGER NOT NULL,
    body         TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (message_id, position)
);
INSERT INTO items_unchecked (message_id, position, thread_id, kind, parent_id, depth, body, created_at)
    SELECT message_id, position, thread_id, kind, parent_id, depth, body, created_at FROM items;
DROP TABLE items;
ALTER TABLE items_unchecked RENAME TO items;

CREATE TABLE model_calls_unchecked (
    id               TEXT PRIMARY KEY,
    thread_id        TEXT NOT NULL,
    message_id       TEXT NOT NULL,
    user_id          TEXT NOT NULL,
    provider         TEXT NOT NULL,
    model            TEXT NOT NULL,
    depth            INTEGER NOT NULL,
    input_tokens     INTEGER NOT NULL,
    output_tokens    INTEGER NOT NULL,
    cost_usd         REAL NOT NULL,
    duration_ms      REAL NOT NULL,
    error            TEXT,
    created_at       INTEGER NOT NULL,
    tool_calls       BIGINT NOT NULL DEFAULT 0
);
INSERT INTO model_calls_unchecked (id, thread_id, message_id, user_id, provider, model, depth,
        input_tokens, output_tokens, cost_usd, duration_ms, error, created_at, tool_calls)
    SELECT id, thread_id, message_id, user_id, provider, model, depth,
        input_tokens, output_tokens, cost_usd, duration_ms, error, created_at, tool_calls
    FROM model_calls;
DROP TABLE model_calls;
ALTER TABLE model_calls_unchecked RENAME TO model_calls;
CREATE INDEX model_calls_thread ON model_calls(thread_id);
