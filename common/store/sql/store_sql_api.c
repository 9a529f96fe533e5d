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
#include "sql.h"
#include "timefmt.h"

#include <pthread.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SQ_BATCH_MAX 64

/* ---- small helpers ---- */

/* Parses a cursor ("" = start). Returns -1 for a malformed one. */
static int64_t cursor_parse(const char *after)
{
    if (!after || !*after)
        return 0;
    char *end;
    long long v = strtoll(after, &end, 10);
    if (*end != '\0' || v < 0)
        return -1;
    return v;
}

/* Binds the App scope: "" or NULL means any App. */
static void bind_app(struct sql_stmt *s, int idx, const char *app_id)
{
    sql_bind_text_copy(s, idx, app_id ? app_id : "");
}

/* One page of an App-scoped list whose statement takes (?1 app id or "", ?2 the cursor's rowid,
 * ?3 the row limit): what the workspace, Session and Sandbox lists share. */
static enum store_status app_list_page(struct store *st, const char *sql, const char *app_id,
                                       const char *after, size_t limit, const struct sql_page *pg,
                                       void *out, size_t *n, char *next_cursor)
{
    struct sql_stmt *s = sql_stmt(st, sql);
    int64_t from = cursor_parse(after);

    if (from < 0)
        return STORE_INVALID;
    if (!s)
        return STORE_ERROR;
    bind_app(s, 1, app_id);
    sql_bind_int64(s, 2, from);
    sql_bind_int64(s, 3, (int64_t)limit + 1);
    return sql_read_page(st, s, limit, pg, out, n, next_cursor);
}

/* Runs a statement that returns no rows; resets it. */
static enum store_status step_done(struct store *st, struct sql_stmt *s)
{
    int rc = sql_step(s);
    sql_done(s);
    return rc == SQL_DONE ? STORE_OK : sql_status(st, rc);
}

/* Runs a "SELECT count(*)"-like statement; resets it. */
static enum store_status step_int(struct store *st, struct sql_stmt *s, int64_t *out)
{
    int rc = sql_step(s);
    enum store_status r = STORE_OK;
    if (rc == SQL_ROW)
        *out = sql_col_int64(s, 0);
    else
        r = rc == SQL_DONE ? STORE_NOT_FOUND : sql_status(st, rc);
    sql_done(s);
    return r;
}

/* Grows a list array by one zeroed element. */
static void *list_grow(void *arr, size_t n, size_t elem)
{
    char *p = realloc(arr, (n + 1) * elem);
    if (p)
        memset(p + n * elem, 0, elem);
    return p;
}

/* Ends a transaction: COMMIT when rc is OK, ROLLBACK otherwise. Returns the final status. */
static enum store_status finish(struct store *st, enum store_status rc)
{
    if (rc == STORE_OK)
        return sql_commit(st);
    sql_rollback(st);
    return rc;
}

/* Escapes s as a JSON string into out (for small event data objects). */
static void json_str(char *out, size_t outlen, const char *s)
{
    size_t n = 0;
    if (outlen < 3)
        return;
    out[n++] = '"';
    for (; s && *s && n + 8 < outlen; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char)c;
        } else if (c < 0x20) {
            n += (size_t)snprintf(out + n, outlen - n, "\\u%04x", c);
        } else {
            out[n++] = (char)c;
        }
    }
    out[n++] = '"';
    out[n] = '\0';
}

/* ---- apps ---- */

#define APP_COLS "a.rowid, " SQL_APP_COLS

static int64_t app_from_row(struct sql_stmt *s, struct store_app *a)
{
    sql_app_from_row(s, 1, a);
    return sql_col_int64(s, 0);
}

static enum store_status sq_app_get(struct store *st, const char *app_id, struct store_app *out)
{
    struct sql_stmt *s =
        sql_stmt(st, "SELECT " APP_COLS " FROM apps a WHERE id = ?1 AND deleted_at IS NULL");
    enum store_status r;
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, app_id);
    int rc = sql_step(s);
    if (rc == SQL_ROW) {
        app_from_row(s, out);
        r = STORE_OK;
    } else {
        r = rc == SQL_DONE ? STORE_NOT_FOUND : sql_status(st, rc);
    }
    sql_done(s);
    return r;
}

static enum store_status sq_app_create(struct store *st, const struct store_ctx *ctx,
                                       struct store_app *app)
{
    struct sql_stmt *s;
    enum store_status r;
    char data[STORE_NAME_LEN * 2 + 32], name_json[STORE_NAME_LEN * 2 + 8];
    int64_t now = now_ms();

    if (id_new("app", app->id, sizeof app->id) != 0)
        return STORE_ERROR;
    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    s = sql_stmt(st, "INSERT INTO apps (id, name, keep_alive_seconds, vcpu_count, mem_size_mib, "
                     "driver, image, max_attempts, command, created_at, updated_at, network) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11)");
    if (!s)
        return finish(st, STORE_ERROR);
    sql_bind_text(s, 1, app->id);
    sql_bind_text(s, 2, app->name);
    sql_bind_int64(s, 3, app->keep_alive_seconds);
    sql_bind_int64(s, 4, app->vcpu_count);
    sql_bind_int64(s, 5, app->mem_size_mib);
    sql_bind_text(s, 6, app->driver);
    sql_bind_text(s, 7, app->image);
    sql_bind_int64(s, 8, app->max_attempts);
    sql_bind_text(s, 9, app->command_json ? app->command_json : "[]");
    sql_bind_int64(s, 10, now);
    sql_bind_text(s, 11, app->network_json ? app->network_json : "{\"egress\":\"public\"}");
    r = step_done(st, s);
    if (r == STORE_OK) {
        json_str(name_json, sizeof name_json, app->name);
        snprintf(data, sizeof data, "{\"name\":%s}", name_json);
        r = sql_event(st, ctx, "app.created", "app", app->id, app->id, NULL, data);
    }
    r = finish(st, r);
    if (r == STORE_OK)
        app->created_at = app->updated_at = now;
    return r;
}

static int64_t app_page_row(struct sql_stmt *s, void *item)
{
    return app_from_row(s, item);
}

static void app_page_free(void *items, size_t n)
{
    store_app_list_free(items, n);
}

static const struct sql_page app_page = {sizeof(struct store_app), app_page_row, app_page_free};

static enum store_status sq_app_list(struct store *st, const char *after, size_t limit,
                                     struct store_app **out, size_t *n, char *next_cursor)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT " APP_COLS " FROM apps a WHERE deleted_at IS NULL "
                                      "AND rowid > ?1 ORDER BY rowid LIMIT ?2");
    int64_t from = cursor_parse(after);

    if (from < 0)
        return STORE_INVALID;
    if (!s)
        return STORE_ERROR;
    sql_bind_int64(s, 1, from);
    sql_bind_int64(s, 2, (int64_t)limit + 1);
    return sql_read_page(st, s, limit, &app_page, (void *)out, n, next_cursor);
}

