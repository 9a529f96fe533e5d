/*
 * workers.c: the workers table: a worker process registers, heartbeats (and learns so that it was
 * taken for dead or stopped, and must exit), stops; the live workers for a peer's liveness check;
 * and adoption, in which a live worker takes over what a dead one held: its leases go back to the
 * queue, its Sessions to idle, its Sandboxes to the adopter to reap. No hidden state.
 */
#include "clock.h"
#include "store_sql.h"

#include <stdint.h>
#include <stdlib.h>

enum store_status store_worker_register(struct store *st, const char *worker_id, const char *host,
                                        int64_t pid)
{
    struct sql_stmt *s =
        sql_stmt(st, "INSERT INTO workers (id, host, pid, started_at, heartbeat_at) "
                     "VALUES (?1, ?2, ?3, ?4, ?4)");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, worker_id);
    sql_bind_text(s, 2, host);
    sql_bind_int64(s, 3, pid);
    sql_bind_int64(s, 4, clock_wall_ms());
    return sql_step_done(st, s);
}

enum store_status store_worker_heartbeat(struct store *st, const char *worker_id)
{
    /* A worker that was taken for dead and adopted must not carry on: its heartbeat fails. */
    struct sql_stmt *s = sql_stmt(st, "UPDATE workers SET heartbeat_at = ?2 WHERE id = ?1 AND "
                                      "stopped_at IS NULL");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, worker_id);
    sql_bind_int64(s, 2, clock_wall_ms());
    return sql_step_change(st, s, STORE_CONFLICT);
}

enum store_status store_worker_stop(struct store *st, const struct store_ctx *ctx,
                                    const char *worker_id, size_t *requeued)
{
    enum store_status rc;
    size_t n = 0;
    if ((rc = sql_begin(st)) != STORE_OK)
        return rc;
    rc = sql_worker_release_in_tx(st, ctx, worker_id, clock_wall_ms(),
                                  "worker stopped while delivering", &n);
    if (rc == STORE_NOT_FOUND)
        rc = STORE_OK; /* taken for dead, and released, by a peer already */
    if (requeued)
        *requeued = rc == STORE_OK ? n : 0;
    return sql_end(st, rc);
}

static int64_t worker_page_row(struct sql_stmt *s, void *item)
{
    struct store_worker *w = item;
    sql_col_copy(s, 0, w->id, sizeof w->id);
    sql_col_copy(s, 1, w->host, sizeof w->host);
    w->pid = sql_col_int64(s, 2);
    w->started_at = sql_col_int64(s, 3);
    w->heartbeat_at = sql_col_int64(s, 4);
    sql_col_copy(s, 5, w->host_id, sizeof w->host_id);
    return 0;
}

static const struct sql_page worker_page = {sizeof(struct store_worker), worker_page_row,
                                            sql_free_items};

enum store_status store_worker_list_active(struct store *st, struct store_worker **out, size_t *n)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT id, host, pid, started_at, heartbeat_at, host_id "
                                      "FROM workers WHERE stopped_at IS NULL ORDER BY started_at");
    return sql_read_all(st, s, &worker_page, (void *)out, n);
}

/* The host of a worker, stopped or not ("" for one registered before hosts). */
enum store_status store_worker_host(struct store *st, const char *worker_id, char *host_id,
                                    size_t len)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT host_id FROM workers WHERE id = ?1");
    int r;
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, worker_id);
    host_id[0] = '\0';
    r = sql_step(s);
    if (r == SQL_ROW)
        sql_col_copy(s, 0, host_id, len);
    sql_done(s);
    if (r == SQL_ROW)
        return STORE_OK;
    return r == SQL_DONE ? STORE_NOT_FOUND : sql_status(st, r);
}

/* Lets go of everything a worker that is gone held in the queue (inside the caller's writer
 * transaction): marks it stopped, requeues the messages it was delivering (the attempt counts, with
 * reason), sends its Sessions back to idle and unowns its deleted ones. *requeued grows by the
 * leases requeued. STORE_NOT_FOUND when it was stopped already. */
