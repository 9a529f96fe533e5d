/*
 * http_event_stream.c: GET /v1/events with Accept: text/event-stream: the live event feed. The
 * caller's events (an App's own; admin: all), optionally of one Session, as they are committed:
 * one SSE event per audit event (id: the event's id, data: the Event as in the JSON list). It
 * starts after Last-Event-ID (or ?cursor=), else with what is committed from now on, and ends
 * only when its App key is revoked (sse.h).
 */
#include "gateway.h"
#include "store_events.h"
#include "store_stream.h"
#include "render.h"
#include "reply.h"
#include "sse.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EVENT_PAGE 200

struct event_feed {
    struct store *st;
    char app_id[STORE_ID_LEN];
    char session_id[STORE_ID_LEN]; /* "" for all */
    int64_t after;                 /* the last event id sent */
    bool started;
};

static int feed_produce(struct sse_stream *s, void *arg, bool *ended)
{
    struct event_feed *f = arg;
    struct store_event *items = NULL;
    size_t n = 0;
    (void)ended;

    if (!f->started) {
        if (sse_append(s, "retry: 1000\n\n", 13) != 0)
            return -1;
        f->started = true;
    }
    enum store_status rc =
        store_event_list(f->st, f->app_id, f->session_id[0] ? f->session_id : NULL, f->after,
                         EVENT_PAGE, &items, &n);
    if (rc != STORE_OK)
        return -1;
    int out = 0;
    for (size_t i = 0; out == 0 && i < n; i++) {
        json_t *j = render_event(&items[i]);
        char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        out = text ? sse_append_event(s, items[i].id, NULL, text) : -1;
        free(text);
        f->after = items[i].id;
    }
    store_event_list_free(items, n);
    return out;
}

enum MHD_Result http_event_stream(struct request *r, const char *session_id, int64_t after)
{
    struct gateway *gw = r->gw;
    int64_t last;
    if (!sse_last_event_id(r, &last))
        return reply_problem(r, PROBLEM_INVALID_PARAMETER, "Last-Event-ID",
                             "Last-Event-ID must be an event id (a decimal number)");
    if (last >= 0)
        after = last;
    if (after < 0) {
        enum store_status st = store_event_feed_start(gw->st, &after);
        if (st != STORE_OK)
            return reply_store_error(r, st, "event feed");
    }
    struct event_feed *f = calloc(1, sizeof *f);
    if (!f)
        return reply_problem(r, PROBLEM_INTERNAL, NULL, "out of memory");
    f->st = gw->st;
    snprintf(f->app_id, sizeof f->app_id, "%s", r->app_id);
    snprintf(f->session_id, sizeof f->session_id, "%s", session_id ? session_id : "");
    f->after = after;
    return sse_reply(r, SSE_TOPIC_EVENTS, NULL, feed_produce, f, free);
}
