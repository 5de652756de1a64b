-- Leases are found by id (the owner's renewal reads the whole small table): as on PostgreSQL,
-- no index on the owner.
DROP INDEX turn_leases_owner;
