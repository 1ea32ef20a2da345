-- The knowledge base: collections of documents, each cut into chunks that are searched by
-- PostgreSQL's full-text search (`tsv`, generated from the location and the text, under the
-- GIN index `knowledge_chunks_tsv`) and, when an embedding model is configured, by cosine
-- similarity over `embedding` (each f32 in little-endian order, made by `embedding_model`).
-- A collection's `owner` is a user's email, or '' for a collection shared with everyone. A
-- document is stored once per collection by the SHA-256 of its content (`hash`). Times are
-- Unix milliseconds.

CREATE TABLE knowledge_collections (
    id         TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    name       TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX knowledge_collections_name ON knowledge_collections (owner, name);

CREATE TABLE knowledge_documents (
    id            TEXT PRIMARY KEY,
    collection_id TEXT NOT NULL REFERENCES knowledge_collections (id) ON DELETE CASCADE,
    title         TEXT NOT NULL,
    source        TEXT NOT NULL,
    hash          TEXT NOT NULL,
    chunk_count   BIGINT NOT NULL,
    created_at    BIGINT NOT NULL,
    created_by    TEXT NOT NULL
);
CREATE UNIQUE INDEX knowledge_documents_hash ON knowledge_documents (collection_id, hash);

CREATE TABLE knowledge_chunks (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    document_id     TEXT NOT NULL REFERENCES knowledge_documents (id) ON DELETE CASCADE,
    collection_id   TEXT NOT NULL,
    ordinal         BIGINT NOT NULL,
    location        TEXT NOT NULL,
    text            TEXT NOT NULL,
    embedding       BYTEA,
    embedding_model TEXT,
    tsv             TSVECTOR GENERATED ALWAYS AS (
        setweight(to_tsvector('english', location), 'B') || to_tsvector('english', text)
    ) STORED
);
CREATE INDEX knowledge_chunks_document ON knowledge_chunks (document_id, ordinal);
CREATE INDEX knowledge_chunks_collection ON knowledge_chunks (collection_id);
CREATE INDEX knowledge_chunks_tsv ON knowledge_chunks USING GIN (tsv);
