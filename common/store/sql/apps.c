/*
 * apps.c: the apps table: an App's settings (its Sandboxes' shape, keep-alive, attempts, command),
 * created, read, listed, patched and soft-deleted by the admin; the distinct shapes of live Apps
 * (what the workers' warm pools keep ready); and the App row reader that the Session, message and
 * delivery reads share. Deleting an App revokes its keys (one event each) in the same transaction.
 * No hidden state.
 */
#include "id.h"
#include "clock.h"
#include "store_sql.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    a->limits_json = sql_col_dup(s, c + 11);
    sql_col_copy(s, c + 12, a->image_id, sizeof a->image_id);
    sql_col_copy(s, c + 13, a->image_digest, sizeof a->image_digest);
    a->env_json = sql_col_dup(s, c + 14);
    a->network_json = sql_col_dup(s, c + 15);
    for (int i = 0; i < STORE_QUOTA_COUNT; i++)
        a->quotas[i] = sql_col_int64_or(s, c + 16 + i, -1);
    a->prestart = sql_col_int64(s, c + 21) != 0;
    a->warm_pool = sql_col_int64(s, c + 22);
    char readiness[8];
    sql_col_copy(s, c + 23, readiness, sizeof readiness);
    a->readiness_line = strcmp(readiness, "line") == 0;
    a->definition_rev = sql_col_int64(s, c + 24);
}

void store_app_clear(struct store_app *a)
{
    free(a->command_json);
    a->command_json = NULL;
    free(a->limits_json);
    a->limits_json = NULL;
    free(a->env_json);
    a->env_json = NULL;
    free(a->network_json);
    a->network_json = NULL;
}

void store_app_defaults(struct store_app *a, const char *name, const char *driver)
{
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%s", name);
    a->keep_alive_seconds = 60;
    a->vcpu_count = 1;
    a->mem_size_mib = 256;
    a->max_attempts = 3;
    snprintf(a->driver, sizeof a->driver, "%s", driver);
    snprintf(a->image, sizeof a->image, "default");
    for (int i = 0; i < STORE_QUOTA_COUNT; i++)
        a->quotas[i] = -1;
}

void store_app_list_free(struct store_app *a, size_t n)
{
    for (size_t i = 0; a && i < n; i++)
        store_app_clear(&a[i]);
    free(a);
}

#define APP_COLS "a.rowid, " SQL_APP_COLS

static int64_t app_from_row(struct sql_stmt *s, struct store_app *a)
{
    sql_app_from_row(s, 1, a);
    return sql_col_int64(s, 0);
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

enum store_status store_app_get(struct store *st, const char *app_id, struct store_app *out)
{
    struct sql_stmt *s =
        sql_stmt(st, "SELECT " APP_COLS " FROM apps a WHERE id = ?1 AND deleted_at IS NULL");
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, app_id);
    return sql_read_one(st, s, &app_page, out);
}

enum store_status sql_app_exists(struct store *st, const char *app_id)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT 1 FROM apps WHERE id = ?1 AND deleted_at IS NULL");
    int64_t one;
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, app_id);
    return sql_step_int(st, s, &one);
}

enum store_status store_app_create(struct store *st, const struct store_ctx *ctx,
                                   struct store_app *app)
{
    struct sql_stmt *s;
    enum store_status r;
    int64_t now = clock_wall_ms();

