-- Jobs, their events, large tool results, workers and the audit log.
-- Times are Unix milliseconds (UTC); ids are UUIDv7 text; JSON is stored as text.

CREATE TABLE jobs (
    id               TEXT PRIMARY KEY,
    piece            TEXT NOT NULL,
    task             TEXT NOT NULL,
    status           TEXT NOT NULL,
    parent_id        TEXT REFERENCES jobs (id),
    priority         BIGINT NOT NULL DEFAULT 0,
    task_class       TEXT NOT NULL DEFAULT 'default',
    workspace        TEXT,
    submitted_by     TEXT NOT NULL,
    attempts         BIGINT NOT NULL DEFAULT 0,
    max_attempts     BIGINT NOT NULL,
    fence            BIGINT NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_expires_at BIGINT,
    run_at           BIGINT NOT NULL,
    result           TEXT,
    reason           TEXT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    started_at       BIGINT,
    finished_at      BIGINT
);
CREATE INDEX jobs_ready ON jobs (status, priority DESC, run_at, id);
CREATE INDEX jobs_lease ON jobs (status, lease_expires_at);
CREATE INDEX jobs_parent ON jobs (parent_id);

CREATE TABLE job_events (
    job_id     TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    seq        BIGINT NOT NULL,
    fence      BIGINT NOT NULL,
    kind       TEXT NOT NULL,
    payload    TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (job_id, seq)
);

CREATE TABLE blobs (
    hash       TEXT PRIMARY KEY,
    size       BIGINT NOT NULL,
    data       BYTEA NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE workers (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    profile      TEXT NOT NULL,
    task_classes TEXT NOT NULL,
    host         TEXT NOT NULL,
    pid          BIGINT NOT NULL,
    started_at   BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL
);

CREATE TABLE audit_log (
    id       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       BIGINT NOT NULL,
    actor    TEXT NOT NULL,
    action   TEXT NOT NULL,
    job_id   TEXT,
    detail   TEXT
);
CREATE INDEX audit_log_job ON audit_log (job_id);
