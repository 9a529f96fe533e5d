/*
 * webhooks.c: the store's side of webhooks (migration 0009_streaming): an App's endpoints
 * (webhooks), the durable outbox (webhook_deliveries: one row per event and endpoint) and every
 * attempt (webhook_attempts).
 *
 * The outbox is filled from the append-only events table: each endpoint has an event cursor, and
 * webhook_fill moves the events after it that the endpoint wants into the outbox and advances the
 * cursor in the same transaction, so no event is skipped or queued twice whoever fills, and
 * nothing else has to know about webhooks when it writes an event. Deliveries of one endpoint go
 * out in event order, one at a time, by the worker that holds the endpoint's lease.
 */
#include "id.h"
#include "log.h"
#include "store_sql.h"
#include "clock.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void store_webhook_clear(struct store_webhook *w)
{
    if (!w)
        return;
    free(w->event_types_json);
    w->event_types_json = NULL;
}

void store_webhook_list_free(struct store_webhook *w, size_t n)
{
    if (!w)
        return;
    for (size_t i = 0; i < n; i++)
        store_webhook_clear(&w[i]);
    free(w);
}

void store_webhook_delivery_list_free(struct store_webhook_delivery *d, size_t n)
{
    if (!d)
        return;
    for (size_t i = 0; i < n; i++)
        free(d[i].log);
    free(d);
}

void store_webhook_job_clear(struct store_webhook_job *j)
{
    if (!j)
        return;
    store_webhook_clear(&j->hook);
    free(j->event.data_json);
    j->event.data_json = NULL;
}

#define HOOK_COLS                                                                                  \
    "id, app_id, url, event_types, state, consecutive_failures, created_at, updated_at, secret "

/* A webhooks row (HOOK_COLS from column c); the secret only when with_secret. */
static void hook_from_row(struct sql_stmt *s, int c, struct store_webhook *w, bool with_secret)
{
    memset(w, 0, sizeof *w);
    sql_col_copy(s, c + 0, w->id, sizeof w->id);
    sql_col_copy(s, c + 1, w->app_id, sizeof w->app_id);
    sql_col_copy(s, c + 2, w->url, sizeof w->url);
    w->event_types_json = sql_col_dup(s, c + 3);
    sql_col_copy(s, c + 4, w->state, sizeof w->state);
    w->consecutive_failures = sql_col_int64(s, c + 5);
    w->created_at = sql_col_int64(s, c + 6);
    w->updated_at = sql_col_int64(s, c + 7);
    if (with_secret)
        sql_col_copy(s, c + 8, w->secret, sizeof w->secret);
}

static enum store_status hook_get(struct store *st, const char *app_id, const char *webhook_id,
                                  struct store_webhook *out, bool with_secret)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT " HOOK_COLS "FROM webhooks WHERE id = ?1 "
                                      "AND (?2 = '' OR app_id = ?2) AND deleted_at IS NULL");
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, webhook_id);
    sql_bind_text_copy(s, 2, app_id ? app_id : "");
    int rc = sql_step(s);
    enum store_status r = STORE_NOT_FOUND;
    if (rc == SQL_ROW) {
        hook_from_row(s, 0, out, with_secret);
        r = out->event_types_json ? STORE_OK : STORE_ERROR;
        if (r != STORE_OK)
            store_webhook_clear(out);
    } else if (rc != SQL_DONE) {
        r = sql_status(st, rc);
    }
    sql_done(s);
    return r;
}

enum store_status store_webhook_get(struct store *st, const char *app_id, const char *webhook_id,
                                    struct store_webhook *out)
{
    return hook_get(st, app_id, webhook_id, out, false);
}

enum store_status store_webhook_create(struct store *st, const struct store_ctx *ctx,
                                       const char *app_id, const char *url,
                                       const char *event_types_json, const char *secret,
                                       struct store_webhook *out)
{
    char id[STORE_ID_LEN], data[STORE_URL_LEN + 64];
    int64_t now = clock_wall_ms();
    struct sql_stmt *s;
    enum store_status r;

