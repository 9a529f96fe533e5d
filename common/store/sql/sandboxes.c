/*
 * sandboxes.c: the sandboxes table. What the gateway reads (one Sandbox, the lists, the warm
 * pool's numbers) and asks (stop one now), and the lifecycle the workers record, one transition
 * per function, each in one writer transaction with its audit event:
 *
 *     booting --mark_warm--> warm --claim_warm--> claimed --mark_running--> running
 *     booting --assign (a cold boot for one Session)--> claimed
 *     booting, warm, claimed, running --mark_stopping--> stopping
 *     any state but terminated and failed --finish--> terminated | failed
 *
 * A transition whose Sandbox is not in a state it starts from is STORE_CONFLICT (sql_step_change).
 * Claiming and assigning point the Session at the Sandbox; running makes it active; stopping or
 * finishing the Sandbox a Session points at sends that Session back to idle (sessions.c). No
 * hidden state.
 */
#include "id.h"
#include "clock.h"
#include "store_sql.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t sandbox_from_row(struct sql_stmt *s, void *item)
{
    struct store_sandbox *b = item;
    sql_col_copy(s, 1, b->id, sizeof b->id);
    sql_col_copy(s, 2, b->state, sizeof b->state);
    sql_col_copy(s, 3, b->shape.driver, sizeof b->shape.driver);
    sql_col_copy(s, 4, b->shape.image, sizeof b->shape.image);
    sql_col_copy(s, 5, b->image_hash, sizeof b->image_hash);
    b->shape.vcpu_count = sql_col_int64(s, 6);
    b->shape.mem_size_mib = sql_col_int64(s, 7);
    sql_col_copy(s, 8, b->worker_id, sizeof b->worker_id);
    sql_col_copy(s, 9, b->app_id, sizeof b->app_id);
    sql_col_copy(s, 10, b->session_id, sizeof b->session_id);
    b->pid = sql_col_int64_or(s, 11, 0);
    sql_col_copy(s, 12, b->jail_dir, sizeof b->jail_dir);
    sql_col_copy(s, 13, b->cgroup_path, sizeof b->cgroup_path);
    sql_col_copy(s, 14, b->net_address, sizeof b->net_address);
    b->cold = sql_col_int64(s, 15) != 0;
    b->boot_ms = sql_col_int64_or(s, 16, -1);
    b->cpu_usec = sql_col_int64_or(s, 17, -1);
    b->mem_peak_bytes = sql_col_int64_or(s, 18, -1);
    sql_col_copy(s, 19, b->termination_reason, sizeof b->termination_reason);
    b->stop_requested_at = sql_col_int64_or(s, 20, 0);
    b->created_at = sql_col_int64(s, 21);
    b->ready_at = sql_col_int64_or(s, 22, 0);
    b->claimed_at = sql_col_int64_or(s, 23, 0);
    b->terminated_at = sql_col_int64_or(s, 24, 0);
    b->callback_calls = sql_col_int64_or(s, 25, 0);
    b->callback_last_at = sql_col_int64_or(s, 26, 0);
    b->oom_kills = sql_col_int64_or(s, 27, 0);
    b->prestart_rev = sql_col_int64_or(s, 28, 0);
    return sql_col_int64(s, 0);
}

const struct sql_page sql_sandbox_page = {sizeof(struct store_sandbox), sandbox_from_row,
                                          sql_free_items};

enum store_status store_sandbox_get(struct store *st, const char *app_id, const char *sandbox_id,
                                    struct store_sandbox *out)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT " SQL_SANDBOX_COLS "FROM sandboxes WHERE id = ?1 "
                                      "AND (?2 = '' OR app_id = ?2)");
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, sandbox_id);
    sql_bind_app(s, 2, app_id);
    return sql_read_one(st, s, &sql_sandbox_page, out);
}

enum store_status store_sandbox_list(struct store *st, const char *app_id, const char *after,
                                     size_t limit, struct store_sandbox **out, size_t *n,
                                     char *next_cursor)
{
    return sql_app_list_page(st,
                             "SELECT " SQL_SANDBOX_COLS "FROM sandboxes WHERE (?1 = '' OR "
                             "app_id = ?1) AND rowid > ?2 ORDER BY rowid LIMIT ?3",
                             app_id, after, limit, &sql_sandbox_page, (void *)out, n, next_cursor);
}

