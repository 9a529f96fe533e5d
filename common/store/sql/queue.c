/*
 * queue.c: the message queue the workers consume: claims with leases (and placement across
 * hosts), lease extension, completion, failed attempts with backoff, releases, requeueing of
 * expired leases, and the next retry's due time.
 *
 * A message is queued -> delivering (claimed, leased, its attempt counted) -> completed, or back
 * to queued (a failed attempt with attempts left, a release, an expired lease) or failed (out of
 * attempts). Every claim and transition is one concurrent writer transaction
 * (sql_begin_concurrent). On SQLite that holds the database's one write lock from the first read,
 * so two worker processes can never both see a message as free and both take it. On PostgreSQL
 * writers run side by side under READ COMMITTED, and each step says what it relies on instead:
 * the claim locks its message row (FOR UPDATE ... SKIP LOCKED: a row another claim holds is passed
 * over) and takes a free Session only if it is still free; completions, releases and lease
 * extensions are UPDATEs conditional on the lease, checked by their row count; a failed attempt
 * and a requeue lock the row before they read it. Only a Session's first unfinished message is
 * ever deliverable, and a Session's messages only become finished, never unfinished again, so a
 * pick's snapshot can be stale but never wrong about order. Every state change writes its audit
 * event in the same transaction. No hidden state.
 */
#include "clock.h"
#include "id.h"
#include "log.h"
#include "queue_sql.h"
#include "store_sql.h"

