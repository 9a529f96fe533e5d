/*
 * http_messages.c: /v1/sessions/{sessionId}/messages (App keys only): enqueue (durable before the
 * 202, idempotent with Idempotency-Key), list in seq order, and get one, optionally as a long poll
 * (?wait=N) that answers as soon as the message is completed or failed.
 */
#include "gateway.h"
#include "json_input.h"
#include "longpoll.h"
#include "notify.h"
#include "render.h"
#include "reply.h"
#include "sha256.h"
#include "timefmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What makes two requests "the same" for Idempotency-Key: the Session and the body, with object
 * keys sorted so that member order does not matter. */
static void request_hash(const char *session_id, json_t *body, char out[65])
{
    struct sha256_ctx c;
    uint8_t digest[32];
    char *canonical = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    sha256_init(&c);
    sha256_update(&c, "POST /v1/sessions/", 18);
    sha256_update(&c, session_id, strlen(session_id));
    sha256_update(&c, "/messages\n", 10);
    if (canonical)
        sha256_update(&c, canonical, strlen(canonical));
    sha256_final(&c, digest);
    sha256_hex(digest, out);
    free(canonical);
}

enum MHD_Result http_message_create(struct request *r)
{
    static const char *const fields[] = {"body", NULL};
    enum MHD_Result ret;
    struct input_error e;
    const char *idem = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Idempotency-Key");
    json_t *obj, *body;
    char hash[65], location[128];
    struct store_message m;
    bool replayed = false;

    if (idem && !input_idempotency_key(idem, &e))
        return reply_input_error(r, &e);
    if (!(obj = request_json(r, fields, &ret)))
        return ret;
    body = json_object_get(obj, "body");
    if (!body) {
        json_decref(obj);
        return reply_problem(r, "invalid-field", "body", "field \"body\" is required");
    }
    char *body_json = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
    request_hash(r->params[0], body, hash);
    json_decref(obj);
    if (!body_json)
        return reply_problem(r, "internal", NULL, "cannot encode the body");

    struct store_enqueue req = {r->app_id, r->params[0], body_json, idem, hash};
    enum store_status st = r->gw->st->message_enqueue(r->gw->st, &r->ctx, &req, &m, &replayed);
    free(body_json);
    if (st == STORE_CONFLICT)
        return reply_problem(r, "idempotency-conflict", "Idempotency-Key",
                             "Idempotency-Key \"%.64s\" was used for a different request", idem);
    if (st != STORE_OK)
        return reply_store_error(r, st, "Session");
    if (!replayed)
        notify_send(r->gw->workers, "queue");
    snprintf(location, sizeof location, "/v1/sessions/%s/messages/%s", m.session_id, m.id);
    json_t *out = render_message(&m);
    store_message_clear(&m);
    return reply_json_header(r, replayed ? 200 : 202, out, "Location", location);
}

enum MHD_Result http_message_list(struct request *r)
{
    enum MHD_Result ret;
    size_t limit, n;
    const char *cursor;
    char next[STORE_CURSOR_LEN];
    struct store_message *items;
    if (!paging_params(r, &limit, &cursor, &ret))
        return ret;
    enum store_status s = r->gw->st->message_list(r->gw->st, r->app_id, r->params[0], cursor, limit,
                                                  &items, &n, next);
    if (s != STORE_OK)
        return reply_store_error(r, s, "Session");
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, render_message(&items[i]));
    store_message_list_free(items, n);
    return reply_json(r, 200, render_page(arr, next));
}

static bool finished(const struct store_message *m)
{
    return strcmp(m->state, "completed") == 0 || strcmp(m->state, "failed") == 0;
}

enum MHD_Result http_message_get(struct request *r)
{
    struct gateway *gw = r->gw;
    struct store_message m;
    struct input_error e;
    int64_t wait = 0;

    /* First run: read ?wait= and fix the deadline; a resumed run keeps it. */
    if (r->wait_deadline_ms == 0) {
        const char *w = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "wait");
        if (!input_wait(w, &wait, &e))
            return reply_input_error(r, &e);
        if (wait > gw->cfg.max_wait)
            wait = gw->cfg.max_wait;
        r->wait_deadline_ms = wait > 0 ? mono_ms() + wait * 1000 : -1;
    }
    enum store_status st = gw->st->message_get(gw->st, r->app_id, r->params[0], r->params[1], &m);
    if (st != STORE_OK)
        return reply_store_error(r, st, "message");
    if (!finished(&m) && r->wait_deadline_ms > mono_ms() && !gw->stopping) {
        store_message_clear(&m);
        longpoll_park(gw->lp, r, r->params[1]);
        return MHD_YES;
    }
    json_t *out = render_message(&m);
    store_message_clear(&m);
    return reply_json(r, 200, out);
}
