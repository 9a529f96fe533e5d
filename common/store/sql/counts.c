/*
 * counts.c: the numbers behind /metrics, read in one snapshot: Sessions, messages and Sandboxes by
 * state, the queue's oldest message and retries, histograms of Sandbox boot times and
 * lifetimes, and the Sandboxes' callback requests. No hidden state.
 */
#include "counts_sql.h"
#include "store_sql.h"

#include <string.h>

/* Adds "SELECT state, count(*) ... GROUP BY state" rows to the matching slot of counts. */
static enum store_status count_states(struct store *st, struct sql_stmt *s,
                                      const char *const *states, size_t nstates, int64_t *counts)
{
    int rc;
    if (!s)
        return STORE_ERROR;
    while ((rc = sql_step(s)) == SQL_ROW) {
        const char *state = sql_col_text(s, 0);
        for (size_t i = 0; state && i < nstates; i++)
            if (strcmp(state, states[i]) == 0)
                counts[i] = sql_col_int64(s, 1);
    }
    sql_done(s);
    return rc == SQL_DONE ? STORE_OK : sql_status(st, rc);
}

/* Messages by state (store_message_states' order) without walking the table, which holds the
 * installation's whole history: queued, delivering and failed stay few and each has a partial
 * index (migrations 0003 and 0013); completed is the rest of count(*), which reads the narrowest
 * index and no row. One statement, so that the rest is taken from the same snapshot on either
 * engine. */
const char counts_messages_sql[] =
    "SELECT (SELECT count(*) FROM messages WHERE state = 'queued'), "
    "(SELECT count(*) FROM messages WHERE state = 'delivering'), "
    "(SELECT count(*) FROM messages WHERE state = 'failed'), (SELECT count(*) FROM messages)";

static enum store_status count_messages(struct store *st, int64_t counts[4])
{
    struct sql_stmt *s = sql_stmt(st, counts_messages_sql);
    int rc;
    if (!s)
        return STORE_ERROR;
    if ((rc = sql_step(s)) == SQL_ROW) {
        counts[0] = sql_col_int64(s, 0);
        counts[1] = sql_col_int64(s, 1);
        counts[3] = sql_col_int64(s, 2);
        counts[2] = sql_col_int64(s, 3) - counts[0] - counts[1] - counts[3];
        rc = SQL_DONE;
    }
    sql_done(s);
    return rc == SQL_DONE ? STORE_OK : sql_status(st, rc);
}

const int64_t store_duration_bounds_ms[STORE_DURATION_BUCKETS] = {10,   50,   100,  250,   500,
                                                                  1000, 2500, 5000, 10000, 60000};

static void histogram_add(struct store_histogram *h, int64_t ms)
{
    size_t i = 0;
    while (i < STORE_DURATION_BUCKETS && ms > store_duration_bounds_ms[i])
        i++;
    h->buckets[i]++;
    h->count++;
    h->sum_ms += ms;
}

/* Boot durations and lifetimes of every Sandbox, and the sum of their callback requests, in one
 * pass over the sandboxes table: the histograms walk it anyway, so the sum costs no other read. */
static enum store_status sandbox_histograms(struct store *st, struct store_counts *c)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT boot_ms, terminated_at - claimed_at, callback_calls "
                                      "FROM sandboxes WHERE boot_ms IS NOT NULL OR terminated_at "
                                      "IS NOT NULL OR callback_calls > 0");
    int rc;
    if (!s)
        return STORE_ERROR;
    while ((rc = sql_step(s)) == SQL_ROW) {
        if (!sql_col_null(s, 0))
            histogram_add(&c->boot, sql_col_int64(s, 0));
        if (!sql_col_null(s, 1))
            histogram_add(&c->lifetime, sql_col_int64(s, 1));
        c->callback_calls += sql_col_int64(s, 2);
    }
    sql_done(s);
    return rc == SQL_DONE ? STORE_OK : sql_status(st, rc);
}

enum store_status store_counts(struct store *st, struct store_counts *out)
{
    struct store_counts c = {0};
    enum store_status r;

    /* One read transaction, so the numbers are one consistent snapshot. */
    if ((r = sql_begin_read(st)) != STORE_OK)
        return r;
    r = count_states(st, sql_stmt(st, "SELECT state, count(*) FROM sessions GROUP BY state"),
                     store_session_states, 4, c.sessions_by_state);
    if (r == STORE_OK)
        r = count_messages(st, c.messages_by_state);
    if (r == STORE_OK)
        r = count_states(st, sql_stmt(st, "SELECT state, count(*) FROM sandboxes GROUP BY state"),
                         store_sandbox_states, 7, c.sandboxes_by_state);
    if (r == STORE_OK) {
        struct sql_stmt *s = sql_stmt(st, "SELECT COALESCE(min(created_at), 0) FROM messages "
                                          "WHERE state = 'queued'");
        r = s ? sql_step_int(st, s, &c.oldest_queued_at) : STORE_ERROR;
    }
    if (r == STORE_OK) {
        struct sql_stmt *s = sql_stmt(st, "SELECT count(*) FROM messages WHERE state = 'queued' "
                                          "AND attempts > 0");
        r = s ? sql_step_int(st, s, &c.retrying) : STORE_ERROR;
    }
    if (r == STORE_OK)
        r = sandbox_histograms(st, &c);
    sql_rollback(st);
    if (r == STORE_OK)
        *out = c;
    return r;
}
