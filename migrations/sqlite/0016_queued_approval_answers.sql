-- An approval answered while no replica runs its turn (its replica died and none has taken
-- the turn up yet) waits here, as {"decision","reason"} JSON, for the replica that takes the
-- turn up: it applies the answer when it asks again instead of asking the person twice.
ALTER TABLE approvals ADD COLUMN queued_answer TEXT;