#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The next deliverable messages. A message is deliverable when it is queued and due, its Session
 * is not deleted and is free or ours, and no earlier message of its Session is unfinished: that
 * one rule gives both per-Session order and one-at-a-time delivery, since a delivering message is
 * unfinished and blocks every later one. Placement (claim_choose) may pass over the first ones,
 * so several may come, each with what placement needs: when it became claimable (its creation, its
 * retry time, or its Session's return to idle, whichever is last) and its App's shape. Up to ?3,
 * due by ?1, for worker ?2. */
#define CLAIM_PICK_COLS                                                                            \
    "SELECT m.id, m.session_id, CASE WHEN s.worker_id IS NULL THEN 1 ELSE 0 END, "                 \
    "CASE WHEN m.not_before > m.created_at THEN m.not_before ELSE m.created_at END, "              \
    "s.updated_at, a.driver, a.image_digest, a.vcpu_count, a.mem_size_mib "
#define CLAIM_PICK_HEAD                                                                            \
    "m.state = 'queued' AND m.not_before <= ?1 AND s.state <> 'deleted' "                          \
    "AND NOT EXISTS (SELECT 1 FROM messages e WHERE e.session_id = m.session_id "                  \
    "AND e.seq < m.seq AND e.state IN ('queued', 'delivering')) "                                  \
    "ORDER BY m.not_before, m.created_at LIMIT ?3"
/* One App's (?4), through messages_queued_app, so that another App's backlog is never walked:
 * its Sessions that are idle or ours; ?5 = 1: idle ones only (store_queue_waiting_app). */
#define CLAIM_PICK_APP_SQL                                                                         \
    CLAIM_PICK_COLS "FROM messages m JOIN sessions s ON s.id = m.session_id "                      \
                    "JOIN apps a ON a.id = s.app_id WHERE m.app_id = ?4 "                          \
                    "AND (s.worker_id IS NULL OR s.worker_id = ?2) "                               \
                    "AND (?5 = 0 OR s.worker_id IS NULL) AND " CLAIM_PICK_HEAD
/* Only Sessions this worker owns (?2; of one App ?4, or of any when ?4 is ''): from those
 * Sessions (sessions_worker) to their queued messages (messages_queued_session), so in proportion
 * to what this worker holds: the claims of a worker at its Sandbox limit, and those of an App at
 * its quota, never walk the queue's backlog. CROSS JOIN keeps SQLite's join in that order. */
#define CLAIM_PICK_OWNED_SQL                                                                       \
    CLAIM_PICK_COLS "FROM sessions s CROSS JOIN messages m JOIN apps a ON a.id = s.app_id "        \
                    "WHERE s.worker_id = ?2 AND (?4 = '' OR s.app_id = ?4) "                       \
                    "AND m.session_id = s.id AND " CLAIM_PICK_HEAD
const char queue_claim_pick_app_sql[] = CLAIM_PICK_APP_SQL;
const char queue_claim_pick_owned_sql[] = CLAIM_PICK_OWNED_SQL;
/* PostgreSQL: the claim also locks the message rows it reads and passes over those another
 * transaction holds, so claimers never queue behind each other on a row (SQLite has no row
 * locks: its one writer at a time is the whole lock). A peek locks nothing. */
static const char claim_pick_app_pg_sql[] = CLAIM_PICK_APP_SQL " FOR UPDATE OF m SKIP LOCKED";
static const char claim_pick_owned_pg_sql[] = CLAIM_PICK_OWNED_SQL " FOR UPDATE OF m SKIP LOCKED";

static const char *claim_pick(struct store *st, bool lock, bool owned)
{
    if (lock && sql_dialect(st) == SQL_POSTGRES)
        return owned ? claim_pick_owned_pg_sql : claim_pick_app_pg_sql;
    return owned ? queue_claim_pick_owned_sql : queue_claim_pick_app_sql;
}

/* The App after ?1 (in id order) with a queued message, its effective live-Sandbox quota (?2:
 * the default for NULL), and the last such App (the walk ends there: one step when one App
 * waits): one step of a walk over the Apps with waiting messages, each a search of
 * messages_queued_app, however long any App's backlog. */
const char queue_claim_next_app_sql[] =
    "SELECT a.id, COALESCE(a.quota_live_sandboxes, ?2), "
    "(SELECT MAX(l.app_id) FROM messages l WHERE l.state = 'queued') FROM apps a WHERE a.id = "
    "(SELECT MIN(m.app_id) FROM messages m WHERE m.state = 'queued' AND m.app_id > ?1)";
/* Each App's Sessions that hold a Sandbox, on every worker: a walk of the partial index
 * sessions_live, so in proportion to the live Sessions, never to an App's idle ones. */
const char queue_claim_live_sql[] = "SELECT s.app_id, COUNT(*) FROM sessions s "
                                    "WHERE s.state IN ('activating', 'active') GROUP BY s.app_id";

/* How many deliverable messages a placed claim looks at before giving up: the ones it passes over
 * belong to other hosts for at most the placement grace. */
#define PLACED_CANDIDATES 32

/* What a claim picked. */
struct claim_pick_result {
    char message_id[STORE_ID_LEN];
    char session_id[STORE_ID_LEN];
    bool session_free;
    char app_id[STORE_ID_LEN]; /* "" when picked without the walk over Apps (owned only) */
    int64_t quota;             /* the App's live-Sandbox quota, 0: no bound */
    int64_t live;              /* its live Sandboxes when picked */
    struct store_shape shape;  /* its App's */
};

/* ---- fair claiming: the Apps with waiting messages, fewest live Sandboxes first ---- */

struct claim_app {
    char id[STORE_ID_LEN];
    int64_t quota; /* 0: no bound */
    int64_t live;
};

static int claim_app_cmp(const void *a, const void *b)
{
    const struct claim_app *x = a, *y = b;
    if (x->live != y->live)
        return x->live < y->live ? -1 : 1;
    return strcmp(x->id, y->id);
}

/* The Apps with queued messages, in the order their messages are served: fewest live Sandboxes
 * first, then by id. The live counts are read only when there is something to order or a quota to
 * hold (one App without a quota, the common case, costs one step of the walk). *out is the
 * caller's to free. */
static enum store_status claim_apps_load(struct store *st, int64_t default_quota,
                                         struct claim_app **out, size_t *n_out)
{
    struct claim_app *apps = NULL;
    size_t n = 0, cap = 0;
    bool any_quota = false;
    char after[STORE_ID_LEN] = "";
    enum store_status rc = STORE_OK;
    *out = NULL;
    *n_out = 0;
    for (;;) {
        struct sql_stmt *s = sql_stmt(st, queue_claim_next_app_sql);
        if (!s) {
            rc = STORE_ERROR;
            break;
        }
        sql_bind_text(s, 1, after);
        sql_bind_int64(s, 2, default_quota);
        int r = sql_step(s);
        if (r != SQL_ROW) {
            sql_done(s);
            if (r != SQL_DONE)
                rc = sql_status(st, r);
            break;
        }
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            struct claim_app *na = realloc(apps, ncap * sizeof *na);
            if (!na) {
                sql_done(s);
                rc = STORE_ERROR;
                break;
            }
            apps = na;
            cap = ncap;
        }
        char last[STORE_ID_LEN];
        memset(&apps[n], 0, sizeof apps[n]);
        sql_col_copy(s, 0, apps[n].id, sizeof apps[n].id);
        apps[n].quota = sql_col_int64_or(s, 1, 0);
        sql_col_copy(s, 2, last, sizeof last);
        sql_done(s);
        any_quota = any_quota || apps[n].quota > 0;
        snprintf(after, sizeof after, "%s", apps[n].id);
        if (strcmp(apps[n++].id, last) == 0)
            break;
    }
    if (rc == STORE_OK && (n > 1 || any_quota)) {
        struct sql_stmt *s = sql_stmt(st, queue_claim_live_sql);
        int r = SQL_DONE;
        if (!s)
            rc = STORE_ERROR;
        while (s && (r = sql_step(s)) == SQL_ROW) {
            char id[STORE_ID_LEN];
            sql_col_copy(s, 0, id, sizeof id);
            for (size_t i = 0; i < n; i++)
                if (strcmp(apps[i].id, id) == 0)
                    apps[i].live = sql_col_int64(s, 1);
        }
        if (s) {
            if (r != SQL_DONE)
                rc = sql_status(st, r);
            sql_done(s);
        }
        qsort(apps, n, sizeof *apps, claim_app_cmp);
    }
    if (rc != STORE_OK) {
        free(apps);
        return rc;
    }
    *out = apps;
    *n_out = n;
    return STORE_OK;
}