enum store_status store_sandbox_request_stop(struct store *st, const struct store_ctx *ctx,
                                             const char *app_id, const char *sandbox_id,
                                             struct store_sandbox *out)
{
    struct sql_stmt *s;
    enum store_status r;
    struct store_sandbox b;

    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    r = store_sandbox_get(st, app_id, sandbox_id, &b);
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
        r = store_sandbox_get(st, app_id, sandbox_id, out);
    return sql_end(st, r);
}

static int64_t pool_stat_from_row(struct sql_stmt *s, void *item)
{
    struct store_pool_stat *p = item;
    sql_col_copy(s, 0, p->shape.driver, sizeof p->shape.driver);
    sql_col_copy(s, 1, p->shape.image, sizeof p->shape.image);
    p->shape.vcpu_count = sql_col_int64(s, 2);
    p->shape.mem_size_mib = sql_col_int64(s, 3);
    p->warm = sql_col_int64(s, 4);
    p->booting = sql_col_int64(s, 5);
    p->claimed = sql_col_int64(s, 6);
    p->cold_activations = sql_col_int64(s, 7);
    p->boot_failures = sql_col_int64(s, 8);
    return 0;
}

static const struct sql_page pool_stat_page = {sizeof(struct store_pool_stat), pool_stat_from_row,
                                               sql_free_items};

enum store_status store_pool_stats(struct store *st, struct store_pool_stat **out, size_t *n)
{
    /* Every shape a live App asks for, plus every shape that has Sandboxes. */
    struct sql_stmt *s = sql_stmt(
        st,
        "WITH shapes AS (SELECT driver, image_digest AS image, vcpu_count, mem_size_mib FROM apps "
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
        "AND b.prestart_rev IS NULL "
        "GROUP BY h.driver, h.image, h.vcpu_count, h.mem_size_mib "
        "ORDER BY h.driver, h.image, h.vcpu_count, h.mem_size_mib");
    return sql_read_all(st, s, &pool_stat_page, (void *)out, n);
}

static int64_t pool_app_stat_from_row(struct sql_stmt *s, void *item)
{
    struct store_pool_app_stat *p = item;
    char readiness[8];
    sql_col_copy(s, 0, p->app_id, sizeof p->app_id);
    p->prestart = sql_col_int64(s, 1) != 0;
    p->warm_pool = sql_col_int64(s, 2);
    sql_col_copy(s, 3, readiness, sizeof readiness);
    p->readiness_line = strcmp(readiness, "line") == 0;
    p->warm = sql_col_int64(s, 4);
    p->starting = sql_col_int64(s, 5);
    p->claimed = sql_col_int64(s, 6);
    p->not_ready = sql_col_int64(s, 7);
    p->retired = sql_col_int64(s, 8);
    p->ended_warm = sql_col_int64(s, 9);
    return 0;
}

static const struct sql_page pool_app_stat_page = {sizeof(struct store_pool_app_stat),
                                                   pool_app_stat_from_row, sql_free_items};

enum store_status store_pool_app_stats(struct store *st, struct store_pool_app_stat **out,
                                       size_t *n)
{
    /* Every live App that pre-starts, and every App that has pre-started Sandboxes. */
    struct sql_stmt *s = sql_stmt(
        st, "SELECT a.id, a.prestart, a.warm_pool, a.readiness, "
            "count(CASE WHEN b.state = 'warm' THEN 1 END), "
            "count(CASE WHEN b.state = 'booting' THEN 1 END), "
            "count(CASE WHEN b.state IN ('claimed', 'running') THEN 1 END), "
            "count(CASE WHEN b.termination_reason LIKE 'not ready%' THEN 1 END), "
            "count(CASE WHEN b.termination_reason LIKE 'retired%' THEN 1 END), "
            "count(CASE WHEN b.state IN ('stopping', 'terminated', 'failed') AND "
            "b.claimed_at IS NULL AND b.termination_reason NOT LIKE 'not ready%' AND "
            "b.termination_reason NOT LIKE 'retired%' THEN 1 END) "
            "FROM apps a LEFT JOIN sandboxes b ON b.app_id = a.id AND b.prestart_rev IS NOT NULL "
            "WHERE (a.deleted_at IS NULL AND a.prestart = 1) OR b.id IS NOT NULL "
            "GROUP BY a.id, a.prestart, a.warm_pool, a.readiness ORDER BY a.id");
    return sql_read_all(st, s, &pool_app_stat_page, (void *)out, n);
}

