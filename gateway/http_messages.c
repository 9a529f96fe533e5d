/*
 * http_messages.c: /v1/sessions/{sessionId}/messages (App keys only): enqueue (durable before the
 * 202, idempotent with Idempotency-Key), list in seq order, and get one, optionally as a long poll
 * (?wait=N) that answers as soon as the message is completed or failed.
 */
#include "gateway.h"
#include "store_messages.h"
#include "json_input.h"
#include "json_text.h"
#include "log.h"
#include "message_request.h"
#include "longpoll.h"
#include "notify.h"
#include "render.h"
#include "reply.h"
#include "clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* An enqueue waiting for its group commit. The connection is suspended meanwhile, so one HTTP
 * thread can have many requests in the same batch instead of one: the committer's callback stores
 * the result here and resumes the connection, and the handler runs again to reply. */
struct pending_enqueue {
    char *body_json;
    char hash[65];
    struct store_enqueue req; /* points into this struct and the request */
    bool done;                /* set by the committer before it resumes the connection */
    enum store_status status;
    struct store_message m; /* owned when status is STORE_OK */
    bool replayed;
};

static void pending_free(struct pending_enqueue *p)
{
    if (!p)
        return;
    if (p->done && p->status == STORE_OK)
        store_message_clear(&p->m);
    free(p->body_json);
    free(p);
}

void http_message_request_free(struct request *r)
{
    pending_free(r->enqueue);
    r->enqueue = NULL;
}

/* woken: the workers were told already (by the committer, right after its COMMIT). */
static enum MHD_Result reply_enqueued(struct request *r, enum store_status st,
                                      struct store_message *m, bool replayed, bool woken)
{
    char location[128];
    if (st == STORE_CONFLICT) {
        const char *idem = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Idempotency-Key");
        return reply_problem(r, PROBLEM_IDEMPOTENCY_CONFLICT, "Idempotency-Key",
                             "Idempotency-Key \"%.64s\" was used for a different request",
                             idem ? idem : "");
    }
    if (st != STORE_OK)
        return reply_store_error(r, st, "Session");
    if (!replayed && !woken)
        notify_send(r->gw->workers, "queue");
    snprintf(location, sizeof location, "/v1/sessions/%s/messages/%s", m->session_id, m->id);
    struct json_text out = {0};
    if (replayed)
        render_message_text(&out, m);
    else
        render_message_queued_text(&out, m);
    store_message_clear(m);
    return reply_json_text(r, replayed ? 200 : 202, &out, "Location", location);
}

/* Runs on the store's committer thread. */
static void enqueue_committed(void *arg, enum store_status status, struct store_message *m,
                              bool replayed)
{
    struct request *r = arg;
    struct pending_enqueue *p = r->enqueue;
    p->status = status;
    if (status == STORE_OK)
        p->m = *m; /* the message's strings move to p */
    p->replayed = replayed;
    /* The message is claimable from this COMMIT on: wake the workers now, not after this
     * connection's thread has woken up to answer (a thread hop on the warm path). */
    if (status == STORE_OK && !replayed && !r->gw->claim_overlap)
        notify_send(r->gw->workers, "queue"); /* with the overlap, sent before the fsync */
    p->done = true;
    MHD_resume_connection(r->conn);
}

/* Hands p to the committer and suspends the connection. False (nothing suspended, p untouched)
 * when the gateway is stopping: enqueue synchronously. */
static bool enqueue_suspended(struct request *r, struct pending_enqueue *p)
{
    struct gateway *gw = r->gw;
    /* Counted before stopping is read, and http_message_drain() reads the count after setting
     * it: either the drain waits for this request or this request sees stopping. */
    __atomic_add_fetch(&gw->enqueues_suspended, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&gw->stopping, __ATOMIC_SEQ_CST)) {
        __atomic_sub_fetch(&gw->enqueues_suspended, 1, __ATOMIC_SEQ_CST);
        return false;
    }
    r->enqueue = p;
    /* Suspend first: the callback may resume the connection before the call below returns, and
     * MHD only accepts a resume for a connection that is already suspended. */
    MHD_suspend_connection(r->conn);
    if (store_message_enqueue_async(gw->st, &r->ctx, &p->req, enqueue_committed, r) != STORE_OK) {
        p->status = STORE_ERROR;
        p->done = true;
        MHD_resume_connection(r->conn);
    }
    return true;
}