/* ---- placement ---- */

/* What placement needs to know about the claimer, in one read: its host, whether it was stopped
 * (a worker of a host declared lost, or one taken for dead, must not start anything new), how
 * many hosts are live (not lost, heartbeat fresh) and whether its own is one of them. */
struct claimer {
    char host_id[STORE_HOST_ID_LEN];
    bool stopped;
    int64_t live_hosts;
    bool host_live;
};

static enum store_status claimer_load(struct store *st, const char *worker_id, int64_t fresh_since,
                                      struct claimer *c)
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
static enum store_status best_host(struct store *st, const struct store_shape *shape,
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

/* What placement decides a pick with, computed once per claim (claim_choose). */
struct placing {
    const struct store_placement *placement; /* NULL: no placement */
    char host_id[STORE_HOST_ID_LEN];
    char best[STORE_HOST_ID_LEN];
    struct store_shape best_for;
    bool have_best, single_host;
    int64_t fresh_since;
};

/* Steps a bound pick statement: the first row this worker may take goes to out (STORE_OK). A
 * message of a Session this worker owns is always ours; one of an idle Session is ours when our
 * host is where placement puts it, or when it has waited for its host longer than the grace (so
 * that a slow or dying host never starves a Session). The best host is computed once per shape
 * per claim; when ours is the only live host, it is ours. */
static enum store_status pick_rows(struct store *st, struct sql_stmt *pick, struct placing *pl,
                                   int64_t now, struct claim_pick_result *out)
{
    const struct store_placement *placement = pl->placement;
    enum store_status rc = STORE_EMPTY;
    int r;
    while ((r = sql_step(pick)) == SQL_ROW) {
        bool session_free = sql_col_int64(pick, 2) != 0;
        int64_t since = sql_col_int64(pick, 3), idle_since = sql_col_int64(pick, 4);
        bool ours = !placement || pl->single_host || !session_free;
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
            if (!pl->have_best || memcmp(&shape, &pl->best_for, sizeof shape) != 0) {
                enum store_status brc =
                    best_host(st, &shape, pl->fresh_since, pl->best, sizeof pl->best);
                if (brc != STORE_OK) {
                    rc = brc;
                    break;
                }
                pl->best_for = shape;
                pl->have_best = true;
            }
            ours = strcmp(pl->best, pl->host_id) == 0;
        }
        if (!ours)
            continue;
        sql_col_copy(pick, 0, out->message_id, sizeof out->message_id);
        sql_col_copy(pick, 1, out->session_id, sizeof out->session_id);
        out->session_free = session_free;
        sql_col_copy(pick, 5, out->shape.driver, sizeof out->shape.driver);
        sql_col_copy(pick, 6, out->shape.image, sizeof out->shape.image);
        out->shape.vcpu_count = sql_col_int64(pick, 7);
        out->shape.mem_size_mib = sql_col_int64(pick, 8);
        rc = STORE_OK;
        break;
    }
    if (r != SQL_ROW && r != SQL_DONE)
        rc = sql_status(st, r);
    sql_done(pick);
    return rc;
}

/* Which messages a claim may take. */
enum claim_scope {
    CLAIM_ANY,       /* Sessions idle or owned by this worker */
    CLAIM_OWNED,     /* only Sessions this worker owns (it is at its Sandbox limit) */
    CLAIM_IDLE_ONLY, /* only idle Sessions: which App waits for a Sandbox (waiting_app) */
};

/* Picks the message to claim. Owned only: the first deliverable one of this worker's Sessions.
 * Otherwise the Apps with queued messages are served fewest live Sandboxes first (fair claiming,
 * store_queue.h), each App's messages in queue order; an App at its quota only for Sessions that
 * hold a Sandbox already. */
