/*
 * store_sql_queue.c: the store's functions that the workers call, on either SQL engine (sql.h):
 * worker registration and liveness, the message queue (claims with leases, completion, retries,
 * requeues) and the Sandbox lifecycle.
 *
 * Every claim is one writer transaction (sql_begin): the database's write lock is held from the
 * first read (SQLite's BEGIN IMMEDIATE, PostgreSQL's advisory lock), so two worker processes, on
 * one host or several, can never both see a message (or a warm Sandbox) as free and both take it.
 * Every state change writes its audit event in the same transaction.
 */
#include "sql.h"
#include "id.h"
#include "log.h"
#include "timefmt.h"

#include <jansson.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers ---- */

/* Steps a statement that returns no row and resets it. */
static enum store_status q_step_done(struct store *st, struct sql_stmt *s)
{
    int rc;
    if (!s)
        return STORE_ERROR;
    rc = sql_step(s);
    sql_done(s);
    return rc == SQL_DONE ? STORE_OK : sql_status(st, rc);
}

/* Opens a write transaction on the calling thread's connection. */
static bool q_begin(struct store *st, enum store_status *rc)
{
    *rc = sql_begin(st);
    return *rc == STORE_OK;
}

/* Commits when rc is OK, rolls back otherwise; returns the final status. */
static enum store_status q_end(struct store *st, enum store_status rc)
{
    if (rc == STORE_OK)
        return sql_commit(st);
    sql_rollback(st);
    return rc;
}

/* A JSON object for event data, built with jansson so reasons are escaped properly. The caller
 * frees the result with free(). */
static char *q_json(json_t *obj)
{
    char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    return s;
}

/* ---- row readers ---- */

/* Reads one Sandbox by id inside the current transaction. */
static enum store_status q_sandbox_load(struct store *st, const char *sandbox_id,
                                        struct store_sandbox *out)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT " SQL_SANDBOX_COLS "FROM sandboxes WHERE id = ?1");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, sandbox_id);
    return sql_read_one(st, s, &sql_sandbox_page, out);
}

/* Runs a Sandbox list query whose first parameter is a text argument (may be ""). */
static enum store_status q_sandbox_list(struct store *st, const char *sql, const char *arg,
                                        struct store_sandbox **out, size_t *n)
{
    struct sql_stmt *s = sql_stmt(st, sql);
    char no_cursor[STORE_CURSOR_LEN];
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, arg ? arg : "");
    return sql_read_page(st, s, SIZE_MAX, &sql_sandbox_page, (void *)out, n, no_cursor);
}

/* ---- workers ---- */

static enum store_status q_worker_register(struct store *st, const char *worker_id,
                                           const char *host, int64_t pid)
{
    struct sql_stmt *s =
        sql_stmt(st, "INSERT INTO workers (id, host, pid, started_at, heartbeat_at) "
                     "VALUES (?1, ?2, ?3, ?4, ?4)");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, worker_id);
    sql_bind_text(s, 2, host);
    sql_bind_int64(s, 3, pid);
    sql_bind_int64(s, 4, now_ms());
    return q_step_done(st, s);
}

static enum store_status q_worker_heartbeat(struct store *st, const char *worker_id)
{
    /* A worker that was taken for dead and adopted must not carry on: its heartbeat fails. */
    struct sql_stmt *s = sql_stmt(st, "UPDATE workers SET heartbeat_at = ?2 WHERE id = ?1 AND "
                                      "stopped_at IS NULL");
    enum store_status rc;
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, worker_id);
    sql_bind_int64(s, 2, now_ms());
    rc = q_step_done(st, s);
    if (rc == STORE_OK && sql_changes(st) == 0)
        return STORE_CONFLICT;
    return rc;
}

static enum store_status q_worker_stop(struct store *st, const char *worker_id)
{
    struct sql_stmt *s = sql_stmt(st, "UPDATE workers SET stopped_at = ?2 WHERE id = ?1");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, worker_id);
    sql_bind_int64(s, 2, now_ms());
    return q_step_done(st, s);
}

/* Id lists: the first column of each row, every row (no paging). */
static int64_t id_row(struct sql_stmt *s, void *item)
{
    sql_col_copy(s, 0, item, STORE_ID_LEN);
    return 0;
}

static int64_t host_id_row(struct sql_stmt *s, void *item)
{
    sql_col_copy(s, 0, item, STORE_HOST_ID_LEN);
    return 0;
}

static void id_items_free(void *items, size_t n)
{
    (void)n;
    free(items);
}

static const struct sql_page id_page = {STORE_ID_LEN, id_row, id_items_free};
static const struct sql_page host_id_page = {STORE_HOST_ID_LEN, host_id_row, id_items_free};

/* Collects the message (or worker) ids a bound query returns. */
static enum store_status q_collect_ids(struct store *st, struct sql_stmt *s,
                                       char (**ids)[STORE_ID_LEN], size_t *n)
{
    char no_cursor[STORE_CURSOR_LEN];
    return sql_read_page(st, s, SIZE_MAX, &id_page, (void *)ids, n, no_cursor);
}

static enum store_status q_worker_list_dead(struct store *st, int64_t stale_ms,
                                            char (**ids)[STORE_ID_LEN], size_t *n)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT id FROM workers WHERE stopped_at IS NULL AND "
                                      "heartbeat_at < ?1 ORDER BY started_at");
    if (!s)
        return STORE_ERROR;
    sql_bind_int64(s, 1, now_ms() - stale_ms);
    return q_collect_ids(st, s, ids, n);
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

static void page_free_plain(void *items, size_t n)
{
    (void)n;
    free(items);
}

static const struct sql_page worker_page = {sizeof(struct store_worker), worker_page_row,
                                            page_free_plain};

static enum store_status q_worker_list_active(struct store *st, struct store_worker **out,
                                              size_t *n)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT id, host, pid, started_at, heartbeat_at, host_id "
                                      "FROM workers WHERE stopped_at IS NULL ORDER BY started_at");
    char no_cursor[STORE_CURSOR_LEN];
    if (!s)
        return STORE_ERROR;
    return sql_read_page(st, s, SIZE_MAX, &worker_page, (void *)out, n, no_cursor);
}

/* ---- sessions (worker side) ---- */

/* The Session goes back to idle and stops pointing at its Sandbox; its worker lets go of it. */
static enum store_status q_session_to_idle(struct store *st, const struct store_ctx *ctx,
                                           const char *session_id, const char *app_id,
                                           const char *sandbox_id)
{
    struct sql_stmt *s = sql_stmt(st, "UPDATE sessions SET state = 'idle', sandbox_id = NULL, "
                                      "worker_id = NULL, expires_at = NULL, updated_at = ?2 "
                                      "WHERE id = ?1 AND state <> 'deleted'");
    enum store_status rc;
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, session_id);
    sql_bind_int64(s, 2, now_ms());
    rc = q_step_done(st, s);
    if (rc != STORE_OK || sql_changes(st) == 0)
        return rc;
    char *data =
        q_json(json_pack("{s:s?}", "sandboxId", sandbox_id && *sandbox_id ? sandbox_id : NULL));
    rc = sql_event(st, ctx, "session.idle", "session", session_id, app_id, session_id, data);
    free(data);
    return rc;
}

static enum store_status q_session_touch(struct store *st, const char *session_id,
                                         int64_t expires_at)
{
    struct sql_stmt *s = sql_stmt(st, "UPDATE sessions SET expires_at = ?2, last_activity_at = ?3, "
                                      "updated_at = ?3 WHERE id = ?1");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, session_id);
    sql_bind_int64(s, 2, expires_at);
    sql_bind_int64(s, 3, now_ms());
    return q_step_done(st, s);
}

/* ---- the queue ---- */

/* The next deliverable messages. A message is deliverable when it is queued and due, its Session
 * is not deleted and is free or ours, and no earlier message of its Session is unfinished: that
 * one rule gives both per-Session order and one-at-a-time delivery, since a delivering message is
 * unfinished and blocks every later one. Placement (q_claim_choose) may pass over the first ones,
 * so up to ?4 come, each with what placement needs: when it became claimable (its creation, its
 * retry time, or its Session's return to idle, whichever is last) and its App's shape. */
#define Q_CLAIM_PICK_SQL                                                                           \
    "SELECT m.id, m.session_id, CASE WHEN s.worker_id IS NULL THEN 1 ELSE 0 END, "                 \
    "CASE WHEN m.not_before > m.created_at THEN m.not_before ELSE m.created_at END, "              \
    "s.updated_at, a.driver, a.image_digest, a.vcpu_count, a.mem_size_mib FROM messages m "        \
    "JOIN sessions s ON s.id = m.session_id JOIN apps a ON a.id = s.app_id "                       \
    "WHERE m.state = 'queued' AND m.not_before <= ?1 AND s.state <> 'deleted' "                    \
    "AND (s.worker_id IS NULL OR s.worker_id = ?2) AND (?3 = 0 OR s.worker_id = ?2) "              \
    "AND NOT EXISTS (SELECT 1 FROM messages e WHERE e.session_id = m.session_id "                  \
    "AND e.seq < m.seq AND e.state IN ('queued', 'delivering')) "                                  \
    "ORDER BY m.not_before, m.created_at LIMIT ?4"
