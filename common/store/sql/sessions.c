/*
 * sessions.c: the sessions table: a Session's life as the gateway sees it (created, optionally by
 * a name that makes creation idempotent, read, listed, patched, deleted: its unfinished messages
 * fail and its data is scrubbed) and the steps the workers take on it outside the queue (its
 * keep-alive deadline; pointing it at a Sandbox; back to idle when its Sandbox ends). The claim
 * that makes an idle Session activating is the queue's (queue.c); running it is the Sandbox's
 * (sandboxes.c). No hidden state.
 */
#include "id.h"
#include "clock.h"
#include "json_merge_patch.h"
#include "store_sql.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#define SES_COLS "s.rowid, " SQL_SESSION_COLS " FROM sessions s JOIN apps a ON a.id = s.app_id "

static int64_t session_from_row(struct sql_stmt *s, struct store_session *x)
{
    sql_session_from_row(s, 1, x);
    return sql_col_int64(s, 0);
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

/* What a Session holds of stored text, for the lists' byte bound (STORE_PAGE_BYTES). */
static size_t session_page_bytes(const void *item)
{
    const struct store_session *x = item;
    return x->metadata_json ? strlen(x->metadata_json) : 0;
}

enum store_status store_session_get(struct store *st, const char *app_id, const char *session_id,
                                    struct store_session *out)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT " SES_COLS "WHERE s.id = ?1 AND (?2 = '' OR "
                                      "s.app_id = ?2) AND s.state <> 'deleted'");
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, session_id);
    sql_bind_app(s, 2, app_id);
    return sql_read_one(st, s, &session_page, out);
}

/* The live Session of the App with this name, if any. */
static enum store_status session_by_name(struct store *st, const char *app_id, const char *name,
                                         struct store_session *out)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT " SES_COLS "WHERE s.app_id = ?1 AND s.name = ?2 "
                                      "AND s.state <> 'deleted'");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, app_id);
    sql_bind_text(s, 2, name);
    return sql_read_one(st, s, &session_page, out);
}

enum store_status store_session_create(struct store *st, const struct store_ctx *ctx,
                                       const char *app_id, const char *name,
                                       int64_t keep_alive_seconds, const char *workspace_id,
                                       const char *metadata_json, struct store_session *out,
                                       bool *created)
{
    return store_session_create_within(st, ctx, app_id, name, keep_alive_seconds, workspace_id,
                                       metadata_json, NULL, out, created);
}

/* The keep-alive quota, then (for a new Session) the Sessions quota, read in the caller's
 * transaction: a value above its bound is refused before a count. */
static enum store_status session_quotas_in_tx(struct store *st, const char *app_id,
                                              int64_t keep_alive_seconds, int64_t adding,
                                              struct store_quotas *q)
{
    struct store_app_usage u;
    enum store_status r = sql_app_usage_in_tx(st, app_id, &u);
    if (r != STORE_OK)
        return r;
    if (keep_alive_seconds > 0 && sql_quota_over(q, &u, STORE_QUOTA_KEEP_ALIVE, keep_alive_seconds))
        return STORE_OVER_QUOTA;
    if (adding > 0 && sql_quota_over(q, &u, STORE_QUOTA_SESSIONS, adding))
        return STORE_OVER_QUOTA;
    return STORE_OK;
}

enum store_status store_session_create_within(struct store *st, const struct store_ctx *ctx,
                                              const char *app_id, const char *name,
                                              int64_t keep_alive_seconds, const char *workspace_id,
                                              const char *metadata_json, struct store_quotas *q,
                                              struct store_session *out, bool *created)
{
    struct sql_stmt *s;
    enum store_status r;
    char id[STORE_ID_LEN], data[STORE_ID_LEN + 32];
    int64_t now = clock_wall_ms();

    if (id_new("ses", id, sizeof id) != 0)
        return STORE_ERROR;
    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    r = sql_app_exists(st, app_id);
    if (r == STORE_OK && name && *name) {
        r = session_by_name(st, app_id, name, out);
        if (r == STORE_OK) {
            *created = false;
            return sql_end(st, STORE_OK);
        }
        if (r == STORE_NOT_FOUND)
            r = STORE_OK;
    }
    if (r == STORE_OK && workspace_id && *workspace_id) {
        struct store_workspace w;
        r = store_workspace_get(st, app_id, workspace_id, &w);
        if (r == STORE_NOT_FOUND)
            r = STORE_INVALID; /* the caller names the workspaceId field */
    }
    if (r == STORE_OK && q)
        r = session_quotas_in_tx(st, app_id, keep_alive_seconds, 1, q);
    if (r == STORE_OK) {
        s = sql_stmt(st, "INSERT INTO sessions (id, app_id, name, keep_alive_seconds, "
                         "workspace_id, metadata, created_at, updated_at) "
                         "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)");
        if (!s)
            return sql_end(st, STORE_ERROR);
        sql_bind_text(s, 1, id);
        sql_bind_text(s, 2, app_id);
        sql_bind_text_or_null(s, 3, name);
        if (keep_alive_seconds > 0)
            sql_bind_int64(s, 4, keep_alive_seconds);
        sql_bind_text_or_null(s, 5, workspace_id);
        sql_bind_text(s, 6, metadata_json ? metadata_json : "{}");
        sql_bind_int64(s, 7, now);
        r = sql_step_done(st, s);
    }
    if (r == STORE_OK) {
        if (workspace_id && *workspace_id)
            snprintf(data, sizeof data, "{\"workspaceId\":\"%s\"}", workspace_id);
        r = sql_event(st, ctx, "session.created", "session", id, app_id, id,
                      workspace_id && *workspace_id ? data : NULL);
    }
    struct store_session fresh = {0};
    if (r == STORE_OK)
        r = store_session_get(st, app_id, id, &fresh);
    r = sql_end(st, r);
    if (r == STORE_OK) {
        *out = fresh;
        *created = true;
    } else {
        store_session_clear(&fresh);
    }
    return r;
}

