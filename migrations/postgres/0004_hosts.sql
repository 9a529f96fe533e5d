-- 0004_hosts (PostgreSQL): worker hosts, the same as migrations/0004_hosts.sql for SQLite.
-- A host is one machine's (or one host id's) worker processes, which share its kernel state:
-- jails, cgroups, links, firewall elements, NFS exports. Hosts register and heartbeat here;
-- placement picks a host for an idle Session's next message; a host whose heartbeat stops is
-- declared lost by a live host (lost_at), which ends its Sandboxes in the store and sends its
-- Sessions and leases back to the queue.
CREATE TABLE hosts (
    id            TEXT PRIMARY KEY,           -- host_id: the machine's hostname unless configured
    address       TEXT NOT NULL DEFAULT '',   -- how other components reach it ('' none); recorded
    capacity      BIGINT NOT NULL,            -- Sessions it serves at once (placement skips it full)
    registered_at BIGINT NOT NULL,            -- first registration, or the last after a loss
    heartbeat_at  BIGINT NOT NULL,            -- last heartbeat of any of its workers
    lost_at       BIGINT                      -- declared lost (NULL: live); cleared on return
);
-- The host a worker process belongs to (NULL for workers registered before hosts existed).
ALTER TABLE workers ADD COLUMN host_id TEXT;
UPDATE workers SET host_id = host;
-- A host's live workers (placement, host loss).
CREATE INDEX workers_host ON workers (host_id, stopped_at);
-- The Sessions a worker owns (placement counts a host's load; host loss releases them).
CREATE INDEX sessions_worker ON sessions (worker_id) WHERE worker_id IS NOT NULL;
