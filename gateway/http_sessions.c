/*
 * http_sessions.c: /v1/sessions and /v1/sessions/{sessionId} (App keys only): create (or find by
 * name), list, get, patch (metadata, keep-alive override), delete.
 */
#include "app_quotas.h"
#include "gateway.h"
#include "store_sessions.h"
#include "json_input.h"
#include "json_text.h"
#include "render.h"
#include "reply.h"
#include "notify.h"

#include <stdio.h>
#include <stdlib.h>

static enum MHD_Result reply_session(struct request *r, unsigned status, struct store_session *s)
{
    char location[96];
    struct json_text body = {0};
    render_session_text(&body, s);
    store_session_clear(s);
    snprintf(location, sizeof location, "/v1/sessions/%s", s->id);
    return reply_json_text(r, status, &body, status == 201 ? "Location" : NULL, location);
}

enum MHD_Result http_session_create(struct request *r)
{
    static const char *const fields[] = {"name", "keepAliveSeconds", "workspaceId", "metadata",
                                         NULL};
    enum MHD_Result ret;
    struct input_error e;
    const char *name = NULL, *workspace_id = NULL;
    int64_t keep_alive = 0;
    bool keep_alive_null = false;
    json_t *metadata = NULL, *obj = request_json(r, fields, &ret);
    char *metadata_json = NULL;
    struct store_session s;
    bool created = false;

    if (!obj)
        return ret;
    if (input_string(obj, "name", 1, 128, true, &name, NULL, &e) < 0 ||
        input_int(obj, "keepAliveSeconds", 1, 86400, true, &keep_alive, &keep_alive_null, &e) < 0 ||
        input_string(obj, "workspaceId", 1, STORE_ID_LEN - 1, true, &workspace_id, NULL, &e) < 0 ||
        input_object(obj, "metadata", &metadata, &e) < 0) {
        json_decref(obj);
        return reply_input_error(r, &e);
    }
    if (keep_alive_null)
        keep_alive = 0;
    if (metadata)
        metadata_json = json_dumps(metadata, JSON_COMPACT);
    struct store_quotas q;
    app_quotas_init(&q, &r->gw->cfg);
    enum store_status st =
        store_session_create_within(r->gw->st, &r->ctx, r->app_id, name, keep_alive, workspace_id,
                                    metadata_json, &q, &s, &created);
    free(metadata_json);
    json_decref(obj);
    if (st == STORE_INVALID)
        return reply_problem(r, PROBLEM_NOT_FOUND, "workspaceId", "no such Workspace");
    if (st == STORE_OVER_QUOTA)
        return reply_over_quota(r, &q, q.hit == STORE_QUOTA_KEEP_ALIVE ? keep_alive : 1,
                                q.hit == STORE_QUOTA_KEEP_ALIVE ? "keepAliveSeconds" : NULL);
    if (st != STORE_OK)
        return reply_store_error(r, st, "Session");
    return reply_session(r, created ? 201 : 200, &s);
}

enum MHD_Result http_session_list(struct request *r)
{
    enum MHD_Result ret;
    size_t limit, n;
    const char *cursor;
    char next[STORE_CURSOR_LEN];
    struct store_session *items;
    if (!paging_params(r, &limit, &cursor, &ret))
        return ret;
    enum store_status s = store_session_list(r->gw->st, r->app_id, cursor, limit, &items, &n, next);
    if (s != STORE_OK)
        return reply_store_error(r, s, "Session list");
    struct json_text page = {0};
    render_page_begin(&page);
    for (size_t i = 0; i < n; i++) {
        render_page_item(&page, i);
        render_session_text(&page, &items[i]);
    }
    render_page_end(&page, next);
    store_session_list_free(items, n);
    return reply_json_text(r, 200, &page, NULL, NULL);
}

enum MHD_Result http_session_get(struct request *r)
{
    struct store_session s;
    enum store_status st = store_session_get(r->gw->st, r->app_id, r->params[0], &s);
    if (st != STORE_OK)
        return reply_store_error(r, st, "Session");
    return reply_session(r, 200, &s);
}

enum MHD_Result http_session_patch(struct request *r)
{
    static const char *const fields[] = {"metadata", "keepAliveSeconds", NULL};
    enum MHD_Result ret;
    struct input_error e;
    json_t *metadata = NULL, *obj = request_json(r, fields, &ret);
    int64_t keep_alive = 0;
    bool keep_alive_null = false;
    int has_keep_alive;
    struct store_session s;

    if (!obj)
        return ret;
    if (input_object(obj, "metadata", &metadata, &e) < 0 ||
        (has_keep_alive = input_int(obj, "keepAliveSeconds", 1, 86400, true, &keep_alive,
                                    &keep_alive_null, &e)) < 0) {
        json_decref(obj);
        return reply_input_error(r, &e);
    }
    if (keep_alive_null)
        keep_alive = 0;
    char *metadata_json = metadata ? json_dumps(metadata, JSON_COMPACT) : NULL;
    struct store_session_patch p = {.metadata_json = metadata_json,
                                    .keep_alive_seconds = has_keep_alive > 0 ? &keep_alive : NULL};
    struct store_quotas q;
    app_quotas_init(&q, &r->gw->cfg);
    enum store_status st =
        store_session_update_within(r->gw->st, &r->ctx, r->app_id, r->params[0], &p, &q, &s);
    free(metadata_json);
    json_decref(obj);
    if (st == STORE_OVER_QUOTA)
        return reply_over_quota(r, &q, keep_alive, "keepAliveSeconds");
    if (st != STORE_OK)
        return reply_store_error(r, st, "Session");
    return reply_session(r, 200, &s);
}

enum MHD_Result http_session_delete(struct request *r)
{
    enum store_status st = store_session_delete(r->gw->st, &r->ctx, r->app_id, r->params[0]);
    if (st != STORE_OK)
        return reply_store_error(r, st, "Session");
    /* Its Sandbox, if any, is terminated by the owning worker: wake the workers now. */
    notify_send(r->gw->workers, "stop");
    return reply_empty(r, 204);
}
