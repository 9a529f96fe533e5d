-- 0011_concurrent_writers: writers no longer hold one lock each (docs/postgres.md), so two
-- transactions can commit their events out of id order: B takes id 11 and commits while A, which
-- took id 10, still runs. A reader paging by id that returned 11 would never see 10. Two pieces
-- make "every id up to S is settled" something a reader can establish:
--   - events.id comes from events_id_seq through a trigger that first gives the transaction its
--     transaction id (pg_current_xact_id()), so a transaction always has its xid before it holds
--     an event id;
--   - sbx_events_settled(wait_ms) reads the sequence's last value S, then takes a snapshot, and
--     waits until every transaction that snapshot saw in progress has ended. Any id <= S was
--     allocated by a transaction that had its xid before S was read, so it was either over or in
--     that snapshot's in-progress list; once they are all over, a statement started afterwards
--     sees every committed event with id <= S. It returns S, or NULL when wait_ms passed first
--     (a writer stuck mid-transaction): the reader then returns nothing newer than its cursor.
-- Readers of events by id (GET /v1/events, the event feed, webhooks' outbox fill) read only up to
-- the settled id.
ALTER TABLE events ALTER COLUMN id DROP IDENTITY;
CREATE SEQUENCE events_id_seq;
SELECT setval('events_id_seq', COALESCE((SELECT max(id) FROM events), 0) + 1, false);
ALTER SEQUENCE events_id_seq OWNED BY events.id;

CREATE FUNCTION events_assign_id() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id IS NOT NULL THEN
        RAISE EXCEPTION 'events.id is assigned by the database, GENERATED ALWAYS'
            USING ERRCODE = 'generated_always';
    END IF;
    PERFORM pg_current_xact_id();
    NEW.id := nextval('events_id_seq');
    RETURN NEW;
END
$$;
CREATE TRIGGER events_assign_id BEFORE INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION events_assign_id();

CREATE FUNCTION sbx_events_settled(wait_ms integer) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    allocated bigint;
    snap pg_snapshot;
    deadline timestamptz := clock_timestamp() + make_interval(secs => wait_ms / 1000.0);
BEGIN
    SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END INTO allocated
        FROM events_id_seq;
    snap := pg_current_snapshot();
    WHILE EXISTS (SELECT 1 FROM pg_snapshot_xip(snap) AS x
                  WHERE x IS DISTINCT FROM pg_current_xact_id_if_assigned()
                    AND pg_xact_status(x) = 'in progress') LOOP
        IF clock_timestamp() >= deadline THEN
            RETURN NULL;
        END IF;
        PERFORM pg_sleep(0.0005);
    END LOOP;
    RETURN allocated;
END
$$;
