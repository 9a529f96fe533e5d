/*
 * enqueue_pg.c: the PostgreSQL statements of the group commit (enqueue.c), where several
 * gateways' committers write at the same time. Per-Session order comes from the Session row
 * (next_seq), locked until COMMIT; UNIQUE (session_id, seq) is the backstop.
 *
 * - One statement locks the batch's Sessions' rows, in id order, passing over the ones another
 *   transaction holds (SKIP LOCKED), and writes the requests of the rows it holds: the requests
 *   for the others wait for the committer's next batch instead of holding this one (and its other
 *   Sessions) behind another gateway's COMMIT, so two gateways' batches commit side by side and
 *   share the server's WAL flushes. Each Session's next_seq grows by its number of requests, each
 *   message takes its seq in the batch's order, and each has its message.queued event (arrays
 *   and unnest). With the BEGIN sent in front of it and, when nothing else of the batch is left
 *   to write, the COMMIT behind it, a batch is one round trip to the server.
 * - A request passed over ENQUEUE_PG_MAX_DEFERS times is waited for instead (so it is never
 *   starved): those rows are locked first, waiting, in id order, by a statement of their own
 *   before the others, so no two batches wait for each other in a cycle.
 * Requests with a key go through enqueue.c's one-by-one path on the rows already locked.
 * No hidden state.
 */
#include "clock.h"
#include "id.h"
#include "store_sql.h"

#include <stdlib.h>
#include <string.h>

/* A PostgreSQL array literal of texts, built up: {"a","b",NULL}. */
struct pg_array {
    char *buf;
    size_t len, cap;
    bool failed;
};

static void arr_put(struct pg_array *a, const char *s, size_t n)
{
    if (a->failed)
        return;
    if (a->len + n + 1 > a->cap) {
        size_t cap = a->cap ? a->cap : 256;
        while (a->len + n + 1 > cap)
            cap *= 2;
        char *grown = realloc(a->buf, cap);
        if (!grown) {
            a->failed = true;
            return;
        }
        a->buf = grown;
        a->cap = cap;
    }
    memcpy(a->buf + a->len, s, n);
    a->len += n;
    a->buf[a->len] = '\0';
}

/* Appends one element (NULL: SQL NULL), quoted, with " and \ escaped. */
static void arr_add(struct pg_array *a, const char *v)
{
    arr_put(a, a->len ? "," : "{", 1);
    if (!v) {
        arr_put(a, "NULL", 4);
        return;
    }
    arr_put(a, "\"", 1);
    for (const char *p = v; *p;) {
        size_t run = strcspn(p, "\"\\");
        arr_put(a, p, run);
        p += run;
        if (*p) {
            char esc[2] = {'\\', *p++};
            arr_put(a, esc, 2);
        }
    }
    arr_put(a, "\"", 1);
}

/* The finished literal ("{}" when empty), or NULL when out of memory. */
static const char *arr_text(struct pg_array *a)
{
    if (!a->len)
        arr_put(a, "{", 1);
    arr_put(a, "}", 1);
    return a->failed ? NULL : a->buf;
}

static void arr_free(struct pg_array *a)
{
    free(a->buf);
    memset(a, 0, sizeof *a);
}

enum store_status sql_enqueue_pg_lock(struct store *st, const char *const *session_ids, size_t n,
                                      bool wait, bool *skipped)
{
    struct pg_array ids = {0};
    for (size_t i = 0; i < n; i++) {
        arr_add(&ids, session_ids[i]);
        skipped[i] = false;
    }
    const char *lit = arr_text(&ids);
    if (!lit) {
        arr_free(&ids);
        return STORE_ERROR;
    }
    struct sql_stmt *s;
    if (wait) {
        s = sql_stmt(st, "SELECT id FROM sessions WHERE id = ANY (CAST(?1 AS TEXT[])) "
                         "ORDER BY id FOR NO KEY UPDATE");
    } else {
        /* The rows this transaction locked, and the Sessions it passed over (they exist but
         * another transaction holds them). A Session that does not exist is neither: its
         * requests go on, and find no Session. */
        s = sql_stmt(st, "WITH l AS MATERIALIZED (SELECT id FROM sessions "
                         "WHERE id = ANY (CAST(?1 AS TEXT[])) ORDER BY id "
                         "FOR NO KEY UPDATE SKIP LOCKED) "
                         "SELECT s.id FROM sessions s WHERE s.id = ANY (CAST(?1 AS TEXT[])) "
                         "AND s.id NOT IN (SELECT id FROM l)");
    }
    if (!s) {
        arr_free(&ids);
        return STORE_ERROR;
    }
    sql_bind_text_array(s, 1, lit);
    int rc;
    while ((rc = sql_step(s)) == SQL_ROW) {
        const char *id = sql_col_text(s, 0);
        for (size_t i = 0; !wait && id && i < n; i++)
            if (strcmp(session_ids[i], id) == 0)
                skipped[i] = true;
    }
    sql_done(s);
    arr_free(&ids);
    return rc == SQL_DONE ? STORE_OK : sql_status(st, rc);
}