    if (id_new("whk", id, sizeof id) != 0)
        return STORE_ERROR;
    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    s = sql_stmt(st, "SELECT 1 FROM apps WHERE id = ?1 AND deleted_at IS NULL");
    if (!s)
        return sql_end(st, STORE_ERROR);
    sql_bind_text(s, 1, app_id);
    int rc = sql_step(s);
    sql_done(s);
    if (rc != SQL_ROW)
        return sql_end(st, rc == SQL_DONE ? STORE_NOT_FOUND : sql_status(st, rc));
    json_t *d = json_pack("{s:s}", "url", url);
    char *dj = d ? json_dumps(d, JSON_COMPACT) : NULL;
    json_decref(d);
    snprintf(data, sizeof data, "%s", dj ? dj : "{}");
    free(dj);
    r = sql_event(st, ctx, "webhook.created", "webhook", id, app_id, NULL, data);
    /* The cursor starts after every event committed so far, its own creation included. */
    if (r == STORE_OK) {
        s = sql_stmt(st, "INSERT INTO webhooks (id, app_id, url, event_types, secret, "
                         "event_cursor, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, "
                         "(SELECT COALESCE(max(id), 0) FROM events), ?6, ?6)");
        if (!s)
            return sql_end(st, STORE_ERROR);
        sql_bind_text(s, 1, id);
        sql_bind_text(s, 2, app_id);
        sql_bind_text(s, 3, url);
        sql_bind_text(s, 4, event_types_json);
        sql_bind_text(s, 5, secret);
        sql_bind_int64(s, 6, now);
        r = sql_step_done(st, s);
    }
    if (r == STORE_OK)
        r = hook_get(st, app_id, id, out, true);
    if (r != STORE_OK)
        return sql_end(st, r);
    r = sql_commit(st);
    if (r != STORE_OK)
        store_webhook_clear(out);
    return r;
}

enum store_status store_webhook_list(struct store *st, const char *app_id,
                                     struct store_webhook **out, size_t *n)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT " HOOK_COLS "FROM webhooks WHERE app_id = ?1 "
                                      "AND deleted_at IS NULL ORDER BY created_at, id");
    struct store_webhook *items = NULL;
    size_t count = 0;
    int rc;
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, app_id);
    while ((rc = sql_step(s)) == SQL_ROW) {
        struct store_webhook *grown = realloc(items, (count + 1) * sizeof *items);
        if (!grown) {
            rc = SQL_NOMEM;
            break;
        }
        items = grown;
        hook_from_row(s, 0, &items[count++], false);
    }
    sql_done(s);
    if (rc != SQL_DONE) {
        store_webhook_list_free(items, count);
        return rc == SQL_NOMEM ? STORE_ERROR : sql_status(st, rc);
    }
    *out = items;
    *n = count;
    return STORE_OK;
}

enum store_status store_webhook_delete(struct store *st, const struct store_ctx *ctx,
                                       const char *app_id, const char *webhook_id)
{
    enum store_status r;
    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    struct sql_stmt *s = sql_stmt(st, "UPDATE webhooks SET deleted_at = ?3, updated_at = ?3 "
                                      "WHERE id = ?1 AND app_id = ?2 AND deleted_at IS NULL");
    if (!s)
        return sql_end(st, STORE_ERROR);
    sql_bind_text(s, 1, webhook_id);
    sql_bind_text(s, 2, app_id);
    sql_bind_int64(s, 3, clock_wall_ms());
    r = sql_step_done(st, s);
    if (r == STORE_OK && sql_changes(st) != 1)
        r = STORE_NOT_FOUND;
    if (r == STORE_OK)
        r = sql_event(st, ctx, "webhook.deleted", "webhook", webhook_id, app_id, NULL, NULL);
    return sql_end(st, r);
}

