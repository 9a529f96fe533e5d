/*
 * event_feed.c: what the live event feed (GET /v1/events as text/event-stream) needs from the
 * events table beyond the JSON list: the newest event id, one cheap read that tells a waiting
 * feed whether anything was committed since it last looked (a hint: the list it then reads waits
 * for what is in progress, see sql_events_settled), and where a feed without a cursor starts.
 * No hidden state.
 */
#include "store_sql.h"

enum store_status store_event_last_id(struct store *st, int64_t *id)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT COALESCE(max(id), 0) FROM events");
    if (!s)
        return STORE_ERROR;
    int rc = sql_step(s);
    enum store_status r = STORE_OK;
    if (rc == SQL_ROW)
        *id = sql_col_int64(s, 0);
    else
        r = sql_status(st, rc);
    sql_done(s);
    return r;
}

/* After every event committed so far and every one in progress now: on PostgreSQL an event still
 * in progress may get a smaller id than the newest committed one, and a feed starting after the
 * newest would never send it. */
enum store_status store_event_feed_start(struct store *st, int64_t *id)
{
    if (sql_dialect(st) != SQL_POSTGRES)
        return store_event_last_id(st, id);
    int64_t upto;
    enum store_status r = sql_events_settled(st, -1, &upto);
    if (r == STORE_OK && upto < 0)
        r = STORE_BUSY; /* a writer is stuck: no start that could skip its events */
    if (r == STORE_OK)
        *id = upto;
    return r;
}
