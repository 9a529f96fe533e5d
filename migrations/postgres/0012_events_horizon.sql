-- 0012_events_horizon: sbx_events_settled() of migration 0011 could return an id whose event
-- was still uncommitted, so a reader paging by id skipped it (it.pg.concurrency caught one such
-- skip in CI; a reader beside 16 writers skipped 5,455 ids in 20,778 pages in 30 s). It waited
-- for the transactions its snapshot listed in progress, but a snapshot lists only xids below its
-- xmax (the newest completed xid + 1): a transaction whose xid is newer than every completed one
-- is in progress to that snapshot without being listed, and was not waited for. Its
-- pg_xact_status() test also took "committed in the commit log" for "visible", which a commit is
-- only a moment later, once it leaves the proc array.
--
-- Now the reader takes a transaction id R of its own right after reading the sequence's last
-- value S. Every id <= S was allocated by a transaction whose xid it had before S was read, so
-- below R; the function waits until a fresh snapshot has xmax >= R and lists no xid below R, i.e.
-- every transaction older than R has ended and is visible to statements that start afterwards.
-- It must be called before its transaction writes (an xid it already had would be older than
-- writers it must wait for), and it now refuses to be called otherwise.
CREATE OR REPLACE FUNCTION sbx_events_settled(wait_ms integer) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    allocated bigint;
    mine xid8;
    deadline timestamptz := clock_timestamp() + make_interval(secs => wait_ms / 1000.0);
BEGIN
    IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
        RAISE EXCEPTION 'sbx_events_settled() must run before its transaction writes';
    END IF;
    SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END INTO allocated
        FROM events_id_seq;
    mine := pg_current_xact_id();
    WHILE EXISTS (SELECT 1 FROM (SELECT pg_current_snapshot() AS s) AS fresh
                  WHERE pg_snapshot_xmax(fresh.s) < mine
                     OR EXISTS (SELECT 1 FROM pg_snapshot_xip(fresh.s) AS x WHERE x < mine)) LOOP
        IF clock_timestamp() >= deadline THEN
            RETURN NULL;
        END IF;
        PERFORM pg_sleep(0.0005);
    END LOOP;
    RETURN allocated;
END
$$;
