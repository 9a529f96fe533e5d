-- 0010_events_rowid: events.id without AUTOINCREMENT. AUTOINCREMENT made every audit event (one
-- per enqueued message, and more) also write the events row of sqlite_sequence; without it SQLite
-- gives a new row the largest id in the table plus one.
--
-- Why the ids still only grow, which the events cursor (GET /v1/events?after=, Last-Event-ID,
-- webhooks' event_id) relies on: AUTOINCREMENT differs from max(id) + 1 only once the row with
-- the largest id has been deleted, and no event is ever deleted (the triggers below refuse DELETE
-- and UPDATE, so an id never changes either); a rolled-back insert takes its id back under both.
-- SQLite has one writer at a time, so the ids are handed out in commit order too. Restarts change
-- nothing: the next id is read from the table itself, which is on disk.
--
-- SQLite cannot drop AUTOINCREMENT from a table in place: the rows move to a temporary copy and
-- back into the table created again (with the same ids), and its indexes and triggers with it.
-- Dropping the table also drops its row in sqlite_sequence. The views that read events are
-- untouched: they name the table, which exists again when the migration commits.
CREATE TEMP TABLE events_0010 AS SELECT * FROM events;
DROP TABLE events;
CREATE TABLE events (
    id          INTEGER PRIMARY KEY,     -- the largest id + 1 (0010): ids only grow, see above
    at          INTEGER NOT NULL,
    actor       TEXT NOT NULL,           -- 'admin', 'key:<keyId>', 'gateway', 'worker:<workerId>'
    kind        TEXT NOT NULL,           -- e.g. 'session.created', 'message.completed'
    object_type TEXT NOT NULL,           -- app, key, session, message, sandbox, workspace
    object_id   TEXT NOT NULL,
    app_id      TEXT,
    session_id  TEXT,
    request_id  TEXT,
    data        TEXT                     -- JSON with the details of the change
);
INSERT INTO events (id, at, actor, kind, object_type, object_id, app_id, session_id, request_id,
                    data)
SELECT id, at, actor, kind, object_type, object_id, app_id, session_id, request_id, data
FROM events_0010 ORDER BY id;
DROP TABLE events_0010;
CREATE INDEX events_session ON events (session_id, id);
CREATE INDEX events_object ON events (object_id, id);
CREATE INDEX events_app ON events (app_id, id);

CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events is append-only');
END;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'events is append-only');
END;
