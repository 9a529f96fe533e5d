-- 0010_streaming: an agent's partial output. The App's command may print {"id":..,"chunk":..}
-- lines for the message it works on before its reply; the worker stores them here in order, a
-- few per transaction, up to chunk_max_count chunks and chunk_max_bytes bytes per message. What
-- passes the bound is dropped and counted on the message (chunks_dropped); the reply is never
-- affected. GET .../messages/{id}/stream reads them. Chunks belong to their message: deleting the
-- Session deletes them with the message's body and reply.
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
