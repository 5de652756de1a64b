-- Saved workflows (a graph of nodes, as JSON) per user, and their runs: from REST, from a
-- chat message (route 1, in a thread) or from the run_workflow tool.
CREATE TABLE workflows (
    id          TEXT PRIMARY KEY,
    owner       TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    graph       TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);

CREATE INDEX workflows_owner ON workflows (owner, updated_at);

CREATE TABLE workflow_runs (
    id          TEXT PRIMARY KEY,
    workflow_id TEXT NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
    owner       TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    thread_id   TEXT,
    message_id  TEXT,
    status      TEXT NOT NULL,
    params      TEXT NOT NULL,
    outputs     TEXT NOT NULL,
    nodes       TEXT NOT NULL,
    error       TEXT,
    started_at  BIGINT NOT NULL,
    finished_at BIGINT NOT NULL
);

CREATE INDEX workflow_runs_workflow ON workflow_runs (workflow_id, started_at);
