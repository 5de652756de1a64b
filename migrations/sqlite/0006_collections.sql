-- Knowledge collections: documents split into chunks, searched with full text (FTS5 with the
-- porter stemmer, ranked by bm25) and, when an embeddings endpoint is configured, by vectors
-- kept in the row (little-endian f32, base64) and compared in process.
CREATE TABLE collections (
    id          TEXT PRIMARY KEY,
    owner       TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    shared      INTEGER NOT NULL DEFAULT 0,
    created_at  INTEGER NOT NULL,
    UNIQUE (owner, name)
);

CREATE TABLE documents (
    id            TEXT PRIMARY KEY,
    collection_id TEXT NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    title         TEXT NOT NULL,
    source        TEXT NOT NULL DEFAULT '',
    metadata      TEXT NOT NULL DEFAULT '{}',
    chunks        INTEGER NOT NULL,
    created_at    INTEGER NOT NULL
);

CREATE INDEX documents_collection ON documents (collection_id, created_at);

CREATE TABLE chunks (
    seq           INTEGER PRIMARY KEY,
    document_id   TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    collection_id TEXT NOT NULL,
    position      INTEGER NOT NULL,
    text          TEXT NOT NULL,
    embedding     TEXT
);

CREATE INDEX chunks_collection ON chunks (collection_id);
CREATE INDEX chunks_document ON chunks (document_id);

-- The index over chunks' text, kept in step by triggers (cascaded deletes included).
CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content = 'chunks', content_rowid = 'seq', tokenize = 'porter unicode61');

CREATE TRIGGER chunks_fts_insert AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts (rowid, text) VALUES (new.seq, new.text);
END;

CREATE TRIGGER chunks_fts_delete AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, text) VALUES ('delete', old.seq, old.text);
END;
