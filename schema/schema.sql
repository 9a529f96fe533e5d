-- schema.sql: the full current schema of sbx, the result of applying every migration in
-- migrations/ to an empty database (tests/unit/test_schema.c checks that they agree).
-- It documents each table; the migrations are what the store actually applies.


-- Settings owned by sbx itself, such as the admin token's hash.
CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE apps (
    id                 TEXT PRIMARY KEY,
    name               TEXT NOT NULL,
    keep_alive_seconds INTEGER NOT NULL DEFAULT 60 CHECK (keep_alive_seconds BETWEEN 1 AND 86400),
    vcpu_count         INTEGER NOT NULL DEFAULT 1 CHECK (vcpu_count BETWEEN 1 AND 32),
    mem_size_mib       INTEGER NOT NULL DEFAULT 256 CHECK (mem_size_mib BETWEEN 32 AND 65536),
    driver             TEXT NOT NULL DEFAULT 'process' CHECK (driver IN ('process', 'qemu', 'firecracker')),
    image              TEXT NOT NULL DEFAULT 'default',
    max_attempts       INTEGER NOT NULL DEFAULT 3 CHECK (max_attempts BETWEEN 1 AND 100),
    command            TEXT NOT NULL, -- JSON array of strings: the agent's argv inside the Sandbox
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    deleted_at         INTEGER
);
CREATE UNIQUE INDEX apps_name ON apps (name) WHERE deleted_at IS NULL;

CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    app_id     TEXT NOT NULL REFERENCES apps (id),
    name       TEXT,
    prefix     TEXT NOT NULL,            -- first characters of the key, to recognise it; not secret
    hash       BLOB NOT NULL UNIQUE,     -- SHA-256 of the whole key; the key itself is never stored
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
CREATE INDEX api_keys_app ON api_keys (app_id);

CREATE TABLE workspaces (
    id         TEXT PRIMARY KEY,
    app_id     TEXT NOT NULL REFERENCES apps (id),
    name       TEXT,
    path       TEXT NOT NULL,            -- host directory that holds the Workspace's data
    created_at INTEGER NOT NULL,
    deleted_at INTEGER
);
CREATE INDEX workspaces_app ON workspaces (app_id);

-- Worker processes, so that the leases and Sandboxes of one that died can be recognised.
CREATE TABLE workers (
    id           TEXT PRIMARY KEY,
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    started_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    stopped_at   INTEGER
);

CREATE TABLE sessions (
    id                 TEXT PRIMARY KEY,
    app_id             TEXT NOT NULL REFERENCES apps (id),
    name               TEXT,
    state              TEXT NOT NULL DEFAULT 'idle'
                       CHECK (state IN ('idle', 'activating', 'active', 'deleted')),
    sandbox_id         TEXT,             -- the current Sandbox while activating or active
    keep_alive_seconds INTEGER CHECK (keep_alive_seconds BETWEEN 1 AND 86400), -- NULL: the App's
    workspace_id       TEXT REFERENCES workspaces (id),
    metadata           TEXT NOT NULL DEFAULT '{}',
    next_seq           INTEGER NOT NULL DEFAULT 1,
    activation_count   INTEGER NOT NULL DEFAULT 0,
    cpu_usec           INTEGER NOT NULL DEFAULT 0, -- accumulated over all its Sandboxes
    mem_peak_bytes     INTEGER,                    -- highest peak of its Sandboxes, where measured
    worker_id          TEXT,             -- the worker that owns its Sandbox while activating/active
    expires_at         INTEGER,          -- keep-alive deadline of the current Sandbox
    stop_requested_at  INTEGER,          -- set by DELETE; the owning worker terminates the Sandbox
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    last_activity_at   INTEGER,
    deleted_at         INTEGER
);
CREATE UNIQUE INDEX sessions_app_name ON sessions (app_id, name)
    WHERE name IS NOT NULL AND state <> 'deleted';
CREATE INDEX sessions_app ON sessions (app_id);
CREATE INDEX sessions_state ON sessions (state);
-- How many live Sessions name a Workspace (attachedSessions, and the 409 on DELETE).
CREATE INDEX sessions_workspace ON sessions (workspace_id) WHERE workspace_id IS NOT NULL;

