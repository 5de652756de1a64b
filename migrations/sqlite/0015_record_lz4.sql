-- PostgreSQL's record rows compress with lz4 from this migration on; SQLite does not compress
-- values, so nothing changes here (the number keeps the two sets of migrations in step).
SELECT 1;
