-- The knowledge base: collections of documents, each cut into chunks that are searched by
-- BM25 (the FTS5 table `knowledge_fts`, kept in step with `knowledge_chunks` by triggers) and,
-- when an embedding model is configured, by cosine similarity over `embedding` (each f32 in
-- little-endian order, made by `embedding_model`). A collection's `owner` is a user's email,
-- or '' for a collection shared with everyone. A document is stored once per collection by
-- the SHA-256 of its content (`hash`). Times are Unix milliseconds.

CREATE TABLE knowledge_collections (
    id         TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    name       TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX knowledge_collections_name ON knowledge_collections (owner, name);

CREATE TABLE knowledge_documents (
    id            TEXT PRIMARY KEY,
    collection_id TEXT NOT NULL REFERENCES knowledge_collections (id) ON DELETE CASCADE,
    title         TEXT NOT NULL,
    source        TEXT NOT NULL,
    hash          TEXT NOT NULL,
    chunk_count   INTEGER NOT NULL,
    created_at    INTEGER NOT NULL,
    created_by    TEXT NOT NULL
);
CREATE UNIQUE INDEX knowledge_documents_hash ON knowledge_documents (collection_id, hash);

CREATE TABLE knowledge_chunks (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    document_id     TEXT NOT NULL REFERENCES knowledge_documents (id) ON DELETE CASCADE,
    collection_id   TEXT NOT NULL,
    ordinal         INTEGER NOT NULL,
    location        TEXT NOT NULL,
    text            TEXT NOT NULL,
    embedding       BLOB,
    embedding_model TEXT
);
CREATE INDEX knowledge_chunks_document ON knowledge_chunks (document_id, ordinal);
CREATE INDEX knowledge_chunks_collection ON knowledge_chunks (collection_id);

CREATE VIRTUAL TABLE knowledge_fts USING fts5 (
    text, location,
    content = 'knowledge_chunks', content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);

CREATE TRIGGER knowledge_chunks_fts_insert AFTER INSERT ON knowledge_chunks BEGIN
    INSERT INTO knowledge_fts (rowid, text, location) VALUES (new.id, new.text, new.location);
END;
CREATE TRIGGER knowledge_chunks_fts_delete AFTER DELETE ON knowledge_chunks BEGIN
    INSERT INTO knowledge_fts (knowledge_fts, rowid, text, location)
    VALUES ('delete', old.id, old.text, old.location);
END;
CREATE TRIGGER knowledge_chunks_fts_update AFTER UPDATE OF text, location ON knowledge_chunks BEGIN
    INSERT INTO knowledge_fts (knowledge_fts, rowid, text, location)
    VALUES ('delete', old.id, old.text, old.location);
    INSERT INTO knowledge_fts (rowid, text, location) VALUES (new.id, new.text, new.location);
END;