static enum store_status sq_app_update(struct store *st, const struct store_ctx *ctx,
                                       const char *app_id, const struct store_app_patch *p,
                                       struct store_app *out)
{
    struct sql_stmt *s;
    enum store_status r;
    char data[512];
    size_t n = 0;

    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    s = sql_stmt(st, "UPDATE apps SET name = COALESCE(?2, name), "
                     "keep_alive_seconds = COALESCE(?3, keep_alive_seconds), "
                     "vcpu_count = COALESCE(?4, vcpu_count), "
                     "mem_size_mib = COALESCE(?5, mem_size_mib), driver = COALESCE(?6, driver), "
                     "image = COALESCE(?7, image), max_attempts = COALESCE(?8, max_attempts), "
                     "command = COALESCE(?9, command), network = COALESCE(?11, network), "
                     "updated_at = ?10 "
                     "WHERE id = ?1 AND deleted_at IS NULL");
    if (!s)
        return finish(st, STORE_ERROR);
    sql_bind_text(s, 1, app_id);
    if (p->name)
        sql_bind_text(s, 2, p->name);
    if (p->keep_alive_seconds)
        sql_bind_int64(s, 3, *p->keep_alive_seconds);
    if (p->vcpu_count)
        sql_bind_int64(s, 4, *p->vcpu_count);
    if (p->mem_size_mib)
        sql_bind_int64(s, 5, *p->mem_size_mib);
    if (p->driver)
        sql_bind_text(s, 6, p->driver);
    if (p->image)
        sql_bind_text(s, 7, p->image);
    if (p->max_attempts)
        sql_bind_int64(s, 8, *p->max_attempts);
    if (p->command_json)
        sql_bind_text(s, 9, p->command_json);
    sql_bind_int64(s, 10, now_ms());
    if (p->network_json)
        sql_bind_text(s, 11, p->network_json);
    r = step_done(st, s);
    if (r == STORE_OK && sql_changes(st) == 0)
        r = STORE_NOT_FOUND;
    if (r == STORE_OK) {
        /* The event names the fields that changed (not their values: the command may be long). */
        const char *fields[] = {p->name ? "name" : NULL,
                                p->keep_alive_seconds ? "keepAliveSeconds" : NULL,
                                p->vcpu_count ? "vcpuCount" : NULL,
                                p->mem_size_mib ? "memSizeMib" : NULL,
                                p->driver ? "driver" : NULL,
                                p->image ? "image" : NULL,
                                p->max_attempts ? "maxAttempts" : NULL,
                                p->command_json ? "command" : NULL,
                                p->network_json ? "network" : NULL};
        n = (size_t)snprintf(data, sizeof data, "{\"fields\":[");
        for (size_t i = 0, k = 0; i < sizeof fields / sizeof fields[0]; i++)
            if (fields[i])
                n += (size_t)snprintf(data + n, sizeof data - n, "%s\"%s\"", k++ ? "," : "",
                                      fields[i]);
        snprintf(data + n, sizeof data - n, "]}");
        r = sql_event(st, ctx, "app.updated", "app", app_id, app_id, NULL, data);
    }
    struct store_app fresh = {0};
    if (r == STORE_OK)
        r = sq_app_get(st, app_id, &fresh);
    r = finish(st, r);
    if (r == STORE_OK)
        *out = fresh;
    else
        store_app_clear(&fresh);
    return r;
}

static enum store_status sq_app_delete(struct store *st, const struct store_ctx *ctx,
                                       const char *app_id)
{
    struct sql_stmt *s;
    enum store_status r;
    int64_t live = 0, now = now_ms();
    struct store_app app;

    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    r = sq_app_get(st, app_id, &app);
    if (r == STORE_OK)
        store_app_clear(&app);
    if (r == STORE_OK) {
        s = sql_stmt(st, "SELECT (SELECT count(*) FROM sessions WHERE app_id = ?1 "
                         "AND state <> 'deleted') + (SELECT count(*) FROM workspaces "
                         "WHERE app_id = ?1 AND deleted_at IS NULL)");
        if (!s)
            return finish(st, STORE_ERROR);
        sql_bind_text(s, 1, app_id);
        r = step_int(st, s, &live);
        if (r == STORE_OK && live > 0)
            r = STORE_CONFLICT;
    }
    if (r == STORE_OK) {
        /* Revoke its keys one by one so that each revocation has its own event. */
        s = sql_stmt(st, "SELECT id FROM api_keys WHERE app_id = ?1 AND revoked_at IS NULL");
        if (!s)
            return finish(st, STORE_ERROR);
        sql_bind_text(s, 1, app_id);
        char(*ids)[STORE_ID_LEN] = NULL;
        size_t nids = 0;
        int rc;
        while ((rc = sql_step(s)) == SQL_ROW) {
            void *grown = list_grow(ids, nids, sizeof *ids);
            if (!grown) {
                rc = SQL_NOMEM;
                break;
            }
            ids = grown;
            sql_col_copy(s, 0, ids[nids++], STORE_ID_LEN);
        }
        sql_done(s);
        if (rc != SQL_DONE)
            r = sql_status(st, rc);
        for (size_t i = 0; r == STORE_OK && i < nids; i++) {
            s = sql_stmt(st, "UPDATE api_keys SET revoked_at = ?2 WHERE id = ?1");
            if (!s) {
                r = STORE_ERROR;
                break;
            }
            sql_bind_text(s, 1, ids[i]);
            sql_bind_int64(s, 2, now);
            r = step_done(st, s);
            if (r == STORE_OK)
                r = sql_event(st, ctx, "key.revoked", "key", ids[i], app_id, NULL,
                              "{\"reason\":\"app deleted\"}");
        }
        free(ids);
    }
    if (r == STORE_OK) {
        s = sql_stmt(st, "UPDATE apps SET deleted_at = ?2, updated_at = ?2 WHERE id = ?1");
        if (!s)
            return finish(st, STORE_ERROR);
        sql_bind_text(s, 1, app_id);
        sql_bind_int64(s, 2, now);
        r = step_done(st, s);
    }
    if (r == STORE_OK)
        r = sql_event(st, ctx, "app.deleted", "app", app_id, app_id, NULL, NULL);
    return finish(st, r);
}

/* ---- api keys ---- */

#define KEY_COLS "id, app_id, name, prefix, created_at, revoked_at"

static void key_from_row(struct sql_stmt *s, struct store_key *k)
{
    memset(k, 0, sizeof *k);
    sql_col_copy(s, 0, k->id, sizeof k->id);
    sql_col_copy(s, 1, k->app_id, sizeof k->app_id);
    sql_col_copy(s, 2, k->name, sizeof k->name);
    sql_col_copy(s, 3, k->prefix, sizeof k->prefix);
    k->created_at = sql_col_int64(s, 4);
    k->revoked_at = sql_col_int64_or(s, 5, 0);
}

/* STORE_OK when the App exists and is not deleted. */
static enum store_status app_exists(struct store *st, const char *app_id)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT 1 FROM apps WHERE id = ?1 AND deleted_at IS NULL");
    int64_t one;
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, app_id);
    return step_int(st, s, &one);
}

