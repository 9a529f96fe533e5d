-- 0001_init: the first schema of sbx.
-- Times are integers: milliseconds since the Unix epoch, UTC.
-- Ids are text with a type prefix (app_, key_, ses_, msg_, sbx_, wsp_) and 20 random base32 chars.
-- JSON columns hold canonical JSON text written by sbx.

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
-- The queue: the unfinished messages, in order.
CREATE INDEX messages_pending ON messages (state, not_before) WHERE state IN ('queued', 'delivering');

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

-- The audit trail. Append-only: the triggers below refuse UPDATE and DELETE.
CREATE TABLE events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
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