/* ---- the lifecycle (the workers) ---- */

/* Reads one Sandbox by id inside the current transaction. */
static enum store_status sandbox_load(struct store *st, const char *sandbox_id,
                                      struct store_sandbox *out)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT " SQL_SANDBOX_COLS "FROM sandboxes WHERE id = ?1");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, sandbox_id);
    return sql_read_one(st, s, &sql_sandbox_page, out);
}

/* Runs a Sandbox list query whose first parameter is a text argument (may be ""). */
static enum store_status sandbox_list_all(struct store *st, const char *sql, const char *arg,
                                          struct store_sandbox **out, size_t *n)
{
    struct sql_stmt *s = sql_stmt(st, sql);
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, arg ? arg : "");
    return sql_read_all(st, s, &sql_sandbox_page, (void *)out, n);
}

static enum store_status sandbox_event(struct store *st, const struct store_ctx *ctx,
                                       const char *kind, const struct store_sandbox *sb,
                                       json_t *data)
{
    return sql_event_json(st, ctx, kind, "sandbox", sb->id, sb->app_id, sb->session_id, data);
}

/* A new booting Sandbox; with app_id, pre-started for that App's definition revision rev. */
static enum store_status sandbox_insert(struct store *st, const struct store_ctx *ctx,
                                        const char *worker_id, const struct store_shape *shape,
                                        bool cold, const char *app_id, int64_t rev,
                                        struct store_sandbox *out)
{
    enum store_status rc;
    struct store_sandbox sb;

    memset(&sb, 0, sizeof sb);
    if (id_new("sbx", sb.id, sizeof sb.id) != 0)
        return STORE_ERROR;
    if ((rc = sql_begin(st)) != STORE_OK)
        return rc;
    struct sql_stmt *s =
        sql_stmt(st, "INSERT INTO sandboxes (id, state, driver, image, vcpu_count, "
                     "mem_size_mib, worker_id, cold, created_at, updated_at, app_id, "
                     "prestart_rev) "
                     "SELECT ?1, 'booting', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?9, ?10 WHERE NOT "
                     "EXISTS (SELECT 1 FROM workers WHERE id = ?6 AND stopped_at IS NOT NULL)");
    if (!s)
        return sql_end(st, STORE_ERROR);
    sql_bind_text(s, 1, sb.id);
    sql_bind_text(s, 2, shape->driver);
    sql_bind_text(s, 3, shape->image);
    sql_bind_int64(s, 4, shape->vcpu_count);
    sql_bind_int64(s, 5, shape->mem_size_mib);
    sql_bind_text(s, 6, worker_id);
    sql_bind_int64(s, 7, cold ? 1 : 0);
    sql_bind_int64(s, 8, clock_wall_ms());
    sql_bind_text_or_null(s, 9, app_id);
    if (app_id)
        sql_bind_int64(s, 10, rev);
    else
        sql_bind_null(s, 10);
    rc = sql_step_done(st, s);
    /* A worker that was stopped (its host declared lost, or itself taken for dead) records no new
     * Sandbox: nobody would ever end it. */
    if (rc == STORE_OK && sql_changes(st) == 0)
        rc = STORE_CONFLICT;
    if (rc == STORE_OK)
        rc = sandbox_load(st, sb.id, &sb);
    if (rc == STORE_OK)
        rc = sandbox_event(st, ctx, "sandbox.booting", &sb,
                           json_pack("{s:s,s:s,s:I,s:I,s:b,s:s,s:b}", "driver", shape->driver,
                                     "image", shape->image, "vcpuCount",
                                     (json_int_t)shape->vcpu_count, "memSizeMib",
                                     (json_int_t)shape->mem_size_mib, "cold", cold, "workerId",
                                     worker_id, "prestarted", app_id != NULL));
    rc = sql_end(st, rc);
    if (rc == STORE_OK)
        *out = sb;
    return rc;
}