CREATE TABLE messages (
    id               TEXT PRIMARY KEY,
    session_id       TEXT NOT NULL REFERENCES sessions (id),
    app_id           TEXT NOT NULL REFERENCES apps (id),
    seq              INTEGER NOT NULL,
    state            TEXT NOT NULL DEFAULT 'queued'
                     CHECK (state IN ('queued', 'delivering', 'completed', 'failed')),
    body             TEXT NOT NULL,      -- JSON
    reply            TEXT,               -- JSON, once completed
    error            TEXT,               -- why the last attempt failed, or why the message failed
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL,
    idempotency_key  TEXT,
    request_hash     TEXT,               -- SHA-256 of the request, to tell a replay from a conflict
    request_id       TEXT,
    sandbox_id       TEXT,               -- the Sandbox of the last attempt
    lease_owner      TEXT,               -- worker id while delivering
    lease_expires_at INTEGER,
    not_before       INTEGER NOT NULL DEFAULT 0, -- retry backoff
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    completed_at     INTEGER,
    UNIQUE (session_id, seq)
);
CREATE UNIQUE INDEX messages_idempotency ON messages (session_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- The queue: messages waiting to be delivered (by due time), and leases (by expiry).
CREATE INDEX messages_queued ON messages (not_before, created_at) WHERE state = 'queued';  -- 0005
CREATE INDEX messages_delivering ON messages (lease_expires_at) WHERE state = 'delivering';
-- Failed messages by time: /metrics counts them here, and completed as the rest (0013).
CREATE INDEX messages_failed ON messages (updated_at) WHERE state = 'failed';  -- 0013

CREATE TABLE sandboxes (
    id                 TEXT PRIMARY KEY,
    state              TEXT NOT NULL
                       CHECK (state IN ('booting', 'warm', 'claimed', 'running', 'stopping',
                                        'terminated', 'failed')),
    driver             TEXT NOT NULL,
    image              TEXT NOT NULL,
    image_hash         TEXT,
    vcpu_count         INTEGER NOT NULL,
    mem_size_mib       INTEGER NOT NULL,
    worker_id          TEXT NOT NULL,    -- the worker that booted it and owns its process
    app_id             TEXT REFERENCES apps (id),      -- NULL while in the warm pool
    session_id         TEXT REFERENCES sessions (id),  -- the one Session it ever serves
    pid                INTEGER,
    jail_dir           TEXT,
    cgroup_path        TEXT,
    net_address        TEXT,
    cold               INTEGER NOT NULL DEFAULT 0,     -- 1: booted on demand, the pool was empty
    boot_ms            INTEGER,
    cpu_usec           INTEGER,
    mem_peak_bytes     INTEGER,
    termination_reason TEXT,
    stop_requested_at  INTEGER,          -- set by DELETE; the owning worker terminates it
    created_at         INTEGER NOT NULL,
    ready_at           INTEGER,
    claimed_at         INTEGER,
    terminated_at      INTEGER,
    updated_at         INTEGER NOT NULL
);
CREATE INDEX sandboxes_state ON sandboxes (state, driver, image, vcpu_count, mem_size_mib);
CREATE INDEX sandboxes_session ON sandboxes (session_id);
CREATE INDEX sandboxes_app ON sandboxes (app_id);
-- The callback API's bearer token (its SHA-256 only; docs/callbacks.md) and the Sandbox's calls,
-- counted in batches (0014).
ALTER TABLE sandboxes ADD COLUMN callback_token_hash TEXT;
ALTER TABLE sandboxes ADD COLUMN callback_calls INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN callback_last_at INTEGER;
CREATE UNIQUE INDEX sandboxes_callback_token ON sandboxes (callback_token_hash)
    WHERE callback_token_hash IS NOT NULL;
-- Processes the OOM killer ended inside the Sandbox while its agent went on (0015).
ALTER TABLE sandboxes ADD COLUMN oom_kills INTEGER NOT NULL DEFAULT 0;

-- The audit trail. Append-only: the triggers below refuse UPDATE and DELETE. So the row with the
-- largest id is never deleted, and a new id (the largest + 1; no AUTOINCREMENT since 0010, which
-- wrote sqlite_sequence on every event) is always larger than every id before it: the events
-- cursor only moves forward.
CREATE TABLE events (
    id          INTEGER PRIMARY KEY,     -- the largest id + 1 (0010): ids only grow, see below
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

-- ---- auditor views: migrations/0002_auditor_views.sql, documented in schema/README.md ----
-- The *_utc columns are the millisecond columns as ISO 8601 UTC text. The integrity views
-- (sandbox_reuse_violations, orphan_rows) are empty when all is well.

-- Which messages a Sandbox served: for sandbox_lifetimes.messages_served and `sbxctl sandbox`.
CREATE INDEX messages_sandbox ON messages (sandbox_id) WHERE sandbox_id IS NOT NULL;

-- Everything that happened to each Session, one row per fact, in time order when sorted by
-- (session_id, at, ord): its audit events, its messages and the Sandboxes that served it.
-- source: 'event' (a row of events), 'message' (a message's arrival, and its end once it has
-- one) or 'sandbox' (a Sandbox's claim, and its end once it has one). Events about a Sandbox
-- that served the Session are included even when the event itself names no Session.
CREATE VIEW session_timeline AS
SELECT e.session_id AS session_id,
       e.at AS at,
       strftime('%Y-%m-%dT%H:%M:%fZ', e.at / 1000.0, 'unixepoch') AS at_utc,
       'event' AS source,
       e.kind AS kind,
       e.object_type AS object_type,
       e.object_id AS object_id,
       CASE WHEN e.object_type = 'sandbox' THEN e.object_id
            WHEN json_valid(e.data) THEN json_extract(e.data, '$.sandboxId') END AS sandbox_id,
       e.actor AS actor,
       e.request_id AS request_id,
       e.data AS detail,
       e.id AS ord
FROM events e
WHERE e.session_id IS NOT NULL
UNION ALL
SELECT b.session_id, e.at, strftime('%Y-%m-%dT%H:%M:%fZ', e.at / 1000.0, 'unixepoch'), 'event',
       e.kind, e.object_type, e.object_id, e.object_id, e.actor, e.request_id, e.data, e.id
-- CROSS JOIN keeps sandboxes as the outer loop: from the Session's few Sandboxes to their events
-- (events_object), rather than from every event that names no Session.
FROM sandboxes b
CROSS JOIN events e ON e.object_id = b.id
WHERE e.object_type = 'sandbox' AND e.session_id IS NULL AND b.session_id IS NOT NULL
UNION ALL
SELECT m.session_id, m.created_at, strftime('%Y-%m-%dT%H:%M:%fZ', m.created_at / 1000.0, 'unixepoch'),
       'message', 'message received', 'message', m.id, NULL, NULL, m.request_id,
       'seq ' || m.seq || CASE WHEN m.idempotency_key IS NOT NULL
                               THEN ', idempotency key ' || m.idempotency_key ELSE '' END,
       0
FROM messages m
UNION ALL
SELECT m.session_id, m.completed_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', m.completed_at / 1000.0, 'unixepoch'),
       'message', 'message ' || m.state, 'message', m.id, m.sandbox_id, NULL, m.request_id,
       'seq ' || m.seq || ', ' || m.attempts || '/' || m.max_attempts || ' attempts'
           || coalesce(', sandbox ' || m.sandbox_id, '')
           || coalesce(', error: ' || m.error, ''),
       0
FROM messages m
WHERE m.completed_at IS NOT NULL
UNION ALL
SELECT b.session_id, b.claimed_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', b.claimed_at / 1000.0, 'unixepoch'), 'sandbox',
       'sandbox claimed', 'sandbox', b.id, b.id, 'worker:' || b.worker_id, NULL,
       b.driver || ' ' || b.image || ', ' || b.vcpu_count || ' vCPU, ' || b.mem_size_mib || ' MiB, '
           || CASE WHEN b.cold THEN 'cold' ELSE 'warm' END
           || CASE WHEN b.boot_ms IS NOT NULL THEN ', booted in ' || b.boot_ms || ' ms' ELSE '' END,
       0
FROM sandboxes b
WHERE b.session_id IS NOT NULL AND b.claimed_at IS NOT NULL
UNION ALL
SELECT b.session_id, b.terminated_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', b.terminated_at / 1000.0, 'unixepoch'), 'sandbox',
       'sandbox ' || b.state, 'sandbox', b.id, b.id, 'worker:' || b.worker_id, NULL,
       'reason: ' || coalesce(b.termination_reason, '?')
           || ', cpu ' || coalesce(b.cpu_usec || ' us', 'not measured')
           || ', mem peak ' || coalesce(b.mem_peak_bytes || ' bytes', 'not measured'),
       0
FROM sandboxes b
WHERE b.session_id IS NOT NULL AND b.terminated_at IS NOT NULL;

-- Which Sandbox served which message (the Sandbox of its last attempt), and whether that Sandbox
-- belonged to the message's own Session (served_by_own_session is 0 only if something is wrong).
CREATE VIEW message_deliveries AS
SELECT m.id AS message_id,
       m.session_id AS session_id,
       m.app_id AS app_id,
       m.seq AS seq,
       m.state AS state,
       m.attempts AS attempts,
       m.max_attempts AS max_attempts,
       m.sandbox_id AS sandbox_id,
       b.state AS sandbox_state,
       b.session_id AS sandbox_session_id,
       CASE WHEN m.sandbox_id IS NULL THEN NULL
            WHEN b.session_id = m.session_id THEN 1 ELSE 0 END AS served_by_own_session,
       m.request_id AS request_id,
       m.created_at AS created_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', m.created_at / 1000.0, 'unixepoch') AS created_utc,
       m.completed_at AS completed_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', m.completed_at / 1000.0, 'unixepoch') AS completed_utc,
       m.completed_at - m.created_at AS latency_ms,
       m.error AS error
FROM messages m
LEFT JOIN sandboxes b ON b.id = m.sandbox_id;

-- Each Sandbox from boot to end: whom it served, for how long, why it ended and what it used.
-- lifetime_ms runs from creation to termination (to now while it lives); served_ms from claim to
-- termination. cpu_usec and mem_peak_bytes are NULL where not measured.
CREATE VIEW sandbox_lifetimes AS
SELECT b.id AS sandbox_id,
       b.state AS state,
       b.driver AS driver,
       b.image AS image,
       b.vcpu_count AS vcpu_count,
       b.mem_size_mib AS mem_size_mib,
       b.worker_id AS worker_id,
       b.app_id AS app_id,
       b.session_id AS session_id,
       CASE WHEN b.cold THEN 'cold' ELSE 'warm' END AS activation,
       b.boot_ms AS boot_ms,
       b.created_at AS created_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', b.created_at / 1000.0, 'unixepoch') AS created_utc,
       strftime('%Y-%m-%dT%H:%M:%fZ', b.ready_at / 1000.0, 'unixepoch') AS ready_utc,
       strftime('%Y-%m-%dT%H:%M:%fZ', b.claimed_at / 1000.0, 'unixepoch') AS claimed_utc,
       b.terminated_at AS terminated_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', b.terminated_at / 1000.0, 'unixepoch') AS terminated_utc,
       coalesce(b.terminated_at, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))
           - b.created_at AS lifetime_ms,
       b.terminated_at - b.claimed_at AS served_ms,
       b.termination_reason AS termination_reason,
       b.cpu_usec AS cpu_usec,
       b.mem_peak_bytes AS mem_peak_bytes,
       (SELECT count(*) FROM messages m WHERE m.sandbox_id = b.id) AS messages_served
FROM sandboxes b;

-- API key creations and revocations, with who did it and the request that did it (from the
-- matching audit event, where there is one).
CREATE VIEW key_audit AS
SELECT k.created_at AS at,
       strftime('%Y-%m-%dT%H:%M:%fZ', k.created_at / 1000.0, 'unixepoch') AS at_utc,
       'created' AS action,
       k.id AS key_id,
       k.app_id AS app_id,
       a.name AS app_name,
       k.name AS key_name,
       k.prefix AS prefix,
       (SELECT e.actor FROM events e
        WHERE e.object_id = k.id AND e.kind = 'key.created' ORDER BY e.id LIMIT 1) AS actor,
       (SELECT e.request_id FROM events e
        WHERE e.object_id = k.id AND e.kind = 'key.created' ORDER BY e.id LIMIT 1) AS request_id
FROM api_keys k
LEFT JOIN apps a ON a.id = k.app_id
UNION ALL
SELECT k.revoked_at, strftime('%Y-%m-%dT%H:%M:%fZ', k.revoked_at / 1000.0, 'unixepoch'),
       'revoked', k.id, k.app_id, a.name, k.name, k.prefix,
       (SELECT e.actor FROM events e
        WHERE e.object_id = k.id AND e.kind = 'key.revoked' ORDER BY e.id LIMIT 1),
       (SELECT e.request_id FROM events e
        WHERE e.object_id = k.id AND e.kind = 'key.revoked' ORDER BY e.id LIMIT 1)
FROM api_keys k
LEFT JOIN apps a ON a.id = k.app_id
WHERE k.revoked_at IS NOT NULL;

-- Every trace of a Sandbox serving a Session, one row per trace: the Sandbox's own record, the
-- messages it delivered, the Sessions that point at it and the audit events that name both.
-- (UNION ALL, not UNION: it lets a filter on session_id or sandbox_id reach each branch's index.) The rules say one
-- Sandbox serves at most one Session; sandbox_reuse_violations checks that against this.
CREATE VIEW sandbox_session_links AS
SELECT id AS sandbox_id, session_id, 'sandboxes.session_id' AS evidence, created_at AS at
FROM sandboxes WHERE session_id IS NOT NULL
UNION ALL
SELECT sandbox_id, session_id, 'messages.sandbox_id', updated_at
FROM messages WHERE sandbox_id IS NOT NULL
UNION ALL
SELECT sandbox_id, id, 'sessions.sandbox_id', updated_at
FROM sessions WHERE sandbox_id IS NOT NULL
UNION ALL
SELECT object_id, session_id, 'events:' || kind, at
FROM events WHERE object_type = 'sandbox' AND session_id IS NOT NULL
UNION ALL
SELECT json_extract(data, '$.sandboxId'), session_id, 'events:' || kind, at
FROM events
WHERE session_id IS NOT NULL AND json_valid(data) AND json_extract(data, '$.sandboxId') IS NOT NULL;

-- Integrity: one row per breach of "a Sandbox serves one Session and is never used again after it
-- ends". Empty when all is well. violation is one of:
--   served-two-sessions        traces of more than one Session on one Sandbox (detail lists them)
--   claimed-after-termination  claimed_at later than terminated_at
--   alive-after-termination    terminated_at set but the state is not terminated/failed
--   back-in-pool-after-use     warm or booting although it has served a Session
--   used-after-termination     after its sandbox.terminated/sandbox.failed event, an event that
--                              means use (sandbox.warm, .claimed, .running, message.delivering or
--                              .completed naming it), or a message it completed after it ended;
--                              bookkeeping that may follow an end (session.idle, message.failed,
--                              message.retry naming it) is not use
CREATE VIEW sandbox_reuse_violations AS
SELECT l.sandbox_id AS sandbox_id,
       'served-two-sessions' AS violation,
       group_concat(DISTINCT l.session_id) AS session_ids,
       min(l.at) AS at,
       strftime('%Y-%m-%dT%H:%M:%fZ', min(l.at) / 1000.0, 'unixepoch') AS at_utc,
       group_concat(DISTINCT l.session_id || ' via ' || l.evidence) AS detail
FROM sandbox_session_links l
GROUP BY l.sandbox_id
HAVING count(DISTINCT l.session_id) > 1
UNION ALL
SELECT id, 'claimed-after-termination', session_id, claimed_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', claimed_at / 1000.0, 'unixepoch'),
       'claimed ' || strftime('%Y-%m-%dT%H:%M:%fZ', claimed_at / 1000.0, 'unixepoch')
           || ' after termination at '
           || strftime('%Y-%m-%dT%H:%M:%fZ', terminated_at / 1000.0, 'unixepoch')
FROM sandboxes
WHERE terminated_at IS NOT NULL AND claimed_at > terminated_at
UNION ALL
SELECT id, 'alive-after-termination', session_id, terminated_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', terminated_at / 1000.0, 'unixepoch'),
       'state ' || state || ' although terminated at '
           || strftime('%Y-%m-%dT%H:%M:%fZ', terminated_at / 1000.0, 'unixepoch')
FROM sandboxes
WHERE terminated_at IS NOT NULL AND state NOT IN ('terminated', 'failed')
UNION ALL
SELECT id, 'back-in-pool-after-use', session_id, updated_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', updated_at / 1000.0, 'unixepoch'),
       'state ' || state || ' although it served ' || coalesce(session_id, 'a Session')
FROM sandboxes
WHERE state IN ('warm', 'booting') AND (session_id IS NOT NULL OR claimed_at IS NOT NULL)
UNION ALL
SELECT b.id, 'used-after-termination', coalesce(e.session_id, b.session_id), e.at,
       strftime('%Y-%m-%dT%H:%M:%fZ', e.at / 1000.0, 'unixepoch'),
       'event #' || e.id || ' ' || e.kind || ' after event #' || t.id || ' ' || t.kind
FROM sandboxes b
JOIN (SELECT object_id, min(id) AS id FROM events
      WHERE object_type = 'sandbox' AND kind IN ('sandbox.terminated', 'sandbox.failed')
      GROUP BY object_id) tid ON tid.object_id = b.id
JOIN events t ON t.id = tid.id
JOIN events e ON e.id > t.id
    AND ((e.object_type = 'sandbox' AND e.object_id = b.id)
         OR (json_valid(e.data) AND json_extract(e.data, '$.sandboxId') = b.id))
WHERE e.kind IN ('sandbox.warm', 'sandbox.claimed', 'sandbox.running', 'message.delivering',
                 'message.completed')
UNION ALL
SELECT b.id, 'used-after-termination', m.session_id, m.completed_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', m.completed_at / 1000.0, 'unixepoch'),
       'message ' || m.id || ' ' || m.state || ' at '
           || strftime('%Y-%m-%dT%H:%M:%fZ', m.completed_at / 1000.0, 'unixepoch')
           || ' after the Sandbox ended at '
           || strftime('%Y-%m-%dT%H:%M:%fZ', b.terminated_at / 1000.0, 'unixepoch')
FROM sandboxes b
JOIN messages m ON m.sandbox_id = b.id
WHERE b.terminated_at IS NOT NULL AND m.completed_at > b.terminated_at AND m.state = 'completed';

-- Integrity: rows that point at something missing or dead. Empty when all is well (while sbx
-- runs, and after a clean stop). problem is one of:
--   message-without-session, sandbox-without-session, session-without-sandbox (a live Session
--   whose Sandbox does not exist), session-on-ended-sandbox (an active Session whose Sandbox has
--   ended), sandbox-of-stopped-worker (a live Sandbox whose worker stopped or is unknown),
--   lease-of-stopped-worker (a message leased by a worker that stopped or is unknown),
--   message-of-missing-sandbox (a message naming a Sandbox that does not exist).
CREATE VIEW orphan_rows AS
SELECT 'message-without-session' AS problem, 'messages' AS table_name, m.id AS row_id,
       'session ' || m.session_id || ' does not exist' AS detail
FROM messages m WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = m.session_id)
UNION ALL
SELECT 'sandbox-without-session', 'sandboxes', b.id, 'session ' || b.session_id || ' does not exist'
FROM sandboxes b
WHERE b.session_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = b.session_id)
UNION ALL
SELECT 'session-without-sandbox', 'sessions', s.id, 'sandbox ' || s.sandbox_id || ' does not exist'
FROM sessions s
WHERE s.sandbox_id IS NOT NULL AND s.state <> 'deleted'
  AND NOT EXISTS (SELECT 1 FROM sandboxes b WHERE b.id = s.sandbox_id)
UNION ALL
SELECT 'session-on-ended-sandbox', 'sessions', s.id,
       'state ' || s.state || ' but sandbox ' || s.sandbox_id || ' is ' || b.state
FROM sessions s JOIN sandboxes b ON b.id = s.sandbox_id
WHERE s.state = 'active' AND b.state IN ('terminated', 'failed')
UNION ALL
SELECT 'sandbox-of-stopped-worker', 'sandboxes', b.id,
       'state ' || b.state || ' but worker ' || b.worker_id
           || CASE WHEN w.id IS NULL THEN ' is unknown' ELSE ' stopped at '
               || strftime('%Y-%m-%dT%H:%M:%fZ', w.stopped_at / 1000.0, 'unixepoch') END
FROM sandboxes b LEFT JOIN workers w ON w.id = b.worker_id
WHERE b.state NOT IN ('terminated', 'failed') AND (w.id IS NULL OR w.stopped_at IS NOT NULL)
UNION ALL
SELECT 'lease-of-stopped-worker', 'messages', m.id,
       'delivering under worker ' || m.lease_owner
           || CASE WHEN w.id IS NULL THEN ' which is unknown' ELSE ' which stopped' END
FROM messages m LEFT JOIN workers w ON w.id = m.lease_owner
WHERE m.state = 'delivering' AND (w.id IS NULL OR w.stopped_at IS NOT NULL)
UNION ALL
SELECT 'message-of-missing-sandbox', 'messages', m.id, 'sandbox ' || m.sandbox_id || ' does not exist'
FROM messages m
WHERE m.sandbox_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM sandboxes b WHERE b.id = m.sandbox_id);