static const char q_claim_pick_sql[] = Q_CLAIM_PICK_SQL;
/* PostgreSQL: the claim also locks the message rows it reads and passes over those another
 * transaction holds, so claimers never queue behind each other on a row (SQLite has no row
 * locks: its one writer at a time is the whole lock). A peek locks nothing. */
static const char q_claim_pick_pg_sql[] = Q_CLAIM_PICK_SQL " FOR UPDATE OF m SKIP LOCKED";

static const char *q_claim_pick(struct store *st, bool lock)
{
    return lock && sql_dialect(st) == SQL_POSTGRES ? q_claim_pick_pg_sql : q_claim_pick_sql;
}

/* How many deliverable messages a placed claim looks at before giving up: the ones it passes over
 * belong to other hosts for at most the placement grace. */
#define Q_PLACED_CANDIDATES 32

/* What a claim picked. */
struct q_pick {
    char message_id[STORE_ID_LEN];
    char session_id[STORE_ID_LEN];
    bool session_free;
};

/* ---- placement ---- */

/* The host of a worker, stopped or not ("" for one registered before hosts). */
static enum store_status q_worker_host(struct store *st, const char *worker_id, char *host_id,
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

/* What placement needs to know about the claimer, in one read: its host, whether it was stopped
 * (a worker of a host declared lost, or one taken for dead, must not start anything new), how
 * many hosts are live (not lost, heartbeat fresh) and whether its own is one of them. */
struct q_claimer {
    char host_id[STORE_HOST_ID_LEN];
    bool stopped;
    int64_t live_hosts;
    bool host_live;
};

static enum store_status q_claimer_load(struct store *st, const char *worker_id,
                                        int64_t fresh_since, struct q_claimer *c)
{
    struct sql_stmt *s = sql_stmt(
        st, "SELECT w.host_id, CASE WHEN w.stopped_at IS NULL THEN 0 ELSE 1 END, "
            "(SELECT COUNT(*) FROM hosts h WHERE h.lost_at IS NULL AND h.heartbeat_at >= ?2), "
            "(SELECT COUNT(*) FROM hosts h WHERE h.id = w.host_id AND h.lost_at IS NULL AND "
            "h.heartbeat_at >= ?2) FROM workers w WHERE w.id = ?1");
    int r;
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, worker_id);
    sql_bind_int64(s, 2, fresh_since);
    memset(c, 0, sizeof *c);
    r = sql_step(s);
    if (r == SQL_ROW) {
        sql_col_copy(s, 0, c->host_id, sizeof c->host_id);
        c->stopped = sql_col_int64(s, 1) != 0;
        c->live_hosts = sql_col_int64(s, 2);
        c->host_live = sql_col_int64(s, 3) > 0;
    }
    sql_done(s);
    return r == SQL_ROW || r == SQL_DONE ? STORE_OK : sql_status(st, r);
}

/* The host placement chooses for an idle Session of this shape, into best ("" when every live
 * host is full): among live hosts with a live worker and room (Sessions served < capacity), one
 * holding a warm Sandbox of the shape first, then the least loaded (served / capacity, compared
 * exactly by cross-multiplying), then the smallest id, so that every worker computes the same. */
static enum store_status q_best_host(struct store *st, const struct store_shape *shape,
                                     int64_t fresh_since, char *best, size_t len)
{
    struct sql_stmt *s = sql_stmt(
        st, "SELECT h.id, h.capacity, "
            "(SELECT COUNT(*) FROM workers w JOIN sessions s ON s.worker_id = w.id "
            "WHERE w.host_id = h.id AND s.state IN ('activating', 'active')), "
            "(SELECT COUNT(*) FROM sandboxes b JOIN workers w ON w.id = b.worker_id "
            "WHERE b.state = 'warm' AND b.driver = ?1 AND b.image = ?2 AND b.vcpu_count = ?3 "
            "AND b.mem_size_mib = ?4 AND b.stop_requested_at IS NULL AND w.host_id = h.id) "
            "FROM hosts h WHERE h.lost_at IS NULL AND h.heartbeat_at >= ?5 AND EXISTS "
            "(SELECT 1 FROM workers w WHERE w.host_id = h.id AND w.stopped_at IS NULL) "
            "ORDER BY h.id");
    int64_t best_cap = 0, best_serving = 0;
    bool best_warm = false;
    int r;
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, shape->driver);
    sql_bind_text(s, 2, shape->image);
    sql_bind_int64(s, 3, shape->vcpu_count);
    sql_bind_int64(s, 4, shape->mem_size_mib);
    sql_bind_int64(s, 5, fresh_since);
    best[0] = '\0';
    while ((r = sql_step(s)) == SQL_ROW) {
        int64_t cap = sql_col_int64(s, 1), serving = sql_col_int64(s, 2);
        bool warm = sql_col_int64(s, 3) > 0;
        if (serving >= cap)
            continue; /* full: never chosen */
        bool better = !best[0] || (warm && !best_warm) ||
                      (warm == best_warm && serving * best_cap < best_serving * cap);
        if (!better)
            continue;
        sql_col_copy(s, 0, best, len);
        best_cap = cap;
        best_serving = serving;
        best_warm = warm;
    }
    sql_done(s);
    return r == SQL_DONE ? STORE_OK : sql_status(st, r);
}

/* Picks the message to claim: the first deliverable one that this worker may take. Without
 * placement that is the first one. With placement, a message of a Session this worker owns is
 * always ours; one of an idle Session is ours when our host is where placement puts it, or when
 * it has waited for its host longer than the grace (so that a slow or dying host never starves a
 * Session). The best host is computed once per shape per pick; when ours is the only live host, it
 * is ours. */
static enum store_status q_claim_choose(struct store *st, const char *worker_id, bool owned_only,
                                        const struct store_placement *placement, int64_t now,
                                        bool lock, struct q_pick *out)
{
    char host_id[STORE_HOST_ID_LEN] = "", best[STORE_HOST_ID_LEN] = "";
    struct store_shape best_for = {0};
    bool have_best = false, single_host = false;
    int64_t fresh_since = 0;
    enum store_status rc;

    if (placement) {
        struct q_claimer c;
        fresh_since = now - placement->host_lost_ms;
        if ((rc = q_claimer_load(st, worker_id, fresh_since, &c)) != STORE_OK)
            return rc;
        if (c.stopped)
            return STORE_EMPTY;
        snprintf(host_id, sizeof host_id, "%s", c.host_id);
        /* Nothing to choose between when this is the only live host, or when no host is live;
         * a worker without a host (registered the old way) places nothing either. */
        single_host = !host_id[0] || c.live_hosts == 0 || (c.live_hosts == 1 && c.host_live);
    }
    struct sql_stmt *pick = sql_stmt(st, q_claim_pick(st, lock));
    int r;
    if (!pick)
        return STORE_ERROR;
    sql_bind_int64(pick, 1, now);
    sql_bind_text(pick, 2, worker_id);
    sql_bind_int64(pick, 3, owned_only ? 1 : 0);
    sql_bind_int64(pick, 4, placement && !single_host ? Q_PLACED_CANDIDATES : 1);
    rc = STORE_EMPTY;
    while ((r = sql_step(pick)) == SQL_ROW) {
        bool session_free = sql_col_int64(pick, 2) != 0;
        int64_t since = sql_col_int64(pick, 3), idle_since = sql_col_int64(pick, 4);
        bool ours = !placement || single_host || !session_free;
        if (!ours) {
            if (idle_since > since)
                since = idle_since;
            ours = now - since >= placement->grace_ms;
        }
        if (!ours) {
            struct store_shape shape = {0};
            sql_col_copy(pick, 5, shape.driver, sizeof shape.driver);
            sql_col_copy(pick, 6, shape.image, sizeof shape.image);
            shape.vcpu_count = sql_col_int64(pick, 7);
            shape.mem_size_mib = sql_col_int64(pick, 8);
            if (!have_best || memcmp(&shape, &best_for, sizeof shape) != 0) {
                enum store_status brc = q_best_host(st, &shape, fresh_since, best, sizeof best);
                if (brc != STORE_OK) {
                    rc = brc;
                    break;
                }
                best_for = shape;
                have_best = true;
            }
            ours = strcmp(best, host_id) == 0;
        }
        if (!ours)
            continue;
        sql_col_copy(pick, 0, out->message_id, sizeof out->message_id);
        sql_col_copy(pick, 1, out->session_id, sizeof out->session_id);
        out->session_free = session_free;
        rc = STORE_OK;
        break;
    }
    if (r != SQL_ROW && r != SQL_DONE)
        rc = sql_status(st, r);
    sql_done(pick);
    return rc;
}