static enum store_status sq_key_create(struct store *st, const struct store_ctx *ctx,
                                       const char *app_id, const char *name, const char *prefix,
                                       const uint8_t hash[32], struct store_key *out)
{
    struct sql_stmt *s;
    enum store_status r;
    struct store_key k = {0};
    char data[64];

    if (id_new("key", k.id, sizeof k.id) != 0)
        return STORE_ERROR;
    snprintf(k.app_id, sizeof k.app_id, "%s", app_id);
    snprintf(k.name, sizeof k.name, "%s", name ? name : "");
    snprintf(k.prefix, sizeof k.prefix, "%s", prefix);
    k.created_at = now_ms();
    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    r = app_exists(st, app_id);
    if (r == STORE_OK) {
        s = sql_stmt(st, "INSERT INTO api_keys (id, app_id, name, prefix, hash, created_at) "
                         "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
        if (!s)
            return finish(st, STORE_ERROR);
        sql_bind_text(s, 1, k.id);
        sql_bind_text(s, 2, app_id);
        sql_bind_text_or_null(s, 3, name);
        sql_bind_text(s, 4, prefix);
        sql_bind_blob(s, 5, hash, 32);
        sql_bind_int64(s, 6, k.created_at);
        r = step_done(st, s);
    }
    if (r == STORE_OK) {
        snprintf(data, sizeof data, "{\"prefix\":\"%s\"}", k.prefix);
        r = sql_event(st, ctx, "key.created", "key", k.id, app_id, NULL, data);
    }
    r = finish(st, r);
    if (r == STORE_OK)
        *out = k;
    return r;
}

static enum store_status sq_key_list(struct store *st, const char *app_id, struct store_key **out,
                                     size_t *n)
{
    struct sql_stmt *s;
    struct store_key *items = NULL;
    size_t count = 0;
    enum store_status r = app_exists(st, app_id);
    int rc;

    if (r != STORE_OK)
        return r;
    s = sql_stmt(st, "SELECT " KEY_COLS " FROM api_keys WHERE app_id = ?1 ORDER BY rowid");
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, app_id);
    while ((rc = sql_step(s)) == SQL_ROW) {
        struct store_key *grown = list_grow(items, count, sizeof *items);
        if (!grown) {
            rc = SQL_NOMEM;
            break;
        }
        items = grown;
        key_from_row(s, &items[count++]);
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

static enum store_status sq_key_revoke(struct store *st, const struct store_ctx *ctx,
                                       const char *app_id, const char *key_id)
{
    struct sql_stmt *s;
    enum store_status r;
    int64_t revoked_at = 0;

    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    r = app_exists(st, app_id);
    if (r == STORE_OK) {
        s = sql_stmt(st, "SELECT COALESCE(revoked_at, 0) FROM api_keys "
                         "WHERE id = ?1 AND app_id = ?2");
        if (!s)
            return finish(st, STORE_ERROR);
        sql_bind_text(s, 1, key_id);
        sql_bind_text(s, 2, app_id);
        r = step_int(st, s, &revoked_at);
    }
    if (r == STORE_OK && revoked_at == 0) {
        s = sql_stmt(st, "UPDATE api_keys SET revoked_at = ?2 WHERE id = ?1");
        if (!s)
            return finish(st, STORE_ERROR);
        sql_bind_text(s, 1, key_id);
        sql_bind_int64(s, 2, now_ms());
        r = step_done(st, s);
        if (r == STORE_OK)
            r = sql_event(st, ctx, "key.revoked", "key", key_id, app_id, NULL, NULL);
    }
    return finish(st, r);
}

/* Compares two hashes without an early exit, so the time taken says nothing about where they
 * differ. (The index lookup before it finds the row by the hash of a 256-bit secret, which an
 * attacker cannot steer towards a stored hash.) */
static int hash_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    uint8_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= a[i] ^ b[i];
    return diff == 0;
}

static enum store_status sq_key_lookup(struct store *st, const uint8_t hash[32],
                                       struct store_key *out)
{
    struct sql_stmt *s =
        sql_stmt(st, "SELECT k.id, k.app_id, k.name, k.prefix, k.created_at, "
                     "k.revoked_at, k.hash FROM api_keys k JOIN apps a "
                     "ON a.id = k.app_id WHERE k.hash = ?1 AND k.revoked_at IS NULL "
                     "AND a.deleted_at IS NULL");
    enum store_status r;
    if (!s)
        return STORE_ERROR;
    sql_bind_blob(s, 1, hash, 32);
    int rc = sql_step(s);
    uint8_t stored[32];
    if (rc == SQL_ROW && sql_col_blob(s, 6, stored, sizeof stored) == 32 &&
        hash_equal(stored, hash, 32)) {
        key_from_row(s, out);
        r = STORE_OK;
    } else if (rc == SQL_ROW || rc == SQL_DONE) {
        r = STORE_NOT_FOUND;
    } else {
        r = sql_status(st, rc);
    }
    sql_done(s);
    return r;
}

/* ---- workspaces ---- */

#define WS_COLS                                                                                    \
    "w.rowid, w.id, w.app_id, w.name, w.path, w.created_at, (SELECT count(*) FROM sessions x "     \
    "WHERE x.workspace_id = w.id AND x.state <> 'deleted')"

static int64_t ws_from_row(struct sql_stmt *s, struct store_workspace *w)
{
    memset(w, 0, sizeof *w);
    sql_col_copy(s, 1, w->id, sizeof w->id);
    sql_col_copy(s, 2, w->app_id, sizeof w->app_id);
    sql_col_copy(s, 3, w->name, sizeof w->name);
    sql_col_copy(s, 4, w->path, sizeof w->path);
    w->created_at = sql_col_int64(s, 5);
    w->attached_sessions = sql_col_int64(s, 6);
    return sql_col_int64(s, 0);
}

static enum store_status sq_workspace_get(struct store *st, const char *app_id, const char *ws_id,
                                          struct store_workspace *out)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT " WS_COLS " FROM workspaces w WHERE w.id = ?1 "
                                      "AND (?2 = '' OR w.app_id = ?2) AND w.deleted_at IS NULL");
    enum store_status r;
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, ws_id);
    bind_app(s, 2, app_id);
    int rc = sql_step(s);
    if (rc == SQL_ROW) {
        ws_from_row(s, out);
        r = STORE_OK;
    } else {
        r = rc == SQL_DONE ? STORE_NOT_FOUND : sql_status(st, rc);
    }
    sql_done(s);
    return r;
}

static enum store_status sq_workspace_create(struct store *st, const struct store_ctx *ctx,
                                             const char *app_id, const char *name,
                                             const char *data_dir, struct store_workspace *out)
{
    struct sql_stmt *s;
    enum store_status r;
    struct store_workspace w = {0};

    if (id_new("wsp", w.id, sizeof w.id) != 0)
        return STORE_ERROR;
    if ((size_t)snprintf(w.path, sizeof w.path, "%s/workspaces/%s/%s", data_dir, app_id, w.id) >=
        sizeof w.path)
        return STORE_INVALID;
    snprintf(w.app_id, sizeof w.app_id, "%s", app_id);
    snprintf(w.name, sizeof w.name, "%s", name ? name : "");
    w.created_at = now_ms();
    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    r = app_exists(st, app_id);
    if (r == STORE_OK) {
        s = sql_stmt(st, "INSERT INTO workspaces (id, app_id, name, path, created_at) "
                         "VALUES (?1, ?2, ?3, ?4, ?5)");
        if (!s)
            return finish(st, STORE_ERROR);
        sql_bind_text(s, 1, w.id);
        sql_bind_text(s, 2, app_id);
        sql_bind_text_or_null(s, 3, name);
        sql_bind_text(s, 4, w.path);
        sql_bind_int64(s, 5, w.created_at);
        r = step_done(st, s);
    }
    if (r == STORE_OK)
        r = sql_event(st, ctx, "workspace.created", "workspace", w.id, app_id, NULL, NULL);
    r = finish(st, r);
    if (r == STORE_OK)
        *out = w;
    return r;
}