/* Whether id is one of the comma-separated ids in list (NULL: none). The list holds Sessions that
 * exist, whose ids sbx made: none holds a comma, so an id that does is in no list. */
static bool in_id_list(const char *list, const char *id)
{
    size_t n = strlen(id);
    for (const char *p = list; p && *p;) {
        size_t run = strcspn(p, ",");
        if (run == n && memcmp(p, id, n) == 0)
            return true;
        p += run + (p[run] == ',');
    }
    return false;
}

enum store_status sql_enqueue_pg_batch(struct store *st, const char *const *session_ids,
                                       size_t nsess, bool *skipped,
                                       struct sql_enqueue_pg_item *items, size_t n, bool last)
{
    struct pg_array a_id = {0}, a_session = {0}, a_app = {0}, a_body = {0}, a_request = {0},
                    a_actor = {0}, a_lock = {0};
    char(*ids)[STORE_ID_LEN] = calloc(n ? n : 1, sizeof *ids);
    enum store_status r = ids ? STORE_OK : STORE_ERROR;

    for (size_t i = 0; i < nsess; i++) {
        arr_add(&a_lock, session_ids[i]);
        skipped[i] = false;
    }
    for (size_t i = 0; r == STORE_OK && i < n; i++) {
        const struct store_ctx *ctx = items[i].ctx;
        if (id_new_ordered("msg", ids[i], sizeof ids[i]) != 0) {
            r = STORE_ERROR;
            break;
        }
        arr_add(&a_id, ids[i]);
        arr_add(&a_session, items[i].req->session_id);
        arr_add(&a_app, items[i].req->app_id ? items[i].req->app_id : "");
        arr_add(&a_body, items[i].req->body_json);
        arr_add(&a_request, ctx && ctx->request_id && *ctx->request_id ? ctx->request_id : NULL);
        arr_add(&a_actor, ctx && ctx->actor ? ctx->actor : "unknown");
        items[i].status = STORE_NOT_FOUND; /* until its row comes back */
    }
    const char *t_id = arr_text(&a_id), *t_session = arr_text(&a_session),
               *t_app = arr_text(&a_app), *t_body = arr_text(&a_body),
               *t_request = arr_text(&a_request), *t_actor = arr_text(&a_actor),
               *t_lock = arr_text(&a_lock);
    if (r == STORE_OK && !(t_id && t_session && t_app && t_body && t_request && t_actor && t_lock))
        r = STORE_ERROR;