/* The second run, after the commit resumed the connection. */
static enum MHD_Result reply_pending(struct request *r)
{
    struct pending_enqueue *p = r->enqueue;
    __atomic_sub_fetch(&r->gw->enqueues_suspended, 1, __ATOMIC_SEQ_CST);
    enum store_status st = p->status;
    struct store_message m = p->m;
    bool replayed = p->replayed;
    p->status = STORE_ERROR; /* m now belongs to reply_enqueued */
    return reply_enqueued(r, st, &m, replayed, true);
}

enum MHD_Result http_message_create(struct request *r)
{
    static const char *const fields[] = {"body", NULL};
    enum MHD_Result ret;
    struct input_error e;
    const char *idem = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Idempotency-Key");
    json_t *obj, *body;
    struct pending_enqueue *p;

    if (r->enqueue && r->enqueue->done)
        return reply_pending(r);
    if (idem && !input_idempotency_key(idem, &e))
        return reply_input_error(r, &e);
    if (!(obj = request_json(r, fields, &ret)))
        return ret;
    body = json_object_get(obj, "body");
    if (!body) {
        json_decref(obj);
        return reply_problem(r, PROBLEM_INVALID_FIELD, "body", "field \"body\" is required");
    }
    if (!(p = calloc(1, sizeof *p))) {
        json_decref(obj);
        return reply_problem(r, PROBLEM_INTERNAL, NULL, "out of memory");
    }
    p->body_json = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
    if (idem) /* only a key's replay is compared with its request */
        message_request_hash(r->params[0], body, p->hash);
    json_decref(obj);
    if (!p->body_json) {
        pending_free(p);
        return reply_problem(r, PROBLEM_INTERNAL, NULL, "cannot encode the body");
    }
    p->req = (struct store_enqueue){r->app_id, r->params[0], p->body_json, idem, p->hash};
    if (enqueue_suspended(r, p))
        return MHD_YES;

    struct store_message m;
    bool replayed = false;
    enum store_status st = store_message_enqueue(r->gw->st, &r->ctx, &p->req, &m, &replayed);
    pending_free(p);
    return reply_enqueued(r, st, &m, replayed, false);
}

void http_message_drain(struct gateway *gw, int timeout_ms)
{
    for (int64_t end = clock_mono_ms() + timeout_ms; clock_mono_ms() < end;) {
        if (__atomic_load_n(&gw->enqueues_suspended, __ATOMIC_SEQ_CST) <= 0)
            return;
        usleep(10000);
    }
    log_warn("stopping with %d enqueues still suspended",
             __atomic_load_n(&gw->enqueues_suspended, __ATOMIC_SEQ_CST));
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
    enum store_status s =
        store_message_list(r->gw->st, r->app_id, r->params[0], cursor, limit, &items, &n, next);
    if (s != STORE_OK)
        return reply_store_error(r, s, "Session");
    struct json_text page = {0};
    render_message_page_text(&page, items, n, next);
    store_message_list_free(items, n);
    return reply_json_text(r, 200, &page, NULL, NULL);
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
        r->wait_deadline_ms = wait > 0 ? clock_mono_ms() + wait * 1000 : -1;
    }
    if (r->wait_deadline_ms > 0)
        r->wait_hints = longpoll_hints_seen(gw->lp); /* before the read: see longpoll_park */
    enum store_status st = store_message_get(gw->st, r->app_id, r->params[0], r->params[1], &m);
    if (st != STORE_OK)
        return reply_store_error(r, st, "message");
    if (!finished(&m) && r->wait_deadline_ms > clock_mono_ms() && !gw->stopping) {
        store_message_clear(&m);
        longpoll_park(gw->lp, r, r->params[1]);
        return MHD_YES;
    }
    struct json_text out = {0};
    render_message_text(&out, &m);
    store_message_clear(&m);
    return reply_json_text(r, 200, &out, NULL, NULL);
}