static enum store_status q_delivery_load(struct store *st, const char *message_id,
                                         struct store_delivery *out)
{
    struct sql_stmt *s =
        sql_stmt(st, "SELECT " SQL_MESSAGE_COLS ", " SQL_SESSION_COLS ", " SQL_APP_COLS
                     " FROM messages m JOIN sessions s ON s.id = m.session_id "
                     "JOIN apps a ON a.id = s.app_id WHERE m.id = ?1");
    enum store_status rc;
    int r;
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, message_id);
    r = sql_step(s);
    if (r == SQL_ROW) {
        sql_message_from_row(s, 0, &out->message);
        sql_session_from_row(s, 19, &out->session);
        sql_app_from_row(s, 37, &out->app);
        rc = STORE_OK;
    } else {
        rc = r == SQL_DONE ? STORE_NOT_FOUND : sql_status(st, r);
    }
    sql_done(s);
    return rc;
}

static enum store_status q_claim_in_tx(struct store *st, const struct store_ctx *ctx,
                                       const char *worker_id, int64_t lease_ms, bool owned_only,
                                       const struct store_placement *placement,
                                       struct store_delivery *out)
{
    struct q_pick pick;
    int64_t now = now_ms();
    enum store_status rc = q_claim_choose(st, worker_id, owned_only, placement, now, true, &pick);
    if (rc != STORE_OK)
        return rc;
    const char *message_id = pick.message_id, *session_id = pick.session_id;
    bool session_free = pick.session_free;
    struct sql_stmt *lease =
        sql_stmt(st, "UPDATE messages SET state = 'delivering', lease_owner = ?2, "
                     "lease_expires_at = ?3, attempts = attempts + 1, "
                     "updated_at = ?4 WHERE id = ?1 AND state = 'queued'");
    if (!lease)
        return STORE_ERROR;
    sql_bind_text(lease, 1, message_id);
    sql_bind_text(lease, 2, worker_id);
    sql_bind_int64(lease, 3, now + lease_ms);
    sql_bind_int64(lease, 4, now);
    if ((rc = q_step_done(st, lease)) != STORE_OK)
        return rc;

    if (session_free) {
        struct sql_stmt *own =
            sql_stmt(st, "UPDATE sessions SET state = 'activating', worker_id = ?2, "
                         "updated_at = ?3 WHERE id = ?1");
        if (!own)
            return STORE_ERROR;
        sql_bind_text(own, 1, session_id);
        sql_bind_text(own, 2, worker_id);
        sql_bind_int64(own, 3, now);
        if ((rc = q_step_done(st, own)) != STORE_OK)
            return rc;
    }
    if ((rc = q_delivery_load(st, message_id, out)) != STORE_OK)
        return rc;
    if (session_free) {
        char *data = q_json(json_pack("{s:s}", "workerId", worker_id));
        rc = sql_event(st, ctx, "session.activating", "session", session_id, out->app.id,
                       session_id, data);
        free(data);
    }
    if (rc == STORE_OK) {
        char *data = q_json(json_pack("{s:I,s:s}", "attempt", (json_int_t)out->message.attempts,
                                      "workerId", worker_id));
        rc = sql_event(st, ctx, "message.delivering", "message", message_id, out->app.id,
                       session_id, data);
        free(data);
    }
    if (rc != STORE_OK)
        store_delivery_clear(out);
    return rc;
}

/* Whether anything is deliverable to this worker, read without taking the write lock: in WAL mode
 * this never waits, so the many wake-ups that find nothing to do do not queue behind the gateway's
 * commits (nor, with placement, behind other hosts' claims). */
static enum store_status q_claim_peek(struct store *st, const char *worker_id, bool owned_only,
                                      const struct store_placement *placement)
{
    struct q_pick pick;
    return q_claim_choose(st, worker_id, owned_only, placement, now_ms(), false, &pick);
}

static enum store_status q_claim(struct store *st, const struct store_ctx *ctx,
                                 const char *worker_id, int64_t lease_ms, bool owned_only,
                                 const struct store_placement *placement,
                                 struct store_delivery *out)
{
    enum store_status rc = q_claim_peek(st, worker_id, owned_only, placement);
    struct store_delivery d;
    if (rc != STORE_OK)
        return rc;
    /* Something looked deliverable: claim it for real under the write lock (it may be gone). */
    if (!q_begin(st, &rc))
        return rc;
    memset(&d, 0, sizeof d);
    rc = q_end(st, q_claim_in_tx(st, ctx, worker_id, lease_ms, owned_only, placement, &d));
    if (rc == STORE_OK)
        *out = d;
    else if (rc != STORE_EMPTY)
        store_delivery_clear(&d);
    return rc;
}

static enum store_status q_queue_claim(struct store *st, const struct store_ctx *ctx,
                                       const char *worker_id, int64_t lease_ms,
                                       struct store_delivery *out)
{
    return q_claim(st, ctx, worker_id, lease_ms, false, NULL, out);
}

static enum store_status q_queue_claim_owned(struct store *st, const struct store_ctx *ctx,
                                             const char *worker_id, int64_t lease_ms,
                                             struct store_delivery *out)
{
    return q_claim(st, ctx, worker_id, lease_ms, true, NULL, out);
}

static enum store_status q_queue_claim_placed(struct store *st, const struct store_ctx *ctx,
                                              const char *worker_id, int64_t lease_ms,
                                              const struct store_placement *placement,
                                              struct store_delivery *out)
{
    return q_claim(st, ctx, worker_id, lease_ms, false, placement, out);
}

static enum store_status q_queue_extend_lease(struct store *st, const char *message_id,
                                              const char *worker_id, int64_t lease_ms)
{
    struct sql_stmt *s = sql_stmt(st, "UPDATE messages SET lease_expires_at = ?3 WHERE id = ?1 AND "
                                      "state = 'delivering' AND lease_owner = ?2");
    enum store_status rc;
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, message_id);
    sql_bind_text(s, 2, worker_id);
    sql_bind_int64(s, 3, now_ms() + lease_ms);
    rc = q_step_done(st, s);
    if (rc == STORE_OK && sql_changes(st) == 0)
        return STORE_CONFLICT;
    return rc;
}

/* The message's Session and App, for the events of a transition. */
static enum store_status q_message_owner(struct store *st, const char *message_id, char *session_id,
                                         char *app_id, int64_t *attempts, int64_t *max_attempts)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT session_id, app_id, attempts, max_attempts "
                                      "FROM messages WHERE id = ?1");
    enum store_status rc;
    int r;
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, message_id);
    r = sql_step(s);
    if (r == SQL_ROW) {
        sql_col_copy(s, 0, session_id, STORE_ID_LEN);
        sql_col_copy(s, 1, app_id, STORE_ID_LEN);
        *attempts = sql_col_int64(s, 2);
        *max_attempts = sql_col_int64(s, 3);
        rc = STORE_OK;
    } else {
        rc = r == SQL_DONE ? STORE_NOT_FOUND : sql_status(st, r);
    }
    sql_done(s);
    return rc;
}

static enum store_status q_complete_in_tx(struct store *st, const struct store_ctx *ctx,
                                          const char *message_id, const char *worker_id,
                                          const char *sandbox_id, const char *reply_json)
{
    struct sql_stmt *s =
        sql_stmt(st, "UPDATE messages SET state = 'completed', reply = ?3, "
                     "error = NULL, sandbox_id = ?4, lease_owner = NULL, "
                     "lease_expires_at = NULL, completed_at = ?5, updated_at = ?5 "
                     "WHERE id = ?1 AND state = 'delivering' AND lease_owner = ?2");
    char session_id[STORE_ID_LEN], app_id[STORE_ID_LEN];
    int64_t attempts, max_attempts;
    enum store_status rc;
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, message_id);
    sql_bind_text(s, 2, worker_id);
    sql_bind_text(s, 3, reply_json ? reply_json : "null");
    sql_bind_text_or_null(s, 4, sandbox_id);
    sql_bind_int64(s, 5, now_ms());
    if ((rc = q_step_done(st, s)) != STORE_OK)
        return rc;
    if (sql_changes(st) == 0)
        return STORE_CONFLICT; /* the lease moved on: someone else owns this delivery now */
    if ((rc = q_message_owner(st, message_id, session_id, app_id, &attempts, &max_attempts)) !=
        STORE_OK)
        return rc;
    char *data = q_json(json_pack("{s:I,s:s?}", "attempt", (json_int_t)attempts, "sandboxId",
                                  sandbox_id && *sandbox_id ? sandbox_id : NULL));
    rc = sql_event(st, ctx, "message.completed", "message", message_id, app_id, session_id, data);
    free(data);
    return rc;
}