-- ---- hosts: migrations/0004_hosts.sql, documented in schema/README.md ----
-- Worker hosts. A host is one machine's (or one host id's) worker processes, which
-- share its kernel state: jails, cgroups, links, firewall elements, NFS exports. Hosts register
-- and heartbeat here; placement picks a host for an idle Session's next message; a host whose
-- heartbeat stops is declared lost by a live host (lost_at), which ends its Sandboxes in the store
-- and sends its Sessions and leases back to the queue.
CREATE TABLE hosts (
    id            TEXT PRIMARY KEY,           -- host_id: the machine's hostname unless configured
    address       TEXT NOT NULL DEFAULT '',   -- how other components reach it ('' none); recorded
    capacity      INTEGER NOT NULL,           -- Sessions it serves at once (placement skips it full)
    registered_at INTEGER NOT NULL,           -- first registration, or the last after a loss
    heartbeat_at  INTEGER NOT NULL,           -- last heartbeat of any of its workers
    lost_at       INTEGER                     -- declared lost (NULL: live); cleared on return
);
-- Requests this host's callback servers refused for their token (401), counted in batches (0014).
ALTER TABLE hosts ADD COLUMN callback_refused INTEGER NOT NULL DEFAULT 0;
-- The host a worker process belongs to (NULL for workers registered before hosts existed).
ALTER TABLE workers ADD COLUMN host_id TEXT;
-- A host's live workers (placement, host loss).
CREATE INDEX workers_host ON workers (host_id, stopped_at);
-- The Sessions a worker owns (placement counts a host's load; host loss releases them).
CREATE INDEX sessions_worker ON sessions (worker_id) WHERE worker_id IS NOT NULL;

-- ---- images: migrations/0006_images.sql, documented in schema/README.md ----
CREATE TABLE images (
    id             TEXT PRIMARY KEY,         -- img_...
    name           TEXT NOT NULL,            -- unique among Images that are not deleted
    state          TEXT NOT NULL DEFAULT 'importing'
                   CHECK (state IN ('importing', 'ready', 'failed')),
    source         TEXT NOT NULL,            -- 'upload', or the registry reference pulled
    upload_path    TEXT,                     -- the uploaded archive under <data_dir>/images/uploads
    upload_sha256  TEXT,                     -- 'sha256:<hex>' of the uploaded body as it arrived
    upload_bytes   INTEGER,                  -- its size
    credentials    TEXT,                     -- JSON {username, password} for the pull; cleared when
                                             -- the import ends, never returned by the API
    problem_code   TEXT,                     -- why it failed (a stable code), NULL otherwise
    problem_detail TEXT,
    digest         TEXT,                     -- 'sha256:<hex>' of the image's config blob, once ready
    layer_count    INTEGER,
    unpacked_bytes INTEGER,                  -- size of the unpacked tree
    entrypoint     TEXT,                     -- the image config's Entrypoint (JSON array or NULL)
    cmd            TEXT,                     -- its Cmd (JSON array or NULL)
    env            TEXT,                     -- its Env (JSON array of "K=V" or NULL)
    working_dir    TEXT,                     -- its WorkingDir (NULL when empty)
    config_user    TEXT,                     -- its User (NULL when empty)
    manifest_digest TEXT,                    -- a pull's image manifest, by which other hosts pull
    claimed_by     TEXT,                     -- the worker importing it while importing
    claimed_at     INTEGER,
    created_at     INTEGER NOT NULL,
    ready_at       INTEGER,                  -- when it became ready or failed
    last_used_at   INTEGER,                  -- last boot of a Sandbox on it (cache eviction)
    deleted_at     INTEGER
);
CREATE UNIQUE INDEX images_name ON images (name) WHERE deleted_at IS NULL;
-- The import queue: what workers claim, oldest first.
CREATE INDEX images_importing ON images (created_at) WHERE state = 'importing';
CREATE INDEX images_digest ON images (digest) WHERE digest IS NOT NULL;
-- The Image an App names (NULL: 'default'), the digest it resolved to ('default' for the built-in
-- rootfs; existing Apps booted it whatever their image label said) and the App's own environment
-- (a JSON object), applied over the image's.
ALTER TABLE apps ADD COLUMN image_id TEXT REFERENCES images (id);
ALTER TABLE apps ADD COLUMN image_digest TEXT NOT NULL DEFAULT 'default';
ALTER TABLE apps ADD COLUMN env TEXT NOT NULL DEFAULT '{}';
-- The Apps that refer to an Image (the 409 on DELETE, cache eviction).
CREATE INDEX apps_image ON apps (image_id) WHERE image_id IS NOT NULL;
-- ---- egress: migrations/0007_egress.sql, documented in schema/README.md ----
-- Each App's egress policy in its normal form: {"egress":"public"} (the host-wide rule),
-- {"egress":"none"}, or {"egress":"allowlist","allow":[...]}.
ALTER TABLE apps ADD COLUMN network TEXT NOT NULL DEFAULT '{"egress":"public"}';

-- ---- hardening (migration 0008), documented in schema/README.md ----
-- A Workspace's size in MiB: its data lives in an ext4 image of that size (NULL: a Workspace made
-- before 0008, a plain directory).
ALTER TABLE workspaces ADD COLUMN size_mib INTEGER;
-- An App's optional host caps for its microVMs' VMM process: JSON {"vmmMemoryMib": N,
-- "vmmCpus": N} (NULL: none, the default).
ALTER TABLE apps ADD COLUMN limits TEXT;
-- The bounds a worker's drivers cannot apply on its host ("process:cpu", comma-separated; '').
ALTER TABLE workers ADD COLUMN unbounded TEXT;
-- ---- streaming: migrations/0009_streaming.sql, documented in schema/README.md ----
-- An agent's partial output ({"id":..,"chunk":..} lines), in order per message; bounded per
-- message (chunks past the bound are counted in messages.chunks_dropped); deleted with the
-- Session's message bodies and replies.
CREATE TABLE message_chunks (
    message_id TEXT NOT NULL REFERENCES messages (id),
    idx        INTEGER NOT NULL,         -- 0, 1, 2, ... in the order the agent printed them
    value      TEXT NOT NULL,            -- JSON
    at         INTEGER NOT NULL,         -- when the worker received it
    PRIMARY KEY (message_id, idx)
);
ALTER TABLE messages ADD COLUMN chunks_dropped INTEGER NOT NULL DEFAULT 0;