enum store_status store_sandbox_insert(struct store *st, const struct store_ctx *ctx,
                                       const char *worker_id, const struct store_shape *shape,
                                       bool cold, struct store_sandbox *out)
{
    return sandbox_insert(st, ctx, worker_id, shape, cold, NULL, 0, out);
}

enum store_status store_sandbox_insert_prestarted(struct store *st, const struct store_ctx *ctx,
                                                  const char *worker_id,
                                                  const struct store_shape *shape,
                                                  const char *app_id, int64_t rev,
                                                  struct store_sandbox *out)
{
    return sandbox_insert(st, ctx, worker_id, shape, false, app_id, rev, out);
}

enum store_status store_sandbox_set_runtime(struct store *st, const struct store_sandbox *sb)
{
    struct sql_stmt *s =
        sql_stmt(st, "UPDATE sandboxes SET pid = ?2, jail_dir = ?3, cgroup_path = ?4, "
                     "net_address = ?5, image_hash = ?6, updated_at = ?7, "
                     "callback_token_hash = COALESCE(?8, callback_token_hash) "
                     "WHERE id = ?1");
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
    sql_bind_int64(s, 7, clock_wall_ms());
    sql_bind_text_or_null(s, 8, sb->callback_token_hash);
    return sql_step_change(st, s, STORE_NOT_FOUND);
}

enum store_status store_sandbox_mark_warm(struct store *st, const struct store_ctx *ctx,
                                          const char *sandbox_id, int64_t boot_ms)
{
    enum store_status rc;
    struct store_sandbox sb;
    if ((rc = sql_begin(st)) != STORE_OK)
        return rc;
    struct sql_stmt *s = sql_stmt(st, "UPDATE sandboxes SET state = 'warm', boot_ms = ?2, "
                                      "ready_at = ?3, updated_at = ?3 "
                                      "WHERE id = ?1 AND state = 'booting'");
    if (!s)
        return sql_end(st, STORE_ERROR);
    sql_bind_text(s, 1, sandbox_id);
    sql_bind_int64(s, 2, boot_ms);
    sql_bind_int64(s, 3, clock_wall_ms());
    rc = sql_step_change(st, s, STORE_CONFLICT);
    if (rc == STORE_OK)
        rc = sandbox_load(st, sandbox_id, &sb);
    if (rc == STORE_OK)
        rc = sandbox_event(st, ctx, "sandbox.warm", &sb,
                           json_pack("{s:I}", "bootMs", (json_int_t)boot_ms));
    return sql_end(st, rc);
}

/* The warm Sandbox a claim takes, into sandbox_id: with prestart_rev, one of this worker's
 * pre-started for the App at that revision; without, one of the shape's ordinary pool (never a
 * pre-started one: it holds its App's agent already). STORE_EMPTY when none is warm. */
static enum store_status warm_pick(struct store *st, const char *worker_id,
                                   const struct store_shape *shape, const char *app_id,
                                   int64_t prestart_rev, char *sandbox_id, size_t len)
{
    struct sql_stmt *pick =
        prestart_rev > 0
            ? sql_stmt(st, "SELECT id FROM sandboxes WHERE app_id = ?6 AND state = 'warm' AND "
                           "prestart_rev = ?7 AND worker_id = ?1 AND driver = ?2 AND image = ?3 "
                           "AND vcpu_count = ?4 AND mem_size_mib = ?5 AND "
                           "stop_requested_at IS NULL ORDER BY ready_at LIMIT 1")
            : sql_stmt(st, "SELECT id FROM sandboxes WHERE state = 'warm' AND "
                           "worker_id = ?1 AND driver = ?2 AND image = ?3 AND "
                           "vcpu_count = ?4 AND mem_size_mib = ?5 AND prestart_rev IS NULL AND "
                           "stop_requested_at IS NULL ORDER BY ready_at LIMIT 1");
    int r;
    if (!pick)
        return STORE_ERROR;
    sql_bind_text(pick, 1, worker_id);
    sql_bind_text(pick, 2, shape->driver);
    sql_bind_text(pick, 3, shape->image);
    sql_bind_int64(pick, 4, shape->vcpu_count);
    sql_bind_int64(pick, 5, shape->mem_size_mib);
    if (prestart_rev > 0) {
        sql_bind_text(pick, 6, app_id);
        sql_bind_int64(pick, 7, prestart_rev);
    }
    r = sql_step(pick);
    if (r == SQL_ROW)
        sql_col_copy(pick, 0, sandbox_id, len);
    sql_done(pick);
    if (r == SQL_DONE)
        return STORE_EMPTY;
    return r == SQL_ROW ? STORE_OK : sql_status(st, r);
}