static int64_t workspace_page_row(struct sql_stmt *s, void *item)
{
    return ws_from_row(s, item);
}

static void page_free_plain(void *items, size_t n)
{
    (void)n;
    free(items);
}

static const struct sql_page workspace_page = {sizeof(struct store_workspace), workspace_page_row,
                                               page_free_plain};

static enum store_status sq_workspace_list(struct store *st, const char *app_id, const char *after,
                                           size_t limit, struct store_workspace **out, size_t *n,
                                           char *next_cursor)
{
    return app_list_page(st,
                         "SELECT " WS_COLS " FROM workspaces w WHERE "
                         "(?1 = '' OR w.app_id = ?1) AND w.deleted_at IS NULL "
                         "AND w.rowid > ?2 ORDER BY w.rowid LIMIT ?3",
                         app_id, after, limit, &workspace_page, (void *)out, n, next_cursor);
}

static enum store_status sq_workspace_delete(struct store *st, const struct store_ctx *ctx,
                                             const char *app_id, const char *ws_id,
                                             struct store_workspace *out)
{
    struct sql_stmt *s;
    enum store_status r;
    struct store_workspace w;

    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    r = sq_workspace_get(st, app_id, ws_id, &w);
    if (r == STORE_OK && w.attached_sessions > 0)
        r = STORE_CONFLICT;
    if (r == STORE_OK) {
        s = sql_stmt(st, "UPDATE workspaces SET deleted_at = ?2 WHERE id = ?1");
        if (!s)
            return finish(st, STORE_ERROR);
        sql_bind_text(s, 1, ws_id);
        sql_bind_int64(s, 2, now_ms());
        r = step_done(st, s);
    }
    if (r == STORE_OK)
        r = sql_event(st, ctx, "workspace.deleted", "workspace", ws_id, w.app_id, NULL, NULL);
    r = finish(st, r);
    if (r == STORE_OK && out)
        *out = w;
    return r;
}

/* ---- sessions ---- */

#define SES_COLS "s.rowid, " SQL_SESSION_COLS " FROM sessions s JOIN apps a ON a.id = s.app_id "

static int64_t session_from_row(struct sql_stmt *s, struct store_session *x)
{
    sql_session_from_row(s, 1, x);
    return sql_col_int64(s, 0);
}

static enum store_status sq_session_get(struct store *st, const char *app_id,
                                        const char *session_id, struct store_session *out)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT " SES_COLS "WHERE s.id = ?1 AND (?2 = '' OR "
                                      "s.app_id = ?2) AND s.state <> 'deleted'");
    enum store_status r;
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, session_id);
    bind_app(s, 2, app_id);
    int rc = sql_step(s);
    if (rc == SQL_ROW) {
        session_from_row(s, out);
        r = STORE_OK;
    } else {
        r = rc == SQL_DONE ? STORE_NOT_FOUND : sql_status(st, rc);
    }
    sql_done(s);
    return r;
}

/* The live Session of the App with this name, if any. */
static enum store_status session_by_name(struct store *st, const char *app_id, const char *name,
                                         struct store_session *out)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT " SES_COLS "WHERE s.app_id = ?1 AND s.name = ?2 "
                                      "AND s.state <> 'deleted'");
    enum store_status r;
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, app_id);
    sql_bind_text(s, 2, name);
    int rc = sql_step(s);
    if (rc == SQL_ROW) {
        session_from_row(s, out);
        r = STORE_OK;
    } else {
        r = rc == SQL_DONE ? STORE_NOT_FOUND : sql_status(st, rc);
    }
    sql_done(s);
    return r;
}

static enum store_status sq_session_create(struct store *st, const struct store_ctx *ctx,
                                           const char *app_id, const char *name,
                                           int64_t keep_alive_seconds, const char *workspace_id,
                                           const char *metadata_json, struct store_session *out,
                                           bool *created)
{
    struct sql_stmt *s;
    enum store_status r;
    char id[STORE_ID_LEN], data[STORE_ID_LEN + 32];
    int64_t now = now_ms();

    if (id_new("ses", id, sizeof id) != 0)
        return STORE_ERROR;
    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    r = app_exists(st, app_id);
    if (r == STORE_OK && name && *name) {
        r = session_by_name(st, app_id, name, out);
        if (r == STORE_OK) {
            *created = false;
            return finish(st, STORE_OK);
        }
        if (r == STORE_NOT_FOUND)
            r = STORE_OK;
    }
    if (r == STORE_OK && workspace_id && *workspace_id) {
        struct store_workspace w;
        r = sq_workspace_get(st, app_id, workspace_id, &w);
        if (r == STORE_NOT_FOUND)
            r = STORE_INVALID; /* the caller names the workspaceId field */
    }
    if (r == STORE_OK) {
        s = sql_stmt(st, "INSERT INTO sessions (id, app_id, name, keep_alive_seconds, "
                         "workspace_id, metadata, created_at, updated_at) "
                         "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)");
        if (!s)
            return finish(st, STORE_ERROR);
        sql_bind_text(s, 1, id);
        sql_bind_text(s, 2, app_id);
        sql_bind_text_or_null(s, 3, name);
        if (keep_alive_seconds > 0)
            sql_bind_int64(s, 4, keep_alive_seconds);
        sql_bind_text_or_null(s, 5, workspace_id);
        sql_bind_text(s, 6, metadata_json ? metadata_json : "{}");
        sql_bind_int64(s, 7, now);
        r = step_done(st, s);
    }
    if (r == STORE_OK) {
        if (workspace_id && *workspace_id)
            snprintf(data, sizeof data, "{\"workspaceId\":\"%s\"}", workspace_id);
        r = sql_event(st, ctx, "session.created", "session", id, app_id, id,
                      workspace_id && *workspace_id ? data : NULL);
    }
    struct store_session fresh = {0};
    if (r == STORE_OK)
        r = sq_session_get(st, app_id, id, &fresh);
    r = finish(st, r);
    if (r == STORE_OK) {
        *out = fresh;
        *created = true;
    } else {
        store_session_clear(&fresh);
    }
    return r;
}

static int64_t session_page_row(struct sql_stmt *s, void *item)
{
    return session_from_row(s, item);
}

static void session_page_free(void *items, size_t n)
{
    store_session_list_free(items, n);
}

static const struct sql_page session_page = {sizeof(struct store_session), session_page_row,
                                             session_page_free};

