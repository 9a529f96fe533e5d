-- 0001_init (PostgreSQL): the first schema of sbx, the same as migrations/0001_init.sql for SQLite,
-- so that the store's SQL runs unchanged on both.
-- Times are BIGINT: milliseconds since the Unix epoch, UTC. Every integer is BIGINT, as SQLite's
-- INTEGER is 64-bit; flags (sandboxes.cold) stay integers 0/1, compared with <> 0.
-- Ids are text with a type prefix (app_, key_, ses_, msg_, sbx_, wsp_) and 20 random base32 chars.
-- JSON columns hold canonical JSON text written by sbx (TEXT, not jsonb: byte for byte what sbx
-- wrote, as on SQLite).
-- Tables whose lists page by SQLite's implicit rowid (apps, api_keys, workspaces, sessions,
-- sandboxes) declare it: `rowid`, an identity column. Writers hold the store's advisory lock, so
-- rowids grow in commit order, as the list cursors expect.

-- Settings owned by sbx itself, such as the admin token's hash.
CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE apps (
    rowid              BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    id                 TEXT PRIMARY KEY,
    name               TEXT NOT NULL,
    keep_alive_seconds BIGINT NOT NULL DEFAULT 60 CHECK (keep_alive_seconds BETWEEN 1 AND 86400),
    vcpu_count         BIGINT NOT NULL DEFAULT 1 CHECK (vcpu_count BETWEEN 1 AND 32),
    mem_size_mib       BIGINT NOT NULL DEFAULT 256 CHECK (mem_size_mib BETWEEN 32 AND 65536),
    driver             TEXT NOT NULL DEFAULT 'process' CHECK (driver IN ('process', 'qemu', 'firecracker')),
    image              TEXT NOT NULL DEFAULT 'default',
    max_attempts       BIGINT NOT NULL DEFAULT 3 CHECK (max_attempts BETWEEN 1 AND 100),
    command            TEXT NOT NULL, -- JSON array of strings: the agent's argv inside the Sandbox
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL,
    deleted_at         BIGINT
);
CREATE UNIQUE INDEX apps_name ON apps (name) WHERE deleted_at IS NULL;

CREATE TABLE api_keys (
    rowid      BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    id         TEXT PRIMARY KEY,
    app_id     TEXT NOT NULL REFERENCES apps (id),
    name       TEXT,
    prefix     TEXT NOT NULL,            -- first characters of the key, to recognise it; not secret
    hash       BYTEA NOT NULL UNIQUE,    -- SHA-256 of the whole key; the key itself is never stored
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);
CREATE INDEX api_keys_app ON api_keys (app_id);

CREATE TABLE workspaces (
    rowid      BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    id         TEXT PRIMARY KEY,
    app_id     TEXT NOT NULL REFERENCES apps (id),
    name       TEXT,
    path       TEXT NOT NULL,            -- host directory that holds the Workspace's data
    created_at BIGINT NOT NULL,
    deleted_at BIGINT
);
CREATE INDEX workspaces_app ON workspaces (app_id);

-- Worker processes, so that the leases and Sandboxes of one that died can be recognised.
CREATE TABLE workers (
    id           TEXT PRIMARY KEY,
    host         TEXT NOT NULL,
    pid          BIGINT NOT NULL,
    started_at   BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL,
    stopped_at   BIGINT
);

CREATE TABLE sessions (
    rowid              BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    id                 TEXT PRIMARY KEY,
    app_id             TEXT NOT NULL REFERENCES apps (id),
    name               TEXT,
    state              TEXT NOT NULL DEFAULT 'idle'
                       CHECK (state IN ('idle', 'activating', 'active', 'deleted')),
    sandbox_id         TEXT,             -- the current Sandbox while activating or active
    keep_alive_seconds BIGINT CHECK (keep_alive_seconds BETWEEN 1 AND 86400), -- NULL: the App's
    workspace_id       TEXT REFERENCES workspaces (id),
    metadata           TEXT NOT NULL DEFAULT '{}',
    next_seq           BIGINT NOT NULL DEFAULT 1,
    activation_count   BIGINT NOT NULL DEFAULT 0,
    cpu_usec           BIGINT NOT NULL DEFAULT 0, -- accumulated over all its Sandboxes
    mem_peak_bytes     BIGINT,                    -- highest peak of its Sandboxes, where measured
    worker_id          TEXT,             -- the worker that owns its Sandbox while activating/active
    expires_at         BIGINT,           -- keep-alive deadline of the current Sandbox
    stop_requested_at  BIGINT,           -- set by DELETE; the owning worker terminates the Sandbox
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL,
    last_activity_at   BIGINT,
    deleted_at         BIGINT
);
CREATE UNIQUE INDEX sessions_app_name ON sessions (app_id, name)
    WHERE name IS NOT NULL AND state <> 'deleted';