static enum store_status claim_choose(struct store *st, const char *worker_id,
                                      enum claim_scope scope,
                                      const struct store_placement *placement, int64_t now,
                                      bool lock, struct claim_pick_result *out)
{
    struct placing pl;
    enum store_status rc;

    memset(&pl, 0, sizeof pl);
    memset(out, 0, sizeof *out);
    pl.placement = placement;
    if (placement) {
        struct claimer c;
        pl.fresh_since = now - placement->host_lost_ms;
        if ((rc = claimer_load(st, worker_id, pl.fresh_since, &c)) != STORE_OK)
            return rc;
        if (c.stopped)
            return STORE_EMPTY;
        snprintf(pl.host_id, sizeof pl.host_id, "%s", c.host_id);
        /* Nothing to choose between when this is the only live host, or when no host is live;
         * a worker without a host (registered the old way) places nothing either. */
        pl.single_host = !pl.host_id[0] || c.live_hosts == 0 || (c.live_hosts == 1 && c.host_live);
    }
    int64_t limit = placement && !pl.single_host ? PLACED_CANDIDATES : 1;
    if (scope == CLAIM_OWNED) {
        struct sql_stmt *pick = sql_stmt(st, claim_pick(st, lock, true));
        if (!pick)
            return STORE_ERROR;
        sql_bind_int64(pick, 1, now);
        sql_bind_text(pick, 2, worker_id);
        sql_bind_int64(pick, 3, limit);
        sql_bind_text(pick, 4, "");
        return pick_rows(st, pick, &pl, now, out);
    }

    struct claim_app *apps = NULL;
    size_t n_apps = 0;
    if ((rc = claim_apps_load(st, placement ? placement->default_live_quota : 0, &apps, &n_apps)) !=
        STORE_OK)
        return rc;
    rc = STORE_EMPTY;
    for (size_t i = 0; i < n_apps && rc == STORE_EMPTY; i++) {
        bool at_quota = apps[i].quota > 0 && apps[i].live >= apps[i].quota;
        if (at_quota && scope == CLAIM_IDLE_ONLY)
            continue;
        /* At its quota, only its Sessions that hold a Sandbox here (found from them). */
        struct sql_stmt *pick = sql_stmt(st, claim_pick(st, lock, at_quota));
        if (!pick) {
            rc = STORE_ERROR;
            break;
        }
        sql_bind_int64(pick, 1, now);
        sql_bind_text(pick, 2, worker_id);
        sql_bind_int64(pick, 3, limit);
        sql_bind_text(pick, 4, apps[i].id);
        if (!at_quota)
            sql_bind_int64(pick, 5, scope == CLAIM_IDLE_ONLY ? 1 : 0);
        rc = pick_rows(st, pick, &pl, now, out);
        if (rc == STORE_OK) {
            snprintf(out->app_id, sizeof out->app_id, "%s", apps[i].id);
            out->quota = apps[i].quota;
            out->live = apps[i].live;
        }
    }
    free(apps);
    return rc;
}

enum store_status store_queue_waiting_app(struct store *st, const char *worker_id,
                                          const struct store_placement *placement,
                                          struct store_waiting_app *out)
{
    struct claim_pick_result pick;
    int64_t now = clock_wall_ms();
    enum store_status rc =
        claim_choose(st, worker_id, CLAIM_IDLE_ONLY, placement, now, false, &pick);
    if (rc != STORE_OK)
        return rc;
    /* Not waiting if some worker has a free slot for it: a live host serving fewer Sessions than
     * its capacity, where placement would send it (and whose worker will claim it). */
    if (placement) {
        char best[STORE_HOST_ID_LEN];
        rc = best_host(st, &pick.shape, now - placement->host_lost_ms, best, sizeof best);
        if (rc != STORE_OK)
            return rc;
        if (best[0])
            return STORE_EMPTY;
    }
    memset(out, 0, sizeof *out);
    snprintf(out->app_id, sizeof out->app_id, "%s", pick.app_id);
    out->live = pick.live;
    out->quota = pick.quota;
    return STORE_OK;
}

/* A delivery row: SQL_MESSAGE_COLS, SQL_SESSION_COLS, SQL_APP_COLS. */
static int64_t delivery_from_row(struct sql_stmt *s, void *item)
{
    struct store_delivery *d = item;
    sql_message_from_row(s, 0, &d->message);
    sql_session_from_row(s, 19, &d->session);
    sql_app_from_row(s, 37, &d->app);
    return 0;
}

static void delivery_items_free(void *items, size_t n)
{
    struct store_delivery *d = items;
    for (size_t i = 0; d && i < n; i++)
        store_delivery_clear(&d[i]);
    free(items);
}

static const struct sql_page delivery_page = {sizeof(struct store_delivery), delivery_from_row,
                                              delivery_items_free};

