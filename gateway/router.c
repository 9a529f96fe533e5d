/*
 * router.c: the one table that maps method + path template to a handler, and the MHD access
 * handler that runs every request through the same steps: request id, route match (404/405),
 * auth (401/403/429), content type and size (415/413), body collection, then the handler.
 */
#include "auth.h"
#include "gateway.h"
#include "json_input.h"
#include "log.h"
#include "longpoll.h"
#include "metrics.h"
#include "notify.h"
#include "reply.h"
#include "sse.h"
#include "id.h"
#include "timefmt.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Bytes of an over-limit chunked body read and dropped before the 413 (see below). */
#define BODY_DISCARD_MAX (4u << 20)

const struct route gateway_routes[] = {
    {"GET", "/healthz", AUTH_NONE, BODY_NONE, http_healthz},
    {"GET", "/metrics", AUTH_NONE, BODY_NONE, http_metrics},
    {"GET", "/.well-known/jwks.json", AUTH_NONE, BODY_NONE, http_jwks},
    {"GET", "/.well-known/openid-configuration", AUTH_NONE, BODY_NONE, http_openid_configuration},
    {"POST", "/v1/apps", AUTH_ADMIN, BODY_REQUIRED, http_app_create},
    {"GET", "/v1/apps", AUTH_ADMIN, BODY_NONE, http_app_list},
    {"GET", "/v1/apps/{appId}", AUTH_ADMIN, BODY_NONE, http_app_get},
    {"PATCH", "/v1/apps/{appId}", AUTH_ADMIN, BODY_REQUIRED, http_app_patch},
    {"DELETE", "/v1/apps/{appId}", AUTH_ADMIN, BODY_NONE, http_app_delete},
    {"POST", "/v1/apps/{appId}/keys", AUTH_ADMIN, BODY_OPTIONAL, http_key_create},
    {"GET", "/v1/apps/{appId}/keys", AUTH_ADMIN, BODY_NONE, http_key_list},
    {"DELETE", "/v1/apps/{appId}/keys/{keyId}", AUTH_ADMIN, BODY_NONE, http_key_delete},
    {"POST", "/v1/apps/{appId}/webhooks", AUTH_ADMIN, BODY_REQUIRED, http_webhook_create},
    {"GET", "/v1/apps/{appId}/webhooks", AUTH_ADMIN, BODY_NONE, http_webhook_list},
    {"GET", "/v1/apps/{appId}/webhooks/{webhookId}", AUTH_ADMIN, BODY_NONE, http_webhook_get},
    {"DELETE", "/v1/apps/{appId}/webhooks/{webhookId}", AUTH_ADMIN, BODY_NONE, http_webhook_delete},
    {"GET", "/v1/apps/{appId}/webhooks/{webhookId}/deliveries", AUTH_ADMIN, BODY_NONE,
     http_webhook_deliveries},
    {"GET", "/v1/apps/{appId}/secrets", AUTH_ADMIN, BODY_NONE, http_secret_list},
    {"PUT", "/v1/apps/{appId}/secrets/{secretName}", AUTH_ADMIN, BODY_REQUIRED, http_secret_put},
    {"GET", "/v1/apps/{appId}/secrets/{secretName}", AUTH_ADMIN, BODY_NONE, http_secret_get},
    {"DELETE", "/v1/apps/{appId}/secrets/{secretName}", AUTH_ADMIN, BODY_NONE, http_secret_delete},
    {"POST", "/v1/sessions", AUTH_KEY, BODY_OPTIONAL, http_session_create},
    {"GET", "/v1/sessions", AUTH_KEY, BODY_NONE, http_session_list},
    {"GET", "/v1/sessions/{sessionId}", AUTH_KEY, BODY_NONE, http_session_get},
    {"PATCH", "/v1/sessions/{sessionId}", AUTH_KEY, BODY_REQUIRED, http_session_patch},
    {"DELETE", "/v1/sessions/{sessionId}", AUTH_KEY, BODY_NONE, http_session_delete},
    {"POST", "/v1/sessions/{sessionId}/messages", AUTH_KEY, BODY_REQUIRED, http_message_create},
    {"GET", "/v1/sessions/{sessionId}/messages", AUTH_KEY, BODY_NONE, http_message_list},
    {"GET", "/v1/sessions/{sessionId}/messages/{messageId}", AUTH_KEY, BODY_NONE, http_message_get},
    {"GET", "/v1/sessions/{sessionId}/messages/{messageId}/stream", AUTH_KEY, BODY_NONE,
     http_message_stream},
    {"GET", "/v1/sandboxes", AUTH_EITHER, BODY_NONE, http_sandbox_list},
    {"GET", "/v1/sandboxes/{sandboxId}", AUTH_EITHER, BODY_NONE, http_sandbox_get},
    {"DELETE", "/v1/sandboxes/{sandboxId}", AUTH_EITHER, BODY_NONE, http_sandbox_delete},
    {"GET", "/v1/pool", AUTH_EITHER, BODY_NONE, http_pool_get},
    {"POST", "/v1/workspaces", AUTH_KEY, BODY_OPTIONAL, http_workspace_create},
    {"GET", "/v1/workspaces", AUTH_KEY, BODY_NONE, http_workspace_list},
    {"GET", "/v1/workspaces/{workspaceId}", AUTH_KEY, BODY_NONE, http_workspace_get},
    {"DELETE", "/v1/workspaces/{workspaceId}", AUTH_KEY, BODY_NONE, http_workspace_delete},
    {"GET", "/v1/events", AUTH_EITHER, BODY_NONE, http_event_list},
    {"POST", "/v1/images", AUTH_ADMIN, BODY_UPLOAD, http_image_create},
    {"GET", "/v1/images", AUTH_ADMIN, BODY_NONE, http_image_list},
    {"GET", "/v1/images/{imageId}", AUTH_ADMIN, BODY_NONE, http_image_get},
    {"DELETE", "/v1/images/{imageId}", AUTH_ADMIN, BODY_NONE, http_image_delete},
};
const int gateway_route_count = (int)(sizeof gateway_routes / sizeof gateway_routes[0]);

