-- How many times a turn's lease was taken over from a replica that died: a turn taken up
-- again numbers its frames above everything its earlier lives sent.
ALTER TABLE turn_leases ADD COLUMN takeovers INTEGER NOT NULL DEFAULT 0;