/* The attempts of deliveries[0..n), in one read. */
static enum store_status read_attempts(struct store *st, struct store_webhook_delivery *d, size_t n,
                                       const char *webhook_id, int64_t first, int64_t last)
{
    struct sql_stmt *s =
        sql_stmt(st, "SELECT a.delivery_id, a.attempt, a.at, a.status, a.error, a.duration_ms "
                     "FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id "
                     "WHERE d.webhook_id = ?1 AND d.event_id >= ?2 AND d.event_id <= ?3 "
                     "ORDER BY d.event_id, a.attempt");
    int rc;
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, webhook_id);
    sql_bind_int64(s, 2, first);
    sql_bind_int64(s, 3, last);
    size_t i = 0;
    while ((rc = sql_step(s)) == SQL_ROW) {
        const char *did = sql_col_text(s, 0);
        while (i < n && did && strcmp(d[i].id, did) != 0)
            i++;
        if (i == n)
            break;
        struct store_webhook_attempt *grown = realloc(d[i].log, (d[i].n_log + 1) * sizeof *grown);
        if (!grown) {
            rc = SQL_NOMEM;
            break;
        }
        d[i].log = grown;
        struct store_webhook_attempt *a = &d[i].log[d[i].n_log++];
        memset(a, 0, sizeof *a);
        a->attempt = sql_col_int64(s, 1);
        a->at = sql_col_int64(s, 2);
        a->status = sql_col_int64_or(s, 3, 0);
        sql_col_copy(s, 4, a->error, sizeof a->error);
        a->duration_ms = sql_col_int64(s, 5);
    }
    sql_done(s);
    return rc == SQL_DONE || rc == SQL_ROW ? STORE_OK
           : rc == SQL_NOMEM               ? STORE_ERROR
                                           : sql_status(st, rc);
}

enum store_status store_webhook_delivery_list(struct store *st, const char *app_id,
                                              const char *webhook_id, int64_t after, size_t limit,
                                              struct store_webhook_delivery **out, size_t *n,
                                              char *next_cursor)
{
    struct store_webhook hook;
    enum store_status r = hook_get(st, app_id, webhook_id, &hook, false);
    if (r != STORE_OK)
        return r;
    store_webhook_clear(&hook);
    struct sql_stmt *s =
        sql_stmt(st, "SELECT d.id, d.webhook_id, d.event_id, e.kind, d.state, d.attempts, "
                     "d.next_attempt_at, d.last_status, d.last_error, d.created_at, d.finished_at "
                     "FROM webhook_deliveries d JOIN events e ON e.id = d.event_id "
                     "WHERE d.webhook_id = ?1 AND d.event_id > ?2 ORDER BY d.event_id LIMIT ?3");
    struct store_webhook_delivery *items = NULL;
    size_t count = 0;
    int rc;
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, webhook_id);
    sql_bind_int64(s, 2, after);
    sql_bind_int64(s, 3, (int64_t)limit + 1);
    while ((rc = sql_step(s)) == SQL_ROW) {
        struct store_webhook_delivery *grown = realloc(items, (count + 1) * sizeof *items);
        if (!grown) {
            rc = SQL_NOMEM;
            break;
        }
        items = grown;
        struct store_webhook_delivery *d = &items[count++];
        memset(d, 0, sizeof *d);
        sql_col_copy(s, 0, d->id, sizeof d->id);
        sql_col_copy(s, 1, d->webhook_id, sizeof d->webhook_id);
        d->event_id = sql_col_int64(s, 2);
        sql_col_copy(s, 3, d->kind, sizeof d->kind);
        sql_col_copy(s, 4, d->state, sizeof d->state);
        d->attempts = sql_col_int64(s, 5);
        d->next_attempt_at = sql_col_int64(s, 6);
        d->last_status = sql_col_int64_or(s, 7, 0);
        sql_col_copy(s, 8, d->last_error, sizeof d->last_error);
        d->created_at = sql_col_int64(s, 9);
        d->finished_at = sql_col_int64_or(s, 10, 0);
    }
    sql_done(s);
    if (rc != SQL_DONE) {
        store_webhook_delivery_list_free(items, count);
        return rc == SQL_NOMEM ? STORE_ERROR : sql_status(st, rc);
    }
    next_cursor[0] = '\0';
    if (count > limit) {
        count = limit;
        snprintf(next_cursor, STORE_CURSOR_LEN, "%lld", (long long)items[limit - 1].event_id);
    }
    r = count ? read_attempts(st, items, count, webhook_id, items[0].event_id,
                              items[count - 1].event_id)
              : STORE_OK;
    if (r != STORE_OK) {
        store_webhook_delivery_list_free(items, count);
        return r;
    }
    *out = items;
    *n = count;
    return STORE_OK;
}

/* Whether an endpoint that wants `types` (a JSON array) wants an event of `kind`. */
static bool wants(json_t *types, const char *kind)
{
    size_t i;
    json_t *t;
    json_array_foreach(types, i, t)
    {
        const char *p = json_string_value(t);
        if (!p)
            continue;
        size_t n = strlen(p);
        if (strcmp(p, "*") == 0 || strcmp(p, kind) == 0 ||
            (n >= 2 && p[n - 1] == '*' && p[n - 2] == '.' && strncmp(kind, p, n - 1) == 0))
            return true;
    }
    return false;
}

