/*
 * routes.c: the callback API's routes (openapi.yaml, tag "Sandbox callbacks"), each on behalf of
 * the caller's Sandbox (r->sb, authenticated by server.c) and the Session it serves: that
 * Session, its metadata, its history, a message to a sibling Session, an identity token.
 */
#include "callback_int.h"
#include "store_messages.h"
#include "store_sessions.h"

#include "id.h"
#include "json_text.h"
#include "message_request.h"
#include "notify.h"
#include "pki.h"
#include "render.h"
#include "timefmt.h"
#include "clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The largest metadata a merge patch may leave (compact JSON). */
#define METADATA_MAX_BYTES 65536
#define HISTORY_LIMIT_DEFAULT 50
#define HISTORY_LIMIT_MAX 200
#define AUDIENCE_MAX 256

const struct cb_route cb_routes[] = {
    {"GET", "/sandbox/v1/session", false, cb_session_get},
    {"PATCH", "/sandbox/v1/session/metadata", true, cb_metadata_patch},
    {"GET", "/sandbox/v1/session/messages", false, cb_history},
    {"POST", "/sandbox/v1/sessions/{sessionId}/messages", true, cb_sibling_message},
    {"POST", "/sandbox/v1/identity-token", true, cb_identity_token},
    {NULL, NULL, false, NULL},
};

/* The body as a JSON object whose members are all in allowed; NULL after a 400 reply. */
static json_t *body_object(struct cb_request *r, const char *const *allowed)
{
    json_error_t e;
    json_t *obj = r->body_len ? json_loadb(r->body, r->body_len, 0, &e) : NULL;
    if (!json_is_object(obj)) {
        json_decref(obj);
        cb_reply_problem(r, PROBLEM_MALFORMED_JSON, NULL, "the body must be a JSON object");
        return NULL;
    }
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
    {
        bool known = false;
        for (size_t i = 0; allowed && allowed[i] && !known; i++)
            known = strcmp(allowed[i], k) == 0;
        if (allowed && !known) {
            cb_reply_problem(r, PROBLEM_UNKNOWN_FIELD, k, "field \"%.64s\" is not known here", k);
            json_decref(obj);
            return NULL;
        }
    }
    return obj;
}

static bool json_content_type(struct cb_request *r, const char *also)
{
    const char *ct = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Type");
    size_t n = ct ? strcspn(ct, "; ") : 0;
    return ct && ((n == 16 && strncasecmp(ct, "application/json", n) == 0) ||
                  (also && n == strlen(also) && strncasecmp(ct, also, n) == 0));
}

/* The Session as the REST API shows it (rc STORE_OK: s is read and cleared), or the store's
 * error. */
static enum MHD_Result reply_session(struct cb_request *r, enum store_status rc,
                                     struct store_session *s)
{
    if (rc != STORE_OK)
        return cb_reply_store_error(r, rc, "Session");
    struct json_text t = {0};
    render_session_text(&t, s);
    store_session_clear(s);
    return cb_reply_text(r, 200, &t, NULL);
}

enum MHD_Result cb_session_get(struct cb_request *r)
{
    struct store_session s;
    enum store_status rc = store_session_get(r->cs->st, r->sb.app_id, r->sb.session_id, &s);
    return reply_session(r, rc, &s);
}

enum MHD_Result cb_metadata_patch(struct cb_request *r)
{
    if (!json_content_type(r, "application/merge-patch+json"))
        return cb_reply_problem(r, PROBLEM_UNSUPPORTED_MEDIA_TYPE, NULL,
                                "the body must be application/merge-patch+json (or "
                                "application/json)");
    json_t *patch = body_object(r, NULL);
    if (!patch)
        return MHD_YES;
    char *text = json_dumps(patch, JSON_COMPACT);
    json_decref(patch);
    if (!text)
        return cb_reply_problem(r, PROBLEM_INTERNAL, NULL, "out of memory");
    struct store_session_patch p = {.metadata_merge_json = text,
                                    .metadata_max_bytes = METADATA_MAX_BYTES};
    struct store_session s;
    enum store_status rc =
        store_session_update(r->cs->st, &r->ctx, r->sb.app_id, r->sb.session_id, &p, &s);
    free(text);
    if (rc == STORE_INVALID)
        return cb_reply_problem(r, PROBLEM_INVALID_VALUE, "metadata",
                                "the metadata would be over %d bytes of JSON", METADATA_MAX_BYTES);
    return reply_session(r, rc, &s);
}

/* A non-negative integer query parameter, or def when absent; -1 when malformed. */
static int64_t query_int(struct cb_request *r, const char *name, int64_t def)
{
    const char *v = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
    if (!v)
        return def;
    char *end;
    long long n = strtoll(v, &end, 10);
    return *v && *end == '\0' && n >= 0 ? n : -1;
}