static enum store_status q_queue_complete(struct store *st, const struct store_ctx *ctx,
                                          const char *message_id, const char *worker_id,
                                          const char *sandbox_id, const char *reply_json)
{
    enum store_status rc;
    bool began = q_begin(st, &rc);
    if (!began)
        return rc;
    return q_end(st, q_complete_in_tx(st, ctx, message_id, worker_id, sandbox_id, reply_json));
}

/* Ends an attempt that did not produce a reply: back to queued after backoff, or failed for good
 * once the message has used its attempts. lease_owner NULL means any holder (expired leases). */
static enum store_status q_fail_in_tx(struct store *st, const struct store_ctx *ctx,
                                      const char *message_id, const char *worker_id,
                                      const char *sandbox_id, const char *reason,
                                      int64_t backoff_ms, bool *final)
{
    char session_id[STORE_ID_LEN], app_id[STORE_ID_LEN];
    int64_t attempts, max_attempts, now = now_ms();
    enum store_status rc;
    struct sql_stmt *check =
        sql_stmt(st, "SELECT 1 FROM messages WHERE id = ?1 AND "
                     "state = 'delivering' AND (CAST(?2 AS TEXT) IS NULL OR lease_owner = ?2)");
    int r;
    if (!check)
        return STORE_ERROR;
    sql_bind_text(check, 1, message_id);
    sql_bind_text_or_null(check, 2, worker_id);
    r = sql_step(check);
    sql_done(check);
    if (r == SQL_DONE)
        return STORE_CONFLICT;
    if (r != SQL_ROW)
        return sql_status(st, r);
    if ((rc = q_message_owner(st, message_id, session_id, app_id, &attempts, &max_attempts)) !=
        STORE_OK)
        return rc;

    bool give_up = attempts >= max_attempts;
    struct sql_stmt *s;
    if (give_up)
        s = sql_stmt(st, "UPDATE messages SET state = 'failed', error = ?2, sandbox_id = "
                         "COALESCE(?3, sandbox_id), lease_owner = NULL, lease_expires_at = NULL, "
                         "completed_at = ?4, updated_at = ?4 WHERE id = ?1");
    else
        s = sql_stmt(st, "UPDATE messages SET state = 'queued', error = ?2, sandbox_id = "
                         "COALESCE(?3, sandbox_id), lease_owner = NULL, lease_expires_at = NULL, "
                         "not_before = ?5, updated_at = ?4 WHERE id = ?1");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, message_id);
    sql_bind_text(s, 2, reason ? reason : "unknown failure");
    sql_bind_text_or_null(s, 3, sandbox_id);
    sql_bind_int64(s, 4, now);
    if (!give_up)
        sql_bind_int64(s, 5, now + (backoff_ms > 0 ? backoff_ms : 0));
    if ((rc = q_step_done(st, s)) != STORE_OK)
        return rc;
    char *data =
        give_up
            ? q_json(json_pack("{s:I,s:s?}", "attempts", (json_int_t)attempts, "reason", reason))
            : q_json(json_pack("{s:I,s:s?,s:I}", "attempt", (json_int_t)attempts, "reason", reason,
                               "backoffMs", (json_int_t)backoff_ms));
    rc = sql_event(st, ctx, give_up ? "message.failed" : "message.retry", "message", message_id,
                   app_id, session_id, data);
    free(data);
    if (rc == STORE_OK && final)
        *final = give_up;
    return rc;
}

static enum store_status q_queue_fail(struct store *st, const struct store_ctx *ctx,
                                      const char *message_id, const char *worker_id,
                                      const char *sandbox_id, const char *reason,
                                      int64_t backoff_ms, bool *final)
{
    enum store_status rc;
    bool began = q_begin(st, &rc);
    bool fin = false;
    if (!began)
        return rc;
    rc = q_end(st, q_fail_in_tx(st, ctx, message_id, worker_id ? worker_id : "", sandbox_id, reason,
                                backoff_ms, &fin));
    if (rc == STORE_OK && final)
        *final = fin;
    return rc;
}

static enum store_status q_queue_release(struct store *st, const struct store_ctx *ctx,
                                         const char *message_id, const char *worker_id)
{
    enum store_status rc;
    bool began = q_begin(st, &rc);
    char session_id[STORE_ID_LEN], app_id[STORE_ID_LEN];
    int64_t attempts, max_attempts;
    if (!began)
        return rc;
    struct sql_stmt *s = sql_stmt(st, "UPDATE messages SET state = 'queued', lease_owner = NULL, "
                                      "lease_expires_at = NULL, attempts = CASE WHEN attempts > 0 "
                                      "THEN attempts - 1 ELSE 0 END, "
                                      "updated_at = ?3 WHERE id = ?1 AND state = 'delivering' AND "
                                      "lease_owner = ?2");
    if (!s)
        return q_end(st, STORE_ERROR);
    sql_bind_text(s, 1, message_id);
    sql_bind_text(s, 2, worker_id);
    sql_bind_int64(s, 3, now_ms());
    rc = q_step_done(st, s);
    if (rc == STORE_OK && sql_changes(st) == 0)
        rc = STORE_CONFLICT;
    if (rc == STORE_OK)
        rc = q_message_owner(st, message_id, session_id, app_id, &attempts, &max_attempts);
    if (rc == STORE_OK)
        rc =
            sql_event(st, ctx, "message.released", "message", message_id, app_id, session_id, NULL);
    return q_end(st, rc);
}

/* Requeues (or fails, when out of attempts) every message of the list; they were leased by a
 * worker that is gone or too slow, so the attempt ends like any other failed attempt. */
static enum store_status q_requeue_list(struct store *st, const struct store_ctx *ctx,
                                        char (*ids)[STORE_ID_LEN], size_t n, const char *reason)
{
    enum store_status rc = STORE_OK;
    for (size_t i = 0; i < n && rc == STORE_OK; i++) {
        rc = q_fail_in_tx(st, ctx, ids[i], NULL, NULL, reason, 0, NULL);
        if (rc == STORE_CONFLICT)
            rc = STORE_OK;
    }
    return rc;
}

static enum store_status q_queue_requeue_expired(struct store *st, const struct store_ctx *ctx,
                                                 size_t *n)
{
    enum store_status rc;
    bool began = q_begin(st, &rc);
    char(*ids)[STORE_ID_LEN] = NULL;
    size_t count = 0;
    if (!began)
        return rc;
    struct sql_stmt *s = sql_stmt(st, "SELECT id FROM messages WHERE state = 'delivering' AND "
                                      "lease_expires_at < ?1");
    if (!s)
        return q_end(st, STORE_ERROR);
    sql_bind_int64(s, 1, now_ms());
    rc = q_collect_ids(st, s, &ids, &count);
    if (rc == STORE_OK)
        rc =
            q_requeue_list(st, ctx, ids, count, "lease expired: the worker delivering it was lost");
    free(ids);
    rc = q_end(st, rc);
    if (rc == STORE_OK && n)
        *n = count;
    return rc;
}

static enum store_status q_queue_next_due(struct store *st, int64_t *at)
{
    /* Only the head of each Session's queue counts: a later message waits for it anyway. */
    struct sql_stmt *s = sql_stmt(st, "SELECT MIN(m.not_before) FROM messages m WHERE m.state = "
                                      "'queued' AND NOT EXISTS (SELECT 1 FROM messages e WHERE "
                                      "e.session_id = m.session_id AND e.seq < m.seq AND "
                                      "e.state IN ('queued', 'delivering'))");
    int r;
    if (!s)
        return STORE_ERROR;
    r = sql_step(s);
    if (r == SQL_ROW)
        *at = sql_col_int64_or(s, 0, 0);
    sql_done(s);
    return r == SQL_ROW ? STORE_OK : sql_status(st, r);
}

/* ---- Sandbox lifecycle ---- */

static enum store_status q_sandbox_event(struct store *st, const struct store_ctx *ctx,
                                         const char *kind, const struct store_sandbox *sb,
                                         json_t *data)
{
    char *text = q_json(data);
    enum store_status rc =
        sql_event(st, ctx, kind, "sandbox", sb->id, sb->app_id, sb->session_id, text);
    free(text);
    return rc;
}