struct hook_cursor {
    char id[STORE_ID_LEN];
    char app_id[STORE_ID_LEN];
    json_t *types;
    int64_t cursor;
};

static enum store_status fill_one(struct store *st, const struct hook_cursor *h, size_t limit,
                                  int64_t now, size_t *added)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT id, kind FROM events WHERE id > ?1 AND app_id = ?2 "
                                      "ORDER BY id LIMIT ?3");
    struct {
        int64_t id;
        bool wanted;
    } *evs = NULL;
    size_t n = 0;
    int rc;
    if (!s)
        return STORE_ERROR;
    sql_bind_int64(s, 1, h->cursor);
    sql_bind_text(s, 2, h->app_id);
    sql_bind_int64(s, 3, (int64_t)limit);
    while ((rc = sql_step(s)) == SQL_ROW) {
        void *grown = realloc(evs, (n + 1) * sizeof *evs);
        if (!grown) {
            rc = SQL_NOMEM;
            break;
        }
        evs = grown;
        evs[n].id = sql_col_int64(s, 0);
        const char *kind = sql_col_text(s, 1);
        evs[n].wanted = kind && wants(h->types, kind);
        n++;
    }
    sql_done(s);
    enum store_status r = rc == SQL_DONE    ? STORE_OK
                          : rc == SQL_NOMEM ? STORE_ERROR
                                            : sql_status(st, rc);
    for (size_t i = 0; r == STORE_OK && i < n; i++) {
        char did[STORE_ID_LEN];
        if (!evs[i].wanted)
            continue;
        if (id_new_ordered("whd", did, sizeof did) != 0) {
            r = STORE_ERROR;
            break;
        }
        s = sql_stmt(st, "INSERT INTO webhook_deliveries (id, webhook_id, event_id, "
                         "next_attempt_at, created_at) VALUES (?1, ?2, ?3, ?4, ?4)");
        if (!s) {
            r = STORE_ERROR;
            break;
        }
        sql_bind_text(s, 1, did);
        sql_bind_text(s, 2, h->id);
        sql_bind_int64(s, 3, evs[i].id);
        sql_bind_int64(s, 4, now);
        r = sql_step_done(st, s);
        if (r == STORE_OK)
            (*added)++;
    }
    if (r == STORE_OK && n > 0) {
        s = sql_stmt(st, "UPDATE webhooks SET event_cursor = ?2 WHERE id = ?1");
        if (!s)
            r = STORE_ERROR;
        else {
            sql_bind_text(s, 1, h->id);
            sql_bind_int64(s, 2, evs[n - 1].id);
            r = sql_step_done(st, s);
        }
    }
    free(evs);
    return r;
}

enum store_status store_webhook_fill(struct store *st, size_t limit, size_t *added)
{
    struct hook_cursor *hooks = NULL;
    size_t n = 0;
    enum store_status r;
    int rc;
    *added = 0;
    /* A read first, without the write lock: most rounds find nothing new. */
    struct sql_stmt *s = sql_stmt(st, "SELECT count(*) FROM webhooks w WHERE w.deleted_at IS NULL "
                                      "AND EXISTS (SELECT 1 FROM events e WHERE e.id > "
                                      "w.event_cursor AND e.app_id = w.app_id)");
    if (!s)
        return STORE_ERROR;
    rc = sql_step(s);
    int64_t behind = rc == SQL_ROW ? sql_col_int64(s, 0) : -1;
    sql_done(s);
    if (rc != SQL_ROW)
        return sql_status(st, rc);
    if (behind == 0)
        return STORE_OK;

    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    s = sql_stmt(st, "SELECT id, app_id, event_types, event_cursor FROM webhooks "
                     "WHERE deleted_at IS NULL ORDER BY id");
    if (!s)
        return sql_end(st, STORE_ERROR);
    while ((rc = sql_step(s)) == SQL_ROW) {
        struct hook_cursor *grown = realloc(hooks, (n + 1) * sizeof *hooks);
        if (!grown) {
            rc = SQL_NOMEM;
            break;
        }
        hooks = grown;
        struct hook_cursor *h = &hooks[n++];
        memset(h, 0, sizeof *h);
        sql_col_copy(s, 0, h->id, sizeof h->id);
        sql_col_copy(s, 1, h->app_id, sizeof h->app_id);
        const char *types = sql_col_text(s, 2);
        h->types = types ? json_loads(types, 0, NULL) : NULL;
        if (!json_is_array(h->types)) {
            json_decref(h->types);
            h->types = json_array();
        }
        h->cursor = sql_col_int64(s, 3);
    }
    sql_done(s);
    r = rc == SQL_DONE ? STORE_OK : rc == SQL_NOMEM ? STORE_ERROR : sql_status(st, rc);
    int64_t now = clock_wall_ms();
    for (size_t i = 0; r == STORE_OK && i < n; i++)
        r = fill_one(st, &hooks[i], limit, now, added);
    for (size_t i = 0; i < n; i++)
        json_decref(hooks[i].types);
    free(hooks);
    if (r != STORE_OK)
        *added = 0;
    return sql_end(st, r);
}