static enum store_status delivery_load(struct store *st, const char *message_id,
                                       struct store_delivery *out)
{
    struct sql_stmt *s =
        sql_stmt(st, "SELECT " SQL_MESSAGE_COLS ", " SQL_SESSION_COLS ", " SQL_APP_COLS
                     " FROM messages m JOIN sessions s ON s.id = m.session_id "
                     "JOIN apps a ON a.id = s.app_id WHERE m.id = ?1");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, message_id);
    return sql_read_one(st, s, &delivery_page, out);
}

/* With warm, the idle Session's Sandbox: one of this worker's warm ones of the App's shape,
 * claimed for it in the claim's own transaction (out->sandbox; id "" when none is warm). */
static enum store_status claim_warm_sandbox_in_tx(struct store *st, const struct store_ctx *ctx,
                                                  const char *worker_id, struct store_delivery *out)
{
    struct store_shape shape;
    memset(&shape, 0, sizeof shape);
    snprintf(shape.driver, sizeof shape.driver, "%s", out->app.driver);
    snprintf(shape.image, sizeof shape.image, "%s", out->app.image_digest);
    shape.vcpu_count = out->app.vcpu_count;
    shape.mem_size_mib = out->app.mem_size_mib;
    out->warm_claim_tried = true;
    int64_t prestart_rev =
        out->app.prestart && out->app.warm_pool > 0 ? out->app.definition_rev : 0;
    enum store_status rc = sql_sandbox_claim_warm_in_tx(
        st, ctx, worker_id, &shape, out->app.id, prestart_rev, out->session.id, &out->sandbox);
    if (rc == STORE_EMPTY) {
        memset(&out->sandbox, 0, sizeof out->sandbox);
        return STORE_OK; /* none warm: the worker boots one cold */
    }
    return rc;
}

/* STORE_OK when the App still has room below its quota, under its row lock; STORE_EMPTY when it
 * has none (the claim then takes nothing this time: the message stays queued, uncounted). */
static enum store_status quota_recheck(struct store *st, const char *app_id, int64_t quota)
{
    struct sql_stmt *lock = sql_stmt(st, "SELECT 1 FROM apps WHERE id = ?1 FOR UPDATE");
    if (!lock)
        return STORE_ERROR;
    sql_bind_text(lock, 1, app_id);
    int r = sql_step(lock);
    sql_done(lock);
    if (r != SQL_ROW)
        return r == SQL_DONE ? STORE_EMPTY : sql_status(st, r);
    struct sql_stmt *count = sql_stmt(st, "SELECT COUNT(*) FROM sessions WHERE app_id = ?1 AND "
                                          "state IN ('activating', 'active')");
    if (!count)
        return STORE_ERROR;
    sql_bind_text(count, 1, app_id);
    r = sql_step(count);
    int64_t live = r == SQL_ROW ? sql_col_int64(count, 0) : 0;
    sql_done(count);
    if (r != SQL_ROW)
        return sql_status(st, r);
    return live < quota ? STORE_OK : STORE_EMPTY;
}

static enum store_status claim_in_tx(struct store *st, const struct store_ctx *ctx,
                                     const char *worker_id, int64_t lease_ms, bool owned_only,
                                     const struct store_placement *placement, bool warm,
                                     struct store_delivery *out)
{
    struct claim_pick_result pick;
    int64_t now = clock_wall_ms();
    enum store_status rc = claim_choose(st, worker_id, owned_only ? CLAIM_OWNED : CLAIM_ANY,
                                        placement, now, true, &pick);
    if (rc != STORE_OK)
        return rc;
    /* On PostgreSQL, claims of one App's idle Sessions run side by side and each may have counted
     * the App's live Sandboxes below its quota: taking the App's row lock and counting again makes
     * them take turns, so the quota is never exceeded (SQLite's one writer already does that). */
    if (pick.session_free && pick.quota > 0 && sql_dialect(st) == SQL_POSTGRES &&
        (rc = quota_recheck(st, pick.app_id, pick.quota)) != STORE_OK)
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
    if ((rc = sql_step_done(st, lease)) != STORE_OK)
        return rc;

