-- 0002_auditor_views (PostgreSQL): read-only views for auditors and for `sbxctl`, the same views
-- with the same columns as migrations/0002_auditor_views.sql for SQLite, so that psql answers
-- "what happened to Session X, which Sandboxes served it, and why did they end" without reading
-- code. Views store no data: they read the tables of 0001_init at query time.
-- Every *_utc column is the matching millisecond column as ISO 8601 UTC text
-- (2026-11-29T08:00:00.123Z); the millisecond columns stay next to them for arithmetic.
-- The integrity views (sandbox_reuse_violations, orphan_rows) are empty when all is well.
-- Where SQLite has strftime(), json_valid()/json_extract() and group_concat(), these views use
-- the two functions below and string_agg().

-- Milliseconds since the epoch as ISO 8601 UTC text with milliseconds, like SQLite's
-- strftime('%Y-%m-%dT%H:%M:%fZ', ms / 1000.0, 'unixepoch'); NULL for NULL. Integer arithmetic on a
-- timestamp without time zone: exact, and independent of the session's TimeZone.
CREATE FUNCTION sbx_utc(ms BIGINT) RETURNS TEXT
    LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
SELECT to_char(TIMESTAMP '1970-01-01 00:00:00' + ms * INTERVAL '1 millisecond',
               'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- One top-level field of a JSON text as text, like SQLite's
-- CASE WHEN json_valid(doc) THEN json_extract(doc, '$.' || field) END for a string field: NULL when
-- doc is NULL, is not valid JSON, is not an object or has no such field.
CREATE FUNCTION sbx_json_field(doc TEXT, field TEXT) RETURNS TEXT
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
    RETURN doc::jsonb ->> field;
EXCEPTION WHEN invalid_text_representation THEN
    RETURN NULL;
END
$$;

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
       sbx_utc(e.at) AS at_utc,
       'event' AS source,
       e.kind AS kind,
       e.object_type AS object_type,
       e.object_id AS object_id,
       CASE WHEN e.object_type = 'sandbox' THEN e.object_id
            ELSE sbx_json_field(e.data, 'sandboxId') END AS sandbox_id,
       e.actor AS actor,
       e.request_id AS request_id,
       e.data AS detail,
       e.id AS ord
FROM events e
WHERE e.session_id IS NOT NULL
UNION ALL
SELECT b.session_id, e.at, sbx_utc(e.at), 'event',
       e.kind, e.object_type, e.object_id, e.object_id, e.actor, e.request_id, e.data, e.id
-- (SQLite's view says CROSS JOIN ... ON to fix the join order; PostgreSQL allows no ON after CROSS
-- JOIN and picks the order itself: from the Session's few Sandboxes to their events.)
FROM sandboxes b
JOIN events e ON e.object_id = b.id
WHERE e.object_type = 'sandbox' AND e.session_id IS NULL AND b.session_id IS NOT NULL
UNION ALL
SELECT m.session_id, m.created_at, sbx_utc(m.created_at),
       'message', 'message received', 'message', m.id, NULL, NULL, m.request_id,
       'seq ' || m.seq || CASE WHEN m.idempotency_key IS NOT NULL
                               THEN ', idempotency key ' || m.idempotency_key ELSE '' END,
       0
FROM messages m
UNION ALL
SELECT m.session_id, m.completed_at,
       sbx_utc(m.completed_at),
       'message', 'message ' || m.state, 'message', m.id, m.sandbox_id, NULL, m.request_id,
       'seq ' || m.seq || ', ' || m.attempts || '/' || m.max_attempts || ' attempts'
           || coalesce(', sandbox ' || m.sandbox_id, '')
           || coalesce(', error: ' || m.error, ''),
       0
FROM messages m
WHERE m.completed_at IS NOT NULL
UNION ALL
SELECT b.session_id, b.claimed_at,
       sbx_utc(b.claimed_at), 'sandbox',
       'sandbox claimed', 'sandbox', b.id, b.id, 'worker:' || b.worker_id, NULL,
       b.driver || ' ' || b.image || ', ' || b.vcpu_count || ' vCPU, ' || b.mem_size_mib || ' MiB, '
           || CASE WHEN b.cold <> 0 THEN 'cold' ELSE 'warm' END
           || CASE WHEN b.boot_ms IS NOT NULL THEN ', booted in ' || b.boot_ms || ' ms' ELSE '' END,
       0
FROM sandboxes b
WHERE b.session_id IS NOT NULL AND b.claimed_at IS NOT NULL
UNION ALL
SELECT b.session_id, b.terminated_at,
       sbx_utc(b.terminated_at), 'sandbox',
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
       sbx_utc(m.created_at) AS created_utc,
       m.completed_at AS completed_at,
       sbx_utc(m.completed_at) AS completed_utc,
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
       CASE WHEN b.cold <> 0 THEN 'cold' ELSE 'warm' END AS activation,
       b.boot_ms AS boot_ms,
       b.created_at AS created_at,
       sbx_utc(b.created_at) AS created_utc,
       sbx_utc(b.ready_at) AS ready_utc,
       sbx_utc(b.claimed_at) AS claimed_utc,
       b.terminated_at AS terminated_at,
       sbx_utc(b.terminated_at) AS terminated_utc,
       coalesce(b.terminated_at, CAST(floor(EXTRACT(EPOCH FROM CURRENT_TIMESTAMP) * 1000) AS BIGINT))
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
       sbx_utc(k.created_at) AS at_utc,
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
SELECT k.revoked_at, sbx_utc(k.revoked_at),
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
SELECT sbx_json_field(data, 'sandboxId'), session_id, 'events:' || kind, at
FROM events
WHERE session_id IS NOT NULL AND sbx_json_field(data, 'sandboxId') IS NOT NULL;

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
       string_agg(DISTINCT l.session_id, ',') AS session_ids,
       min(l.at) AS at,
       sbx_utc(min(l.at)) AS at_utc,
       string_agg(DISTINCT l.session_id || ' via ' || l.evidence, ',') AS detail
FROM sandbox_session_links l
GROUP BY l.sandbox_id
HAVING count(DISTINCT l.session_id) > 1
UNION ALL
SELECT id, 'claimed-after-termination', session_id, claimed_at,
       sbx_utc(claimed_at),
       'claimed ' || sbx_utc(claimed_at)
           || ' after termination at '
           || sbx_utc(terminated_at)
FROM sandboxes
WHERE terminated_at IS NOT NULL AND claimed_at > terminated_at
UNION ALL
SELECT id, 'alive-after-termination', session_id, terminated_at,
       sbx_utc(terminated_at),
       'state ' || state || ' although terminated at '
           || sbx_utc(terminated_at)
FROM sandboxes
WHERE terminated_at IS NOT NULL AND state NOT IN ('terminated', 'failed')
UNION ALL
SELECT id, 'back-in-pool-after-use', session_id, updated_at,
       sbx_utc(updated_at),
       'state ' || state || ' although it served ' || coalesce(session_id, 'a Session')
FROM sandboxes
WHERE state IN ('warm', 'booting') AND (session_id IS NOT NULL OR claimed_at IS NOT NULL)
UNION ALL
SELECT b.id, 'used-after-termination', coalesce(e.session_id, b.session_id), e.at,
       sbx_utc(e.at),
       'event #' || e.id || ' ' || e.kind || ' after event #' || t.id || ' ' || t.kind
FROM sandboxes b
JOIN (SELECT object_id, min(id) AS id FROM events
      WHERE object_type = 'sandbox' AND kind IN ('sandbox.terminated', 'sandbox.failed')
      GROUP BY object_id) tid ON tid.object_id = b.id
JOIN events t ON t.id = tid.id
JOIN events e ON e.id > t.id
    AND ((e.object_type = 'sandbox' AND e.object_id = b.id)
         OR sbx_json_field(e.data, 'sandboxId') = b.id)
WHERE e.kind IN ('sandbox.warm', 'sandbox.claimed', 'sandbox.running', 'message.delivering',
                 'message.completed')
UNION ALL
SELECT b.id, 'used-after-termination', m.session_id, m.completed_at,
       sbx_utc(m.completed_at),
       'message ' || m.id || ' ' || m.state || ' at '
           || sbx_utc(m.completed_at)
           || ' after the Sandbox ended at '
           || sbx_utc(b.terminated_at)
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
               || sbx_utc(w.stopped_at) END
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