static enum store_status q_sandbox_insert(struct store *st, const struct store_ctx *ctx,
                                          const char *worker_id, const struct store_shape *shape,
                                          bool cold, struct store_sandbox *out)
{
    enum store_status rc;
    struct store_sandbox sb;

    memset(&sb, 0, sizeof sb);
    if (id_new("sbx", sb.id, sizeof sb.id) != 0)
        return STORE_ERROR;
    if (!q_begin(st, &rc))
        return rc;
    struct sql_stmt *s =
        sql_stmt(st, "INSERT INTO sandboxes (id, state, driver, image, vcpu_count, "
                     "mem_size_mib, worker_id, cold, created_at, updated_at) "
                     "SELECT ?1, 'booting', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8 WHERE NOT EXISTS "
                     "(SELECT 1 FROM workers WHERE id = ?6 AND stopped_at IS NOT NULL)");
    if (!s)
        return q_end(st, STORE_ERROR);
    sql_bind_text(s, 1, sb.id);
    sql_bind_text(s, 2, shape->driver);
    sql_bind_text(s, 3, shape->image);
    sql_bind_int64(s, 4, shape->vcpu_count);
    sql_bind_int64(s, 5, shape->mem_size_mib);
    sql_bind_text(s, 6, worker_id);
    sql_bind_int64(s, 7, cold ? 1 : 0);
    sql_bind_int64(s, 8, now_ms());
    rc = q_step_done(st, s);
    /* A worker that was stopped (its host declared lost, or itself taken for dead) records no new
     * Sandbox: nobody would ever end it. */
    if (rc == STORE_OK && sql_changes(st) == 0)
        rc = STORE_CONFLICT;
    if (rc == STORE_OK)
        rc = q_sandbox_load(st, sb.id, &sb);
    if (rc == STORE_OK)
        rc = q_sandbox_event(
            st, ctx, "sandbox.booting", &sb,
            json_pack("{s:s,s:s,s:I,s:I,s:b,s:s}", "driver", shape->driver, "image", shape->image,
                      "vcpuCount", (json_int_t)shape->vcpu_count, "memSizeMib",
                      (json_int_t)shape->mem_size_mib, "cold", cold, "workerId", worker_id));
    rc = q_end(st, rc);
    if (rc == STORE_OK)
        *out = sb;
    return rc;
}

static enum store_status q_sandbox_set_runtime(struct store *st, const struct store_sandbox *sb)
{
    struct sql_stmt *s =
        sql_stmt(st, "UPDATE sandboxes SET pid = ?2, jail_dir = ?3, cgroup_path = ?4, "
                     "net_address = ?5, image_hash = ?6, updated_at = ?7 "
                     "WHERE id = ?1");
    enum store_status rc;
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, sb->id);
    if (sb->pid > 0)
        sql_bind_int64(s, 2, sb->pid);
    else
        sql_bind_null(s, 2);
    sql_bind_text_or_null(s, 3, sb->jail_dir);
    sql_bind_text_or_null(s, 4, sb->cgroup_path);
    sql_bind_text_or_null(s, 5, sb->net_address);
    sql_bind_text_or_null(s, 6, sb->image_hash);
    sql_bind_int64(s, 7, now_ms());
    rc = q_step_done(st, s);
    if (rc == STORE_OK && sql_changes(st) == 0)
        return STORE_NOT_FOUND;
    return rc;
}

static enum store_status q_sandbox_mark_warm(struct store *st, const struct store_ctx *ctx,
                                             const char *sandbox_id, int64_t boot_ms)
{
    enum store_status rc;
    bool began = q_begin(st, &rc);
    struct store_sandbox sb;
    if (!began)
        return rc;
    struct sql_stmt *s = sql_stmt(st, "UPDATE sandboxes SET state = 'warm', boot_ms = ?2, "
                                      "ready_at = ?3, updated_at = ?3 "
                                      "WHERE id = ?1 AND state = 'booting'");
    if (!s)
        return q_end(st, STORE_ERROR);
    sql_bind_text(s, 1, sandbox_id);
    sql_bind_int64(s, 2, boot_ms);
    sql_bind_int64(s, 3, now_ms());
    rc = q_step_done(st, s);
    if (rc == STORE_OK && sql_changes(st) == 0)
        rc = STORE_CONFLICT;
    if (rc == STORE_OK)
        rc = q_sandbox_load(st, sandbox_id, &sb);
    if (rc == STORE_OK)
        rc = q_sandbox_event(st, ctx, "sandbox.warm", &sb,
                             json_pack("{s:I}", "bootMs", (json_int_t)boot_ms));
    return q_end(st, rc);
}

/* Points the Session at its new Sandbox (still activating) while this worker owns it. */
static enum store_status q_session_point_at(struct store *st, const char *session_id,
                                            const char *sandbox_id, const char *worker_id)
{
    struct sql_stmt *s = sql_stmt(st, "UPDATE sessions SET sandbox_id = ?2, state = 'activating', "
                                      "updated_at = ?4 WHERE id = ?1 AND worker_id = ?3 "
                                      "AND state <> 'deleted'");
    enum store_status rc;
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, session_id);
    sql_bind_text(s, 2, sandbox_id);
    sql_bind_text(s, 3, worker_id);
    sql_bind_int64(s, 4, now_ms());
    rc = q_step_done(st, s);
    if (rc == STORE_OK && sql_changes(st) == 0)
        return STORE_CONFLICT; /* deleted meanwhile, or no longer ours */
    return rc;
}

static enum store_status q_claim_warm_in_tx(struct store *st, const struct store_ctx *ctx,
                                            const char *worker_id, const struct store_shape *shape,
                                            const char *app_id, const char *session_id,
                                            struct store_sandbox *out)
{
    struct sql_stmt *pick = sql_stmt(st, "SELECT id FROM sandboxes WHERE state = 'warm' AND "
                                         "worker_id = ?1 AND driver = ?2 AND image = ?3 AND "
                                         "vcpu_count = ?4 AND mem_size_mib = ?5 AND "
                                         "stop_requested_at IS NULL ORDER BY ready_at LIMIT 1");
    char sandbox_id[STORE_ID_LEN];
    enum store_status rc;
    int64_t now = now_ms();
    int r;
    if (!pick)
        return STORE_ERROR;
    sql_bind_text(pick, 1, worker_id);
    sql_bind_text(pick, 2, shape->driver);
    sql_bind_text(pick, 3, shape->image);
    sql_bind_int64(pick, 4, shape->vcpu_count);
    sql_bind_int64(pick, 5, shape->mem_size_mib);
    r = sql_step(pick);
    if (r == SQL_ROW)
        sql_col_copy(pick, 0, sandbox_id, sizeof sandbox_id);
    sql_done(pick);
    if (r == SQL_DONE)
        return STORE_EMPTY;
    if (r != SQL_ROW)
        return sql_status(st, r);

    struct sql_stmt *s = sql_stmt(st, "UPDATE sandboxes SET state = 'claimed', app_id = ?2, "
                                      "session_id = ?3, claimed_at = ?4, updated_at = ?4 "
                                      "WHERE id = ?1 AND state = 'warm'");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, sandbox_id);
    sql_bind_text(s, 2, app_id);
    sql_bind_text(s, 3, session_id);
    sql_bind_int64(s, 4, now);
    if ((rc = q_step_done(st, s)) != STORE_OK)
        return rc;
    if ((rc = q_session_point_at(st, session_id, sandbox_id, worker_id)) != STORE_OK)
        return rc;
    if ((rc = q_sandbox_load(st, sandbox_id, out)) != STORE_OK)
        return rc;
    return q_sandbox_event(st, ctx, "sandbox.claimed", out, json_pack("{s:b}", "cold", 0));
}

static enum store_status q_sandbox_claim_warm(struct store *st, const struct store_ctx *ctx,
                                              const char *worker_id,
                                              const struct store_shape *shape, const char *app_id,
                                              const char *session_id, struct store_sandbox *out)
{
    enum store_status rc;
    bool began = q_begin(st, &rc);
    struct store_sandbox sb;
    if (!began)
        return rc;
    rc = q_end(st, q_claim_warm_in_tx(st, ctx, worker_id, shape, app_id, session_id, &sb));
    if (rc == STORE_OK)
        *out = sb;
    return rc;
}

