-- Pieces kept in the store, so that every node sees them, one row per version (a NULL yaml is
-- a deletion); the job's piece version; the configuration overlay written at runtime.

CREATE TABLE pieces (
    name       TEXT NOT NULL,
    version    INTEGER NOT NULL,
    yaml       TEXT,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (name, version)
);

ALTER TABLE jobs ADD COLUMN piece_version INTEGER;

CREATE TABLE config_versions (
    version    INTEGER PRIMARY KEY,
    doc        TEXT NOT NULL,
    updated_by TEXT NOT NULL,
    updated_at INTEGER NOT NULL
);