enum store_status sql_sandbox_claim_warm_in_tx(struct store *st, const struct store_ctx *ctx,
                                               const char *worker_id,
                                               const struct store_shape *shape, const char *app_id,
                                               int64_t prestart_rev, const char *session_id,
                                               struct store_sandbox *out)
{
    char sandbox_id[STORE_ID_LEN];
    enum store_status rc = STORE_EMPTY;
    int64_t now = clock_wall_ms();
    /* An App with pre-started agents takes one of its own first, else today's pool. */
    if (prestart_rev > 0)
        rc = warm_pick(st, worker_id, shape, app_id, prestart_rev, sandbox_id, sizeof sandbox_id);
    if (rc == STORE_EMPTY)
        rc = warm_pick(st, worker_id, shape, app_id, 0, sandbox_id, sizeof sandbox_id);
    if (rc != STORE_OK)
        return rc;

    /* Conditional, and checked by its row count: under PostgreSQL's READ COMMITTED a stop request
     * may land between the pick and here; such a Sandbox is not claimed (none was warm). */
    struct sql_stmt *s = sql_stmt(st, "UPDATE sandboxes SET state = 'claimed', app_id = ?2, "
                                      "session_id = ?3, claimed_at = ?4, updated_at = ?4 "
                                      "WHERE id = ?1 AND state = 'warm' AND "
                                      "stop_requested_at IS NULL");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, sandbox_id);
    sql_bind_text(s, 2, app_id);
    sql_bind_text(s, 3, session_id);
    sql_bind_int64(s, 4, now);
    if ((rc = sql_step_change(st, s, STORE_EMPTY)) != STORE_OK)
        return rc;
    if ((rc = sql_session_point_at_in_tx(st, session_id, sandbox_id, worker_id)) != STORE_OK)
        return rc;
    if ((rc = sandbox_load(st, sandbox_id, out)) != STORE_OK)
        return rc;
    return sandbox_event(st, ctx, "sandbox.claimed", out,
                         json_pack("{s:b,s:b}", "cold", 0, "prestarted", out->prestart_rev > 0));
}

enum store_status store_sandbox_claim_warm(struct store *st, const struct store_ctx *ctx,
                                           const char *worker_id, const struct store_shape *shape,
                                           const char *app_id, int64_t prestart_rev,
                                           const char *session_id, struct store_sandbox *out)
{
    enum store_status rc;
    struct store_sandbox sb;
    if ((rc = sql_begin(st)) != STORE_OK)
        return rc;
    rc = sql_end(st, sql_sandbox_claim_warm_in_tx(st, ctx, worker_id, shape, app_id, prestart_rev,
                                                  session_id, &sb));
    if (rc == STORE_OK)
        *out = sb;
    return rc;
}

