/*
 * event_horizon.c: how far a reader of events by id may go without ever skipping one. On SQLite
 * writers run one at a time, so ids commit in order and every id a reader sees is settled. On
 * PostgreSQL writers run concurrently and ids can commit out of order; sbx_events_settled()
 * (migrations 0011 and 0012) waits for every transaction older than an xid it takes itself and
 * gives an id up to which every event is committed or never will be. It must run outside a
 * transaction that writes (it refuses otherwise): its callers read events outside transactions.
 * No hidden state.
 */
#include "log.h"
#include "store_sql.h"

/* How long a reader waits for the writers in progress before it returns nothing new: a writer
 * transaction lasts milliseconds, so only a stuck one (ended by the server after
 * idle_in_transaction_session_timeout) makes a reader wait this long. */
#define EVENTS_SETTLE_WAIT_MS 1000

enum store_status sql_events_settled(struct store *st, int64_t after, int64_t *upto)
{
    if (sql_dialect(st) != SQL_POSTGRES) {
        *upto = INT64_MAX;
        return STORE_OK;
    }
    struct sql_stmt *s = sql_stmt(st, "SELECT sbx_events_settled(CAST(?1 AS INTEGER))");
    if (!s)
        return STORE_ERROR;
    sql_bind_int64(s, 1, EVENTS_SETTLE_WAIT_MS);
    int rc = sql_step(s);
    enum store_status r = STORE_OK;
    if (rc == SQL_ROW) {
        if (sql_col_null(s, 0)) {
            log_warn("store: a writer has been in progress for %d ms; events after %lld wait",
                     EVENTS_SETTLE_WAIT_MS, (long long)after);
            *upto = after;
        } else {
            *upto = sql_col_int64(s, 0);
        }
    } else {
        r = sql_status(st, rc);
    }
    sql_done(s);
    return r;
}