enum MHD_Result cb_history(struct cb_request *r)
{
    int64_t after = query_int(r, "after", 0), limit = query_int(r, "limit", HISTORY_LIMIT_DEFAULT);
    if (after < 0)
        return cb_reply_problem(r, PROBLEM_INVALID_PARAMETER, "after",
                                "after must be a message's seq (an integer >= 0)");
    if (limit < 1 || limit > HISTORY_LIMIT_MAX)
        return cb_reply_problem(r, PROBLEM_INVALID_PARAMETER, "limit", "limit must be 1 to %d",
                                HISTORY_LIMIT_MAX);
    char cursor[32], next[STORE_CURSOR_LEN];
    snprintf(cursor, sizeof cursor, "%lld", (long long)after);
    struct store_message *items;
    size_t n;
    enum store_status rc = store_message_list(r->cs->st, r->sb.app_id, r->sb.session_id, cursor,
                                              (size_t)limit, &items, &n, next);
    if (rc != STORE_OK)
        return cb_reply_store_error(r, rc, "Session");
    struct json_text t = {0};
    render_message_page_text(&t, items, n, next);
    store_message_list_free(items, n);
    return cb_reply_text(r, 200, &t, NULL);
}

static bool idempotency_key_ok(const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
            return false;
    return n >= 1 && n <= 255;
}

enum MHD_Result cb_sibling_message(struct cb_request *r)
{
    static const char *const fields[] = {"body", NULL};
    const char *idem = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Idempotency-Key");
    if (idem && !idempotency_key_ok(idem))
        return cb_reply_problem(r, PROBLEM_INVALID_PARAMETER, "Idempotency-Key",
                                "Idempotency-Key must be 1 to 255 visible ASCII characters");
    if (!json_content_type(r, NULL))
        return cb_reply_problem(r, PROBLEM_UNSUPPORTED_MEDIA_TYPE, NULL,
                                "the body must be application/json");
    json_t *obj = body_object(r, fields);
    if (!obj)
        return MHD_YES;
    json_t *body = json_object_get(obj, "body");
    if (!body) {
        json_decref(obj);
        return cb_reply_problem(r, PROBLEM_INVALID_FIELD, "body", "field \"body\" is required");
    }
    char hash[65] = "";
    char *body_json = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
    if (idem)
        message_request_hash(r->params[0], body, hash);
    json_decref(obj);
    if (!body_json)
        return cb_reply_problem(r, PROBLEM_INTERNAL, NULL, "cannot encode the body");
    /* Scoped to the caller's App: another App's Session is not found, like one that is not. */
    struct store_enqueue req = {r->sb.app_id, r->params[0], body_json, idem, idem ? hash : NULL};
    struct store_message m;
    bool replayed = false;
    enum store_status rc = store_message_enqueue(r->cs->st, &r->ctx, &req, &m, &replayed);
    free(body_json);
    if (rc == STORE_CONFLICT)
        return cb_reply_problem(r, PROBLEM_IDEMPOTENCY_CONFLICT, "Idempotency-Key",
                                "Idempotency-Key \"%.64s\" was used for a different request",
                                idem ? idem : "");
    if (rc != STORE_OK)
        return cb_reply_store_error(r, rc, "Session");
    if (!replayed && r->cs->workers)
        notify_send(r->cs->workers, "queue");
    char location[128];
    snprintf(location, sizeof location, "/v1/sessions/%s/messages/%s", m.session_id, m.id);
    struct json_text t = {0};
    if (replayed)
        render_message_text(&t, &m);
    else
        render_message_queued_text(&t, &m);
    store_message_clear(&m);
    return cb_reply_text(r, replayed ? 200 : 202, &t, location);
}

enum MHD_Result cb_identity_token(struct cb_request *r)
{
    static const char *const fields[] = {"audience", NULL};
    if (!json_content_type(r, NULL))
        return cb_reply_problem(r, PROBLEM_UNSUPPORTED_MEDIA_TYPE, NULL,
                                "the body must be application/json");
    json_t *obj = body_object(r, fields);
    if (!obj)
        return MHD_YES;
    const char *aud = json_string_value(json_object_get(obj, "audience"));
    if (!aud || !*aud || strlen(aud) > AUDIENCE_MAX) {
        json_decref(obj);
        return cb_reply_problem(r, PROBLEM_INVALID_FIELD, "audience",
                                "field \"audience\" must be a string of 1 to %d bytes",
                                AUDIENCE_MAX);
    }
    const struct sbx_config *cfg = r->cs->cfg;
    int64_t now = clock_wall_ms() / 1000, exp = now + cfg->identity_token_ttl;
    char sub[128], jti[STORE_ID_LEN], err[256], expires[40];
    snprintf(sub, sizeof sub, "sbx:app:%s:session:%s", r->sb.app_id, r->sb.session_id);
    if (id_new("jti", jti, sizeof jti) != 0) {
        json_decref(obj);
        return cb_reply_problem(r, PROBLEM_INTERNAL, NULL, "no randomness for the token's id");
    }
    json_t *claims = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:s, s:s, s:s, s:s}", "iss",
                               cfg->public_url, "sub", sub, "aud", aud, "iat", (json_int_t)now,
                               "nbf", (json_int_t)now, "exp", (json_int_t)exp, "jti", jti, "app",
                               r->sb.app_id, "session", r->sb.session_id, "sandbox", r->sb.id);
    json_decref(obj);
    char *jwt = NULL;
    int rc = claims ? pki_jwt_sign(r->cs->pki, claims, &jwt, err, sizeof err) : -1;
    json_decref(claims);
    if (rc != 0)
        return cb_reply_problem(r, PROBLEM_INTERNAL, NULL, "cannot sign the token: %s",
                                claims ? err : "out of memory");
    time_format_ms(exp * 1000, expires, sizeof expires);
    json_t *out = json_pack("{s:s, s:s}", "token", jwt, "expiresAt", expires);
    free(jwt);
    return cb_reply_json(r, 200, out);
}
