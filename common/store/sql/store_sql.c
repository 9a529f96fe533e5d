/*
 * store_sql.c: the parts of the store that do not depend on the SQL engine (sql.h): state names,
 * column helpers, the audit event writer that every mutation calls inside its own transaction,
 * the page reader behind every list, the records' clear()s, and the settings table.
 */
#include "sql.h"
#include "timefmt.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const store_session_states[4] = {"idle", "activating", "active", "deleted"};
const char *const store_message_states[4] = {"queued", "delivering", "completed", "failed"};
const char *const store_sandbox_states[7] = {"booting",  "warm",       "claimed", "running",
                                             "stopping", "terminated", "failed"};

const char *store_status_name(enum store_status st)
{
    static const char *const names[] = {"ok",   "not found", "conflict", "busy",
                                        "full", "invalid",   "empty",    "error"};
    return (unsigned)st < sizeof names / sizeof names[0] ? names[st] : "unknown";
}

void sql_col_copy(struct sql_stmt *s, int col, char *out, size_t outlen)
{
    const char *t = sql_col_text(s, col);
    snprintf(out, outlen, "%s", t ? t : "");
}

char *sql_col_dup(struct sql_stmt *s, int col)
{
    const char *t = sql_col_text(s, col);
    return t ? strdup(t) : NULL;
}

enum store_status sql_event(struct store *st, const struct store_ctx *ctx, const char *kind,
                            const char *object_type, const char *object_id, const char *app_id,
                            const char *session_id, const char *data_json)
{
    struct sql_stmt *s =
        sql_stmt(st, "INSERT INTO events (at, actor, kind, object_type, object_id, "
                     "app_id, session_id, request_id, data) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
    int rc;
    if (!s)
        return STORE_ERROR;
    sql_bind_int64(s, 1, now_ms());
    sql_bind_text(s, 2, ctx && ctx->actor ? ctx->actor : "unknown");
    sql_bind_text(s, 3, kind);
    sql_bind_text(s, 4, object_type);
    sql_bind_text(s, 5, object_id);
    sql_bind_text_or_null(s, 6, app_id);
    sql_bind_text_or_null(s, 7, session_id);
    sql_bind_text_or_null(s, 8, ctx ? ctx->request_id : NULL);
    sql_bind_text_or_null(s, 9, data_json);
    rc = sql_step(s);
    sql_done(s);
    return rc == SQL_DONE ? STORE_OK : sql_status(st, rc);
}

enum store_status sql_read_page(struct store *st, struct sql_stmt *s, size_t limit,
                                const struct sql_page *pg, void *out, size_t *n, char *next_cursor)
{
    char *items = NULL;
    size_t count = 0;
    int64_t last = 0;
    int rc;

    next_cursor[0] = '\0';
    while ((rc = sql_step(s)) == SQL_ROW) {
        if (count == limit) {
            snprintf(next_cursor, STORE_CURSOR_LEN, "%" PRId64, last);
            break;
        }
        char *grown = realloc(items, (count + 1) * pg->elem_size);
        if (!grown) {
            rc = SQL_NOMEM;
            break;
        }
        items = grown;
        memset(items + count * pg->elem_size, 0, pg->elem_size);
        last = pg->from_row(s, items + count++ * pg->elem_size);
    }
    sql_done(s);
    if (rc != SQL_ROW && rc != SQL_DONE) {
        pg->free_items(items, count);
        return sql_status(st, rc);
    }
    /* out is the caller's `struct store_x **`: every object pointer has the same representation
     * here, and storing through a void * would be an aliasing violation. */
    memcpy(out, &items, sizeof items);
    *n = count;
    return STORE_OK;
}

enum store_status sql_read_one(struct store *st, struct sql_stmt *s, const struct sql_page *pg,
                               void *out)
{
    int rc = sql_step(s);
    enum store_status r = STORE_OK;
    if (rc == SQL_ROW) {
        memset(out, 0, pg->elem_size);
        pg->from_row(s, out);
    } else {
        r = rc == SQL_DONE ? STORE_NOT_FOUND : sql_status(st, rc);
    }
    sql_done(s);
    return r;
}

void sql_app_from_row(struct sql_stmt *s, int c, struct store_app *a)
{
    memset(a, 0, sizeof *a);
    sql_col_copy(s, c + 0, a->id, sizeof a->id);
    sql_col_copy(s, c + 1, a->name, sizeof a->name);
    a->keep_alive_seconds = sql_col_int64(s, c + 2);
    a->vcpu_count = sql_col_int64(s, c + 3);
    a->mem_size_mib = sql_col_int64(s, c + 4);
    sql_col_copy(s, c + 5, a->driver, sizeof a->driver);
    sql_col_copy(s, c + 6, a->image, sizeof a->image);
    a->max_attempts = sql_col_int64(s, c + 7);
    a->command_json = sql_col_dup(s, c + 8);
    a->created_at = sql_col_int64(s, c + 9);
    a->updated_at = sql_col_int64(s, c + 10);
    a->network_json = sql_col_dup(s, c + 11);
}

void sql_session_from_row(struct sql_stmt *s, int c, struct store_session *o)
{
    memset(o, 0, sizeof *o);
    sql_col_copy(s, c + 0, o->id, sizeof o->id);
    sql_col_copy(s, c + 1, o->app_id, sizeof o->app_id);
    sql_col_copy(s, c + 2, o->name, sizeof o->name);
    sql_col_copy(s, c + 3, o->state, sizeof o->state);
    sql_col_copy(s, c + 4, o->sandbox_id, sizeof o->sandbox_id);
    o->keep_alive_seconds = sql_col_int64_or(s, c + 5, 0);
    o->effective_keep_alive_seconds = sql_col_int64(s, c + 6);
    sql_col_copy(s, c + 7, o->workspace_id, sizeof o->workspace_id);
    o->metadata_json = sql_col_dup(s, c + 8);
    o->activation_count = sql_col_int64(s, c + 9);
    o->cpu_usec = sql_col_int64(s, c + 10);
    o->mem_peak_bytes = sql_col_int64_or(s, c + 11, -1);
    sql_col_copy(s, c + 12, o->worker_id, sizeof o->worker_id);
    o->expires_at = sql_col_int64_or(s, c + 13, 0);
    o->stop_requested_at = sql_col_int64_or(s, c + 14, 0);
    o->created_at = sql_col_int64(s, c + 15);
    o->updated_at = sql_col_int64(s, c + 16);
    o->last_activity_at = sql_col_int64_or(s, c + 17, 0);
}

void sql_message_from_row(struct sql_stmt *s, int c, struct store_message *m)
{
    memset(m, 0, sizeof *m);
    sql_col_copy(s, c + 0, m->id, sizeof m->id);
    sql_col_copy(s, c + 1, m->session_id, sizeof m->session_id);
    sql_col_copy(s, c + 2, m->app_id, sizeof m->app_id);
    m->seq = sql_col_int64(s, c + 3);
    sql_col_copy(s, c + 4, m->state, sizeof m->state);
    m->body_json = sql_col_dup(s, c + 5);
    m->reply_json = sql_col_dup(s, c + 6);
    m->error = sql_col_dup(s, c + 7);
    m->attempts = sql_col_int64(s, c + 8);
    m->max_attempts = sql_col_int64(s, c + 9);
    sql_col_copy(s, c + 10, m->idempotency_key, sizeof m->idempotency_key);
    sql_col_copy(s, c + 11, m->request_id, sizeof m->request_id);
    sql_col_copy(s, c + 12, m->sandbox_id, sizeof m->sandbox_id);
    sql_col_copy(s, c + 13, m->lease_owner, sizeof m->lease_owner);
    m->lease_expires_at = sql_col_int64_or(s, c + 14, 0);
    m->not_before = sql_col_int64(s, c + 15);
    m->created_at = sql_col_int64(s, c + 16);
    m->updated_at = sql_col_int64(s, c + 17);
    m->completed_at = sql_col_int64_or(s, c + 18, 0);
}

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
    return sql_col_int64(s, 0);
}

