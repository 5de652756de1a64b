-- Stored agents (seed 004's agent config, as JSON), one namespace per user; the thread
-- remembers the agent it runs; an assistant message keeps run metadata (the plan); an
-- approval keeps the schema-only arguments the model sent with the call.
CREATE TABLE agents (
    owner       TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    config      TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (owner, name)
);

ALTER TABLE threads ADD COLUMN agent TEXT;
ALTER TABLE messages ADD COLUMN metadata TEXT;
ALTER TABLE approvals ADD COLUMN injected_args TEXT;