/* Whether a path segment can be an id at all: ids are ASCII letters, digits and '_' (with '-' and
 * '.' allowed for names a caller may choose). Anything else (bytes that are not even UTF-8, which
 * PostgreSQL refuses as text) names no object. */
static bool id_chars_ok(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-' && s[i] != '.')
            return false;
    return true;
}

/* Matches path against a template; writes the {parameters}. A parameter is one non-empty
 * segment that fits an id buffer and has only id characters (anything else cannot be an id: no
 * match, so 404). */
static bool path_matches(const char *tmpl, const char *path, char params[][ROUTE_PARAM_LEN])
{
    int np = 0;
    while (*tmpl && *path) {
        if (*tmpl == '{') {
            const char *end = strchr(path, '/');
            size_t len = end ? (size_t)(end - path) : strlen(path);
            const char *close = strchr(tmpl, '}');
            bool is_name = close - tmpl > 5 && strncmp(close - 4, "Name", 4) == 0;
            if (len == 0 || len >= (is_name ? ROUTE_PARAM_LEN : STORE_ID_LEN) ||
                np >= ROUTE_MAX_PARAMS || !id_chars_ok(path, len))
                return false;
            memcpy(params[np], path, len);
            params[np++][len] = '\0';
            path += len;
            tmpl = strchr(tmpl, '}') + 1;
            continue;
        }
        if (*tmpl != *path)
            return false;
        tmpl++;
        path++;
    }
    return *tmpl == '\0' && *path == '\0';
}

int gateway_route_match(const char *method, const char *path,
                        char params[ROUTE_MAX_PARAMS][ROUTE_PARAM_LEN], char *allow,
                        size_t allowlen, int *path_route)
{
    char found[ROUTE_MAX_PARAMS][ROUTE_PARAM_LEN];
    size_t n = 0;
    allow[0] = '\0';
    *path_route = -1;
    for (int i = 0; i < gateway_route_count; i++) {
        const struct route *rt = &gateway_routes[i];
        if (!path_matches(rt->path, path, found))
            continue;
        if (strcmp(rt->method, method) == 0) {
            memcpy(params, found, sizeof found);
            return i;
        }
        if (*path_route < 0)
            *path_route = i;
        int w = snprintf(allow + n, allowlen - n, "%s%s", n ? ", " : "", rt->method);
        if (w > 0)
            n = n + (size_t)w < allowlen ? n + (size_t)w : allowlen - 1;
    }
    return -1;
}

