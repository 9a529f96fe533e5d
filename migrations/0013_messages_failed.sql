-- 0013_messages_failed: /metrics counts messages by state at every scrape. A GROUP BY state walked
-- every message of the installation's history (0.23 s at a million, growing without bound). Now
-- the counts come from the partial indexes of the states that stay small (queued, delivering and,
-- with this index, failed) and completed is the rest of a count(*), which SQLite answers from the
-- narrowest index without reading a row (0.01 s at a million). Failed messages are rare: the index
-- costs a write only when one fails, and lists failures by time for an auditor.
CREATE INDEX messages_failed ON messages (updated_at) WHERE state = 'failed';
