/*
 * hosts.c: the hosts table, for several worker hosts on one store: a host registers (or comes
 * back after it was declared lost) with its address and capacity, heartbeats, is listed with its
 * load; and a host whose heartbeat went stale is declared lost by another, which ends its
 * Sandboxes in the store, stops its workers and sends their work back to the queue, in one
 * transaction. Placement (which host should take an idle Session) is the queue's (queue.c). No
 * hidden state.
 */
#include "clock.h"
#include "log.h"
#include "store_sql.h"

#include <stdint.h>
#include <stdlib.h>

enum store_status store_host_register(struct store *st, const struct store_ctx *ctx,
                                      const struct store_host *host, const char *worker_id,
                                      int64_t *was_lost_at)
{
    enum store_status rc;
    int64_t now = clock_wall_ms(), lost_at = 0;
    bool known = false;
    int r;
    if (!host->id[0] || host->capacity < 1)
        return STORE_INVALID;
    if ((rc = sql_begin(st)) != STORE_OK)
        return rc;
    struct sql_stmt *get = sql_stmt(st, "SELECT lost_at FROM hosts WHERE id = ?1");
    if (!get)
        return sql_end(st, STORE_ERROR);
    sql_bind_text(get, 1, host->id);
    r = sql_step(get);
    if (r == SQL_ROW) {
        known = true;
        lost_at = sql_col_int64_or(get, 0, 0);
    }
    sql_done(get);
    if (r != SQL_ROW && r != SQL_DONE)
        return sql_end(st, sql_status(st, r));

    struct sql_stmt *up =
        known ? sql_stmt(st, "UPDATE hosts SET address = ?2, capacity = ?3, heartbeat_at = ?4, "
                             "registered_at = CASE WHEN lost_at IS NULL THEN registered_at "
                             "ELSE ?4 END, lost_at = NULL WHERE id = ?1")
              : sql_stmt(st, "INSERT INTO hosts (id, address, capacity, registered_at, "
                             "heartbeat_at) VALUES (?1, ?2, ?3, ?4, ?4)");
    if (!up)
        return sql_end(st, STORE_ERROR);
    sql_bind_text(up, 1, host->id);
    sql_bind_text(up, 2, host->address);
    sql_bind_int64(up, 3, host->capacity);
    sql_bind_int64(up, 4, now);
    rc = sql_step_done(st, up);

    if (rc == STORE_OK && worker_id) {
        struct sql_stmt *w = sql_stmt(st, "UPDATE workers SET host_id = ?2 WHERE id = ?1");
        if (!w)
            return sql_end(st, STORE_ERROR);
        sql_bind_text(w, 1, worker_id);
        sql_bind_text(w, 2, host->id);
        rc = sql_step_change(st, w, STORE_NOT_FOUND);
    }
    if (rc == STORE_OK && (!known || lost_at)) {
        rc = sql_event_json(st, ctx, lost_at ? "host.returned" : "host.registered", "host",
                            host->id, NULL, NULL,
                            json_pack("{s:s,s:I,s:s?,s:o}", "address", host->address, "capacity",
                                      (json_int_t)host->capacity, "workerId", worker_id,
                                      "wasLostAt", lost_at ? json_integer(lost_at) : json_null()));
    }
    rc = sql_end(st, rc);
    if (rc == STORE_OK && was_lost_at)
        *was_lost_at = lost_at;
    return rc;
}

enum store_status store_host_heartbeat(struct store *st, const char *host_id)
{
    struct sql_stmt *s = sql_stmt(st, "UPDATE hosts SET heartbeat_at = ?2 WHERE id = ?1 AND "
                                      "lost_at IS NULL");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, host_id);
    sql_bind_int64(s, 2, clock_wall_ms());
    return sql_step_change(st, s, STORE_CONFLICT); /* declared lost (or never registered) */
}

static int64_t host_page_row(struct sql_stmt *s, void *item)
{
    struct store_host *h = item;
    sql_col_copy(s, 0, h->id, sizeof h->id);
    sql_col_copy(s, 1, h->address, sizeof h->address);
    h->capacity = sql_col_int64(s, 2);
    h->registered_at = sql_col_int64(s, 3);
    h->heartbeat_at = sql_col_int64(s, 4);
    h->lost_at = sql_col_int64_or(s, 5, 0);
    h->workers = sql_col_int64(s, 6);
    h->serving = sql_col_int64(s, 7);
    h->live_sandboxes = sql_col_int64(s, 8);
    h->callback_refused = sql_col_int64(s, 9);
    return 0;
}

static const struct sql_page host_page = {sizeof(struct store_host), host_page_row, sql_free_items};

enum store_status store_host_list(struct store *st, struct store_host **out, size_t *n)
{
    struct sql_stmt *s = sql_stmt(
        st, "SELECT h.id, h.address, h.capacity, h.registered_at, h.heartbeat_at, h.lost_at, "
            "(SELECT COUNT(*) FROM workers w WHERE w.host_id = h.id AND w.stopped_at IS NULL), "
            "(SELECT COUNT(*) FROM workers w JOIN sessions s ON s.worker_id = w.id "
            "WHERE w.host_id = h.id AND s.state IN ('activating', 'active')), "
            "(SELECT COUNT(*) FROM sandboxes b JOIN workers w ON w.id = b.worker_id "
            "WHERE w.host_id = h.id AND b.state IN " SQL_SANDBOX_LIVE "), h.callback_refused "
            "FROM hosts h ORDER BY h.id");
    return sql_read_all(st, s, &host_page, (void *)out, n);
}

/* Ends one lost host in the store (inside the caller's writer transaction): see
 * host_declare_lost in store.h. */
