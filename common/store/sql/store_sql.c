/*
 * store_sql.c: what the store's per-table files share (store_sql.h): the state and status names,
 * column copies, running statements, ending transactions, one-row, paged and id-list reads, the
 * audit event writer that every mutation calls inside its own transaction, and store_sql_init()
 * and store_sql_fini(), which set up and stop the group commit (enqueue.c). No hidden state.
 */
#include "store_sql.h"
#include "clock.h"

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
    static const char *const names[] = {"ok",      "not found", "conflict", "busy",      "full",
                                        "invalid", "empty",     "error",    "over quota"};
    return (unsigned)st < sizeof names / sizeof names[0] ? names[st] : "unknown";
}

/* ---- statements ---- */

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

enum store_status sql_step_done(struct store *st, struct sql_stmt *s)
{
    int rc;
    if (!s)
        return STORE_ERROR;
    rc = sql_step(s);
    sql_done(s);
    return rc == SQL_DONE ? STORE_OK : sql_status(st, rc);
}

enum store_status sql_step_change(struct store *st, struct sql_stmt *s,
                                  enum store_status if_unchanged)
{
    enum store_status rc = sql_step_done(st, s);
    if (rc == STORE_OK && sql_changes(st) == 0)
        return if_unchanged;
    return rc;
}

enum store_status sql_step_int(struct store *st, struct sql_stmt *s, int64_t *out)
{
    enum store_status r = STORE_OK;
    int rc;
    if (!s)
        return STORE_ERROR;
    rc = sql_step(s);
    if (rc == SQL_ROW)
        *out = sql_col_int64(s, 0);
    else
        r = rc == SQL_DONE ? STORE_NOT_FOUND : sql_status(st, rc);
    sql_done(s);
    return r;
}

enum store_status sql_end(struct store *st, enum store_status rc)
{
    if (rc == STORE_OK)
        return sql_commit(st);
    sql_rollback(st);
    return rc;
}

void sql_bind_app(struct sql_stmt *s, int idx, const char *app_id)
{
    sql_bind_text_copy(s, idx, app_id ? app_id : "");
}

/* ---- reads ---- */

enum store_status sql_read_page(struct store *st, struct sql_stmt *s, size_t limit,
                                const struct sql_page *pg, void *out, size_t *n, char *next_cursor)
{
    return sql_read_page_bounded(st, s, limit, pg, NULL, out, n, next_cursor);
}

enum store_status sql_read_page_bounded(struct store *st, struct sql_stmt *s, size_t limit,
                                        const struct sql_page *pg,
                                        size_t (*item_bytes)(const void *item), void *out,
                                        size_t *n, char *next_cursor)
{
    char *items = NULL;
    size_t count = 0, bytes = 0;
    int64_t last = 0;
    int rc;

    next_cursor[0] = '\0';
    while ((rc = sql_step(s)) == SQL_ROW) {
        if (count == limit || (item_bytes && count > 0 && bytes >= STORE_PAGE_BYTES)) {
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
        last = pg->from_row(s, items + count * pg->elem_size);
        if (item_bytes)
            bytes += item_bytes(items + count * pg->elem_size);
        count++;
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

enum store_status sql_read_all(struct store *st, struct sql_stmt *s, const struct sql_page *pg,
                               void *out, size_t *n)
{
    char no_cursor[STORE_CURSOR_LEN];
    if (!s)
        return STORE_ERROR;
    return sql_read_page(st, s, SIZE_MAX, pg, out, n, no_cursor);
}

enum store_status sql_read_one(struct store *st, struct sql_stmt *s, const struct sql_page *pg,
                               void *out)
{
    enum store_status r = STORE_OK;
    int rc;
    if (!s)
        return STORE_ERROR;
    rc = sql_step(s);
    if (rc == SQL_ROW) {
        memset(out, 0, pg->elem_size);
        pg->from_row(s, out);
    } else {
        r = rc == SQL_DONE ? STORE_NOT_FOUND : sql_status(st, rc);
    }
    sql_done(s);
    return r;
}

void sql_free_items(void *items, size_t n)
{
    (void)n;
    free(items);
}

int64_t sql_cursor_parse(const char *after)
{
    if (!after || !*after)
        return 0;
    char *end;
    long long v = strtoll(after, &end, 10);
    if (*end != '\0' || v < 0)
        return -1;
    return v;
}

enum store_status sql_app_list_page(struct store *st, const char *sql, const char *app_id,
                                    const char *after, size_t limit, const struct sql_page *pg,
                                    void *out, size_t *n, char *next_cursor)
{
    return sql_app_list_page_bounded(st, sql, app_id, after, limit, pg, NULL, out, n, next_cursor);
}

enum store_status sql_app_list_page_bounded(struct store *st, const char *sql, const char *app_id,
                                            const char *after, size_t limit,
                                            const struct sql_page *pg,
                                            size_t (*item_bytes)(const void *item), void *out,
                                            size_t *n, char *next_cursor)
{
    struct sql_stmt *s = sql_stmt(st, sql);
    int64_t from = sql_cursor_parse(after);

    if (from < 0)
        return STORE_INVALID;
    if (!s)
        return STORE_ERROR;
    sql_bind_app(s, 1, app_id);
    sql_bind_int64(s, 2, from);
    sql_bind_int64(s, 3, (int64_t)limit + 1);
    return sql_read_page_bounded(st, s, limit, pg, item_bytes, out, n, next_cursor);
}

static int64_t id_from_row(struct sql_stmt *s, void *item)
{
    sql_col_copy(s, 0, item, STORE_ID_LEN);
    return 0;
}

static const struct sql_page id_page = {STORE_ID_LEN, id_from_row, sql_free_items};

enum store_status sql_read_ids(struct store *st, struct sql_stmt *s, char (**ids)[STORE_ID_LEN],
                               size_t *n)
{
    return sql_read_all(st, s, &id_page, (void *)ids, n);
}

/* ---- audit events ---- */

enum store_status sql_event(struct store *st, const struct store_ctx *ctx, const char *kind,
                            const char *object_type, const char *object_id, const char *app_id,
                            const char *session_id, const char *data_json)
{
    struct sql_stmt *s =
        sql_stmt(st, "INSERT INTO events (at, actor, kind, object_type, object_id, "
                     "app_id, session_id, request_id, data) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
    if (!s)
        return STORE_ERROR;
    sql_bind_int64(s, 1, clock_wall_ms());
    sql_bind_text(s, 2, ctx && ctx->actor ? ctx->actor : "unknown");
    sql_bind_text(s, 3, kind);
    sql_bind_text(s, 4, object_type);
    sql_bind_text(s, 5, object_id);
    sql_bind_text_or_null(s, 6, app_id);
    sql_bind_text_or_null(s, 7, session_id);
    sql_bind_text_or_null(s, 8, ctx ? ctx->request_id : NULL);
    sql_bind_text_or_null(s, 9, data_json);
    return sql_step_done(st, s);
}

enum store_status sql_event_json(struct store *st, const struct store_ctx *ctx, const char *kind,
                                 const char *object_type, const char *object_id, const char *app_id,
                                 const char *session_id, json_t *data)
{
    char *text = data ? json_dumps(data, JSON_COMPACT) : NULL;
    json_decref(data);
    enum store_status rc =
        sql_event(st, ctx, kind, object_type, object_id, app_id, session_id, text);
    free(text);
    return rc;
}

/* ---- setting up and tearing down ---- */

void store_sql_init(struct store *st)
{
    sql_enqueue_init(st);
}

void store_sql_fini(struct store *st)
{
    sql_enqueue_fini(st);
}
