-- The queue's indexes hold only the rows they serve. A job's claim, lease renewals and end each
-- write a new row version, and every full index took a new entry for each one; a partial index
-- takes one only while the job is in its state. `jobs_parent` goes: `jobs_spawn_key` starts
-- with `parent_id` and serves the same lookups.

DROP INDEX jobs_ready;
DROP INDEX jobs_lease;
DROP INDEX jobs_parent;
-- The claim: queued jobs in claim order (priority, then age).
CREATE INDEX jobs_queued ON jobs (priority DESC, run_at, id) WHERE status = 'queued';
-- The sweep: running jobs by the end of their lease.
CREATE INDEX jobs_running ON jobs (lease_expires_at) WHERE status = 'running';