static enum store_status host_lose_in_tx(struct store *st, const struct store_ctx *ctx,
                                         const char *host_id, int64_t now)
{
    enum store_status rc;
    char(*ids)[STORE_ID_LEN] = NULL;
    size_t n_workers = 0, n_requeued = 0, n_sandboxes = 0;

    struct sql_stmt *mark = sql_stmt(st, "UPDATE hosts SET lost_at = ?2 WHERE id = ?1 AND "
                                         "lost_at IS NULL");
    if (!mark)
        return STORE_ERROR;
    sql_bind_text(mark, 1, host_id);
    sql_bind_int64(mark, 2, now);
    if ((rc = sql_step_done(st, mark)) != STORE_OK)
        return rc;
    if (sql_changes(st) == 0)
        return STORE_OK; /* declared lost already */

    /* Its live Sandboxes end here, in the store: nobody can reach their processes any more. The
     * Sessions pointing at them go back to idle (sql_sandbox_finish_in_tx). Usage is not measured.
     */
    struct sql_stmt *sbs = sql_stmt(st, "SELECT b.id FROM sandboxes b JOIN workers w ON "
                                        "w.id = b.worker_id WHERE w.host_id = ?1 AND "
                                        "b.state IN " SQL_SANDBOX_LIVE);
    if (!sbs)
        return STORE_ERROR;
    sql_bind_text(sbs, 1, host_id);
    if ((rc = sql_read_ids(st, sbs, &ids, &n_sandboxes)) != STORE_OK)
        return rc;
    for (size_t i = 0; i < n_sandboxes && rc == STORE_OK; i++) {
        rc = sql_sandbox_finish_in_tx(st, ctx, ids[i], false, "host lost", NULL);
        if (rc == STORE_CONFLICT)
            rc = STORE_OK;
    }
    free(ids);
    ids = NULL;
    if (rc != STORE_OK)
        return rc;

    /* Its workers: stopped, their leases requeued and their Sessions idle, as when one worker
     * is adopted (their Sandboxes are already ended above). */
    struct sql_stmt *wk = sql_stmt(st, "SELECT id FROM workers WHERE host_id = ?1 AND "
                                       "stopped_at IS NULL");
    if (!wk)
        return STORE_ERROR;
    sql_bind_text(wk, 1, host_id);
    if ((rc = sql_read_ids(st, wk, &ids, &n_workers)) != STORE_OK)
        return rc;
    for (size_t i = 0; i < n_workers && rc == STORE_OK; i++)
        rc = sql_worker_release_in_tx(st, ctx, ids[i], now, "host lost while delivering",
                                      &n_requeued);
    free(ids);
    if (rc != STORE_OK)
        return rc;

    rc = sql_event_json(st, ctx, "host.lost", "host", host_id, NULL, NULL,
                        json_pack("{s:I,s:I,s:I}", "workers", (json_int_t)n_workers, "sandboxes",
                                  (json_int_t)n_sandboxes, "requeued", (json_int_t)n_requeued));
    if (rc == STORE_OK)
        log_warn("store: host %s declared lost: %zu workers stopped, %zu Sandboxes ended, %zu "
                 "messages requeued",
                 host_id, n_workers, n_sandboxes, n_requeued);
    return rc;
}

static int64_t host_id_row(struct sql_stmt *s, void *item)
{
    sql_col_copy(s, 0, item, STORE_HOST_ID_LEN);
    return 0;
}

static const struct sql_page host_id_page = {STORE_HOST_ID_LEN, host_id_row, sql_free_items};

/* Collects the host ids a bound query returns. */
static enum store_status read_host_ids(struct store *st, struct sql_stmt *s,
                                       char (**ids)[STORE_HOST_ID_LEN], size_t *n)
{
    return sql_read_all(st, s, &host_id_page, (void *)ids, n);
}

static const char stale_hosts_sql[] =
    "SELECT id FROM hosts WHERE lost_at IS NULL AND heartbeat_at < ?1 AND id <> ?2 ORDER BY id";

enum store_status store_host_declare_lost(struct store *st, const struct store_ctx *ctx,
                                          const char *self_host_id, int64_t stale_ms,
                                          size_t *n_lost)
{
    enum store_status rc;
    char(*ids)[STORE_HOST_ID_LEN] = NULL;
    size_t n = 0;
    int64_t now = clock_wall_ms();
    int r;

    if (n_lost)
        *n_lost = 0;
    /* The common case, no stale host, costs one read and no write lock. */
    struct sql_stmt *peek = sql_stmt(st, stale_hosts_sql);
    if (!peek)
        return STORE_ERROR;
    sql_bind_int64(peek, 1, now - stale_ms);
    sql_bind_text(peek, 2, self_host_id ? self_host_id : "");
    r = sql_step(peek);
    sql_done(peek);
    if (r == SQL_DONE)
        return STORE_OK;
    if (r != SQL_ROW)
        return sql_status(st, r);

    if ((rc = sql_begin(st)) != STORE_OK)
        return rc;
    /* Again under the write lock: the host may have heartbeated, or been declared lost by
     * another host, since. */
    struct sql_stmt *stale = sql_stmt(st, stale_hosts_sql);
    if (!stale)
        return sql_end(st, STORE_ERROR);
    sql_bind_int64(stale, 1, now - stale_ms);
    sql_bind_text(stale, 2, self_host_id ? self_host_id : "");
    rc = read_host_ids(st, stale, &ids, &n);
    for (size_t i = 0; i < n && rc == STORE_OK; i++)
        rc = host_lose_in_tx(st, ctx, ids[i], now);
    free(ids);
    rc = sql_end(st, rc);
    if (rc == STORE_OK && n_lost)
        *n_lost = n;
    return rc;
}
