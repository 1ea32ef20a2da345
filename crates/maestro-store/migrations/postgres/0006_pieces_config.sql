-- Pieces kept in the store, so that every node sees them, one row per version (a NULL yaml is
-- a deletion); the job's piece version; the configuration overlay written at runtime.

CREATE TABLE pieces (
    name       TEXT NOT NULL,
    version    BIGINT NOT NULL,
    yaml       TEXT,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (name, version)
);

ALTER TABLE jobs ADD COLUMN piece_version BIGINT;

CREATE TABLE config_versions (
    version    BIGINT PRIMARY KEY,
    doc        TEXT NOT NULL,
    updated_by TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);
