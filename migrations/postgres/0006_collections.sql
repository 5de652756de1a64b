-- Knowledge collections: documents split into chunks, searched with full text (tsvector + GIN,
-- ranked by ts_rank) and, when an embeddings endpoint is configured, by vectors kept in
-- the row (little-endian f32, base64) and compared in process.
CREATE TABLE collections (
    id          TEXT PRIMARY KEY,
    owner       TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    shared      BIGINT NOT NULL DEFAULT 0,
    created_at  BIGINT NOT NULL,
    UNIQUE (owner, name)
);

CREATE TABLE documents (
    id            TEXT PRIMARY KEY,
    collection_id TEXT NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    title         TEXT NOT NULL,
    source        TEXT NOT NULL DEFAULT '',
    metadata      TEXT NOT NULL DEFAULT '{}',
    chunks        BIGINT NOT NULL,
    created_at    BIGINT NOT NULL
);

CREATE INDEX documents_collection ON documents (collection_id, created_at);

CREATE TABLE chunks (
    seq           BIGSERIAL PRIMARY KEY,
    document_id   TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    collection_id TEXT NOT NULL,
    position      BIGINT NOT NULL,
    text          TEXT NOT NULL,
    embedding     TEXT,
    tsv           tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED
);

CREATE INDEX chunks_tsv ON chunks USING GIN (tsv);
CREATE INDEX chunks_collection ON chunks (collection_id);
CREATE INDEX chunks_document ON chunks (document_id);