static enum store_status q_sandbox_assign(struct store *st, const struct store_ctx *ctx,
                                          const char *sandbox_id, const char *app_id,
                                          const char *session_id)
{
    enum store_status rc;
    bool began = q_begin(st, &rc);
    struct store_sandbox sb;
    int64_t now = now_ms();
    if (!began)
        return rc;
    struct sql_stmt *s = sql_stmt(st, "UPDATE sandboxes SET state = 'claimed', app_id = ?2, "
                                      "session_id = ?3, ready_at = ?4, claimed_at = ?4, "
                                      "boot_ms = ?4 - created_at, updated_at = ?4 "
                                      "WHERE id = ?1 AND state = 'booting'");
    if (!s)
        return q_end(st, STORE_ERROR);
    sql_bind_text(s, 1, sandbox_id);
    sql_bind_text(s, 2, app_id);
    sql_bind_text(s, 3, session_id);
    sql_bind_int64(s, 4, now);
    rc = q_step_done(st, s);
    if (rc == STORE_OK && sql_changes(st) == 0)
        rc = STORE_CONFLICT;
    if (rc == STORE_OK)
        rc = q_sandbox_load(st, sandbox_id, &sb);
    if (rc == STORE_OK)
        rc = q_session_point_at(st, session_id, sandbox_id, sb.worker_id);
    if (rc == STORE_OK)
        rc = q_sandbox_event(st, ctx, "sandbox.claimed", &sb,
                             json_pack("{s:b,s:I}", "cold", 1, "bootMs", (json_int_t)sb.boot_ms));
    return q_end(st, rc);
}

static enum store_status q_sandbox_mark_running(struct store *st, const struct store_ctx *ctx,
                                                const char *sandbox_id, const char *session_id)
{
    enum store_status rc;
    bool began = q_begin(st, &rc);
    struct store_sandbox sb;
    int64_t now = now_ms();
    if (!began)
        return rc;
    struct sql_stmt *s = sql_stmt(st, "UPDATE sandboxes SET state = 'running', updated_at = ?2 "
                                      "WHERE id = ?1 AND state = 'claimed'");
    if (!s)
        return q_end(st, STORE_ERROR);
    sql_bind_text(s, 1, sandbox_id);
    sql_bind_int64(s, 2, now);
    rc = q_step_done(st, s);
    if (rc == STORE_OK && sql_changes(st) == 0)
        rc = STORE_CONFLICT;
    if (rc == STORE_OK)
        rc = q_sandbox_load(st, sandbox_id, &sb);
    if (rc == STORE_OK)
        rc = q_sandbox_event(st, ctx, "sandbox.running", &sb, NULL);
    if (rc == STORE_OK) {
        struct sql_stmt *u = sql_stmt(st, "UPDATE sessions SET state = 'active', sandbox_id = ?2, "
                                          "activation_count = activation_count + 1, "
                                          "last_activity_at = ?3, updated_at = ?3 "
                                          "WHERE id = ?1 AND state <> 'deleted'");
        if (!u)
            return q_end(st, STORE_ERROR);
        sql_bind_text(u, 1, session_id);
        sql_bind_text(u, 2, sandbox_id);
        sql_bind_int64(u, 3, now);
        rc = q_step_done(st, u);
        if (rc == STORE_OK && sql_changes(st) == 0)
            rc = STORE_CONFLICT; /* the Session was deleted meanwhile */
    }
    if (rc == STORE_OK) {
        char *data = q_json(json_pack("{s:s,s:b}", "sandboxId", sandbox_id, "cold", sb.cold));
        rc = sql_event(st, ctx, "session.active", "session", session_id, sb.app_id, session_id,
                       data);
        free(data);
    }
    return q_end(st, rc);
}

static enum store_status q_sandbox_mark_stopping(struct store *st, const struct store_ctx *ctx,
                                                 const char *sandbox_id, const char *reason)
{
    enum store_status rc;
    bool began = q_begin(st, &rc);
    struct store_sandbox sb;
    if (!began)
        return rc;
    struct sql_stmt *s =
        sql_stmt(st, "UPDATE sandboxes SET state = 'stopping', termination_reason = "
                     "?2, updated_at = ?3 WHERE id = ?1 AND state IN "
                     "('booting', 'warm', 'claimed', 'running')");
    if (!s)
        return q_end(st, STORE_ERROR);
    sql_bind_text(s, 1, sandbox_id);
    sql_bind_text_or_null(s, 2, reason);
    sql_bind_int64(s, 3, now_ms());
    rc = q_step_done(st, s);
    if (rc == STORE_OK && sql_changes(st) == 0)
        rc = STORE_CONFLICT;
    if (rc == STORE_OK)
        rc = q_sandbox_load(st, sandbox_id, &sb);
    if (rc == STORE_OK)
        rc = q_sandbox_event(st, ctx, "sandbox.stopping", &sb,
                             json_pack("{s:s?}", "reason", reason));
    /* The Session lets go of a stopping Sandbox at once, so its next message can activate a new
     * one while this one is still being torn down. */
    if (rc == STORE_OK && sb.session_id[0]) {
        struct sql_stmt *cur =
            sql_stmt(st, "SELECT 1 FROM sessions WHERE id = ?1 AND sandbox_id = ?2");
        int r;
        if (!cur)
            return q_end(st, STORE_ERROR);
        sql_bind_text(cur, 1, sb.session_id);
        sql_bind_text(cur, 2, sandbox_id);
        r = sql_step(cur);
        sql_done(cur);
        if (r == SQL_ROW)
            rc = q_session_to_idle(st, ctx, sb.session_id, sb.app_id, sandbox_id);
        else if (r != SQL_DONE)
            rc = sql_status(st, r);
    }
    return q_end(st, rc);
}

static enum store_status q_finish_in_tx(struct store *st, const struct store_ctx *ctx,
                                        const char *sandbox_id, bool failed, const char *reason,
                                        const struct store_usage *usage)
{
    struct store_sandbox sb;
    enum store_status rc;
    int64_t cpu = usage ? usage->cpu_usec : -1, mem = usage ? usage->mem_peak_bytes : -1;
    int64_t now = now_ms();

    if ((rc = q_sandbox_load(st, sandbox_id, &sb)) != STORE_OK)
        return rc;
    if (strcmp(sb.state, "terminated") == 0 || strcmp(sb.state, "failed") == 0)
        return STORE_CONFLICT;
    struct sql_stmt *s = sql_stmt(st, "UPDATE sandboxes SET state = ?2, termination_reason = "
                                      "COALESCE(termination_reason, ?3), cpu_usec = ?4, "
                                      "mem_peak_bytes = ?5, terminated_at = ?6, updated_at = ?6 "
                                      "WHERE id = ?1");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, sandbox_id);
    sql_bind_text(s, 2, failed ? "failed" : "terminated");
    sql_bind_text_or_null(s, 3, reason);
    if (cpu >= 0)
        sql_bind_int64(s, 4, cpu);
    else
        sql_bind_null(s, 4);
    if (mem >= 0)
        sql_bind_int64(s, 5, mem);
    else
        sql_bind_null(s, 5);
    sql_bind_int64(s, 6, now);
    if ((rc = q_step_done(st, s)) != STORE_OK)
        return rc;
    if ((rc = q_sandbox_load(st, sandbox_id, &sb)) != STORE_OK)
        return rc;
    rc = q_sandbox_event(st, ctx, failed ? "sandbox.failed" : "sandbox.terminated", &sb,
                         json_pack("{s:s?,s:o,s:o}", "reason",
                                   sb.termination_reason[0] ? sb.termination_reason : NULL,
                                   "cpuUsec", cpu >= 0 ? json_integer(cpu) : json_null(),
                                   "memPeakBytes", mem >= 0 ? json_integer(mem) : json_null()));
    if (rc != STORE_OK || !sb.session_id[0])
        return rc;

    /* The Session accumulates what its Sandboxes used, even when it has moved on to another. */
    struct sql_stmt *u =
        sql_stmt(st, "UPDATE sessions SET cpu_usec = cpu_usec + ?2, mem_peak_bytes = "
                     "CASE WHEN CAST(?3 AS BIGINT) IS NULL THEN mem_peak_bytes "
                     "WHEN COALESCE(mem_peak_bytes, 0) > ?3 THEN mem_peak_bytes ELSE ?3 END, "
                     "updated_at = ?4 "
                     "WHERE id = ?1");
    if (!u)
        return STORE_ERROR;
    sql_bind_text(u, 1, sb.session_id);
    sql_bind_int64(u, 2, cpu > 0 ? cpu : 0);
    if (mem >= 0)
        sql_bind_int64(u, 3, mem);
    else
        sql_bind_null(u, 3);
    sql_bind_int64(u, 4, now);
    if ((rc = q_step_done(st, u)) != STORE_OK)
        return rc;

    struct sql_stmt *cur = sql_stmt(st, "SELECT 1 FROM sessions WHERE id = ?1 AND sandbox_id = ?2");
    int r;
    if (!cur)
        return STORE_ERROR;
    sql_bind_text(cur, 1, sb.session_id);
    sql_bind_text(cur, 2, sandbox_id);
    r = sql_step(cur);
    sql_done(cur);
    if (r == SQL_ROW)
        return q_session_to_idle(st, ctx, sb.session_id, sb.app_id, sandbox_id);
    return r == SQL_DONE ? STORE_OK : sql_status(st, r);
}