static enum store_status sq_session_list(struct store *st, const char *app_id, const char *after,
                                         size_t limit, struct store_session **out, size_t *n,
                                         char *next_cursor)
{
    return app_list_page(st,
                         "SELECT " SES_COLS "WHERE (?1 = '' OR s.app_id = ?1) "
                         "AND s.state <> 'deleted' AND s.rowid > ?2 "
                         "ORDER BY s.rowid LIMIT ?3",
                         app_id, after, limit, &session_page, (void *)out, n, next_cursor);
}

static enum store_status sq_session_update(struct store *st, const struct store_ctx *ctx,
                                           const char *app_id, const char *session_id,
                                           const struct store_session_patch *p,
                                           struct store_session *out)
{
    struct sql_stmt *s;
    enum store_status r;
    struct store_session cur = {0};
    char data[128];

    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    r = sq_session_get(st, app_id, session_id, &cur);
    store_session_clear(&cur);
    if (r == STORE_OK) {
        /* ?3: 1 = set the override to ?4 (NULL clears it), 0 = keep it. (`<> 0`: PostgreSQL
         * takes no integer as a condition.) */
        s = sql_stmt(st, "UPDATE sessions SET metadata = COALESCE(?2, metadata), "
                         "keep_alive_seconds = CASE WHEN ?3 <> 0 THEN ?4 "
                         "ELSE keep_alive_seconds END, "
                         "updated_at = ?5 WHERE id = ?1");
        if (!s)
            return finish(st, STORE_ERROR);
        sql_bind_text(s, 1, session_id);
        if (p->metadata_json)
            sql_bind_text(s, 2, p->metadata_json);
        sql_bind_int64(s, 3, p->keep_alive_seconds != NULL);
        if (p->keep_alive_seconds && *p->keep_alive_seconds > 0)
            sql_bind_int64(s, 4, *p->keep_alive_seconds);
        sql_bind_int64(s, 5, now_ms());
        r = step_done(st, s);
    }
    if (r == STORE_OK) {
        snprintf(data, sizeof data, "{\"fields\":[%s%s%s]}", p->metadata_json ? "\"metadata\"" : "",
                 p->metadata_json && p->keep_alive_seconds ? "," : "",
                 p->keep_alive_seconds ? "\"keepAliveSeconds\"" : "");
        r = sql_event(st, ctx, "session.updated", "session", session_id, cur.app_id, session_id,
                      data);
    }
    struct store_session fresh = {0};
    if (r == STORE_OK)
        r = sq_session_get(st, app_id, session_id, &fresh);
    r = finish(st, r);
    if (r == STORE_OK)
        *out = fresh;
    else
        store_session_clear(&fresh);
    return r;
}

/* Fails the Session's unfinished messages (one event each) inside the caller's transaction. */
static enum store_status fail_unfinished_messages(struct store *st, const struct store_ctx *ctx,
                                                  const char *app_id, const char *session_id,
                                                  int64_t now)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT id FROM messages WHERE session_id = ?1 "
                                      "AND state IN ('queued', 'delivering') ORDER BY seq");
    char(*ids)[STORE_ID_LEN] = NULL;
    size_t n = 0;
    enum store_status r = STORE_OK;
    int rc;

    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, session_id);
    while ((rc = sql_step(s)) == SQL_ROW) {
        void *grown = list_grow(ids, n, sizeof *ids);
        if (!grown) {
            rc = SQL_NOMEM;
            break;
        }
        ids = grown;
        sql_col_copy(s, 0, ids[n++], STORE_ID_LEN);
    }
    sql_done(s);
    if (rc != SQL_DONE)
        r = sql_status(st, rc);
    for (size_t i = 0; r == STORE_OK && i < n; i++) {
        s = sql_stmt(st, "UPDATE messages SET state = 'failed', error = 'session deleted', "
                         "lease_owner = NULL, lease_expires_at = NULL, updated_at = ?2, "
                         "completed_at = ?2 WHERE id = ?1");
        if (!s) {
            r = STORE_ERROR;
            break;
        }
        sql_bind_text(s, 1, ids[i]);
        sql_bind_int64(s, 2, now);
        r = step_done(st, s);
        if (r == STORE_OK)
            r = sql_event(st, ctx, "message.failed", "message", ids[i], app_id, session_id,
                          "{\"reason\":\"session deleted\"}");
    }
    free(ids);
    return r;
}

static enum store_status sq_session_delete(struct store *st, const struct store_ctx *ctx,
                                           const char *app_id, const char *session_id)
{
    struct sql_stmt *s;
    enum store_status r;
    struct store_session cur = {0};
    int64_t now = now_ms();

    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    r = sq_session_get(st, app_id, session_id, &cur);
    store_session_clear(&cur);
    if (r == STORE_OK)
        r = fail_unfinished_messages(st, ctx, cur.app_id, session_id, now);
    if (r == STORE_OK) {
        /* Only the audit trail keeps what happened: the caller's data (bodies, replies,
         * metadata, the client's name) is scrubbed now, not at some later purge. */
        s = sql_stmt(st, "UPDATE messages SET body = 'null', reply = NULL, updated_at = ?2 "
                         "WHERE session_id = ?1");
        if (!s)
            return finish(st, STORE_ERROR);
        sql_bind_text(s, 1, session_id);
        sql_bind_int64(s, 2, now);
        r = step_done(st, s);
    }
    if (r == STORE_OK) {
        s = sql_stmt(st, "UPDATE sessions SET state = 'deleted', name = NULL, metadata = '{}', "
                         "stop_requested_at = ?2, deleted_at = ?2, updated_at = ?2 WHERE id = ?1");
        if (!s)
            return finish(st, STORE_ERROR);
        sql_bind_text(s, 1, session_id);
        sql_bind_int64(s, 2, now);
        r = step_done(st, s);
    }
    if (r == STORE_OK)
        r = sql_event(st, ctx, "session.deleted", "session", session_id, cur.app_id, session_id,
                      NULL);
    return finish(st, r);
}

/* ---- messages ---- */

#define MSG_COLS SQL_MESSAGE_COLS " "

static void message_from_row(struct sql_stmt *s, struct store_message *m)
{
    sql_message_from_row(s, 0, m);
}

static enum store_status sq_message_get(struct store *st, const char *app_id,
                                        const char *session_id, const char *message_id,
                                        struct store_message *out)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT " MSG_COLS "FROM messages m JOIN sessions s ON "
                                      "s.id = m.session_id WHERE m.id = ?1 AND m.session_id = ?2 "
                                      "AND (?3 = '' OR m.app_id = ?3) AND s.state <> 'deleted'");
    enum store_status r;
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, message_id);
    sql_bind_text_copy(s, 2, session_id);
    bind_app(s, 3, app_id);
    int rc = sql_step(s);
    if (rc == SQL_ROW) {
        message_from_row(s, out);
        r = STORE_OK;
    } else {
        r = rc == SQL_DONE ? STORE_NOT_FOUND : sql_status(st, rc);
    }
    sql_done(s);
    return r;
}

