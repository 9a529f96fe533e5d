-- 0009_streaming: an agent's partial output, and webhooks (at the end). The App's command may
-- print {"id":..,"chunk":..} lines for the message it works on before its reply; the worker
-- stores them here in order, a few per transaction, up to chunk_max_count chunks and
-- chunk_max_bytes bytes per message. What passes the bound is dropped and counted on the
-- message (chunks_dropped); the reply is never affected. GET .../messages/{id}/stream reads them. Chunks belong to their message: deleting the
-- Session deletes them with the message's body and reply.
CREATE TABLE message_chunks (
    message_id TEXT NOT NULL REFERENCES messages (id),
    idx        BIGINT NOT NULL,          -- 0, 1, 2, ... in the order the agent printed them
    value      TEXT NOT NULL,            -- JSON
    at         BIGINT NOT NULL,          -- when the worker received it
    PRIMARY KEY (message_id, idx)
);
ALTER TABLE messages ADD COLUMN chunks_dropped BIGINT NOT NULL DEFAULT 0;

-- Each message's partial output, one row per chunk, for auditors: which message, Session and
-- App it belongs to, when it arrived and how large it is.
CREATE VIEW message_output AS
SELECT c.message_id AS message_id,
       m.session_id AS session_id,
       m.app_id AS app_id,
       m.seq AS seq,
       c.idx AS chunk_index,
       c.at AS at,
       sbx_utc(c.at) AS at_utc,
       octet_length(c.value) AS bytes,
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
    consecutive_failures BIGINT NOT NULL DEFAULT 0,
    event_cursor         BIGINT NOT NULL,  -- the last event id considered for this endpoint
    lease_owner          TEXT,             -- the worker delivering to it now
    lease_expires_at     BIGINT,
    created_at           BIGINT NOT NULL,
    updated_at           BIGINT NOT NULL,
    deleted_at           BIGINT
);
CREATE INDEX webhooks_app ON webhooks (app_id);
CREATE TABLE webhook_deliveries (
    id              TEXT PRIMARY KEY,      -- whd_...: the webhook-id header, the same on every attempt
    webhook_id      TEXT NOT NULL REFERENCES webhooks (id),
    event_id        BIGINT NOT NULL,              -- events.id (append-only, so no foreign key)
    state           TEXT NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts        BIGINT NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    last_status     BIGINT,                -- HTTP status of the last attempt (NULL: no answer)
    last_error      TEXT,
    created_at      BIGINT NOT NULL,
    finished_at     BIGINT,                -- delivered, or given up
    UNIQUE (webhook_id, event_id)
);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (webhook_id, event_id)
    WHERE state = 'pending';
CREATE TABLE webhook_attempts (
    delivery_id TEXT NOT NULL REFERENCES webhook_deliveries (id),
    attempt     BIGINT NOT NULL,
    at          BIGINT NOT NULL,
    status      BIGINT,                    -- HTTP status (NULL: no answer)
    error       TEXT,                      -- why it failed: timeout, connection refused, HTTP 500
    duration_ms BIGINT NOT NULL,
    PRIMARY KEY (delivery_id, attempt)
);
