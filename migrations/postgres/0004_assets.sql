-- Assets: bytes kept in the object store (offloaded tool results; images and audio later),
-- indexed here with their owner. The object's key is `<owner>/<id>`.
CREATE TABLE assets (
    id          TEXT PRIMARY KEY,
    owner       TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    kind        TEXT NOT NULL,
    media_type  TEXT NOT NULL,
    size        BIGINT NOT NULL,
    source      TEXT,
    created_at  BIGINT NOT NULL
);

CREATE INDEX assets_owner ON assets (owner, created_at);
