-- The files of a job: the inputs uploaded with it, and the outputs its runs left in the
-- workspace's `output/`. The bytes live in `blobs`, by content; a row names them by path.
-- `path` is relative and '/'-separated (`data/a.csv`), checked before it is stored.

CREATE TABLE job_files (
    job_id     TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    kind       TEXT NOT NULL CHECK (kind IN ('input', 'output')),
    path       TEXT NOT NULL,
    hash       TEXT NOT NULL REFERENCES blobs (hash),
    size       BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (job_id, kind, path)
);
CREATE INDEX job_files_hash ON job_files (hash);

-- Other processes learn of new events and status changes through notifications, sent when
-- the transaction that wrote them commits (never for a write rolled back):
-- `maestro_events` carries `<job id>:<last seq>` once per job and statement that appends
-- events, `maestro_jobs` the id of a job whose status changed.
CREATE FUNCTION maestro_notify_events() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    appended RECORD;
BEGIN
    FOR appended IN SELECT job_id, max(seq) AS seq FROM new_rows GROUP BY job_id LOOP
        PERFORM pg_notify('maestro_events', appended.job_id || ':' || appended.seq);
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER job_events_notify AFTER INSERT ON job_events
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION maestro_notify_events();

CREATE FUNCTION maestro_notify_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('maestro_jobs', NEW.id);
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_status_notify AFTER UPDATE OF status ON jobs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION maestro_notify_jobs();
