-- Weft schema (PostgreSQL). Timestamps are Unix milliseconds; JSON is stored as text so the
-- same queries serve PostgreSQL and SQLite.
CREATE TABLE users (
    id          TEXT PRIMARY KEY,
    created_at  BIGINT NOT NULL
);

CREATE TABLE api_keys (
    key_hash    TEXT PRIMARY KEY,
    user_id     TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at  BIGINT NOT NULL,
    revoked_at  BIGINT
);

CREATE TABLE threads (
    id               TEXT PRIMARY KEY,
    owner            TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    title            TEXT NOT NULL DEFAULT '',
    permission_mode  TEXT NOT NULL DEFAULT 'default',
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL
);
CREATE INDEX threads_owner ON threads(owner, updated_at);

CREATE TABLE messages (
    id               TEXT PRIMARY KEY,
    thread_id        TEXT NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
    role             TEXT NOT NULL,
    content          TEXT NOT NULL,
    execution_tree   TEXT,
    permission_mode  TEXT,
    status           TEXT NOT NULL DEFAULT 'completed',
    input_tokens     BIGINT NOT NULL DEFAULT 0,
    output_tokens    BIGINT NOT NULL DEFAULT 0,
    cost_usd         DOUBLE PRECISION NOT NULL DEFAULT 0,
    created_at       BIGINT NOT NULL
);
CREATE INDEX messages_thread ON messages(thread_id, created_at);

CREATE TABLE tool_calls (
    id               TEXT PRIMARY KEY,
    thread_id        TEXT NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
    message_id       TEXT NOT NULL,
    tool_call_id     TEXT NOT NULL,
    parent_id        TEXT,
    depth            BIGINT NOT NULL,
    tool             TEXT NOT NULL,
    arguments        TEXT NOT NULL,
    result_preview   TEXT NOT NULL,
    status           TEXT NOT NULL,
    approval_status  TEXT NOT NULL,
    started_at       DOUBLE PRECISION NOT NULL,
    duration_ms      DOUBLE PRECISION NOT NULL
);
CREATE INDEX tool_calls_thread ON tool_calls(thread_id);

CREATE TABLE model_calls (
    id               TEXT PRIMARY KEY,
    thread_id        TEXT NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
    message_id       TEXT NOT NULL,
    user_id          TEXT NOT NULL,
    provider         TEXT NOT NULL,
    model            TEXT NOT NULL,
    depth            BIGINT NOT NULL,
    input_tokens     BIGINT NOT NULL,
    output_tokens    BIGINT NOT NULL,
    cost_usd         DOUBLE PRECISION NOT NULL,
    duration_ms      DOUBLE PRECISION NOT NULL,
    error            TEXT,
    created_at       BIGINT NOT NULL
);
CREATE INDEX model_calls_thread ON model_calls(thread_id);

CREATE TABLE approvals (
    id               TEXT PRIMARY KEY,
    thread_id        TEXT NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
    tool             TEXT NOT NULL,
    arguments        TEXT NOT NULL,
    status           TEXT NOT NULL,
    created_at       BIGINT NOT NULL,
    decided_at       BIGINT
);
CREATE INDEX approvals_thread ON approvals(thread_id);