static void request_id_init(struct request *r)
{
    const char *given = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Request-Id");
    if (input_request_id_ok(given))
        snprintf(r->request_id, sizeof r->request_id, "%s", given);
    else if (id_new("req", r->request_id, sizeof r->request_id) != 0)
        snprintf(r->request_id, sizeof r->request_id, "req_unknown");
}

static bool is_json_content_type(const char *ct)
{
    if (!ct)
        return false;
    while (*ct == ' ')
        ct++;
    if (strncasecmp(ct, "application/json", 16) != 0)
        return false;
    ct += 16;
    while (*ct == ' ')
        ct++;
    return *ct == '\0' || *ct == ';';
}

/* The checks made once the headers are in, before any body is read. Returns true to go on. */
static bool request_admit(struct request *r, enum MHD_Result *ret)
{
    char allow[128];
    const struct gateway *gw = r->gw;

    int path_route;
    r->route_index =
        gateway_route_match(r->method, r->path, r->params, allow, sizeof allow, &path_route);
    if (r->route_index < 0) {
        /* A 405 is counted under the template of the path it hit (r->route stays NULL). */
        r->route_index = path_route;
        if (allow[0])
            *ret = reply_problem_header(r, PROBLEM_METHOD_NOT_ALLOWED, NULL, "Allow", allow,
                                        "%s is not allowed on %s (allowed: %s)", r->method, r->path,
                                        allow);
        else
            *ret = reply_problem(r, PROBLEM_NOT_FOUND, NULL, "no route for %s", r->path);
        return false;
    }
    r->route = &gateway_routes[r->route_index];
    if (gw->metrics_daemon) {
        /* With metrics_listen, /metrics is served there (beside /healthz) and only there. */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_DAEMON);
        bool on_metrics = ci && ci->daemon == gw->metrics_daemon;
        bool is_metrics = r->route->handler == http_metrics;
        if (on_metrics ? !is_metrics && r->route->handler != http_healthz : is_metrics) {
            *ret = reply_problem(r, PROBLEM_NOT_FOUND, NULL, "no route for %s on this listener",
                                 r->path);
            return false;
        }
    }
    if (r->route->auth != AUTH_NONE && !auth_request(r, ret))
        return false;
    if (r->route->body == BODY_NONE)
        return true;

    const char *cl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Length");
    const char *te = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Transfer-Encoding");
    const char *ct = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Type");
    long long length = cl ? atoll(cl) : 0;
    r->body_present = length > 0 || (te && strcasecmp(te, "identity") != 0);
    /* An image archive is streamed to disk, under its own limit (http_images.c). */
    if (r->route->body == BODY_UPLOAD && http_image_is_upload_type(ct))
        return http_image_upload_begin(r, length, ret);
    if ((r->route->body == BODY_REQUIRED || r->route->body == BODY_UPLOAD || r->body_present) &&
        !is_json_content_type(ct)) {
        *ret =
            reply_problem(r, PROBLEM_UNSUPPORTED_MEDIA_TYPE, NULL,
                          r->route->body == BODY_UPLOAD
                              ? "the body must be an image archive (Content-Type: "
                                "application/x-tar) or application/json, not %s"
                              : "the body must be sent as Content-Type: application/json, not %s",
                          ct ? ct : "(none)");
        return false;
    }
    if (length > gw->cfg.body_limit) {
        *ret = reply_problem(r, PROBLEM_BODY_TOO_LARGE, NULL,
                             "the body has %lld bytes; the limit is %lld", length,
                             (long long)gw->cfg.body_limit);
        return false;
    }
    return true;
}

/* Appends a chunk of the body; false when it would pass the limit. */
static bool body_append(struct request *r, const char *data, size_t len)
{
    if (r->body_len + len > (size_t)r->gw->cfg.body_limit)
        return false;
    if (r->body_len + len + 1 > r->body_cap) {
        size_t cap = r->body_cap ? r->body_cap : 4096;
        while (cap < r->body_len + len + 1)
            cap *= 2;
        char *grown = realloc(r->body, cap);
        if (!grown)
            return false;
        r->body = grown;
        r->body_cap = cap;
    }
    memcpy(r->body + r->body_len, data, len);
    r->body_len += len;
    r->body[r->body_len] = '\0';
    return true;
}