-- Each message's partial output, one row per chunk, for auditors: which message, Session and
-- App it belongs to, when it arrived and how large it is.
CREATE VIEW message_output AS
SELECT c.message_id AS message_id,
       m.session_id AS session_id,
       m.app_id AS app_id,
       m.seq AS seq,
       c.idx AS chunk_index,
       c.at AS at,
       strftime('%Y-%m-%dT%H:%M:%fZ', c.at / 1000.0, 'unixepoch') AS at_utc,
       length(CAST(c.value AS BLOB)) AS bytes,
       c.value AS value,
       m.chunks_dropped AS chunks_dropped
FROM message_chunks c
JOIN messages m ON m.id = c.message_id;

-- Webhooks: an App's HTTP endpoints that sbx POSTs its events to (Standard Webhooks: webhook-id,
-- webhook-timestamp, webhook-signature). The outbox is webhook_deliveries: a worker moves each new
-- event of the App whose kind the endpoint wants into it (advancing event_cursor in the same
-- transaction), then delivers them in event order, one endpoint at a time under a lease, with
-- retries and backoff; every attempt is kept in webhook_attempts.
CREATE TABLE webhooks (
    id                   TEXT PRIMARY KEY,
    app_id               TEXT NOT NULL REFERENCES apps (id),
    url                  TEXT NOT NULL,
    event_types          TEXT NOT NULL,    -- JSON array: kinds, prefixes ("sandbox.*") or "*"
    secret               TEXT NOT NULL,    -- whsec_<base64>: the signing key (sbx signs with it)
    state                TEXT NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'failing')),
    consecutive_failures INTEGER NOT NULL DEFAULT 0,
    event_cursor         INTEGER NOT NULL, -- the last event id considered for this endpoint
    lease_owner          TEXT,             -- the worker delivering to it now
    lease_expires_at     INTEGER,
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL,
    deleted_at           INTEGER
);
CREATE INDEX webhooks_app ON webhooks (app_id);
CREATE TABLE webhook_deliveries (
    id              TEXT PRIMARY KEY,      -- whd_...: the webhook-id header, the same on every attempt
    webhook_id      TEXT NOT NULL REFERENCES webhooks (id),
    event_id        INTEGER NOT NULL,              -- events.id (append-only, so no foreign key)
    state           TEXT NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    last_status     INTEGER,               -- HTTP status of the last attempt (NULL: no answer)
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    finished_at     INTEGER,               -- delivered, or given up
    UNIQUE (webhook_id, event_id)
);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (webhook_id, event_id)
    WHERE state = 'pending';