static int64_t message_page_row(struct sql_stmt *s, void *item)
{
    struct store_message *m = item;
    message_from_row(s, m);
    return m->seq;
}

static void message_page_free(void *items, size_t n)
{
    store_message_list_free(items, n);
}

static const struct sql_page message_page = {sizeof(struct store_message), message_page_row,
                                             message_page_free};

static enum store_status sq_message_list(struct store *st, const char *app_id,
                                         const char *session_id, const char *after, size_t limit,
                                         struct store_message **out, size_t *n, char *next_cursor)
{
    struct sql_stmt *s;
    int64_t from = cursor_parse(after);
    struct store_session ses;
    enum store_status r;

    if (from < 0)
        return STORE_INVALID;
    r = sq_session_get(st, app_id, session_id, &ses);
    if (r != STORE_OK)
        return r;
    store_session_clear(&ses);
    /* Messages page by seq (their delivery order), not rowid. */
    s = sql_stmt(st, "SELECT " MSG_COLS "FROM messages m WHERE m.session_id = ?1 AND m.seq > ?2 "
                     "ORDER BY m.seq LIMIT ?3");
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, session_id);
    sql_bind_int64(s, 2, from);
    sql_bind_int64(s, 3, (int64_t)limit + 1);
    return sql_read_page(st, s, limit, &message_page, (void *)out, n, next_cursor);
}

/* One caller's enqueue, waiting for the committer: either a blocked caller (done_cb NULL: it
 * sleeps on sq_api.done until done is set) or an asynchronous one (heap-allocated, with its own
 * result, handed to done_cb and freed by the committer). */
struct sq_enqueue_req {
    const struct store_ctx *ctx;
    const struct store_enqueue *req;
    struct store_message *out;
    bool *replayed;
    enum store_status status;
    bool done;
    store_enqueue_done_fn done_cb;
    void *done_arg;
    struct store_message own_out; /* async: the result */
    bool own_replayed;
    struct sq_enqueue_req *next;
};

struct sq_api {
    pthread_mutex_t lock;
    pthread_cond_t work; /* the committer waits here for requests */
    pthread_cond_t done; /* callers wait here for their batch */
    struct sq_enqueue_req *head, *tail;
    bool stopping;
    bool thread_started;
    pthread_t committer;
};

/* Writes one message inside the committer's open transaction (and its savepoint). */
/* enqueue_one() on PostgreSQL without an Idempotency-Key: the same reads and writes as below (seq
 * from the Session, the row, next_seq + 1, the audit event, the row back) in one statement of
 * data-modifying CTEs, so one round trip to the server instead of five: on a network each round
 * trip costs more than the work, and the group commit holds the writers' lock meanwhile. SQLite
 * has no data-modifying CTEs and no round trips. No row back: no such Session in this App. */
static enum store_status enqueue_one_pg(struct store *st, struct sq_enqueue_req *e)
{
    const struct store_enqueue *q = e->req;
    char id[STORE_ID_LEN];
    struct sql_stmt *s;
    int rc;

    if (id_new_ordered("msg", id, sizeof id) != 0)
        return STORE_ERROR;
    s = sql_stmt(
        st,
        "WITH s AS (UPDATE sessions SET next_seq = sessions.next_seq + 1 FROM apps a "
        "WHERE sessions.id = ?2 AND (?3 = '' OR sessions.app_id = ?3) "
        "AND sessions.state <> 'deleted' AND a.id = sessions.app_id "
        "RETURNING sessions.next_seq - 1 AS seq, a.max_attempts, sessions.app_id), "
        "m AS (INSERT INTO messages (id, session_id, app_id, seq, body, max_attempts, "
        "request_id, created_at, updated_at) "
        "SELECT ?1, ?2, s.app_id, s.seq, ?4, s.max_attempts, ?5, ?6, ?6 FROM s RETURNING *), "
        "e AS (INSERT INTO events (at, actor, kind, object_type, object_id, app_id, session_id, "
        "request_id, data) SELECT ?6, ?7, 'message.queued', 'message', m.id, m.app_id, "
        "m.session_id, ?5, '{\"seq\":' || m.seq || '}' FROM m) "
        "SELECT " MSG_COLS "FROM m");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, id);
    sql_bind_text(s, 2, q->session_id);
    bind_app(s, 3, q->app_id);
    sql_bind_text(s, 4, q->body_json);
    sql_bind_text_or_null(s, 5, e->ctx ? e->ctx->request_id : NULL);
    sql_bind_int64(s, 6, now_ms());
    sql_bind_text(s, 7, e->ctx && e->ctx->actor ? e->ctx->actor : "unknown");
    rc = sql_step(s);
    if (rc == SQL_ROW) {
        message_from_row(s, e->out);
        *e->replayed = false;
    }
    sql_done(s);
    if (rc == SQL_ROW)
        return STORE_OK;
    return rc == SQL_DONE ? STORE_NOT_FOUND : sql_status(st, rc);
}

static enum store_status enqueue_one(struct store *st, struct sq_enqueue_req *e)
{
    const struct store_enqueue *q = e->req;
    struct sql_stmt *s;
    enum store_status r;
    int64_t seq = 0, max_attempts = 0, now = now_ms();
    char id[STORE_ID_LEN], data[64], app_id[STORE_ID_LEN];
    int rc;

    if (sql_dialect(st) == SQL_POSTGRES && !(q->idempotency_key && *q->idempotency_key))
        return enqueue_one_pg(st, e);

    s = sql_stmt(st, "SELECT s.next_seq, a.max_attempts, s.app_id FROM sessions s JOIN apps a "
                     "ON a.id = s.app_id WHERE s.id = ?1 AND (?2 = '' OR s.app_id = ?2) "
                     "AND s.state <> 'deleted'");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, q->session_id);
    bind_app(s, 2, q->app_id);
    rc = sql_step(s);
    if (rc == SQL_ROW) {
        seq = sql_col_int64(s, 0);
        max_attempts = sql_col_int64(s, 1);
        sql_col_copy(s, 2, app_id, sizeof app_id);
    }
    sql_done(s);
    if (rc != SQL_ROW)
        return rc == SQL_DONE ? STORE_NOT_FOUND : sql_status(st, rc);

    if (q->idempotency_key && *q->idempotency_key) {
        s = sql_stmt(st, "SELECT " MSG_COLS ", m.request_hash FROM messages m "
                         "WHERE m.session_id = ?1 AND m.idempotency_key = ?2");
        if (!s)
            return STORE_ERROR;
        sql_bind_text(s, 1, q->session_id);
        sql_bind_text(s, 2, q->idempotency_key);
        rc = sql_step(s);
        if (rc == SQL_ROW) {
            const char *hash = sql_col_text(s, 19);
            if (hash && q->request_hash && strcmp(hash, q->request_hash) == 0) {
                message_from_row(s, e->out);
                *e->replayed = true;
                r = STORE_OK;
            } else {
                r = STORE_CONFLICT;
            }
            sql_done(s);
            return r;
        }
        sql_done(s);
        if (rc != SQL_DONE)
            return sql_status(st, rc);
    }

    if (id_new_ordered("msg", id, sizeof id) != 0)
        return STORE_ERROR;
    s = sql_stmt(st, "INSERT INTO messages (id, session_id, app_id, seq, body, max_attempts, "
                     "idempotency_key, request_hash, request_id, created_at, updated_at) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10)");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, id);
    sql_bind_text(s, 2, q->session_id);
    sql_bind_text(s, 3, app_id);
    sql_bind_int64(s, 4, seq);
    sql_bind_text(s, 5, q->body_json);
    sql_bind_int64(s, 6, max_attempts);
    sql_bind_text_or_null(s, 7, q->idempotency_key);
    sql_bind_text_or_null(s, 8, q->idempotency_key ? q->request_hash : NULL);
    sql_bind_text_or_null(s, 9, e->ctx ? e->ctx->request_id : NULL);
    sql_bind_int64(s, 10, now);
    if ((r = step_done(st, s)) != STORE_OK)
        return r;
    s = sql_stmt(st, "UPDATE sessions SET next_seq = next_seq + 1 WHERE id = ?1");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, q->session_id);
    if ((r = step_done(st, s)) != STORE_OK)
        return r;
    snprintf(data, sizeof data, "{\"seq\":%" PRId64 "}", seq);
    if ((r = sql_event(st, e->ctx, "message.queued", "message", id, app_id, q->session_id, data)) !=
        STORE_OK)
        return r;

    s = sql_stmt(st, "SELECT " MSG_COLS "FROM messages m WHERE m.id = ?1");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, id);
    rc = sql_step(s);
    if (rc == SQL_ROW) {
        message_from_row(s, e->out);
        *e->replayed = false;
    }
    sql_done(s);
    return rc == SQL_ROW ? STORE_OK : sql_status(st, rc);
}