    if (id_new("app", app->id, sizeof app->id) != 0)
        return STORE_ERROR;
    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    /* The Image the gateway resolved must still be ready, with that digest, as the App lands. */
    r = sql_image_check_ready(st, app->image_id, app->image_digest);
    if (r != STORE_OK)
        return sql_end(st, r);
    s = sql_stmt(st, "INSERT INTO apps (id, name, keep_alive_seconds, vcpu_count, mem_size_mib, "
                     "driver, image, max_attempts, command, created_at, updated_at, limits, "
                     "image_id, image_digest, env, network, quota_live_sandboxes, quota_sessions, "
                     "quota_workspaces, quota_workspace_mib, quota_keep_alive_seconds, prestart, "
                     "warm_pool, readiness) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11, ?12, ?13, ?14, "
                     "?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23)");
    if (!s)
        return sql_end(st, STORE_ERROR);
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
    sql_bind_text_or_null(s, 11, app->limits_json);
    sql_bind_text_or_null(s, 12, app->image_id);
    sql_bind_text(s, 13, app->image_digest[0] ? app->image_digest : "default");
    sql_bind_text(s, 14, app->env_json ? app->env_json : "{}");
    sql_bind_text(s, 15, app->network_json ? app->network_json : "{\"egress\":\"public\"}");
    for (int i = 0; i < STORE_QUOTA_COUNT; i++)
        if (app->quotas[i] >= 0)
            sql_bind_int64(s, 16 + i, app->quotas[i]);
        else
            sql_bind_null(s, 16 + i);
    sql_bind_int64(s, 21, app->prestart ? 1 : 0);
    sql_bind_int64(s, 22, app->warm_pool);
    sql_bind_text(s, 23, app->readiness_line ? "line" : "none");
    r = sql_step_done(st, s);
    if (r == STORE_OK) {
        r = sql_event_json(st, ctx, "app.created", "app", app->id, app->id, NULL,
                           json_pack("{s:s}", "name", app->name));
    }
    r = sql_end(st, r);
    if (r == STORE_OK) {
        app->created_at = app->updated_at = now;
        app->definition_rev = 1;
    }
    return r;
}

enum store_status store_app_list(struct store *st, const char *after, size_t limit,
                                 struct store_app **out, size_t *n, char *next_cursor)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT " APP_COLS " FROM apps a WHERE deleted_at IS NULL "
                                      "AND rowid > ?1 ORDER BY rowid LIMIT ?2");
    int64_t from = sql_cursor_parse(after);

    if (from < 0)
        return STORE_INVALID;
    if (!s)
        return STORE_ERROR;
    sql_bind_int64(s, 1, from);
    sql_bind_int64(s, 2, (int64_t)limit + 1);
    return sql_read_page(st, s, limit, &app_page, (void *)out, n, next_cursor);
}

enum store_status store_app_update(struct store *st, const struct store_ctx *ctx,
                                   const char *app_id, const struct store_app_patch *p,
                                   struct store_app *out)
{
    return store_app_update_within(st, ctx, app_id, p, NULL, out);
}

/* Lowers the keepAliveSeconds overrides of the App's live Sessions that are above its new
 * keep-alive quota to it: the quota bounds what its Sandboxes are kept for from their next
 * message on, whoever set the value before. */
static enum store_status sessions_keep_alive_bound(struct store *st, const char *app_id,
                                                   int64_t bound)
{
    struct sql_stmt *s = sql_stmt(st, "UPDATE sessions SET keep_alive_seconds = ?2, "
                                      "updated_at = ?3 WHERE app_id = ?1 AND state <> 'deleted' "
                                      "AND keep_alive_seconds > ?2");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, app_id);
    sql_bind_int64(s, 2, bound);
    sql_bind_int64(s, 3, clock_wall_ms());
    return sql_step_done(st, s);
}