    if (session_free) {
        /* Only if it is still free: on PostgreSQL another worker may have taken the Session
         * since the pick read it (the message row is ours, its Session's is not). */
        struct sql_stmt *own =
            sql_stmt(st, "UPDATE sessions SET state = 'activating', worker_id = ?2, "
                         "updated_at = ?3 WHERE id = ?1 AND worker_id IS NULL");
        if (!own)
            return STORE_ERROR;
        sql_bind_text(own, 1, session_id);
        sql_bind_text(own, 2, worker_id);
        sql_bind_int64(own, 3, now);
        if ((rc = sql_step_change(st, own, STORE_EMPTY)) != STORE_OK)
            return rc;
    }
    if ((rc = delivery_load(st, message_id, out)) != STORE_OK)
        return rc;
    if (session_free) {
        rc = sql_event_json(st, ctx, "session.activating", "session", session_id, out->app.id,
                            session_id, json_pack("{s:s}", "workerId", worker_id));
    }
    if (rc == STORE_OK) {
        rc = sql_event_json(st, ctx, "message.delivering", "message", message_id, out->app.id,
                            session_id,
                            json_pack("{s:I,s:s}", "attempt", (json_int_t)out->message.attempts,
                                      "workerId", worker_id));
    }
    if (rc == STORE_OK && warm && session_free)
        rc = claim_warm_sandbox_in_tx(st, ctx, worker_id, out);
    if (rc != STORE_OK)
        store_delivery_clear(out);
    return rc;
}

/* Whether anything is deliverable to this worker, read without taking the write lock: in WAL mode
 * this never waits, so the many wake-ups that find nothing to do do not queue behind the gateway's
 * commits (nor, with placement, behind other hosts' claims). */
static enum store_status claim_peek(struct store *st, const char *worker_id, bool owned_only,
                                    const struct store_placement *placement)
{
    struct claim_pick_result pick;
    return claim_choose(st, worker_id, owned_only ? CLAIM_OWNED : CLAIM_ANY, placement,
                        clock_wall_ms(), false, &pick);
}

static enum store_status claim_next(struct store *st, const struct store_ctx *ctx,
                                    const char *worker_id, int64_t lease_ms, bool owned_only,
                                    const struct store_placement *placement, bool warm,
                                    struct store_delivery *out)
{
    enum store_status rc = claim_peek(st, worker_id, owned_only, placement);
    struct store_delivery d;
    if (rc != STORE_OK)
        return rc;
    /* Something looked deliverable: claim it for real under the write lock (it may be gone). */
    if ((rc = sql_begin_concurrent(st)) != STORE_OK)
        return rc;
    memset(&d, 0, sizeof d);
    rc = sql_end(st, claim_in_tx(st, ctx, worker_id, lease_ms, owned_only, placement, warm, &d));
    if (rc == STORE_OK)
        *out = d;
    else if (rc != STORE_EMPTY)
        store_delivery_clear(&d);
    return rc;
}

enum store_status store_queue_claim_owned(struct store *st, const struct store_ctx *ctx,
                                          const char *worker_id, int64_t lease_ms,
                                          struct store_delivery *out)
{
    return claim_next(st, ctx, worker_id, lease_ms, true, NULL, false, out);
}

enum store_status store_queue_claim_placed(struct store *st, const struct store_ctx *ctx,
                                           const char *worker_id, int64_t lease_ms,
                                           const struct store_placement *placement,
                                           struct store_delivery *out)
{
    return claim_next(st, ctx, worker_id, lease_ms, false, placement, false, out);
}

enum store_status store_queue_claim_with_sandbox(struct store *st, const struct store_ctx *ctx,
                                                 const char *worker_id, int64_t lease_ms,
                                                 const struct store_placement *placement,
                                                 struct store_delivery *out)
{
    return claim_next(st, ctx, worker_id, lease_ms, false, placement, true, out);
}

enum store_status store_queue_extend_lease(struct store *st, const char *message_id,
                                           const char *worker_id, int64_t lease_ms)
{
    struct sql_stmt *s = sql_stmt(st, "UPDATE messages SET lease_expires_at = ?3 WHERE id = ?1 AND "
                                      "state = 'delivering' AND lease_owner = ?2");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, message_id);
    sql_bind_text(s, 2, worker_id);
    sql_bind_int64(s, 3, clock_wall_ms() + lease_ms);
    return sql_step_change(st, s, STORE_CONFLICT);
}