CREATE TABLE webhook_attempts (
    delivery_id TEXT NOT NULL REFERENCES webhook_deliveries (id),
    attempt     INTEGER NOT NULL,
    at          INTEGER NOT NULL,
    status      INTEGER,                   -- HTTP status (NULL: no answer)
    error       TEXT,                      -- why it failed: timeout, connection refused, HTTP 500
    duration_ms INTEGER NOT NULL,
    PRIMARY KEY (delivery_id, attempt)
);

-- Who called back and how often: one row per Sandbox that made a callback (0014).
CREATE VIEW sandbox_callbacks AS
SELECT b.id AS sandbox_id,
       b.app_id AS app_id,
       b.session_id AS session_id,
       b.state AS state,
       b.callback_calls AS calls,
       b.callback_last_at AS last_call_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', b.callback_last_at / 1000.0, 'unixepoch') AS last_call_utc
FROM sandboxes b
WHERE b.callback_calls > 0;

-- An App's quotas (0016): NULL takes the host-wide default, 0 is no bound (docs/tenants.md).
ALTER TABLE apps ADD COLUMN quota_live_sandboxes INTEGER CHECK (quota_live_sandboxes >= 0);
ALTER TABLE apps ADD COLUMN quota_sessions INTEGER CHECK (quota_sessions >= 0);
ALTER TABLE apps ADD COLUMN quota_workspaces INTEGER CHECK (quota_workspaces >= 0);
ALTER TABLE apps ADD COLUMN quota_workspace_mib INTEGER CHECK (quota_workspace_mib >= 0);
ALTER TABLE apps ADD COLUMN quota_keep_alive_seconds INTEGER CHECK (quota_keep_alive_seconds >= 0);