/* Writes a batch in one transaction; each request gets its own status. */
static void commit_batch(struct store *st, struct sq_enqueue_req **batch, size_t n)
{
    enum store_status r = sql_begin(st);
    bool any_ok = false;

    for (size_t i = 0; i < n; i++) {
        struct sq_enqueue_req *e = batch[i];
        if (r != STORE_OK) {
            e->status = r;
            continue;
        }
        int x = sql_exec(st, "SAVEPOINT enqueue");
        if (x != SQL_DONE) {
            e->status = sql_status(st, x);
            continue;
        }
        e->status = enqueue_one(st, e);
        if (e->status != STORE_OK) {
            sql_exec(st, "ROLLBACK TO enqueue");
            if (e->out->body_json || e->out->reply_json || e->out->error)
                store_message_clear(e->out);
        } else {
            any_ok = true;
        }
        sql_exec(st, "RELEASE enqueue");
    }
    if (r != STORE_OK)
        return;
    r = any_ok ? sql_commit(st) : (sql_rollback(st), STORE_OK);
    if (r != STORE_OK) {
        /* The COMMIT failed (disk full, I/O error): nothing of the batch is durable. */
        for (size_t i = 0; i < n; i++) {
            if (batch[i]->status == STORE_OK) {
                store_message_clear(batch[i]->out);
                batch[i]->status = r;
            }
        }
    }
}

static void *committer_main(void *arg)
{
    struct store *st = arg;
    struct sql_store *s = st->cls;
    struct sq_api *api = s->api;
    struct sq_enqueue_req *batch[SQ_BATCH_MAX];

    pthread_mutex_lock(&api->lock);
    for (;;) {
        while (!api->head && !api->stopping)
            pthread_cond_wait(&api->work, &api->lock);
        if (!api->head && api->stopping)
            break;
        size_t n = 0;
        while (api->head && n < SQ_BATCH_MAX) {
            batch[n++] = api->head;
            api->head = api->head->next;
        }
        if (!api->head)
            api->tail = NULL;
        pthread_mutex_unlock(&api->lock);
        commit_batch(st, batch, n);
        /* Asynchronous callers first, outside the lock: their callbacks may take their own locks
         * (the gateway resumes an HTTP connection). The request is unlinked from the queue, so
         * nothing else refers to it once the callback is called. */
        size_t blocked = 0;
        for (size_t i = 0; i < n; i++) {
            struct sq_enqueue_req *e = batch[i];
            if (!e->done_cb) {
                batch[blocked++] = e;
                continue;
            }
            e->done_cb(e->done_arg, e->status, e->status == STORE_OK ? e->out : NULL,
                       e->own_replayed);
            free(e);
        }
        pthread_mutex_lock(&api->lock);
        for (size_t i = 0; i < blocked; i++)
            batch[i]->done = true;
        if (blocked)
            pthread_cond_broadcast(&api->done);
    }
    pthread_mutex_unlock(&api->lock);
    return NULL;
}

/* Appends e to the committer's queue, starting the committer on first use. False when the store
 * is stopping or the thread cannot start: e was not queued. Called with api->lock held. */
static bool queue_for_commit(struct store *st, struct sq_api *api, struct sq_enqueue_req *e)
{
    /* Started on first use: processes that never enqueue (workers, sbxctl) have no committer. */
    if (!api->thread_started && !api->stopping) {
        if (pthread_create(&api->committer, NULL, committer_main, st) == 0)
            api->thread_started = true;
        else
            log_error("store: cannot start the enqueue committer thread");
    }
    if (api->stopping || !api->thread_started)
        return false;
    if (api->tail)
        api->tail->next = e;
    else
        api->head = e;
    api->tail = e;
    pthread_cond_signal(&api->work);
    return true;
}

static enum store_status sq_message_enqueue(struct store *st, const struct store_ctx *ctx,
                                            const struct store_enqueue *req,
                                            struct store_message *out, bool *replayed)
{
    struct sql_store *s = st->cls;
    struct sq_api *api = s->api;
    struct store_message m = {0};
    bool rep = false;
    struct sq_enqueue_req e = {.ctx = ctx, .req = req, .out = &m, .replayed = &rep};

    if (!api || !req->session_id || !req->body_json)
        return STORE_ERROR;
    pthread_mutex_lock(&api->lock);
    if (!queue_for_commit(st, api, &e)) {
        pthread_mutex_unlock(&api->lock);
        return STORE_ERROR;
    }
    while (!e.done)
        pthread_cond_wait(&api->done, &api->lock);
    pthread_mutex_unlock(&api->lock);
    if (e.status == STORE_OK) {
        *out = m;
        *replayed = rep;
    }
    return e.status;
}

static enum store_status sq_message_enqueue_async(struct store *st, const struct store_ctx *ctx,
                                                  const struct store_enqueue *req,
                                                  store_enqueue_done_fn done, void *arg)
{
    struct sql_store *s = st->cls;
    struct sq_api *api = s->api;
    struct sq_enqueue_req *e;

    if (!api || !done || !req->session_id || !req->body_json)
        return STORE_ERROR;
    if (!(e = calloc(1, sizeof *e)))
        return STORE_ERROR;
    e->ctx = ctx;
    e->req = req;
    e->out = &e->own_out;
    e->replayed = &e->own_replayed;
    e->done_cb = done;
    e->done_arg = arg;
    pthread_mutex_lock(&api->lock);
    bool queued = queue_for_commit(st, api, e);
    pthread_mutex_unlock(&api->lock);
    if (!queued) {
        free(e);
        return STORE_ERROR;
    }
    return STORE_OK;
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
    bind_app(s, 2, app_id);
    return sql_read_one(st, s, &sql_sandbox_page, out);
}