static enum store_status q_sandbox_finish(struct store *st, const struct store_ctx *ctx,
                                          const char *sandbox_id, bool failed, const char *reason,
                                          const struct store_usage *usage)
{
    enum store_status rc;
    bool began = q_begin(st, &rc);
    if (!began)
        return rc;
    return q_end(st, q_finish_in_tx(st, ctx, sandbox_id, failed, reason, usage));
}

static enum store_status q_sandbox_list_live(struct store *st, const char *worker_id,
                                             struct store_sandbox **out, size_t *n)
{
    return q_sandbox_list(st,
                          "SELECT " SQL_SANDBOX_COLS "FROM sandboxes WHERE state NOT IN "
                          "('terminated', 'failed') AND (?1 = '' OR worker_id = ?1) "
                          "ORDER BY created_at",
                          worker_id, out, n);
}

static enum store_status q_sandbox_list_stop_requested(struct store *st, const char *worker_id,
                                                       struct store_sandbox **out, size_t *n)
{
    return q_sandbox_list(st,
                          /* EXISTS per Sandbox (a worker holds few), by the Session's key:
                           * `session_id IN (SELECT ... WHERE state = 'deleted' OR ...)` read
                           * every Session, on every wake-up (20 ms at 100,000 Sessions). */
                          "SELECT " SQL_SANDBOX_COLS "FROM sandboxes WHERE state NOT IN "
                          "('terminated', 'failed') AND worker_id = ?1 AND "
                          "(stop_requested_at IS NOT NULL OR EXISTS (SELECT 1 FROM sessions s "
                          "WHERE s.id = sandboxes.session_id AND (s.state = 'deleted' OR "
                          "s.stop_requested_at IS NOT NULL)))",
                          worker_id, out, n);
}

/* Lets go of everything a worker that is gone held in the queue (inside the caller's writer
 * transaction): marks it stopped, requeues the messages it was delivering (the attempt counts, with
 * reason), sends its Sessions back to idle and unowns its deleted ones. *requeued grows by the
 * leases requeued. STORE_NOT_FOUND when it was stopped already. */
static enum store_status q_release_worker_in_tx(struct store *st, const struct store_ctx *ctx,
                                                const char *worker_id, int64_t now,
                                                const char *reason, size_t *requeued)
{
    enum store_status rc;
    struct sql_stmt *stop = sql_stmt(st, "UPDATE workers SET stopped_at = ?2 WHERE id = ?1 AND "
                                         "stopped_at IS NULL");
    if (!stop)
        return STORE_ERROR;
    sql_bind_text(stop, 1, worker_id);
    sql_bind_int64(stop, 2, now);
    if ((rc = q_step_done(st, stop)) != STORE_OK)
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
    if ((rc = q_collect_ids(st, leased, &ids, &n)) != STORE_OK)
        return rc;
    rc = q_requeue_list(st, ctx, ids, n, reason);
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
        rc = q_session_to_idle(st, ctx, list[i].id, list[i].app_id, list[i].sandbox_id);
    free(list);
    if (rc != STORE_OK)
        return rc;
    /* Deleted Sessions it owned keep their state but lose the owner. */
    struct sql_stmt *del =
        sql_stmt(st, "UPDATE sessions SET worker_id = NULL WHERE worker_id = ?1");
    if (!del)
        return STORE_ERROR;
    sql_bind_text(del, 1, worker_id);
    return q_step_done(st, del);
}

static enum store_status q_adopt_in_tx(struct store *st, const struct store_ctx *ctx,
                                       const char *dead_worker_id, const char *new_owner)
{
    int64_t now = now_ms();
    size_t n = 0;
    enum store_status rc = q_release_worker_in_tx(
        st, ctx, dead_worker_id, now, "worker lost while delivering (worker restart)", &n);
    if (rc != STORE_OK)
        return rc;

    /* Its Sandboxes: the new owner reaps them. */
    struct sql_stmt *sb = sql_stmt(st, "UPDATE sandboxes SET worker_id = ?2, updated_at = ?3 WHERE "
                                       "worker_id = ?1 AND state NOT IN ('terminated', 'failed')");
    if (!sb)
        return STORE_ERROR;
    sql_bind_text(sb, 1, dead_worker_id);
    sql_bind_text(sb, 2, new_owner);
    sql_bind_int64(sb, 3, now);
    if ((rc = q_step_done(st, sb)) != STORE_OK)
        return rc;
    char *data = q_json(json_pack("{s:s,s:I}", "adoptedBy", new_owner, "requeued", (json_int_t)n));
    rc = sql_event(st, ctx, "worker.adopted", "worker", dead_worker_id, NULL, NULL, data);
    free(data);
    return rc;
}

static enum store_status q_worker_adopt(struct store *st, const struct store_ctx *ctx,
                                        const char *dead_worker_id, const char *new_owner)
{
    enum store_status rc;
    bool began = q_begin(st, &rc);
    if (!began)
        return rc;
    return q_end(st, q_adopt_in_tx(st, ctx, dead_worker_id, new_owner));
}

static int64_t shape_page_row(struct sql_stmt *s, void *item)
{
    struct store_shape *sh = item;
    sql_col_copy(s, 0, sh->driver, sizeof sh->driver);
    sql_col_copy(s, 1, sh->image, sizeof sh->image);
    sh->vcpu_count = sql_col_int64(s, 2);
    sh->mem_size_mib = sql_col_int64(s, 3);
    return 0;
}

static const struct sql_page shape_page = {sizeof(struct store_shape), shape_page_row,
                                           page_free_plain};

static enum store_status q_app_shapes(struct store *st, struct store_shape **out, size_t *n)
{
    struct sql_stmt *s =
        sql_stmt(st, "SELECT DISTINCT driver, image_digest, vcpu_count, mem_size_mib "
                     "FROM apps WHERE deleted_at IS NULL "
                     "ORDER BY driver, image_digest, vcpu_count, mem_size_mib");
    char no_cursor[STORE_CURSOR_LEN];
    if (!s)
        return STORE_ERROR;
    return sql_read_page(st, s, SIZE_MAX, &shape_page, (void *)out, n, no_cursor);
}

/* ---- hosts ---- */

static enum store_status q_host_register(struct store *st, const struct store_ctx *ctx,
                                         const struct store_host *host, const char *worker_id,
                                         int64_t *was_lost_at)
{
    enum store_status rc;
    int64_t now = now_ms(), lost_at = 0;
    bool known = false;
    int r;
    if (!host->id[0] || host->capacity < 1)
        return STORE_INVALID;
    if (!q_begin(st, &rc))
        return rc;
    struct sql_stmt *get = sql_stmt(st, "SELECT lost_at FROM hosts WHERE id = ?1");
    if (!get)
        return q_end(st, STORE_ERROR);
    sql_bind_text(get, 1, host->id);
    r = sql_step(get);
    if (r == SQL_ROW) {
        known = true;
        lost_at = sql_col_int64_or(get, 0, 0);
    }
    sql_done(get);
    if (r != SQL_ROW && r != SQL_DONE)
        return q_end(st, sql_status(st, r));

    struct sql_stmt *up =
        known ? sql_stmt(st, "UPDATE hosts SET address = ?2, capacity = ?3, heartbeat_at = ?4, "
                             "registered_at = CASE WHEN lost_at IS NULL THEN registered_at "
                             "ELSE ?4 END, lost_at = NULL WHERE id = ?1")
              : sql_stmt(st, "INSERT INTO hosts (id, address, capacity, registered_at, "
                             "heartbeat_at) VALUES (?1, ?2, ?3, ?4, ?4)");
    if (!up)
        return q_end(st, STORE_ERROR);
    sql_bind_text(up, 1, host->id);
    sql_bind_text(up, 2, host->address);
    sql_bind_int64(up, 3, host->capacity);
    sql_bind_int64(up, 4, now);
    rc = q_step_done(st, up);

    if (rc == STORE_OK && worker_id) {
        struct sql_stmt *w = sql_stmt(st, "UPDATE workers SET host_id = ?2 WHERE id = ?1");
        if (!w)
            return q_end(st, STORE_ERROR);
        sql_bind_text(w, 1, worker_id);
        sql_bind_text(w, 2, host->id);
        rc = q_step_done(st, w);
        if (rc == STORE_OK && sql_changes(st) == 0)
            rc = STORE_NOT_FOUND;
    }
    if (rc == STORE_OK && (!known || lost_at)) {
        char *data = q_json(json_pack("{s:s,s:I,s:s?,s:o}", "address", host->address, "capacity",
                                      (json_int_t)host->capacity, "workerId", worker_id,
                                      "wasLostAt", lost_at ? json_integer(lost_at) : json_null()));
        rc = sql_event(st, ctx, lost_at ? "host.returned" : "host.registered", "host", host->id,
                       NULL, NULL, data);
        free(data);
    }
    rc = q_end(st, rc);
    if (rc == STORE_OK && was_lost_at)
        *was_lost_at = lost_at;
    return rc;
}