enum store_status store_webhook_claim(struct store *st, const char *worker_id, int64_t lease_ms,
                                      struct store_webhook_job *out)
{
    enum store_status r;
    int64_t now = clock_wall_ms();
    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    /* Each live endpoint's oldest pending delivery (in event order), if it is due and the
     * endpoint is not leased: the one due longest first. */
    struct sql_stmt *s = sql_stmt(
        st, "SELECT w.id, w.app_id, w.url, w.event_types, w.state, w.consecutive_failures, "
            "w.created_at, w.updated_at, w.secret, d.id, d.attempts, d.event_id "
            "FROM webhooks w JOIN webhook_deliveries d ON d.webhook_id = w.id "
            "WHERE w.deleted_at IS NULL AND (w.lease_owner IS NULL OR w.lease_expires_at < ?1) "
            "AND d.state = 'pending' AND d.next_attempt_at <= ?1 "
            "AND d.event_id = (SELECT min(p.event_id) FROM webhook_deliveries p "
            "WHERE p.webhook_id = w.id AND p.state = 'pending') "
            "ORDER BY d.next_attempt_at, d.event_id LIMIT 1");
    if (!s)
        return sql_end(st, STORE_ERROR);
    sql_bind_int64(s, 1, now);
    int rc = sql_step(s);
    int64_t event_id = 0;
    memset(out, 0, sizeof *out);
    if (rc == SQL_ROW) {
        hook_from_row(s, 0, &out->hook, true);
        sql_col_copy(s, 9, out->delivery_id, sizeof out->delivery_id);
        out->attempt = sql_col_int64(s, 10) + 1;
        event_id = sql_col_int64(s, 11);
    }
    sql_done(s);
    if (rc != SQL_ROW) {
        store_webhook_job_clear(out);
        return sql_end(st, rc == SQL_DONE ? STORE_EMPTY : sql_status(st, rc));
    }
    s = sql_stmt(st, "UPDATE webhooks SET lease_owner = ?2, lease_expires_at = ?3 WHERE id = ?1");
    if (!s) {
        store_webhook_job_clear(out);
        return sql_end(st, STORE_ERROR);
    }
    sql_bind_text(s, 1, out->hook.id);
    sql_bind_text(s, 2, worker_id);
    sql_bind_int64(s, 3, now + lease_ms);
    r = sql_step_done(st, s);
    if (r == STORE_OK) {
        s = sql_stmt(st, "SELECT id, at, actor, kind, object_type, object_id, app_id, "
                         "session_id, request_id, data FROM events WHERE id = ?1");
        if (!s)
            r = STORE_ERROR;
        else {
            sql_bind_int64(s, 1, event_id);
            rc = sql_step(s);
            if (rc == SQL_ROW) {
                struct store_event *e = &out->event;
                e->id = sql_col_int64(s, 0);
                e->at = sql_col_int64(s, 1);
                sql_col_copy(s, 2, e->actor, sizeof e->actor);
                sql_col_copy(s, 3, e->kind, sizeof e->kind);
                sql_col_copy(s, 4, e->object_type, sizeof e->object_type);
                sql_col_copy(s, 5, e->object_id, sizeof e->object_id);
                sql_col_copy(s, 6, e->app_id, sizeof e->app_id);
                sql_col_copy(s, 7, e->session_id, sizeof e->session_id);
                sql_col_copy(s, 8, e->request_id, sizeof e->request_id);
                e->data_json = sql_col_dup(s, 9);
            }
            r = rc == SQL_ROW ? STORE_OK : rc == SQL_DONE ? STORE_ERROR : sql_status(st, rc);
            sql_done(s);
        }
    }
    if (r != STORE_OK) {
        store_webhook_job_clear(out);
        return sql_end(st, r);
    }
    r = sql_commit(st);
    if (r != STORE_OK)
        store_webhook_job_clear(out);
    return r;
}

