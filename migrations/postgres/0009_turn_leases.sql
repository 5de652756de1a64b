-- Which replica runs each live turn, and until when. The owner's heartbeat renews it; once
-- it has expired any replica may take it and close the turn. It goes when the turn ends.
CREATE TABLE turn_leases (
    message_id  TEXT PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
    owner       TEXT NOT NULL,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX turn_leases_owner ON turn_leases(owner);
