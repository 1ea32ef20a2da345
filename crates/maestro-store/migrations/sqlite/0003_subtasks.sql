-- Subtasks: a child job's depth below its root, its title, its number among its parent's
-- children (its workspace is `subtasks/<n>/` in the parent's), and the key its spawn was made
-- with, so that a spawn repeated after a crash finds the child instead of making another.

ALTER TABLE jobs ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN title TEXT;
ALTER TABLE jobs ADD COLUMN child_index INTEGER;
ALTER TABLE jobs ADD COLUMN spawn_key TEXT;
CREATE UNIQUE INDEX jobs_spawn_key ON jobs (parent_id, spawn_key);
CREATE INDEX jobs_waiting ON jobs (status) WHERE status = 'waiting_subtasks';
