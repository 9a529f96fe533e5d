/*
 * http_webhooks.c: /v1/apps/{appId}/webhooks (admin only): an App's webhook endpoints (create,
 * with its signing secret shown once; list; get; delete) and each endpoint's deliveries with
 * their attempts. The URL policy (http(s), public addresses unless webhook_allow_private) is
 * common/webhook_target.h; the worker delivers (worker/delivery/webhook_sender.c).
 */
#include "gateway.h"
#include "store_apps.h"
#include "store_webhooks.h"
#include "json_input.h"
#include "render.h"
#include "reply.h"
#include "webhook_sign.h"
#include "webhook_target.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_EVENT_TYPES 64

/* An event type an endpoint may ask for: "*", "<object>.*" or "<object>.<verb>" (lowercase
 * letters and '_'). */
static bool event_type_ok(const char *t)
{
    if (strcmp(t, "*") == 0)
        return true;
    const char *dot = strchr(t, '.');
    if (!dot || dot == t || strchr(dot + 1, '.'))
        return false;
    for (const char *p = t; p < dot; p++)
        if (!islower((unsigned char)*p) && *p != '_')
            return false;
    if (strcmp(dot + 1, "*") == 0)
        return true;
    if (!dot[1])
        return false;
    for (const char *p = dot + 1; *p; p++)
        if (!islower((unsigned char)*p) && *p != '_')
            return false;
    return true;
}

static json_t *render_webhook(const struct store_webhook *w)
{
    json_t *types = w->event_types_json ? json_loads(w->event_types_json, 0, NULL) : NULL;
    return json_pack("{s:s, s:s, s:s, s:o, s:s, s:I, s:o, s:o}", "id", w->id, "appId", w->app_id,
                     "url", w->url, "eventTypes", types ? types : json_array(), "state", w->state,
                     "consecutiveFailures", (json_int_t)w->consecutive_failures, "createdAt",
                     render_time(w->created_at), "updatedAt", render_time(w->updated_at));
}

static json_t *nullable_int(int64_t v)
{
    return v ? json_integer(v) : json_null();
}

static json_t *nullable_str(const char *s)
{
    return s && *s ? json_string(s) : json_null();
}

static json_t *render_delivery(const struct store_webhook_delivery *d)
{
    json_t *log = json_array();
    for (size_t i = 0; i < d->n_log; i++) {
        const struct store_webhook_attempt *a = &d->log[i];
        json_array_append_new(
            log, json_pack("{s:I, s:o, s:o, s:o, s:I}", "attempt", (json_int_t)a->attempt, "at",
                           render_time(a->at), "status", nullable_int(a->status), "error",
                           nullable_str(a->error), "durationMs", (json_int_t)a->duration_ms));
    }
    bool pending = strcmp(d->state, "pending") == 0;
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:I, s:o, s:o, s:o, s:o, s:o, s:o}", "id", d->id,
                     "webhookId", d->webhook_id, "eventId", (json_int_t)d->event_id, "kind",
                     d->kind, "state", d->state, "attempts", (json_int_t)d->attempts,
                     "nextAttemptAt", pending ? render_time(d->next_attempt_at) : json_null(),
                     "lastStatus", nullable_int(d->last_status), "lastError",
                     nullable_str(d->last_error), "createdAt", render_time(d->created_at),
                     "finishedAt", render_time(d->finished_at), "attemptLog", log);
}