/* The message's Session and App, for the events of a transition. */
static enum store_status message_owner(struct store *st, const char *message_id, char *session_id,
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

/* Whether message_id is being delivered under worker_id's lease (NULL: anyone's): STORE_OK, else
 * STORE_CONFLICT. On PostgreSQL the row is also locked (and the check re-made on its newest
 * version) until COMMIT, so a completion or a requeue cannot slip between this check and the
 * caller's UPDATE; on SQLite the transaction's write lock already keeps everyone else out. */
static enum store_status lock_leased_message(struct store *st, const char *message_id,
                                             const char *worker_id)
{
    struct sql_stmt *check =
        sql_dialect(st) == SQL_POSTGRES
            ? sql_stmt(st, "SELECT 1 FROM messages WHERE id = ?1 AND state = 'delivering' AND "
                           "(CAST(?2 AS TEXT) IS NULL OR lease_owner = ?2) FOR UPDATE")
            : sql_stmt(st,
                       "SELECT 1 FROM messages WHERE id = ?1 AND "
                       "state = 'delivering' AND (CAST(?2 AS TEXT) IS NULL OR lease_owner = ?2)");
    if (!check)
        return STORE_ERROR;
    sql_bind_text(check, 1, message_id);
    sql_bind_text_or_null(check, 2, worker_id);
    int r = sql_step(check);
    sql_done(check);
    return r == SQL_ROW ? STORE_OK : r == SQL_DONE ? STORE_CONFLICT : sql_status(st, r);
}

static enum store_status complete_in_tx(struct store *st, const struct store_ctx *ctx,
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
    sql_bind_int64(s, 5, clock_wall_ms());
    if ((rc = sql_step_done(st, s)) != STORE_OK)
        return rc;
    if (sql_changes(st) == 0)
        return STORE_CONFLICT; /* the lease moved on: someone else owns this delivery now */
    if ((rc = message_owner(st, message_id, session_id, app_id, &attempts, &max_attempts)) !=
        STORE_OK)
        return rc;
    rc = sql_event_json(st, ctx, "message.completed", "message", message_id, app_id, session_id,
                        json_pack("{s:I,s:s?}", "attempt", (json_int_t)attempts, "sandboxId",
                                  sandbox_id && *sandbox_id ? sandbox_id : NULL));
    return rc;
}

enum store_status store_queue_complete(struct store *st, const struct store_ctx *ctx,
                                       const char *message_id, const char *worker_id,
                                       const char *sandbox_id, const char *reply_json)
{
    enum store_status rc;
    if ((rc = sql_begin_concurrent(st)) != STORE_OK)
        return rc;
    return sql_end(st, complete_in_tx(st, ctx, message_id, worker_id, sandbox_id, reply_json));
}

enum store_status store_queue_complete_first(struct store *st, const struct store_ctx *ctx,
                                             const char *message_id, const char *worker_id,
                                             const char *sandbox_id, const char *session_id,
                                             const char *reply_json)
{
    enum store_status rc;
    if ((rc = sql_begin_concurrent(st)) != STORE_OK)
        return rc;
    /* A concurrent writer on PostgreSQL (docs/postgres.md, "Concurrent writers"): the message row
     * is locked first, its lease re-checked on its newest version, so that this transaction, like
     * every other, holds its message row before it waits for a Session row; the Sandbox and
     * Session updates below are conditional and checked by their row counts. */
    if (sql_dialect(st) == SQL_POSTGRES &&
        (rc = lock_leased_message(st, message_id, worker_id)) != STORE_OK)
        return sql_end(st, rc);
    /* In this order, as two transactions would have written them: the Sandbox ran the App
     * (sandbox.running, session.active) before the message completed. */
    rc = sql_sandbox_mark_running_in_tx(st, ctx, sandbox_id, session_id);
    if (rc == STORE_OK)
        rc = complete_in_tx(st, ctx, message_id, worker_id, sandbox_id, reply_json);
    return sql_end(st, rc);
}

/* Ends an attempt that did not produce a reply: back to queued after backoff, or failed for good
 * once the message has used its attempts. lease_owner NULL means any holder (expired leases). */
static enum store_status fail_in_tx(struct store *st, const struct store_ctx *ctx,
                                    const char *message_id, const char *worker_id,
                                    const char *sandbox_id, const char *reason, int64_t backoff_ms,
                                    bool *final)
{
    char session_id[STORE_ID_LEN], app_id[STORE_ID_LEN];
    int64_t attempts, max_attempts, now = clock_wall_ms();
    enum store_status rc;
    if ((rc = lock_leased_message(st, message_id, worker_id)) != STORE_OK)
        return rc;
    if ((rc = message_owner(st, message_id, session_id, app_id, &attempts, &max_attempts)) !=
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
    if ((rc = sql_step_done(st, s)) != STORE_OK)
        return rc;
    json_t *data = give_up
                       ? json_pack("{s:I,s:s?}", "attempts", (json_int_t)attempts, "reason", reason)
                       : json_pack("{s:I,s:s?,s:I}", "attempt", (json_int_t)attempts, "reason",
                                   reason, "backoffMs", (json_int_t)backoff_ms);
    rc = sql_event_json(st, ctx, give_up ? "message.failed" : "message.retry", "message",
                        message_id, app_id, session_id, data);
    if (rc == STORE_OK && final)
        *final = give_up;
    return rc;
}

enum store_status store_queue_fail(struct store *st, const struct store_ctx *ctx,
                                   const char *message_id, const char *worker_id,
                                   const char *sandbox_id, const char *reason, int64_t backoff_ms,
                                   bool *final)
{
    enum store_status rc;
    bool fin = false;
    if ((rc = sql_begin_concurrent(st)) != STORE_OK)
        return rc;
    rc = sql_end(st, fail_in_tx(st, ctx, message_id, worker_id ? worker_id : "", sandbox_id, reason,
                                backoff_ms, &fin));
    if (rc == STORE_OK && final)
        *final = fin;
    return rc;
}

enum store_status store_queue_release(struct store *st, const struct store_ctx *ctx,
                                      const char *message_id, const char *worker_id)
{
    enum store_status rc;
    char session_id[STORE_ID_LEN], app_id[STORE_ID_LEN];
    int64_t attempts, max_attempts;
    if ((rc = sql_begin_concurrent(st)) != STORE_OK)
        return rc;
    struct sql_stmt *s = sql_stmt(st, "UPDATE messages SET state = 'queued', lease_owner = NULL, "
                                      "lease_expires_at = NULL, attempts = CASE WHEN attempts > 0 "
                                      "THEN attempts - 1 ELSE 0 END, "
                                      "updated_at = ?3 WHERE id = ?1 AND state = 'delivering' AND "
                                      "lease_owner = ?2");
    if (!s)
        return sql_end(st, STORE_ERROR);
    sql_bind_text(s, 1, message_id);
    sql_bind_text(s, 2, worker_id);
    sql_bind_int64(s, 3, clock_wall_ms());
    rc = sql_step_change(st, s, STORE_CONFLICT);
    if (rc == STORE_OK)
        rc = message_owner(st, message_id, session_id, app_id, &attempts, &max_attempts);
    if (rc == STORE_OK)
        rc =
            sql_event(st, ctx, "message.released", "message", message_id, app_id, session_id, NULL);
    return sql_end(st, rc);
}

enum store_status sql_queue_requeue_in_tx(struct store *st, const struct store_ctx *ctx,
                                          char (*ids)[STORE_ID_LEN], size_t n, const char *reason)
{
    enum store_status rc = STORE_OK;
    for (size_t i = 0; i < n && rc == STORE_OK; i++) {
        rc = fail_in_tx(st, ctx, ids[i], NULL, NULL, reason, 0, NULL);
        if (rc == STORE_CONFLICT)
            rc = STORE_OK;
    }
    return rc;
}

/* "IS NOT NULL" changes no result (a NULL is never below ?1) but makes the range two-sided, and
 * only then does SQLite (3.40) take the partial index messages_delivering rather than walk the
 * whole messages table in id order for the ORDER BY: that walk, every poll_ms, inside a write
 * transaction, took 100 ms and more on a database of a million messages and stalled every other
 * writer behind it. */
const char queue_requeue_expired_sql[] =
    "SELECT id FROM messages WHERE state = 'delivering' AND lease_expires_at IS NOT NULL AND "
    "lease_expires_at < ?1 ORDER BY id";

enum store_status store_queue_requeue_expired(struct store *st, const struct store_ctx *ctx,
                                              size_t *n)
{
    enum store_status rc;
    char(*ids)[STORE_ID_LEN] = NULL;
    size_t count = 0;
    if ((rc = sql_begin_concurrent(st)) != STORE_OK)
        return rc;
    struct sql_stmt *s = sql_stmt(st, queue_requeue_expired_sql);
    if (!s)
        return sql_end(st, STORE_ERROR);
    sql_bind_int64(s, 1, clock_wall_ms());
    rc = sql_read_ids(st, s, &ids, &count);
    if (rc == STORE_OK)
        rc = sql_queue_requeue_in_tx(st, ctx, ids, count,
                                     "lease expired: the worker delivering it was lost");
    free(ids);
    rc = sql_end(st, rc);
    if (rc == STORE_OK && n)
        *n = count;
    return rc;
}

/* Only the head of each Session's queue counts: a later message waits for it anyway. */
const char queue_next_due_sql[] =
    "SELECT MIN(m.not_before) FROM messages m WHERE m.state = 'queued' AND NOT EXISTS (SELECT 1 "
    "FROM messages e WHERE e.session_id = m.session_id AND e.seq < m.seq AND e.state IN "
    "('queued', 'delivering'))";

enum store_status store_queue_next_due(struct store *st, int64_t *at)
{
    struct sql_stmt *s = sql_stmt(st, queue_next_due_sql);
    int r;
    if (!s)
        return STORE_ERROR;
    r = sql_step(s);
    if (r == SQL_ROW)
        *at = sql_col_int64_or(s, 0, 0);
    sql_done(s);
    return r == SQL_ROW ? STORE_OK : sql_status(st, r);
}

void store_delivery_clear(struct store_delivery *d)
{
    store_message_clear(&d->message);
    store_session_clear(&d->session);
    store_app_clear(&d->app);
}
