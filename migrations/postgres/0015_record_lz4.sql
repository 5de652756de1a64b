-- A round's record row is a few KB (a response with its calls and their results), above the
-- size at which PostgreSQL compresses a value in the row. Its default method, pglz, took
-- about a sixth of PostgreSQL's CPU under W1; lz4 (PostgreSQL 14 on, when it was built with
-- it, as the Debian, Docker and cloud builds are) compresses as well for such JSON at a
-- fraction of the cost. Rows already written keep their method; a server built without lz4
-- keeps pglz.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_settings
               WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE items ALTER COLUMN body SET COMPRESSION lz4;
    END IF;
END
$$;
