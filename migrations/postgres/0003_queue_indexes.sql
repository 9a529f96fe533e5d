-- 0003_queue_indexes (PostgreSQL): the same indexes as migrations/0003_queue_indexes.sql for SQLite.
-- messages_pending (state, not_before) WHERE state IN ('queued', 'delivering') was never used:
-- SQLite uses a partial index only when the query's WHERE repeats the index's condition, and the
-- queue's queries ask for state = 'queued' or state = 'delivering'. With a million messages, the
-- claim query scanned the whole table inside its write transaction. One partial index per state
-- matches the queries exactly.
DROP INDEX messages_pending;
CREATE INDEX messages_queued ON messages (not_before) WHERE state = 'queued';
CREATE INDEX messages_delivering ON messages (lease_expires_at) WHERE state = 'delivering';
-- How many live Sessions name a Workspace (attachedSessions, and the 409 on DELETE).
CREATE INDEX sessions_workspace ON sessions (workspace_id) WHERE workspace_id IS NOT NULL;