enum store_status sql_worker_release_in_tx(struct store *st, const struct store_ctx *ctx,
                                           const char *worker_id, int64_t now, const char *reason,
                                           size_t *requeued)
{
    enum store_status rc;
    struct sql_stmt *stop = sql_stmt(st, "UPDATE workers SET stopped_at = ?2 WHERE id = ?1 AND "
                                         "stopped_at IS NULL");
    if (!stop)
        return STORE_ERROR;
    sql_bind_text(stop, 1, worker_id);
    sql_bind_int64(stop, 2, now);
    if ((rc = sql_step_done(st, stop)) != STORE_OK)
        return rc;
    if (sql_changes(st) == 0)
        return STORE_NOT_FOUND; /* already adopted by another worker, or stopped cleanly */

    /* Its leases: the attempts it was making are over. */
    char(*ids)[STORE_ID_LEN] = NULL;
    size_t n = 0;
    struct sql_stmt *leased = sql_stmt(st, "SELECT id FROM messages WHERE state = 'delivering' AND "
                                           "lease_owner = ?1");
    if (!leased)
        return STORE_ERROR;
    sql_bind_text(leased, 1, worker_id);
    if ((rc = sql_read_ids(st, leased, &ids, &n)) != STORE_OK)
        return rc;
    rc = sql_queue_requeue_in_tx(st, ctx, ids, n, reason);
    free(ids);
    if (rc != STORE_OK)
        return rc;
    *requeued += n;

    /* Its Sessions: idle again, free for any worker. */
    struct sql_stmt *ses = sql_stmt(st, "SELECT id, app_id, sandbox_id FROM sessions WHERE "
                                        "worker_id = ?1 AND state <> 'deleted'");
    if (!ses)
        return STORE_ERROR;
    sql_bind_text(ses, 1, worker_id);
    struct owned {
        char id[STORE_ID_LEN], app_id[STORE_ID_LEN], sandbox_id[STORE_ID_LEN];
    } *list = NULL;
    size_t len = 0;
    int r;
    while ((r = sql_step(ses)) == SQL_ROW) {
        struct owned *grown = realloc(list, (len + 1) * sizeof *list);
        if (!grown) {
            free(list);
            sql_done(ses);
            return STORE_ERROR;
        }
        list = grown;
        sql_col_copy(ses, 0, list[len].id, STORE_ID_LEN);
        sql_col_copy(ses, 1, list[len].app_id, STORE_ID_LEN);
        sql_col_copy(ses, 2, list[len].sandbox_id, STORE_ID_LEN);
        len++;
    }
    sql_done(ses);
    rc = r == SQL_DONE ? STORE_OK : sql_status(st, r);
    for (size_t i = 0; i < len && rc == STORE_OK; i++)
        rc = sql_session_to_idle_in_tx(st, ctx, list[i].id, list[i].app_id, list[i].sandbox_id);
    free(list);
    if (rc != STORE_OK)
        return rc;
    /* Deleted Sessions it owned keep their state but lose the owner. */
    struct sql_stmt *del =
        sql_stmt(st, "UPDATE sessions SET worker_id = NULL WHERE worker_id = ?1");
    if (!del)
        return STORE_ERROR;
    sql_bind_text(del, 1, worker_id);
    return sql_step_done(st, del);
}

static enum store_status adopt_in_tx(struct store *st, const struct store_ctx *ctx,
                                     const char *dead_worker_id, const char *new_owner)
{
    int64_t now = clock_wall_ms();
    size_t n = 0;
    enum store_status rc = sql_worker_release_in_tx(
        st, ctx, dead_worker_id, now, "worker lost while delivering (worker restart)", &n);
    if (rc != STORE_OK)
        return rc;

    /* Its Sandboxes: the new owner reaps them. */
    struct sql_stmt *sb = sql_stmt(st, "UPDATE sandboxes SET worker_id = ?2, updated_at = ?3 WHERE "
                                       "worker_id = ?1 AND state IN " SQL_SANDBOX_LIVE);
    if (!sb)
        return STORE_ERROR;
    sql_bind_text(sb, 1, dead_worker_id);
    sql_bind_text(sb, 2, new_owner);
    sql_bind_int64(sb, 3, now);
    if ((rc = sql_step_done(st, sb)) != STORE_OK)
        return rc;
    rc = sql_event_json(st, ctx, "worker.adopted", "worker", dead_worker_id, NULL, NULL,
                        json_pack("{s:s,s:I}", "adoptedBy", new_owner, "requeued", (json_int_t)n));
    return rc;
}

enum store_status store_worker_adopt(struct store *st, const struct store_ctx *ctx,
                                     const char *dead_worker_id, const char *new_owner)
{
    enum store_status rc;
    if ((rc = sql_begin(st)) != STORE_OK)
        return rc;
    return sql_end(st, adopt_in_tx(st, ctx, dead_worker_id, new_owner));
}
