/*
 * workspaces.c: the workspaces table: an App's Workspaces (a directory under the data dir that
 * Sessions mount at /workspace), created, read, listed with the number of live Sessions attached,
 * and soft-deleted when none is. The gateway makes and removes the directories; this file only
 * records them. No hidden state.
 */
#include "id.h"
#include "clock.h"
#include "store_sql.h"

#include <stdio.h>
#include <string.h>

#define WS_COLS                                                                                    \
    "w.rowid, w.id, w.app_id, w.name, w.path, w.created_at, (SELECT count(*) FROM sessions x "     \
    "WHERE x.workspace_id = w.id AND x.state <> 'deleted'), w.size_mib"

static int64_t ws_from_row(struct sql_stmt *s, struct store_workspace *w)
{
    memset(w, 0, sizeof *w);
    sql_col_copy(s, 1, w->id, sizeof w->id);
    sql_col_copy(s, 2, w->app_id, sizeof w->app_id);
    sql_col_copy(s, 3, w->name, sizeof w->name);
    sql_col_copy(s, 4, w->path, sizeof w->path);
    w->created_at = sql_col_int64(s, 5);
    w->attached_sessions = sql_col_int64(s, 6);
    w->size_mib = sql_col_int64(s, 7); /* NULL reads as 0: no size */
    return sql_col_int64(s, 0);
}

static int64_t workspace_page_row(struct sql_stmt *s, void *item)
{
    return ws_from_row(s, item);
}

static const struct sql_page workspace_page = {sizeof(struct store_workspace), workspace_page_row,
                                               sql_free_items};

enum store_status store_workspace_get(struct store *st, const char *app_id, const char *ws_id,
                                      struct store_workspace *out)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT " WS_COLS " FROM workspaces w WHERE w.id = ?1 "
                                      "AND (?2 = '' OR w.app_id = ?2) AND w.deleted_at IS NULL");
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, ws_id);
    sql_bind_app(s, 2, app_id);
    return sql_read_one(st, s, &workspace_page, out);
}

enum store_status store_workspace_create(struct store *st, const struct store_ctx *ctx,
                                         const char *app_id, const char *name, int64_t size_mib,
                                         const char *data_dir, struct store_workspace *out)
{
    return store_workspace_create_within(st, ctx, app_id, name, size_mib, data_dir, NULL, out);
}

/* The App's Workspaces and Workspace MiB quotas, then the disk's budget, in the caller's
 * transaction. */
static enum store_status workspace_quotas_in_tx(struct store *st, const char *app_id,
                                                int64_t size_mib, struct store_quotas *q)
{
    struct store_app_usage u;
    enum store_status r = sql_app_usage_in_tx(st, app_id, &u);
    if (r != STORE_OK)
        return r;
    if (sql_quota_over(q, &u, STORE_QUOTA_WORKSPACES, 1) ||
        sql_quota_over(q, &u, STORE_QUOTA_WORKSPACE_MIB, size_mib))
        return STORE_OVER_QUOTA;
    return sql_disk_check_in_tx(st, q, size_mib);
}

enum store_status store_workspace_create_within(struct store *st, const struct store_ctx *ctx,
                                                const char *app_id, const char *name,
                                                int64_t size_mib, const char *data_dir,
                                                struct store_quotas *q, struct store_workspace *out)
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
    w.size_mib = size_mib;
    w.created_at = clock_wall_ms();
    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    r = sql_app_exists(st, app_id);
    if (r == STORE_OK && q)
        r = workspace_quotas_in_tx(st, app_id, size_mib, q);
    if (r == STORE_OK) {
        s = sql_stmt(st, "INSERT INTO workspaces (id, app_id, name, path, created_at, size_mib) "
                         "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
        if (!s)
            return sql_end(st, STORE_ERROR);
        sql_bind_text(s, 1, w.id);
        sql_bind_text(s, 2, app_id);
        sql_bind_text_or_null(s, 3, name);
        sql_bind_text(s, 4, w.path);
        sql_bind_int64(s, 5, w.created_at);
        sql_bind_int64(s, 6, size_mib);
        r = sql_step_done(st, s);
    }
    if (r == STORE_OK)
        r = sql_event(st, ctx, "workspace.created", "workspace", w.id, app_id, NULL, NULL);
    r = sql_end(st, r);
    if (r == STORE_OK)
        *out = w;
    return r;
}

enum store_status store_workspace_list(struct store *st, const char *app_id, const char *after,
                                       size_t limit, struct store_workspace **out, size_t *n,
                                       char *next_cursor)
{
    return sql_app_list_page(st,
                             "SELECT " WS_COLS " FROM workspaces w WHERE "
                             "(?1 = '' OR w.app_id = ?1) AND w.deleted_at IS NULL "
                             "AND w.rowid > ?2 ORDER BY w.rowid LIMIT ?3",
                             app_id, after, limit, &workspace_page, (void *)out, n, next_cursor);
}

enum store_status store_workspace_delete(struct store *st, const struct store_ctx *ctx,
                                         const char *app_id, const char *ws_id,
                                         struct store_workspace *out)
{
    struct sql_stmt *s;
    enum store_status r;
    struct store_workspace w;

    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    r = store_workspace_get(st, app_id, ws_id, &w);
    if (r == STORE_OK && w.attached_sessions > 0)
        r = STORE_CONFLICT;
    if (r == STORE_OK) {
        /* A deleted Session's Sandbox may not have stopped yet: it still has the Workspace
         * mounted (and its agent may still write to it). */
        s = sql_stmt(st, "SELECT count(*) FROM sandboxes b JOIN sessions x ON x.id = b.session_id "
                         "WHERE x.workspace_id = ?1 AND b.state IN " SQL_SANDBOX_LIVE);
        if (!s)
            return sql_end(st, STORE_ERROR);
        sql_bind_text(s, 1, ws_id);
        int rc = sql_step(s);
        if (rc == SQL_ROW && sql_col_int64(s, 0) > 0)
            r = STORE_CONFLICT;
        else if (rc != SQL_ROW)
            r = sql_status(st, rc);
        sql_done(s);
    }
    if (r == STORE_OK) {
        s = sql_stmt(st, "UPDATE workspaces SET deleted_at = ?2 WHERE id = ?1");
        if (!s)
            return sql_end(st, STORE_ERROR);
        sql_bind_text(s, 1, ws_id);
        sql_bind_int64(s, 2, clock_wall_ms());
        r = sql_step_done(st, s);
    }
    if (r == STORE_OK)
        r = sql_event(st, ctx, "workspace.deleted", "workspace", ws_id, w.app_id, NULL, NULL);
    r = sql_end(st, r);
    if (r == STORE_OK && out)
        *out = w;
    return r;
}