enum store_status store_webhook_record(struct store *st, const char *worker_id,
                                       const struct store_webhook_result *res)
{
    enum store_status r;
    int64_t now = clock_wall_ms();
    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    /* The lease check and its release in one statement. */
    struct sql_stmt *s = sql_stmt(
        st, "UPDATE webhooks SET lease_owner = NULL, lease_expires_at = NULL, updated_at = ?3, "
            "consecutive_failures = CASE WHEN ?4 = 1 THEN 0 ELSE consecutive_failures + 1 END, "
            "state = CASE WHEN ?4 = 1 THEN 'active' WHEN consecutive_failures + 1 >= ?5 "
            "THEN 'failing' ELSE state END "
            "WHERE id = ?1 AND lease_owner = ?2");
    if (!s)
        return sql_end(st, STORE_ERROR);
    sql_bind_text(s, 1, res->webhook_id);
    sql_bind_text(s, 2, worker_id);
    sql_bind_int64(s, 3, now);
    sql_bind_int64(s, 4, res->ok ? 1 : 0);
    sql_bind_int64(s, 5, res->failing_after);
    r = sql_step_done(st, s);
    if (r == STORE_OK && sql_changes(st) != 1)
        r = STORE_CONFLICT;
    if (r == STORE_OK) {
        s = sql_stmt(st, "INSERT INTO webhook_attempts (delivery_id, attempt, at, status, error, "
                         "duration_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
        if (!s)
            return sql_end(st, STORE_ERROR);
        sql_bind_text(s, 1, res->delivery_id);
        sql_bind_int64(s, 2, res->attempt);
        sql_bind_int64(s, 3, now - res->duration_ms);
        if (res->status > 0)
            sql_bind_int64(s, 4, res->status);
        else
            sql_bind_null(s, 4);
        sql_bind_text_or_null(s, 5, res->error);
        sql_bind_int64(s, 6, res->duration_ms);
        r = sql_step_done(st, s);
    }
    if (r == STORE_OK) {
        const char *state = res->ok ? "delivered" : res->retry_at == 0 ? "failed" : "pending";
        s = sql_stmt(st, "UPDATE webhook_deliveries SET state = ?2, attempts = ?3, "
                         "next_attempt_at = ?4, last_status = ?5, last_error = ?6, "
                         "finished_at = CASE WHEN ?2 = 'pending' THEN NULL ELSE ?7 END "
                         "WHERE id = ?1 AND state = 'pending'");
        if (!s)
            return sql_end(st, STORE_ERROR);
        sql_bind_text(s, 1, res->delivery_id);
        sql_bind_text(s, 2, state);
        sql_bind_int64(s, 3, res->attempt);
        sql_bind_int64(s, 4, res->retry_at ? res->retry_at : now);
        if (res->status > 0)
            sql_bind_int64(s, 5, res->status);
        else
            sql_bind_null(s, 5);
        sql_bind_text_or_null(s, 6, res->ok ? NULL : res->error);
        sql_bind_int64(s, 7, now);
        r = sql_step_done(st, s);
    }
    return sql_end(st, r);
}

enum store_status store_webhook_next_due(struct store *st, int64_t *at)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT COALESCE(min(d.next_attempt_at), 0) FROM "
                                      "webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id "
                                      "WHERE d.state = 'pending' AND w.deleted_at IS NULL");
    if (!s)
        return STORE_ERROR;
    int rc = sql_step(s);
    enum store_status r = STORE_OK;
    if (rc == SQL_ROW)
        *at = sql_col_int64(s, 0);
    else
        r = sql_status(st, rc);
    sql_done(s);
    return r;
}
