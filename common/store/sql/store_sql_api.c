/*
 * store_sql_api.c: the store's functions that the gateway calls, on either SQL engine (sql.h):
 * Apps, API keys, Workspaces, Sessions, messages (with idempotency and group commit), Sandbox
 * listing and stop requests, pool statistics, the audit trail and the counts behind /metrics.
 *
 * Every mutation runs in one writer transaction (sql_begin: the database's write lock is taken at
 * BEGIN, SQLite's BEGIN IMMEDIATE or PostgreSQL's advisory lock) together with its audit event(s),
 * so an event exists exactly when its change does. List cursors are the decimal rowid (for
 * messages: the seq) of the last row of the previous page.
 *
 * Message enqueues use group commit: with synchronous=FULL every COMMIT is an fsync, so one
 * transaction per message would cap the gateway at the disk's fsync rate. Callers hand their
 * request to one committer thread (with its own connection), which writes up to SQ_BATCH_MAX
 * queued requests in one transaction, each inside its own SAVEPOINT so that one bad row fails
 * alone, and wakes every caller of the batch once the COMMIT is on disk.
 */
#include "id.h"
#include "log.h"
#include "store_sql.h"
#include "clock.h"

#include <pthread.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Grows a list array by one zeroed element. */
static void *list_grow(void *arr, size_t n, size_t elem)
{
    char *p = realloc(arr, (n + 1) * elem);
    if (p)
        memset(p + n * elem, 0, elem);
    return p;
}

/* ---- sandboxes and pool ---- */

static enum store_status sq_sandbox_get(struct store *st, const char *app_id,
                                        const char *sandbox_id, struct store_sandbox *out)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT " SQL_SANDBOX_COLS "FROM sandboxes WHERE id = ?1 "
                                      "AND (?2 = '' OR app_id = ?2)");
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, sandbox_id);
    sql_bind_app(s, 2, app_id);
    return sql_read_one(st, s, &sql_sandbox_page, out);
}

static enum store_status sq_sandbox_list(struct store *st, const char *app_id, const char *after,
                                         size_t limit, struct store_sandbox **out, size_t *n,
                                         char *next_cursor)
{
    return sql_app_list_page(st,
                             "SELECT " SQL_SANDBOX_COLS "FROM sandboxes WHERE (?1 = '' OR "
                             "app_id = ?1) AND rowid > ?2 ORDER BY rowid LIMIT ?3",
                             app_id, after, limit, &sql_sandbox_page, (void *)out, n, next_cursor);
}

static enum store_status sq_sandbox_request_stop(struct store *st, const struct store_ctx *ctx,
                                                 const char *app_id, const char *sandbox_id,
                                                 struct store_sandbox *out)
{
    struct sql_stmt *s;
    enum store_status r;
    struct store_sandbox b;

    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    r = sq_sandbox_get(st, app_id, sandbox_id, &b);
    if (r == STORE_OK && (strcmp(b.state, "terminated") == 0 || strcmp(b.state, "failed") == 0))
        r = STORE_CONFLICT;
    /* A second request while the first is pending changes nothing and writes no event. */
    if (r == STORE_OK && b.stop_requested_at == 0) {
        s = sql_stmt(st, "UPDATE sandboxes SET stop_requested_at = ?2, updated_at = ?2 "
                         "WHERE id = ?1");
        if (!s)
            return sql_end(st, STORE_ERROR);
        sql_bind_text(s, 1, sandbox_id);
        sql_bind_int64(s, 2, clock_wall_ms());
        r = sql_step_done(st, s);
        if (r == STORE_OK)
            r = sql_event(st, ctx, "sandbox.stop_requested", "sandbox", sandbox_id, b.app_id,
                          b.session_id, NULL);
    }
    if (r == STORE_OK)
        r = sq_sandbox_get(st, app_id, sandbox_id, out);
    return sql_end(st, r);
}

static enum store_status sq_pool_stats(struct store *st, struct store_pool_stat **out, size_t *n)
{
    /* Every shape a live App asks for, plus every shape that has Sandboxes. */
    struct sql_stmt *s = sql_stmt(
        st, "WITH shapes AS (SELECT driver, image, vcpu_count, mem_size_mib FROM apps "
            "WHERE deleted_at IS NULL UNION SELECT driver, image, vcpu_count, mem_size_mib "
            "FROM sandboxes) "
            "SELECT h.driver, h.image, h.vcpu_count, h.mem_size_mib, "
            "count(CASE WHEN b.state = 'warm' THEN 1 END), "
            "count(CASE WHEN b.state = 'booting' THEN 1 END), "
            "count(CASE WHEN b.state IN ('claimed', 'running') THEN 1 END), "
            "count(CASE WHEN b.cold = 1 THEN 1 END), "
            "count(CASE WHEN b.state = 'failed' AND b.ready_at IS NULL THEN 1 END) "
            "FROM shapes h LEFT JOIN sandboxes b ON b.driver = h.driver AND b.image = h.image "
            "AND b.vcpu_count = h.vcpu_count AND b.mem_size_mib = h.mem_size_mib "
            "GROUP BY h.driver, h.image, h.vcpu_count, h.mem_size_mib "
            "ORDER BY h.driver, h.image, h.vcpu_count, h.mem_size_mib");
    struct store_pool_stat *items = NULL;
    size_t count = 0;
    int rc;

    if (!s)
        return STORE_ERROR;
    while ((rc = sql_step(s)) == SQL_ROW) {
        struct store_pool_stat *grown = list_grow(items, count, sizeof *items);
        if (!grown) {
            rc = SQL_NOMEM;
            break;
        }
        items = grown;
        struct store_pool_stat *p = &items[count++];
        sql_col_copy(s, 0, p->shape.driver, sizeof p->shape.driver);
        sql_col_copy(s, 1, p->shape.image, sizeof p->shape.image);
        p->shape.vcpu_count = sql_col_int64(s, 2);
        p->shape.mem_size_mib = sql_col_int64(s, 3);
        p->warm = sql_col_int64(s, 4);
        p->booting = sql_col_int64(s, 5);
        p->claimed = sql_col_int64(s, 6);
        p->cold_activations = sql_col_int64(s, 7);
        p->boot_failures = sql_col_int64(s, 8);
    }
    sql_done(s);
    if (rc != SQL_DONE) {
        free(items);
        return sql_status(st, rc);
    }
    *out = items;
    *n = count;
    return STORE_OK;
}

/* ---- setup ---- */

void store_sql_api_init(struct store *st)
{
    st->sandbox_get = sq_sandbox_get;
    st->sandbox_list = sq_sandbox_list;
    st->sandbox_request_stop = sq_sandbox_request_stop;
    st->pool_stats = sq_pool_stats;
}