static void sandbox_items_free(void *items, size_t n)
{
    (void)n;
    free(items);
}

const struct sql_page sql_sandbox_page = {sizeof(struct store_sandbox), sandbox_from_row,
                                          sandbox_items_free};

/* ---- records ---- */

void store_app_clear(struct store_app *a)
{
    free(a->command_json);
    a->command_json = NULL;
    free(a->network_json);
    a->network_json = NULL;
}

void store_app_list_free(struct store_app *a, size_t n)
{
    for (size_t i = 0; a && i < n; i++)
        store_app_clear(&a[i]);
    free(a);
}

void store_session_clear(struct store_session *s)
{
    free(s->metadata_json);
    s->metadata_json = NULL;
}

void store_session_list_free(struct store_session *s, size_t n)
{
    for (size_t i = 0; s && i < n; i++)
        store_session_clear(&s[i]);
    free(s);
}

void store_message_clear(struct store_message *m)
{
    free(m->body_json);
    free(m->reply_json);
    free(m->error);
    m->body_json = m->reply_json = m->error = NULL;
}

void store_message_list_free(struct store_message *m, size_t n)
{
    for (size_t i = 0; m && i < n; i++)
        store_message_clear(&m[i]);
    free(m);
}

void store_event_list_free(struct store_event *e, size_t n)
{
    for (size_t i = 0; e && i < n; i++)
        free(e[i].data_json);
    free(e);
}

void store_delivery_clear(struct store_delivery *d)
{
    store_message_clear(&d->message);
    store_session_clear(&d->session);
    store_app_clear(&d->app);
}
/* ---- settings ---- */

static enum store_status sq_setting_get(struct store *st, const char *key, char *out, size_t outlen)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT value FROM settings WHERE key = ?1");
    enum store_status rc;
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, key);
    int r = sql_step(s);
    if (r == SQL_ROW) {
        sql_col_copy(s, 0, out, outlen);
        rc = STORE_OK;
    } else {
        rc = r == SQL_DONE ? STORE_NOT_FOUND : sql_status(st, r);
    }
    sql_done(s);
    return rc;
}

static enum store_status sq_setting_put(struct store *st, const char *key, const char *value)
{
    struct sql_stmt *s = sql_stmt(st, "INSERT INTO settings (key, value) VALUES (?1, ?2) "
                                      "ON CONFLICT (key) DO UPDATE SET value = excluded.value");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, key);
    sql_bind_text(s, 2, value);
    int r = sql_step(s);
    sql_done(s);
    return r == SQL_DONE ? STORE_OK : sql_status(st, r);
}

static enum store_status sq_setting_init(struct store *st, const char *key, const char *value,
                                         char *out, size_t outlen)
{
    struct sql_stmt *s = sql_stmt(st, "INSERT INTO settings (key, value) VALUES (?1, ?2) "
                                      "ON CONFLICT (key) DO NOTHING");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, key);
    sql_bind_text(s, 2, value);
    int r = sql_step(s);
    sql_done(s);
    if (r != SQL_DONE)
        return sql_status(st, r);
    return sq_setting_get(st, key, out, outlen);
}

void store_sql_settings_init(struct store *st)
{
    st->setting_get = sq_setting_get;
    st->setting_put = sq_setting_put;
    st->setting_init = sq_setting_init;
}
