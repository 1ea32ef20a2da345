-- Comments on jobs (questions and answers), schedules and the slots they fired.

CREATE TABLE job_comments (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id     TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    author     TEXT NOT NULL,
    kind       TEXT NOT NULL,
    body       TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX job_comments_job ON job_comments (job_id, id);

CREATE TABLE schedules (
    id          TEXT PRIMARY KEY,
    piece       TEXT NOT NULL,
    task        TEXT NOT NULL,
    spec        TEXT NOT NULL,
    tz          TEXT NOT NULL,
    misfire     TEXT NOT NULL,
    paused      BIGINT NOT NULL DEFAULT 0,
    missed      BIGINT NOT NULL DEFAULT 0,
    created_by  TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);

CREATE TABLE schedule_fires (
    schedule_id TEXT NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    slot_time   BIGINT NOT NULL,
    job_id      TEXT REFERENCES jobs (id),
    fired_at    BIGINT NOT NULL,
    PRIMARY KEY (schedule_id, slot_time)
);

ALTER TABLE jobs ADD COLUMN schedule_id TEXT;
ALTER TABLE jobs ADD COLUMN scheduled_for BIGINT;

ALTER TABLE audit_log ADD COLUMN schedule_id TEXT;