enum store_status store_app_update_within(struct store *st, const struct store_ctx *ctx,
                                          const char *app_id, const struct store_app_patch *p,
                                          struct store_quotas *q, struct store_app *out)
{
    struct sql_stmt *s;
    enum store_status r;
    char data[512];
    size_t n = 0;

    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    if (p->image_digest &&
        (r = sql_image_check_ready(st, p->image_id, p->image_digest)) != STORE_OK)
        return sql_end(st, r);
    if (p->env_json && (r = sql_app_env_check(st, app_id, p->env_json, p->env_reserved,
                                              p->env_clash, p->env_clash_len)) != STORE_OK)
        return sql_end(st, r);
    s = sql_stmt(st, "UPDATE apps SET name = COALESCE(?2, name), "
                     "keep_alive_seconds = COALESCE(?3, keep_alive_seconds), "
                     "vcpu_count = COALESCE(?4, vcpu_count), "
                     "mem_size_mib = COALESCE(?5, mem_size_mib), driver = COALESCE(?6, driver), "
                     "image = COALESCE(?7, image), max_attempts = COALESCE(?8, max_attempts), "
                     "command = COALESCE(?9, command), updated_at = ?10, "
                     "limits = CASE WHEN CAST(?11 AS TEXT) IS NULL THEN limits "
                     "ELSE NULLIF(CAST(?11 AS TEXT), '') END, "
                     "image_id = CASE WHEN CAST(?13 AS TEXT) IS NULL THEN image_id "
                     "ELSE CAST(?12 AS TEXT) END, "
                     "image_digest = COALESCE(?13, image_digest), env = COALESCE(?14, env), "
                     "network = COALESCE(?15, network), "
                     /* ?16..?20: NULL keeps the quota, -1 sets it back to the host's default */
                     "quota_live_sandboxes = CASE WHEN CAST(?16 AS BIGINT) IS NULL THEN "
                     "quota_live_sandboxes ELSE NULLIF(CAST(?16 AS BIGINT), -1) END, "
                     "quota_sessions = CASE WHEN CAST(?17 AS BIGINT) IS NULL THEN "
                     "quota_sessions ELSE NULLIF(CAST(?17 AS BIGINT), -1) END, "
                     "quota_workspaces = CASE WHEN CAST(?18 AS BIGINT) IS NULL THEN "
                     "quota_workspaces ELSE NULLIF(CAST(?18 AS BIGINT), -1) END, "
                     "quota_workspace_mib = CASE WHEN CAST(?19 AS BIGINT) IS NULL THEN "
                     "quota_workspace_mib ELSE NULLIF(CAST(?19 AS BIGINT), -1) END, "
                     "quota_keep_alive_seconds = CASE WHEN CAST(?20 AS BIGINT) IS NULL THEN "
                     "quota_keep_alive_seconds ELSE NULLIF(CAST(?20 AS BIGINT), -1) END, "
                     "prestart = COALESCE(?21, prestart), "
                     "warm_pool = COALESCE(?22, warm_pool), "
                     "readiness = COALESCE(CAST(?23 AS TEXT), readiness), "
                     /* What its pre-started Sandboxes were started from changed: they are
                      * retired (docs/worker.md). The right-hand sides read the old row. */
                     "definition_rev = definition_rev + CASE WHEN "
                     "COALESCE(?4, vcpu_count) <> vcpu_count OR "
                     "COALESCE(?5, mem_size_mib) <> mem_size_mib OR "
                     "COALESCE(CAST(?6 AS TEXT), driver) <> driver OR "
                     "COALESCE(CAST(?9 AS TEXT), command) <> command OR "
                     "COALESCE(CAST(?13 AS TEXT), image_digest) <> image_digest OR "
                     "COALESCE(CAST(?14 AS TEXT), env) <> env THEN 1 ELSE 0 END "
                     "WHERE id = ?1 AND deleted_at IS NULL");
    if (!s)
        return sql_end(st, STORE_ERROR);
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
    sql_bind_int64(s, 10, clock_wall_ms());
    if (p->limits_json)
        sql_bind_text(s, 11, p->limits_json);
    if (p->image_digest) {
        sql_bind_text_or_null(s, 12, p->image_id);
        sql_bind_text(s, 13, p->image_digest);
    }
    if (p->env_json)
        sql_bind_text(s, 14, p->env_json);
    if (p->network_json)
        sql_bind_text(s, 15, p->network_json);
    for (int i = 0; p->quotas && i < STORE_QUOTA_COUNT; i++)
        if (p->quotas[i] != STORE_QUOTA_KEEP)
            sql_bind_int64(s, 16 + i, p->quotas[i] < 0 ? -1 : p->quotas[i]);
    if (p->prestart)
        sql_bind_int64(s, 21, *p->prestart ? 1 : 0);
    if (p->warm_pool)
        sql_bind_int64(s, 22, *p->warm_pool);
    if (p->readiness)
        sql_bind_text(s, 23, p->readiness);
    r = sql_step_done(st, s);
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
                                p->limits_json ? "limits" : NULL,
                                p->env_json ? "env" : NULL,
                                p->network_json ? "network" : NULL,
                                p->quotas ? "quotas" : NULL,
                                p->prestart ? "prestart" : NULL,
                                p->warm_pool ? "warmPool" : NULL,
                                p->readiness ? "readiness" : NULL};
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
        r = store_app_get(st, app_id, &fresh);
    /* Checked only when the patch changes the keep-alive or its quota: an App above a host
     * default lowered since keeps its other fields patchable. */
    bool keep_alive_changes = p->keep_alive_seconds ||
                              (p->quotas && p->quotas[STORE_QUOTA_KEEP_ALIVE] != STORE_QUOTA_KEEP);
    if (r == STORE_OK && q && keep_alive_changes) {
        int64_t bound = store_quota_effective(fresh.quotas[STORE_QUOTA_KEEP_ALIVE],
                                              q->defaults[STORE_QUOTA_KEEP_ALIVE]);
        if (bound > 0 && fresh.keep_alive_seconds > bound) {
            q->hit = STORE_QUOTA_KEEP_ALIVE;
            q->limit = bound;
            q->used = fresh.keep_alive_seconds;
            r = STORE_OVER_QUOTA;
        } else if (bound > 0 && p->quotas &&
                   p->quotas[STORE_QUOTA_KEEP_ALIVE] != STORE_QUOTA_KEEP) {
            r = sessions_keep_alive_bound(st, app_id, bound);
        }
    }
    r = sql_end(st, r);
    if (r == STORE_OK)
        *out = fresh;
    else
        store_app_clear(&fresh);
    return r;
}

