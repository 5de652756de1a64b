-- A batch's fences find leases by id. With an index on the owner too, PostgreSQL's planner
-- also scanned that index, every lease of the replica and every dead version the heartbeat
-- left, on each fence statement (tens of milliseconds under load); the owner's renewal reads
-- the whole small table anyway. Free room in each page lets a renewal update a row in place.
DROP INDEX turn_leases_owner;
ALTER TABLE turn_leases SET (fillfactor = 50);
