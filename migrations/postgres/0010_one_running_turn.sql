-- A thread runs one turn at a time: the database makes it so, whichever replica starts it.
-- A turn left running beside a newer one (which only a race between replicas could make)
-- is closed first.
UPDATE messages SET status = 'interrupted'
WHERE status = 'running' AND EXISTS (
    SELECT 1 FROM messages newer
    WHERE newer.thread_id = messages.thread_id AND newer.status = 'running'
      AND (newer.created_at > messages.created_at
           OR (newer.created_at = messages.created_at AND newer.id > messages.id))
);
CREATE UNIQUE INDEX messages_one_running_turn ON messages(thread_id) WHERE status = 'running';
