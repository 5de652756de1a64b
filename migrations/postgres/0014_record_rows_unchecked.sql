-- A turn writes many record rows (each round's response and results, each model call), and a
-- foreign key checked per row costs about as much as the insert itself: a lookup in the parent
-- table and a lock on the parent row. These rows are written only by the turn that created
-- their message, and deleted with it by the store (`delete_thread`, `drop_messages`), never
-- by a cascade; so their keys go. Messages, leases and everything written once a turn keep
-- theirs.
ALTER TABLE items DROP CONSTRAINT items_message_id_fkey;
ALTER TABLE model_calls DROP CONSTRAINT model_calls_thread_id_fkey;
