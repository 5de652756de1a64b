-- The tools a thread's user allowed "for this chat" (a JSON array of names): kept with the
-- thread, so the grant holds on every replica and after a restart.
ALTER TABLE threads ADD COLUMN allowed_tools TEXT NOT NULL DEFAULT '[]';