enum store_status store_app_delete(struct store *st, const struct store_ctx *ctx,
                                   const char *app_id)
{
    struct sql_stmt *s;
    enum store_status r;
    int64_t live = 0, now = clock_wall_ms();
    struct store_app app;

    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    r = store_app_get(st, app_id, &app);
    if (r == STORE_OK)
        store_app_clear(&app);
    if (r == STORE_OK) {
        s = sql_stmt(st, "SELECT (SELECT count(*) FROM sessions WHERE app_id = ?1 "
                         "AND state <> 'deleted') + (SELECT count(*) FROM workspaces "
                         "WHERE app_id = ?1 AND deleted_at IS NULL)");
        if (!s)
            return sql_end(st, STORE_ERROR);
        sql_bind_text(s, 1, app_id);
        r = sql_step_int(st, s, &live);
        if (r == STORE_OK && live > 0)
            r = STORE_CONFLICT;
    }
    if (r == STORE_OK) {
        /* Revoke its keys one by one so that each revocation has its own event. */
        s = sql_stmt(st, "SELECT id FROM api_keys WHERE app_id = ?1 AND revoked_at IS NULL");
        if (!s)
            return sql_end(st, STORE_ERROR);
        sql_bind_text(s, 1, app_id);
        char(*ids)[STORE_ID_LEN] = NULL;
        size_t nids = 0;
        r = sql_read_ids(st, s, &ids, &nids);
        for (size_t i = 0; r == STORE_OK && i < nids; i++) {
            s = sql_stmt(st, "UPDATE api_keys SET revoked_at = ?2 WHERE id = ?1");
            if (!s) {
                r = STORE_ERROR;
                break;
            }
            sql_bind_text(s, 1, ids[i]);
            sql_bind_int64(s, 2, now);
            r = sql_step_done(st, s);
            if (r == STORE_OK)
                r = sql_event(st, ctx, "key.revoked", "key", ids[i], app_id, NULL,
                              "{\"reason\":\"app deleted\"}");
        }
        free(ids);
    }
    if (r == STORE_OK) {
        s = sql_stmt(st, "UPDATE apps SET deleted_at = ?2, updated_at = ?2 WHERE id = ?1");
        if (!s)
            return sql_end(st, STORE_ERROR);
        sql_bind_text(s, 1, app_id);
        sql_bind_int64(s, 2, now);
        r = sql_step_done(st, s);
    }
    if (r == STORE_OK)
        r = sql_event(st, ctx, "app.deleted", "app", app_id, app_id, NULL, NULL);
    return sql_end(st, r);
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
                                           sql_free_items};

enum store_status store_app_shapes(struct store *st, struct store_shape **out, size_t *n)
{
    struct sql_stmt *s =
        sql_stmt(st, "SELECT DISTINCT driver, image_digest, vcpu_count, mem_size_mib "
                     "FROM apps WHERE deleted_at IS NULL "
                     "ORDER BY driver, image_digest, vcpu_count, mem_size_mib");
    return sql_read_all(st, s, &shape_page, (void *)out, n);
}

enum store_status store_app_prestart_list(struct store *st, struct store_app **out, size_t *n)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT " APP_COLS " FROM apps a WHERE deleted_at IS NULL "
                                      "AND prestart = 1 AND warm_pool > 0 ORDER BY rowid");
    return sql_read_all(st, s, &app_page, (void *)out, n);
}
