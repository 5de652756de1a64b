-- Each asset's SHA-256 (hex), computed when it is stored: its ETag, and a check on the bytes.
-- Assets kept before this column existed have none.
ALTER TABLE assets ADD COLUMN sha256 TEXT;
