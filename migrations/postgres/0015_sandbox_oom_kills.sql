-- 0015_sandbox_oom_kills (PostgreSQL): the same as migrations/0015_sandbox_oom_kills.sql for
-- SQLite: the processes the OOM killer ended inside each Sandbox while its agent went on.
ALTER TABLE sandboxes ADD COLUMN oom_kills BIGINT NOT NULL DEFAULT 0;
