-- Comments on jobs (questions and answers), schedules and the slots they fired.

CREATE TABLE job_comments (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id     TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    author     TEXT NOT NULL,
    kind       TEXT NOT NULL,
    body       TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX job_comments_job ON job_comments (job_id, id);

CREATE TABLE schedules (
    id          TEXT PRIMARY KEY,
    piece       TEXT NOT NULL,
    task        TEXT NOT NULL,
    spec        TEXT NOT NULL,
    tz          TEXT NOT NULL,
    misfire     TEXT NOT NULL,
    paused      INTEGER NOT NULL DEFAULT 0,
    missed      INTEGER NOT NULL DEFAULT 0,
    created_by  TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);

CREATE TABLE schedule_fires (
    schedule_id TEXT NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    slot_time   INTEGER NOT NULL,
    job_id      TEXT REFERENCES jobs (id),
    fired_at    INTEGER NOT NULL,
    PRIMARY KEY (schedule_id, slot_time)
);

ALTER TABLE jobs ADD COLUMN schedule_id TEXT;
ALTER TABLE jobs ADD COLUMN scheduled_for INTEGER;

ALTER TABLE audit_log ADD COLUMN schedule_id TEXT;
