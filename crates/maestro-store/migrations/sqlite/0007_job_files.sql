-- The files of a job: the inputs uploaded with it, and the outputs its runs left in the
-- workspace's `output/`. The bytes live in `blobs`, by content; a row names them by path.
-- `path` is relative and '/'-separated (`data/a.csv`), checked before it is stored.

CREATE TABLE job_files (
    job_id     TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    kind       TEXT NOT NULL CHECK (kind IN ('input', 'output')),
    path       TEXT NOT NULL,
    hash       TEXT NOT NULL REFERENCES blobs (hash),
    size       INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (job_id, kind, path)
);
CREATE INDEX job_files_hash ON job_files (hash);