enum store_status store_sandbox_assign(struct store *st, const struct store_ctx *ctx,
                                       const char *sandbox_id, const char *app_id,
                                       const char *session_id)
{
    enum store_status rc;
    struct store_sandbox sb;
    int64_t now = clock_wall_ms();
    if ((rc = sql_begin(st)) != STORE_OK)
        return rc;
    struct sql_stmt *s = sql_stmt(st, "UPDATE sandboxes SET state = 'claimed', app_id = ?2, "
                                      "session_id = ?3, ready_at = ?4, claimed_at = ?4, "
                                      "boot_ms = ?4 - created_at, updated_at = ?4 "
                                      "WHERE id = ?1 AND state = 'booting'");
    if (!s)
        return sql_end(st, STORE_ERROR);
    sql_bind_text(s, 1, sandbox_id);
    sql_bind_text(s, 2, app_id);
    sql_bind_text(s, 3, session_id);
    sql_bind_int64(s, 4, now);
    rc = sql_step_change(st, s, STORE_CONFLICT);
    if (rc == STORE_OK)
        rc = sandbox_load(st, sandbox_id, &sb);
    if (rc == STORE_OK)
        rc = sql_session_point_at_in_tx(st, session_id, sandbox_id, sb.worker_id);
    if (rc == STORE_OK)
        rc = sandbox_event(st, ctx, "sandbox.claimed", &sb,
                           json_pack("{s:b,s:I}", "cold", 1, "bootMs", (json_int_t)sb.boot_ms));
    return sql_end(st, rc);
}

enum store_status sql_sandbox_mark_running_in_tx(struct store *st, const struct store_ctx *ctx,
                                                 const char *sandbox_id, const char *session_id)
{
    enum store_status rc;
    struct store_sandbox sb;
    int64_t now = clock_wall_ms();
    struct sql_stmt *s = sql_stmt(st, "UPDATE sandboxes SET state = 'running', updated_at = ?2 "
                                      "WHERE id = ?1 AND state = 'claimed'");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, sandbox_id);
    sql_bind_int64(s, 2, now);
    rc = sql_step_change(st, s, STORE_CONFLICT);
    if (rc == STORE_OK)
        rc = sandbox_load(st, sandbox_id, &sb);
    if (rc == STORE_OK)
        rc = sandbox_event(st, ctx, "sandbox.running", &sb, NULL);
    if (rc == STORE_OK) {
        struct sql_stmt *u = sql_stmt(st, "UPDATE sessions SET state = 'active', sandbox_id = ?2, "
                                          "activation_count = activation_count + 1, "
                                          "last_activity_at = ?3, updated_at = ?3 "
                                          "WHERE id = ?1 AND state <> 'deleted'");
        if (!u)
            return STORE_ERROR;
        sql_bind_text(u, 1, session_id);
        sql_bind_text(u, 2, sandbox_id);
        sql_bind_int64(u, 3, now);
        rc = sql_step_change(st, u, STORE_CONFLICT); /* the Session was deleted meanwhile */
    }
    if (rc == STORE_OK) {
        rc = sql_event_json(st, ctx, "session.active", "session", session_id, sb.app_id, session_id,
                            json_pack("{s:s,s:b}", "sandboxId", sandbox_id, "cold", sb.cold));
    }
    return rc;
}

enum store_status store_sandbox_mark_running(struct store *st, const struct store_ctx *ctx,
                                             const char *sandbox_id, const char *session_id)
{
    enum store_status rc;
    if ((rc = sql_begin(st)) != STORE_OK)
        return rc;
    return sql_end(st, sql_sandbox_mark_running_in_tx(st, ctx, sandbox_id, session_id));
}

enum store_status store_sandbox_mark_stopping(struct store *st, const struct store_ctx *ctx,
                                              const char *sandbox_id, const char *reason)
{
    enum store_status rc;
    struct store_sandbox sb;
    if ((rc = sql_begin(st)) != STORE_OK)
        return rc;
    struct sql_stmt *s =
        sql_stmt(st, "UPDATE sandboxes SET state = 'stopping', termination_reason = "
                     "?2, updated_at = ?3 WHERE id = ?1 AND state IN "
                     "('booting', 'warm', 'claimed', 'running')");
    if (!s)
        return sql_end(st, STORE_ERROR);
    sql_bind_text(s, 1, sandbox_id);
    sql_bind_text_or_null(s, 2, reason);
    sql_bind_int64(s, 3, clock_wall_ms());
    rc = sql_step_change(st, s, STORE_CONFLICT);
    if (rc == STORE_OK)
        rc = sandbox_load(st, sandbox_id, &sb);
    if (rc == STORE_OK)
        rc = sandbox_event(st, ctx, "sandbox.stopping", &sb, json_pack("{s:s?}", "reason", reason));
    /* The Session lets go of a stopping Sandbox at once, so its next message can activate a new
     * one while this one is still being torn down. */
    if (rc == STORE_OK && sb.session_id[0]) {
        struct sql_stmt *cur =
            sql_stmt(st, "SELECT 1 FROM sessions WHERE id = ?1 AND sandbox_id = ?2");
        int r;
        if (!cur)
            return sql_end(st, STORE_ERROR);
        sql_bind_text(cur, 1, sb.session_id);
        sql_bind_text(cur, 2, sandbox_id);
        r = sql_step(cur);
        sql_done(cur);
        if (r == SQL_ROW)
            rc = sql_session_to_idle_in_tx(st, ctx, sb.session_id, sb.app_id, sandbox_id);
        else if (r != SQL_DONE)
            rc = sql_status(st, r);
    }
    return sql_end(st, rc);
}

