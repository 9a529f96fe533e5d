-- 0013_messages_failed (PostgreSQL): the same index as migrations/0013_messages_failed.sql for
-- SQLite. /metrics counts the small states (queued, delivering, failed) through their partial
-- indexes and completed as the rest of a count(*), instead of grouping every message by state.
CREATE INDEX messages_failed ON messages (updated_at) WHERE state = 'failed';
