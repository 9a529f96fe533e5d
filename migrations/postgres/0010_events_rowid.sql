-- 0010_events_rowid: on SQLite, events.id loses AUTOINCREMENT (migrations/0010_events_rowid.sql).
-- Nothing changes on PostgreSQL: events.id comes from an identity sequence, which is what
-- AUTOINCREMENT was standing in for, and costs no extra row write. The migration exists so that
-- both databases are at the same schema version.
SELECT 1;