static enum store_status q_host_heartbeat(struct store *st, const char *host_id)
{
    struct sql_stmt *s = sql_stmt(st, "UPDATE hosts SET heartbeat_at = ?2 WHERE id = ?1 AND "
                                      "lost_at IS NULL");
    enum store_status rc;
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, host_id);
    sql_bind_int64(s, 2, now_ms());
    rc = q_step_done(st, s);
    if (rc == STORE_OK && sql_changes(st) == 0)
        return STORE_CONFLICT; /* declared lost (or never registered) */
    return rc;
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
    return 0;
}

static const struct sql_page host_page = {sizeof(struct store_host), host_page_row,
                                          page_free_plain};

static enum store_status q_host_list(struct store *st, struct store_host **out, size_t *n)
{
    struct sql_stmt *s = sql_stmt(
        st, "SELECT h.id, h.address, h.capacity, h.registered_at, h.heartbeat_at, h.lost_at, "
            "(SELECT COUNT(*) FROM workers w WHERE w.host_id = h.id AND w.stopped_at IS NULL), "
            "(SELECT COUNT(*) FROM workers w JOIN sessions s ON s.worker_id = w.id "
            "WHERE w.host_id = h.id AND s.state IN ('activating', 'active')), "
            "(SELECT COUNT(*) FROM sandboxes b JOIN workers w ON w.id = b.worker_id "
            "WHERE w.host_id = h.id AND b.state NOT IN ('terminated', 'failed')) "
            "FROM hosts h ORDER BY h.id");
    char no_cursor[STORE_CURSOR_LEN];
    if (!s)
        return STORE_ERROR;
    return sql_read_page(st, s, SIZE_MAX, &host_page, (void *)out, n, no_cursor);
}

/* Ends one lost host in the store (inside the caller's writer transaction): see
 * host_declare_lost in store.h. */
static enum store_status q_host_lose_in_tx(struct store *st, const struct store_ctx *ctx,
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
    if ((rc = q_step_done(st, mark)) != STORE_OK)
        return rc;
    if (sql_changes(st) == 0)
        return STORE_OK; /* declared lost already */

    /* Its live Sandboxes end here, in the store: nobody can reach their processes any more. The
     * Sessions pointing at them go back to idle (q_finish_in_tx). Usage is not measured. */
    struct sql_stmt *sbs = sql_stmt(st, "SELECT b.id FROM sandboxes b JOIN workers w ON "
                                        "w.id = b.worker_id WHERE w.host_id = ?1 AND "
                                        "b.state NOT IN ('terminated', 'failed')");
    if (!sbs)
        return STORE_ERROR;
    sql_bind_text(sbs, 1, host_id);
    if ((rc = q_collect_ids(st, sbs, &ids, &n_sandboxes)) != STORE_OK)
        return rc;
    for (size_t i = 0; i < n_sandboxes && rc == STORE_OK; i++) {
        rc = q_finish_in_tx(st, ctx, ids[i], false, "host lost", NULL);
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
    if ((rc = q_collect_ids(st, wk, &ids, &n_workers)) != STORE_OK)
        return rc;
    for (size_t i = 0; i < n_workers && rc == STORE_OK; i++)
        rc =
            q_release_worker_in_tx(st, ctx, ids[i], now, "host lost while delivering", &n_requeued);
    free(ids);
    if (rc != STORE_OK)
        return rc;

    char *data = q_json(json_pack("{s:I,s:I,s:I}", "workers", (json_int_t)n_workers, "sandboxes",
                                  (json_int_t)n_sandboxes, "requeued", (json_int_t)n_requeued));
    rc = sql_event(st, ctx, "host.lost", "host", host_id, NULL, NULL, data);
    free(data);
    if (rc == STORE_OK)
        log_warn("store: host %s declared lost: %zu workers stopped, %zu Sandboxes ended, %zu "
                 "messages requeued",
                 host_id, n_workers, n_sandboxes, n_requeued);
    return rc;
}

/* Collects the host ids a bound query returns. */
static enum store_status q_collect_host_ids(struct store *st, struct sql_stmt *s,
                                            char (**ids)[STORE_HOST_ID_LEN], size_t *n)
{
    char no_cursor[STORE_CURSOR_LEN];
    return sql_read_page(st, s, SIZE_MAX, &host_id_page, (void *)ids, n, no_cursor);
}

static const char q_stale_hosts_sql[] =
    "SELECT id FROM hosts WHERE lost_at IS NULL AND heartbeat_at < ?1 AND id <> ?2 ORDER BY id";

static enum store_status q_host_declare_lost(struct store *st, const struct store_ctx *ctx,
                                             const char *self_host_id, int64_t stale_ms,
                                             size_t *n_lost)
{
    enum store_status rc;
    char(*ids)[STORE_HOST_ID_LEN] = NULL;
    size_t n = 0;
    int64_t now = now_ms();
    int r;

    if (n_lost)
        *n_lost = 0;
    /* The common case, no stale host, costs one read and no write lock. */
    struct sql_stmt *peek = sql_stmt(st, q_stale_hosts_sql);
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

    if (!q_begin(st, &rc))
        return rc;
    /* Again under the write lock: the host may have heartbeated, or been declared lost by
     * another host, since. */
    struct sql_stmt *stale = sql_stmt(st, q_stale_hosts_sql);
    if (!stale)
        return q_end(st, STORE_ERROR);
    sql_bind_int64(stale, 1, now - stale_ms);
    sql_bind_text(stale, 2, self_host_id ? self_host_id : "");
    rc = q_collect_host_ids(st, stale, &ids, &n);
    for (size_t i = 0; i < n && rc == STORE_OK; i++)
        rc = q_host_lose_in_tx(st, ctx, ids[i], now);
    free(ids);
    rc = q_end(st, rc);
    if (rc == STORE_OK && n_lost)
        *n_lost = n;
    return rc;
}

static enum store_status q_sandbox_list_host_lost(struct store *st, const char *host_id,
                                                  int64_t lost_at, struct store_sandbox **out,
                                                  size_t *n)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT " SQL_SANDBOX_COLS "FROM sandboxes WHERE "
                                      "termination_reason = 'host lost' AND terminated_at >= ?2 "
                                      "AND worker_id IN (SELECT id FROM workers WHERE "
                                      "host_id = ?1) ORDER BY created_at");
    char no_cursor[STORE_CURSOR_LEN];
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, host_id);
    sql_bind_int64(s, 2, lost_at);
    return sql_read_page(st, s, SIZE_MAX, &sql_sandbox_page, (void *)out, n, no_cursor);
}

void store_sql_queue_init(struct store *st)
{
    st->worker_register = q_worker_register;
    st->worker_heartbeat = q_worker_heartbeat;
    st->worker_stop = q_worker_stop;
    st->worker_list_dead = q_worker_list_dead;
    st->worker_list_active = q_worker_list_active;
    st->worker_adopt = q_worker_adopt;
    st->queue_claim = q_queue_claim;
    st->queue_claim_owned = q_queue_claim_owned;
    st->queue_extend_lease = q_queue_extend_lease;
    st->queue_complete = q_queue_complete;
    st->queue_fail = q_queue_fail;
    st->queue_release = q_queue_release;
    st->queue_requeue_expired = q_queue_requeue_expired;
    st->queue_next_due = q_queue_next_due;
    st->sandbox_insert = q_sandbox_insert;
    st->sandbox_set_runtime = q_sandbox_set_runtime;
    st->sandbox_mark_warm = q_sandbox_mark_warm;
    st->sandbox_claim_warm = q_sandbox_claim_warm;
    st->sandbox_assign = q_sandbox_assign;
    st->sandbox_mark_running = q_sandbox_mark_running;
    st->session_touch = q_session_touch;
    st->sandbox_mark_stopping = q_sandbox_mark_stopping;
    st->sandbox_finish = q_sandbox_finish;
    st->sandbox_list_live = q_sandbox_list_live;
    st->sandbox_list_stop_requested = q_sandbox_list_stop_requested;
    st->app_shapes = q_app_shapes;
    st->host_register = q_host_register;
    st->host_heartbeat = q_host_heartbeat;
    st->host_list = q_host_list;
    st->host_declare_lost = q_host_declare_lost;
    st->sandbox_list_host_lost = q_sandbox_list_host_lost;
    st->queue_claim_placed = q_queue_claim_placed;
    st->worker_host = q_worker_host;
}