-- An App's secrets, sealed under a key kept outside the database (0018, docs/secrets.md).
CREATE TABLE app_secrets (
    app_id     TEXT NOT NULL REFERENCES apps (id),
    name       TEXT NOT NULL,
    hosts      TEXT NOT NULL,    -- JSON list of host names and "*." wildcards
    nonce      BLOB NOT NULL,
    ciphertext BLOB NOT NULL,
    key_id     TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (app_id, name)
);
CREATE TRIGGER app_secrets_app_deleted AFTER UPDATE OF deleted_at ON apps
WHEN NEW.deleted_at IS NOT NULL
BEGIN
    DELETE FROM app_secrets WHERE app_id = NEW.id;
END;

-- The counts behind an App's quotas read only live rows (0021).
CREATE INDEX sessions_app_live ON sessions (app_id) WHERE state <> 'deleted';
CREATE INDEX workspaces_app_live ON workspaces (app_id, size_mib) WHERE deleted_at IS NULL;
CREATE INDEX sandboxes_app_live ON sandboxes (app_id) WHERE state IN ('claimed', 'running');
-- Pre-started agents (0019): an App's own warm pool whose agent already runs, and the revision of
-- the App's definition each pre-started Sandbox was started with (docs/worker.md).
ALTER TABLE apps ADD COLUMN prestart INTEGER NOT NULL DEFAULT 0 CHECK (prestart IN (0, 1));
ALTER TABLE apps ADD COLUMN warm_pool INTEGER NOT NULL DEFAULT 0 CHECK (warm_pool >= 0);
ALTER TABLE apps ADD COLUMN readiness TEXT NOT NULL DEFAULT 'none'
    CHECK (readiness IN ('none', 'line'));
ALTER TABLE apps ADD COLUMN definition_rev INTEGER NOT NULL DEFAULT 1;
ALTER TABLE sandboxes ADD COLUMN prestart_rev INTEGER;
CREATE INDEX sandboxes_prestarted ON sandboxes (app_id, state) WHERE prestart_rev IS NOT NULL;
-- The queue by App, for fair claiming: the Apps with waiting messages, one after the other, and
-- each App's oldest due message; each App's Sessions that hold a Sandbox; and the queued messages
-- of a Session, for the claims of a worker at its Sandbox limit (0017).
CREATE INDEX messages_queued_app ON messages (app_id, not_before, created_at) WHERE state = 'queued';
CREATE INDEX sessions_live ON sessions (app_id) WHERE state IN ('activating', 'active');
CREATE INDEX messages_queued_session ON messages (session_id, seq) WHERE state = 'queued';
-- The Sandbox drivers a worker can run on its host (0020): JSON, driver name to true or the
-- reason it cannot; NULL: not said. The gateway refuses an App no live worker can run.
ALTER TABLE workers ADD COLUMN drivers TEXT;
