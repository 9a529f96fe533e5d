-- 0014_callbacks (PostgreSQL): the same as migrations/0014_callbacks.sql for SQLite. The callback
-- API (docs/callbacks.md) gives each Sandbox a bearer token at boot; only its SHA-256 is kept, so
-- a copy of the database holds no usable token. The callback servers find a request's Sandbox by it
-- (the partial index: only Sandboxes that were given one) and count each Sandbox's calls, written
-- in batches. hosts.callback_refused counts the requests a host's callback servers refused for
-- their token (401).
ALTER TABLE sandboxes ADD COLUMN callback_token_hash TEXT;
ALTER TABLE sandboxes ADD COLUMN callback_calls BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN callback_last_at BIGINT;
CREATE UNIQUE INDEX sandboxes_callback_token ON sandboxes (callback_token_hash)
    WHERE callback_token_hash IS NOT NULL;
ALTER TABLE hosts ADD COLUMN callback_refused BIGINT NOT NULL DEFAULT 0;

-- Who called back and how often: one row per Sandbox that made a callback.
CREATE VIEW sandbox_callbacks AS
SELECT b.id AS sandbox_id,
       b.app_id AS app_id,
       b.session_id AS session_id,
       b.state AS state,
       b.callback_calls AS calls,
       b.callback_last_at AS last_call_at,
       sbx_utc(b.callback_last_at) AS last_call_utc
FROM sandboxes b
WHERE b.callback_calls > 0;