enum store_status sql_sandbox_finish_in_tx(struct store *st, const struct store_ctx *ctx,
                                           const char *sandbox_id, bool failed, const char *reason,
                                           const struct store_usage *usage)
{
    struct store_sandbox sb;
    enum store_status rc;
    int64_t cpu = usage ? usage->cpu_usec : -1, mem = usage ? usage->mem_peak_bytes : -1;
    int64_t now = clock_wall_ms();

    if ((rc = sandbox_load(st, sandbox_id, &sb)) != STORE_OK)
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
    if ((rc = sql_step_done(st, s)) != STORE_OK)
        return rc;
    if ((rc = sandbox_load(st, sandbox_id, &sb)) != STORE_OK)
        return rc;
    rc = sandbox_event(st, ctx, failed ? "sandbox.failed" : "sandbox.terminated", &sb,
                       json_pack("{s:s?,s:o,s:o}", "reason",
                                 sb.termination_reason[0] ? sb.termination_reason : NULL, "cpuUsec",
                                 cpu >= 0 ? json_integer(cpu) : json_null(), "memPeakBytes",
                                 mem >= 0 ? json_integer(mem) : json_null()));
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
    if ((rc = sql_step_done(st, u)) != STORE_OK)
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
        return sql_session_to_idle_in_tx(st, ctx, sb.session_id, sb.app_id, sandbox_id);
    return r == SQL_DONE ? STORE_OK : sql_status(st, r);
}

enum store_status store_sandbox_finish(struct store *st, const struct store_ctx *ctx,
                                       const char *sandbox_id, bool failed, const char *reason,
                                       const struct store_usage *usage)
{
    enum store_status rc;
    if ((rc = sql_begin(st)) != STORE_OK)
        return rc;
    return sql_end(st, sql_sandbox_finish_in_tx(st, ctx, sandbox_id, failed, reason, usage));
}

enum store_status store_sandbox_list_live(struct store *st, const char *worker_id,
                                          struct store_sandbox **out, size_t *n)
{
    return sandbox_list_all(st,
                            "SELECT " SQL_SANDBOX_COLS "FROM sandboxes WHERE state NOT IN "
                            "('terminated', 'failed') AND (?1 = '' OR worker_id = ?1) "
                            "ORDER BY created_at",
                            worker_id, out, n);
}