CREATE INDEX sessions_app ON sessions (app_id);
CREATE INDEX sessions_state ON sessions (state);

CREATE TABLE messages (
    id               TEXT PRIMARY KEY,
    session_id       TEXT NOT NULL REFERENCES sessions (id),
    app_id           TEXT NOT NULL REFERENCES apps (id),
    seq              BIGINT NOT NULL,
    state            TEXT NOT NULL DEFAULT 'queued'
                     CHECK (state IN ('queued', 'delivering', 'completed', 'failed')),
    body             TEXT NOT NULL,      -- JSON
    reply            TEXT,               -- JSON, once completed
    error            TEXT,               -- why the last attempt failed, or why the message failed
    attempts         BIGINT NOT NULL DEFAULT 0,
    max_attempts     BIGINT NOT NULL,
    idempotency_key  TEXT,
    request_hash     TEXT,               -- SHA-256 of the request, to tell a replay from a conflict
    request_id       TEXT,
    sandbox_id       TEXT,               -- the Sandbox of the last attempt
    lease_owner      TEXT,               -- worker id while delivering
    lease_expires_at BIGINT,
    not_before       BIGINT NOT NULL DEFAULT 0, -- retry backoff
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    completed_at     BIGINT,
    UNIQUE (session_id, seq)
);
CREATE UNIQUE INDEX messages_idempotency ON messages (session_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- The queue: the unfinished messages, in order.
CREATE INDEX messages_pending ON messages (state, not_before) WHERE state IN ('queued', 'delivering');

CREATE TABLE sandboxes (
    rowid              BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    id                 TEXT PRIMARY KEY,
    state              TEXT NOT NULL
                       CHECK (state IN ('booting', 'warm', 'claimed', 'running', 'stopping',
                                        'terminated', 'failed')),
    driver             TEXT NOT NULL,
    image              TEXT NOT NULL,
    image_hash         TEXT,
    vcpu_count         BIGINT NOT NULL,
    mem_size_mib       BIGINT NOT NULL,
    worker_id          TEXT NOT NULL,    -- the worker that booted it and owns its process
    app_id             TEXT REFERENCES apps (id),      -- NULL while in the warm pool
    session_id         TEXT REFERENCES sessions (id),  -- the one Session it ever serves
    pid                BIGINT,
    jail_dir           TEXT,
    cgroup_path        TEXT,
    net_address        TEXT,
    cold               BIGINT NOT NULL DEFAULT 0,      -- 1: booted on demand, the pool was empty
    boot_ms            BIGINT,
    cpu_usec           BIGINT,
    mem_peak_bytes     BIGINT,
    termination_reason TEXT,
    stop_requested_at  BIGINT,           -- set by DELETE; the owning worker terminates it
    created_at         BIGINT NOT NULL,
    ready_at           BIGINT,
    claimed_at         BIGINT,
    terminated_at      BIGINT,
    updated_at         BIGINT NOT NULL
);
CREATE INDEX sandboxes_state ON sandboxes (state, driver, image, vcpu_count, mem_size_mib);
CREATE INDEX sandboxes_session ON sandboxes (session_id);
CREATE INDEX sandboxes_app ON sandboxes (app_id);

-- The audit trail. Append-only: the triggers below refuse UPDATE, DELETE and TRUNCATE.
-- id comes from an identity sequence that never goes back (like SQLite's AUTOINCREMENT); writers
-- hold the store's advisory lock, so ids also grow in commit order and a reader paging by id
-- never skips an event that commits later with a smaller id.
CREATE TABLE events (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          BIGINT NOT NULL,
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

-- Row triggers, like SQLite's (and the kind PostgreSQL-compatible databases support), for UPDATE
-- and DELETE; TRUNCATE, which row triggers do not see, has a statement trigger.
CREATE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events is append-only' USING ERRCODE = 'restrict_violation';
END
$$;
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
    FOR EACH ROW EXECUTE FUNCTION events_append_only();
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_append_only();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_append_only();