enum MHD_Result http_webhook_create(struct request *r)
{
    static const char *const fields[] = {"url", "eventTypes", NULL};
    enum MHD_Result ret;
    struct input_error e;
    const char *url = NULL;
    char *types_json = NULL, secret[WEBHOOK_SECRET_LEN], why[512];
    json_t *obj = request_json(r, fields, &ret);
    if (!obj)
        return ret;
    int have = input_string(obj, "url", 1, STORE_URL_LEN - 1, false, &url, NULL, &e);
    if (have == 0) {
        json_decref(obj);
        return reply_problem(r, PROBLEM_INVALID_FIELD, "url", "field \"url\" is required");
    }
    if (have < 0) {
        json_decref(obj);
        return reply_input_error(r, &e);
    }
    have = input_string_array(obj, "eventTypes", MAX_EVENT_TYPES, 64, &types_json, &e);
    if (have <= 0) {
        json_decref(obj);
        if (have == 0)
            return reply_problem(r, PROBLEM_INVALID_FIELD, "eventTypes",
                                 "field \"eventTypes\" is required: a list of event kinds");
        return reply_input_error(r, &e);
    }
    json_t *types = json_object_get(obj, "eventTypes");
    size_t i;
    json_t *t;
    json_array_foreach(types, i, t)
    {
        if (!event_type_ok(json_string_value(t))) {
            enum MHD_Result bad = reply_problem(
                r, PROBLEM_INVALID_VALUE, "eventTypes",
                "\"%.64s\" is not an event type: use a kind (message.completed), a prefix "
                "(sandbox.*) or *",
                json_string_value(t));
            free(types_json);
            json_decref(obj);
            return bad;
        }
    }
    if (webhook_url_check(url, r->gw->cfg.webhook_allow_private != 0, why, sizeof why) != 0) {
        enum MHD_Result bad = reply_problem(r, PROBLEM_INVALID_VALUE, "url", "%s", why);
        free(types_json);
        json_decref(obj);
        return bad;
    }
    if (webhook_secret_new(secret) != 0) {
        free(types_json);
        json_decref(obj);
        return reply_problem(r, PROBLEM_INTERNAL, NULL, "the random number generator failed");
    }
    struct store_webhook w;
    enum store_status s =
        store_webhook_create(r->gw->st, &r->ctx, r->params[0], url, types_json, secret, &w);
    free(types_json);
    json_decref(obj);
    memset(secret, 0, sizeof secret);
    if (s != STORE_OK)
        return reply_store_error(r, s, "App");
    json_t *body = render_webhook(&w);
    json_object_set_new(body, "secret", json_string(w.secret));
    char location[160];
    snprintf(location, sizeof location, "/v1/apps/%s/webhooks/%s", w.app_id, w.id);
    memset(w.secret, 0, sizeof w.secret);
    store_webhook_clear(&w);
    return reply_json_header(r, 201, body, "Location", location);
}

enum MHD_Result http_webhook_list(struct request *r)
{
    struct store_app a;
    enum store_status s = store_app_get(r->gw->st, r->params[0], &a);
    if (s != STORE_OK)
        return reply_store_error(r, s, "App");
    store_app_clear(&a);
    struct store_webhook *items;
    size_t n;
    s = store_webhook_list(r->gw->st, r->params[0], &items, &n);
    if (s != STORE_OK)
        return reply_store_error(r, s, "App");
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, render_webhook(&items[i]));
    store_webhook_list_free(items, n);
    return reply_json(r, 200, render_page(arr, ""));
}

enum MHD_Result http_webhook_get(struct request *r)
{
    struct store_webhook w;
    enum store_status s = store_webhook_get(r->gw->st, r->params[0], r->params[1], &w);
    if (s != STORE_OK)
        return reply_store_error(r, s, "webhook");
    json_t *body = render_webhook(&w);
    store_webhook_clear(&w);
    return reply_json(r, 200, body);
}

enum MHD_Result http_webhook_delete(struct request *r)
{
    enum store_status s = store_webhook_delete(r->gw->st, &r->ctx, r->params[0], r->params[1]);
    if (s != STORE_OK)
        return reply_store_error(r, s, "webhook");
    return reply_empty(r, 204);
}

enum MHD_Result http_webhook_deliveries(struct request *r)
{
    enum MHD_Result ret;
    size_t limit, n;
    const char *cursor;
    char next[STORE_CURSOR_LEN] = "";
    struct store_webhook_delivery *items;
    if (!paging_params(r, &limit, &cursor, &ret))
        return ret;
    int64_t after = *cursor ? strtoll(cursor, NULL, 10) : 0;
    enum store_status s = store_webhook_delivery_list(r->gw->st, r->params[0], r->params[1], after,
                                                      limit, &items, &n, next);
    if (s != STORE_OK)
        return reply_store_error(r, s, "webhook");
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, render_delivery(&items[i]));
    store_webhook_delivery_list_free(items, n);
    return reply_json(r, 200, render_page(arr, next));
}