enum store_status store_session_list(struct store *st, const char *app_id, const char *after,
                                     size_t limit, struct store_session **out, size_t *n,
                                     char *next_cursor)
{
    return sql_app_list_page_bounded(st,
                                     "SELECT " SES_COLS "WHERE (?1 = '' OR s.app_id = ?1) "
                                     "AND s.state <> 'deleted' AND s.rowid > ?2 "
                                     "ORDER BY s.rowid LIMIT ?3",
                                     app_id, after, limit, &session_page, session_page_bytes,
                                     (void *)out, n, next_cursor);
}

/* The metadata current_json with the merge patch patch_json applied, as new compact JSON text in
 * *out: STORE_INVALID when the result is not an object or is over max_bytes. */
static enum store_status metadata_merge(const char *current_json, const char *patch_json,
                                        size_t max_bytes, char **out)
{
    json_t *cur = json_loads(current_json ? current_json : "{}", 0, NULL);
    json_t *patch = json_loads(patch_json, JSON_DECODE_ANY, NULL);
    json_t *merged = cur && patch ? json_merge_patch(cur, patch) : NULL;
    enum store_status r = STORE_ERROR;
    if (merged && !json_is_object(merged))
        r = STORE_INVALID;
    else if (merged && (*out = json_dumps(merged, JSON_COMPACT)))
        r = strlen(*out) <= max_bytes ? STORE_OK : STORE_INVALID;
    if (r != STORE_OK) {
        free(*out);
        *out = NULL;
    }
    json_decref(cur);
    json_decref(patch);
    json_decref(merged);
    return r;
}

enum store_status store_session_update(struct store *st, const struct store_ctx *ctx,
                                       const char *app_id, const char *session_id,
                                       const struct store_session_patch *p,
                                       struct store_session *out)
{
    return store_session_update_within(st, ctx, app_id, session_id, p, NULL, out);
}

enum store_status store_session_update_within(struct store *st, const struct store_ctx *ctx,
                                              const char *app_id, const char *session_id,
                                              const struct store_session_patch *p,
                                              struct store_quotas *q, struct store_session *out)
{
    struct sql_stmt *s;
    enum store_status r;
    struct store_session cur = {0};
    char data[128];

    char *merged = NULL;
    const char *metadata = p->metadata_json;

    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    r = store_session_get(st, app_id, session_id, &cur);
    /* A merge patch reads the metadata in this transaction, so concurrent patches of different
     * members both land. */
    if (r == STORE_OK && p->metadata_merge_json) {
        r = metadata_merge(cur.metadata_json, p->metadata_merge_json, p->metadata_max_bytes,
                           &merged);
        metadata = merged;
    }
    store_session_clear(&cur);
    if (r == STORE_OK && q && p->keep_alive_seconds && *p->keep_alive_seconds > 0)
        r = session_quotas_in_tx(st, cur.app_id, *p->keep_alive_seconds, 0, q);
    if (r == STORE_OK) {
        /* ?3: 1 = set the override to ?4 (NULL clears it), 0 = keep it. (`<> 0`: PostgreSQL
         * takes no integer as a condition.) */
        s = sql_stmt(st, "UPDATE sessions SET metadata = COALESCE(?2, metadata), "
                         "keep_alive_seconds = CASE WHEN ?3 <> 0 THEN ?4 "
                         "ELSE keep_alive_seconds END, "
                         "updated_at = ?5 WHERE id = ?1");
        if (!s) {
            free(merged);
            return sql_end(st, STORE_ERROR);
        }
        sql_bind_text(s, 1, session_id);
        if (metadata)
            sql_bind_text(s, 2, metadata);
        sql_bind_int64(s, 3, p->keep_alive_seconds != NULL);
        if (p->keep_alive_seconds && *p->keep_alive_seconds > 0)
            sql_bind_int64(s, 4, *p->keep_alive_seconds);
        sql_bind_int64(s, 5, clock_wall_ms());
        r = sql_step_done(st, s);
    }
    if (r == STORE_OK) {
        snprintf(data, sizeof data, "{\"fields\":[%s%s%s]}", metadata ? "\"metadata\"" : "",
                 metadata && p->keep_alive_seconds ? "," : "",
                 p->keep_alive_seconds ? "\"keepAliveSeconds\"" : "");
        r = sql_event(st, ctx, "session.updated", "session", session_id, cur.app_id, session_id,
                      data);
    }
    struct store_session fresh = {0};
    if (r == STORE_OK)
        r = store_session_get(st, app_id, session_id, &fresh);
    r = sql_end(st, r);
    free(merged);
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
    enum store_status r;

    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, session_id);
    r = sql_read_ids(st, s, &ids, &n);
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
        r = sql_step_done(st, s);
        if (r == STORE_OK)
            r = sql_event(st, ctx, "message.failed", "message", ids[i], app_id, session_id,
                          "{\"reason\":\"session deleted\"}");
    }
    free(ids);
    return r;
}

