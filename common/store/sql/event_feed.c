/*
 * event_feed.c: what the live event feed (GET /v1/events as text/event-stream) needs from the
 * events table beyond the JSON list: the newest event id, one cheap read that tells a waiting
 * feed whether anything was committed since it last looked.
 */
#include "store_sql.h"

static enum store_status event_last_id(struct store *st, int64_t *id)
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

void sql_event_feed_init(struct store *st)
{
    st->event_last_id = event_last_id;
}