enum MHD_Result gateway_access_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                       const char *method, const char *version,
                                       const char *upload_data, size_t *upload_data_size,
                                       void **con_cls)
{
    struct gateway *gw = cls;
    struct request *r = *con_cls;
    enum MHD_Result ret = MHD_YES;
    (void)version;

    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO;
        *con_cls = r;
        r->gw = gw;
        r->conn = conn;
        r->method = method;
        r->path = url;
        r->route_index = -1;
        r->start_us = metrics_now_us();
        request_id_init(r);
        if (!request_admit(r, &ret))
            return ret;
        return MHD_YES;
    }
    if (r->replied) {
        /* A problem was queued on the headers (e.g. 413 by Content-Length): drop the body. */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size > 0 && r->upload) {
        r->body_present = true;
        r->body_received += *upload_data_size;
        http_image_upload_chunk(r, upload_data, *upload_data_size);
        *upload_data_size = 0;
        /* Over image_upload_limit: dropped to the end for the 413, as below, up to a cap. */
        if (http_image_upload_too_large(r) &&
            r->body_received > (size_t)gw->cfg.image_upload_limit + BODY_DISCARD_MAX) {
            log_emit(LOG_LEVEL_INFO, r->request_id, "closing: upload over %zu bytes",
                     r->body_received);
            return MHD_NO;
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        r->body_present = true;
        r->body_received += *upload_data_size;
        if (!r->body_too_large && !body_append(r, upload_data, *upload_data_size))
            r->body_too_large = true;
        *upload_data_size = 0;
        /* A body without Content-Length that runs over the limit is read and dropped to its end,
         * so that the client gets its 413 (libmicrohttpd accepts no response in the middle of an
         * upload). Past a generous cap the connection is simply closed. */
        if (r->body_too_large && r->body_received > (size_t)gw->cfg.body_limit + BODY_DISCARD_MAX) {
            log_emit(LOG_LEVEL_INFO, r->request_id, "closing: body over %zu bytes",
                     r->body_received);
            return MHD_NO;
        }
        return MHD_YES;
    }
    if (r->body_too_large)
        return reply_problem(r, PROBLEM_BODY_TOO_LARGE, NULL,
                             "the body is over the limit of %lld bytes",
                             (long long)gw->cfg.body_limit);
    /* The whole request is in (or a parked long poll was resumed). */
    if (r->parked) {
        r->parked = false;
        longpoll_unparked(gw->lp);
        if (r->key_revoked)
            return reply_problem(r, PROBLEM_UNAUTHORIZED, NULL,
                                 "the API key was revoked (or its App deleted) during the wait");
    }
    return r->route->handler(r);
}

void gateway_request_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                               enum MHD_RequestTerminationCode toe)
{
    struct gateway *gw = cls;
    struct request *r = *con_cls;
    (void)conn;
    if (!r)
        return;
    if (r->replied)
        metrics_observe(gw->metrics, r->route_index, r->method, r->status,
                        (double)(metrics_now_us() - r->start_us) / 1e6);
    /* A write of this gateway: the event feeds of every gateway may have news (sse.h). */
    if (r->replied && r->status < 400 && strcmp(r->method, "GET") != 0 &&
        strcmp(r->method, "HEAD") != 0) {
        sse_committed(gw->sse); /* and the workers' webhook threads: the hub's hint goes to both */
    }
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        log_emit(LOG_LEVEL_DEBUG, r->request_id, "request ended early (%d)", (int)toe);
    http_message_request_free(r);
    http_image_request_free(r);
    free(r->body);
    free(r);
    *con_cls = NULL;
}

bool paging_params(struct request *r, size_t *limit, const char **cursor, enum MHD_Result *ret)
{
    struct input_error e;
    const char *l = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "limit");
    const char *c = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "cursor");
    if (!input_limit(l, limit, &e) || !input_cursor(c, &e)) {
        *ret = reply_problem(r, e.code, e.field, "%s", e.detail);
        return false;
    }
    *cursor = c ? c : "";
    return true;
}

json_t *request_json(struct request *r, const char *const *allowed, enum MHD_Result *ret)
{
    struct input_error e;
    json_t *obj = input_parse_object(r->body, r->body_len, r->route->body == BODY_OPTIONAL, &e);
    if (obj && !input_known_fields(obj, allowed, &e)) {
        json_decref(obj);
        obj = NULL;
    }
    if (!obj)
        *ret = reply_input_error(r, &e);
    return obj;
}