enum store_status store_sandbox_list_stop_requested(struct store *st, const char *worker_id,
                                                    struct store_sandbox **out, size_t *n)
{
    return sandbox_list_all(st,
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

enum store_status store_sandbox_list_host_lost(struct store *st, const char *host_id,
                                               int64_t lost_at, struct store_sandbox **out,
                                               size_t *n)
{
    /* Whatever reason they carry: one the host was stopping when it died keeps its own (the
     * verdict does not overwrite it, sql_sandbox_finish_in_tx), and its jail is here as well. No
     * worker of the host wrote after lost_at, so what ended from then on was ended by the verdict.
     */
    struct sql_stmt *s = sql_stmt(st, "SELECT " SQL_SANDBOX_COLS "FROM sandboxes WHERE "
                                      "terminated_at >= ?2 AND worker_id IN (SELECT id FROM "
                                      "workers WHERE host_id = ?1) ORDER BY created_at");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, host_id);
    sql_bind_int64(s, 2, lost_at);
    return sql_read_all(st, s, &sql_sandbox_page, (void *)out, n);
}

/* A Sandbox row followed by its worker's host id (sandbox_by_callback_token). */
struct sandbox_with_host {
    struct store_sandbox b;
    char host_id[STORE_HOST_ID_LEN];
};

static int64_t sandbox_with_host_from_row(struct sql_stmt *s, void *item)
{
    struct sandbox_with_host *h = item;
    sql_col_copy(s, SQL_SANDBOX_NCOLS, h->host_id, sizeof h->host_id);
    return sandbox_from_row(s, &h->b);
}

static const struct sql_page sandbox_with_host_page = {sizeof(struct sandbox_with_host),
                                                       sandbox_with_host_from_row, sql_free_items};

enum store_status store_sandbox_by_callback_token(struct store *st, const char *token_hash,
                                                  struct store_sandbox *out, char *host_id,
                                                  size_t host_len)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT " SQL_SANDBOX_COLS ", (SELECT w.host_id FROM workers "
                                      "w WHERE w.id = sandboxes.worker_id) FROM sandboxes "
                                      "WHERE callback_token_hash = ?1");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, token_hash);
    struct sandbox_with_host h = {0};
    enum store_status r = sql_read_one(st, s, &sandbox_with_host_page, &h);
    if (r == STORE_OK) {
        *out = h.b;
        snprintf(host_id, host_len, "%s", h.host_id);
    }
    return r;
}

enum store_status store_sandbox_callbacks_add(struct store *st,
                                              const struct store_callback_count *counts, size_t n,
                                              const char *host_id, int64_t refused)
{
    enum store_status r;
    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    for (size_t i = 0; i < n && r == STORE_OK; i++) {
        struct sql_stmt *s = sql_stmt(st, "UPDATE sandboxes SET callback_calls = callback_calls "
                                          "+ ?2, callback_last_at = CASE WHEN callback_last_at "
                                          "> ?3 THEN callback_last_at ELSE ?3 END WHERE id = ?1");
        if (!s)
            return sql_end(st, STORE_ERROR);
        sql_bind_text(s, 1, counts[i].sandbox_id);
        sql_bind_int64(s, 2, counts[i].calls);
        sql_bind_int64(s, 3, counts[i].last_at);
        r = sql_step_done(st, s);
    }
    if (r == STORE_OK && refused > 0) {
        struct sql_stmt *s = sql_stmt(st, "UPDATE hosts SET callback_refused = callback_refused + "
                                          "?2 WHERE id = ?1");
        if (!s)
            return sql_end(st, STORE_ERROR);
        sql_bind_text(s, 1, host_id);
        sql_bind_int64(s, 2, refused);
        r = sql_step_done(st, s);
    }
    return sql_end(st, r);
}

enum store_status store_sandbox_oom_killed(struct store *st, const struct store_ctx *ctx,
                                           const char *sandbox_id, int64_t total)
{
    enum store_status rc;
    struct store_sandbox sb;
    if ((rc = sql_begin(st)) != STORE_OK)
        return rc;
    rc = sandbox_load(st, sandbox_id, &sb);
    if (rc == STORE_OK && total <= sb.oom_kills)
        return sql_end(st, STORE_OK); /* read before: nothing new */
    struct sql_stmt *s =
        rc == STORE_OK
            ? sql_stmt(st, "UPDATE sandboxes SET oom_kills = ?2, updated_at = ?3 WHERE id = ?1")
            : NULL;
    if (rc == STORE_OK && !s)
        rc = STORE_ERROR;
    if (rc == STORE_OK) {
        sql_bind_text(s, 1, sandbox_id);
        sql_bind_int64(s, 2, total);
        sql_bind_int64(s, 3, clock_wall_ms());
        rc = sql_step_done(st, s);
    }
    if (rc == STORE_OK)
        rc = sandbox_event(st, ctx, "sandbox.oom_killed", &sb,
                           json_pack("{s:I, s:I}", "killed", (json_int_t)(total - sb.oom_kills),
                                     "total", (json_int_t)total));
    return sql_end(st, rc);
}