    struct sql_stmt *s = NULL;
    if (r == STORE_OK) {
        /* l: the Sessions' rows this transaction holds now, as they are now (a row another
         * transaction changed and committed since this statement's snapshot comes back in its
         * new version: READ COMMITTED rereads a row it locks), so state and App are read from
         * l, not from the snapshot; r: the requests in batch order; ok: those whose Session
         * is in l (in their App, not deleted); k: how many each Session gets; u: its next_seq
         * moved on by that many (u updates only rows that came out of l, so each is locked
         * before it is written); m: the messages, seq in batch order; e: their events; p: the
         * Sessions passed over (they exist but another transaction holds them), as one
         * comma-separated column on every row, and on one row of NULLs when m is empty. */
        s = sql_stmt(
            st,
            "WITH l AS MATERIALIZED (SELECT id, app_id, state FROM sessions "
            "WHERE id = ANY (CAST(?8 AS TEXT[])) ORDER BY id FOR NO KEY UPDATE SKIP LOCKED), "
            "r AS (SELECT * FROM unnest(CAST(?1 AS TEXT[]), CAST(?2 AS TEXT[]), "
            "CAST(?3 AS TEXT[]), CAST(?4 AS TEXT[]), CAST(?5 AS TEXT[]), CAST(?6 AS TEXT[])) "
            "WITH ORDINALITY AS r (id, session_id, app_id, body, request_id, actor, ord)), "
            "ok AS (SELECT r.*, l.app_id AS owner, a.max_attempts FROM r "
            "JOIN l ON l.id = r.session_id AND (r.app_id = '' OR l.app_id = r.app_id) "
            "AND l.state <> 'deleted' JOIN apps a ON a.id = l.app_id), "
            "k AS (SELECT session_id, count(*) AS n FROM ok GROUP BY session_id), "
            "u AS (UPDATE sessions SET next_seq = sessions.next_seq + k.n FROM k "
            "WHERE sessions.id = k.session_id RETURNING sessions.id, sessions.next_seq - k.n AS "
            "base), "
            "m AS (INSERT INTO messages (id, session_id, app_id, seq, body, max_attempts, "
            "request_id, created_at, updated_at) SELECT ok.id, ok.session_id, ok.owner, "
            "u.base + row_number() OVER (PARTITION BY ok.session_id ORDER BY ok.ord) - 1, "
            "ok.body, ok.max_attempts, ok.request_id, ?7, ?7 FROM ok JOIN u ON u.id = "
            "ok.session_id RETURNING *), "
            "e AS (INSERT INTO events (at, actor, kind, object_type, object_id, app_id, "
            "session_id, request_id, data) SELECT ?7, ok.actor, 'message.queued', 'message', "
            "m.id, m.app_id, m.session_id, m.request_id, '{\"seq\":' || m.seq || '}' FROM m "
            "JOIN ok ON ok.id = m.id ORDER BY ok.ord), "
            "p AS (SELECT string_agg(s.id, ',') AS ids FROM sessions s "
            "WHERE s.id = ANY (CAST(?8 AS TEXT[])) AND s.id NOT IN (SELECT id FROM l)) "
            "SELECT p.ids, " SQL_MESSAGE_COLS " FROM p LEFT JOIN m ON true");
        if (!s)
            r = STORE_ERROR;
    }
    if (r == STORE_OK) {
        sql_bind_text_array(s, 1, t_id);
        sql_bind_text_array(s, 2, t_session);
        sql_bind_text_array(s, 3, t_app);
        sql_bind_text_array(s, 4, t_body);
        sql_bind_text_array(s, 5, t_request);
        sql_bind_text_array(s, 6, t_actor);
        sql_bind_int64(s, 7, clock_wall_ms());
        sql_bind_text_array(s, 8, t_lock);
        int rc;
        bool first = true;
        while ((rc = first && last ? sql_step_then_commit(s) : sql_step(s)) == SQL_ROW) {
            if (first) {
                const char *passed = sql_col_null(s, 0) ? NULL : sql_col_text(s, 0);
                for (size_t i = 0; i < nsess; i++)
                    skipped[i] = in_id_list(passed, session_ids[i]);
                first = false;
            }
            const char *id = sql_col_null(s, 1) ? NULL : sql_col_text(s, 1);
            for (size_t i = 0; id && i < n; i++) {
                if (items[i].status == STORE_OK || strcmp(ids[i], id) != 0)
                    continue;
                sql_message_from_row(s, 1, items[i].out);
                items[i].status = STORE_OK;
                break;
            }
        }
        sql_done(s);
        if (rc != SQL_DONE)
            r = sql_status(st, rc);
    }
    if (r == STORE_OK) {
        /* A request of a Session passed over was not written: it is not "no such Session". */
        for (size_t i = 0; i < n; i++)
            for (size_t k = 0; items[i].status != STORE_OK && k < nsess; k++)
                if (skipped[k] && strcmp(session_ids[k], items[i].req->session_id) == 0)
                    items[i].status = STORE_BUSY;
    } else {
        for (size_t i = 0; i < n; i++) {
            if (items[i].status == STORE_OK)
                store_message_clear(items[i].out);
            items[i].status = r;
        }
        for (size_t i = 0; i < nsess; i++)
            skipped[i] = false;
    }
    arr_free(&a_id);
    arr_free(&a_session);
    arr_free(&a_app);
    arr_free(&a_body);
    arr_free(&a_request);
    arr_free(&a_actor);
    arr_free(&a_lock);
    free(ids);
    return r;
}