static enum store_status sq_sandbox_list(struct store *st, const char *app_id, const char *after,
                                         size_t limit, struct store_sandbox **out, size_t *n,
                                         char *next_cursor)
{
    return app_list_page(st,
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
            return finish(st, STORE_ERROR);
        sql_bind_text(s, 1, sandbox_id);
        sql_bind_int64(s, 2, now_ms());
        r = step_done(st, s);
        if (r == STORE_OK)
            r = sql_event(st, ctx, "sandbox.stop_requested", "sandbox", sandbox_id, b.app_id,
                          b.session_id, NULL);
    }
    if (r == STORE_OK)
        r = sq_sandbox_get(st, app_id, sandbox_id, out);
    return finish(st, r);
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

/* ---- audit and metrics ---- */

static enum store_status sq_event_list(struct store *st, const char *app_id, const char *session_id,
                                       int64_t after, size_t limit, struct store_event **out,
                                       size_t *n)
{
    struct sql_stmt *s =
        sql_stmt(st, "SELECT id, at, actor, kind, object_type, object_id, app_id, "
                     "session_id, request_id, data FROM events WHERE id > ?1 "
                     "AND (?2 = '' OR app_id = ?2) AND (?3 = '' OR session_id = ?3) "
                     "ORDER BY id LIMIT ?4");
    struct store_event *items = NULL;
    size_t count = 0;
    int rc;

    if (!s)
        return STORE_ERROR;
    sql_bind_int64(s, 1, after);
    bind_app(s, 2, app_id);
    sql_bind_text_copy(s, 3, session_id ? session_id : "");
    sql_bind_int64(s, 4, (int64_t)limit);
    while ((rc = sql_step(s)) == SQL_ROW) {
        struct store_event *grown = list_grow(items, count, sizeof *items);
        if (!grown) {
            rc = SQL_NOMEM;
            break;
        }
        items = grown;
        struct store_event *e = &items[count++];
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
    sql_done(s);
    if (rc != SQL_DONE) {
        store_event_list_free(items, count);
        return sql_status(st, rc);
    }
    *out = items;
    *n = count;
    return STORE_OK;
}

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

/* Boot durations and lifetimes of every Sandbox, in one pass over the sandboxes table. */
static enum store_status sandbox_histograms(struct store *st, struct store_counts *c)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT boot_ms, terminated_at - claimed_at FROM sandboxes "
                                      "WHERE boot_ms IS NOT NULL OR terminated_at IS NOT NULL");
    int rc;
    if (!s)
        return STORE_ERROR;
    while ((rc = sql_step(s)) == SQL_ROW) {
        if (!sql_col_null(s, 0))
            histogram_add(&c->boot, sql_col_int64(s, 0));
        if (!sql_col_null(s, 1))
            histogram_add(&c->lifetime, sql_col_int64(s, 1));
    }
    sql_done(s);
    return rc == SQL_DONE ? STORE_OK : sql_status(st, rc);
}

static enum store_status sq_counts(struct store *st, struct store_counts *out)
{
    struct store_counts c = {0};
    enum store_status r;

    /* One read transaction, so the numbers are one consistent snapshot. */
    if ((r = sql_begin_read(st)) != STORE_OK)
        return r;
    r = count_states(st, sql_stmt(st, "SELECT state, count(*) FROM sessions GROUP BY state"),
                     store_session_states, 4, c.sessions_by_state);
    if (r == STORE_OK)
        r = count_states(st, sql_stmt(st, "SELECT state, count(*) FROM messages GROUP BY state"),
                         store_message_states, 4, c.messages_by_state);
    if (r == STORE_OK)
        r = count_states(st, sql_stmt(st, "SELECT state, count(*) FROM sandboxes GROUP BY state"),
                         store_sandbox_states, 7, c.sandboxes_by_state);
    if (r == STORE_OK) {
        struct sql_stmt *s = sql_stmt(st, "SELECT COALESCE(min(created_at), 0) FROM messages "
                                          "WHERE state = 'queued'");
        r = s ? step_int(st, s, &c.oldest_queued_at) : STORE_ERROR;
    }
    if (r == STORE_OK) {
        struct sql_stmt *s = sql_stmt(st, "SELECT count(*) FROM messages WHERE state = 'queued' "
                                          "AND attempts > 0");
        r = s ? step_int(st, s, &c.retrying) : STORE_ERROR;
    }
    if (r == STORE_OK)
        r = sandbox_histograms(st, &c);
    sql_rollback(st);
    if (r == STORE_OK)
        *out = c;
    return r;
}

/* ---- setup ---- */

void store_sql_api_init(struct store *st)
{
    struct sql_store *s = st->cls;
    struct sq_api *api = calloc(1, sizeof *api);

    st->app_create = sq_app_create;
    st->app_get = sq_app_get;
    st->app_list = sq_app_list;
    st->app_update = sq_app_update;
    st->app_delete = sq_app_delete;
    st->key_create = sq_key_create;
    st->key_list = sq_key_list;
    st->key_revoke = sq_key_revoke;
    st->key_lookup = sq_key_lookup;
    st->workspace_create = sq_workspace_create;
    st->workspace_get = sq_workspace_get;
    st->workspace_list = sq_workspace_list;
    st->workspace_delete = sq_workspace_delete;
    st->session_create = sq_session_create;
    st->session_get = sq_session_get;
    st->session_list = sq_session_list;
    st->session_update = sq_session_update;
    st->session_delete = sq_session_delete;
    st->message_enqueue = sq_message_enqueue;
    st->message_enqueue_async = sq_message_enqueue_async;
    st->message_get = sq_message_get;
    st->message_list = sq_message_list;
    st->sandbox_get = sq_sandbox_get;
    st->sandbox_list = sq_sandbox_list;
    st->sandbox_request_stop = sq_sandbox_request_stop;
    st->pool_stats = sq_pool_stats;
    st->event_list = sq_event_list;
    st->counts = sq_counts;

    s->api = api;
    if (!api) {
        log_error("store: out of memory for the enqueue committer");
        return;
    }
    pthread_mutex_init(&api->lock, NULL);
    pthread_cond_init(&api->work, NULL);
    pthread_cond_init(&api->done, NULL);
}

void store_sql_api_fini(struct store *st)
{
    struct sql_store *s = st->cls;
    struct sq_api *api = s->api;

    if (!api)
        return;
    pthread_mutex_lock(&api->lock);
    api->stopping = true;
    bool started = api->thread_started;
    pthread_cond_signal(&api->work);
    pthread_mutex_unlock(&api->lock);
    /* The committer drains what is queued before it exits, so no caller is left waiting. */
    if (started)
        pthread_join(api->committer, NULL);
    pthread_mutex_destroy(&api->lock);
    pthread_cond_destroy(&api->work);
    pthread_cond_destroy(&api->done);
    free(api);
    s->api = NULL;
}