enum store_status store_session_delete(struct store *st, const struct store_ctx *ctx,
                                       const char *app_id, const char *session_id)
{
    struct sql_stmt *s;
    enum store_status r;
    struct store_session cur = {0};
    int64_t now = clock_wall_ms();

    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    r = store_session_get(st, app_id, session_id, &cur);
    store_session_clear(&cur);
    if (r == STORE_OK)
        r = fail_unfinished_messages(st, ctx, cur.app_id, session_id, now);
    if (r == STORE_OK) {
        /* Only the audit trail keeps what happened: the caller's data (bodies, replies,
         * metadata, the client's name) is scrubbed now, not at some later purge. */
        s = sql_stmt(st, "UPDATE messages SET body = 'null', reply = NULL, updated_at = ?2 "
                         "WHERE session_id = ?1");
        if (!s)
            return sql_end(st, STORE_ERROR);
        sql_bind_text(s, 1, session_id);
        sql_bind_int64(s, 2, now);
        r = sql_step_done(st, s);
    }
    if (r == STORE_OK) {
        /* The agent's partial output goes with the replies (migration 0009_streaming). */
        s = sql_stmt(st, "DELETE FROM message_chunks WHERE message_id IN "
                         "(SELECT id FROM messages WHERE session_id = ?1)");
        if (!s)
            return sql_end(st, STORE_ERROR);
        sql_bind_text(s, 1, session_id);
        r = sql_step_done(st, s);
    }
    if (r == STORE_OK) {
        s = sql_stmt(st, "UPDATE sessions SET state = 'deleted', name = NULL, metadata = '{}', "
                         "stop_requested_at = ?2, deleted_at = ?2, updated_at = ?2 WHERE id = ?1");
        if (!s)
            return sql_end(st, STORE_ERROR);
        sql_bind_text(s, 1, session_id);
        sql_bind_int64(s, 2, now);
        r = sql_step_done(st, s);
    }
    if (r == STORE_OK)
        r = sql_event(st, ctx, "session.deleted", "session", session_id, cur.app_id, session_id,
                      NULL);
    return sql_end(st, r);
}

/* ---- what the workers change ---- */

enum store_status sql_session_to_idle_in_tx(struct store *st, const struct store_ctx *ctx,
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
    sql_bind_int64(s, 2, clock_wall_ms());
    rc = sql_step_done(st, s);
    if (rc != STORE_OK || sql_changes(st) == 0)
        return rc;
    rc = sql_event_json(
        st, ctx, "session.idle", "session", session_id, app_id, session_id,
        json_pack("{s:s?}", "sandboxId", sandbox_id && *sandbox_id ? sandbox_id : NULL));
    return rc;
}

enum store_status store_session_touch(struct store *st, const char *session_id, int64_t expires_at)
{
    struct sql_stmt *s = sql_stmt(st, "UPDATE sessions SET expires_at = ?2, last_activity_at = ?3, "
                                      "updated_at = ?3 WHERE id = ?1");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, session_id);
    sql_bind_int64(s, 2, expires_at);
    sql_bind_int64(s, 3, clock_wall_ms());
    return sql_step_done(st, s);
}

enum store_status sql_session_point_at_in_tx(struct store *st, const char *session_id,
                                             const char *sandbox_id, const char *worker_id)
{
    struct sql_stmt *s = sql_stmt(st, "UPDATE sessions SET sandbox_id = ?2, state = 'activating', "
                                      "updated_at = ?4 WHERE id = ?1 AND worker_id = ?3 "
                                      "AND state <> 'deleted'");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, session_id);
    sql_bind_text(s, 2, sandbox_id);
    sql_bind_text(s, 3, worker_id);
    sql_bind_int64(s, 4, clock_wall_ms());
    return sql_step_change(st, s, STORE_CONFLICT); /* deleted meanwhile, or no longer ours */
}
