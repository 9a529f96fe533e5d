/*
 * http_stream.c: GET /v1/sessions/{sessionId}/messages/{messageId}/stream: the agent's partial
 * output as Server-Sent Events (sse.h). One `chunk` event per stored chunk (id: its index, data:
 * its JSON value) from the first, or from the one after Last-Event-ID, then one `completed` or
 * `failed` event whose data is the Message, then the end. A finished message replays and ends at
 * once. The message is looked up before the stream starts, so an unknown one (or another App's)
 * is a plain 404.
 */
#include "gateway.h"
#include "store_messages.h"
#include "store_stream.h"
#include "json_text.h"
#include "render.h"
#include "reply.h"
#include "sse.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Chunks read per store round trip; a longer backlog is sent in several. */
#define CHUNK_PAGE 256

struct message_stream {
    struct store *st;
    char app_id[STORE_ID_LEN];
    char session_id[STORE_ID_LEN];
    char message_id[STORE_ID_LEN];
    int64_t next_index;
    bool started;
};

static bool finished(const struct store_message *m)
{
    return strcmp(m->state, "completed") == 0 || strcmp(m->state, "failed") == 0;
}

/* The final event: the Message, with how many chunks its bounds dropped. */
static int append_end(struct sse_stream *s, const struct store_message *m, int64_t dropped)
{
    struct json_text t = {0};
    render_message_end_text(&t, m, dropped);
    size_t len;
    char *text = json_text_take(&t, &len);
    if (!text)
        return -1;
    int rc = sse_append_event(s, -1, m->state, text);
    free(text);
    return rc;
}

static int message_produce(struct sse_stream *s, void *arg, bool *ended)
{
    struct message_stream *ms = arg;
    struct store *st = ms->st;
    struct store_message m;
    struct store_chunk *c = NULL;
    size_t n = 0;
    int64_t dropped = 0;

    if (!ms->started) {
        /* How long an EventSource waits before it reconnects (with Last-Event-ID). */
        if (sse_append(s, "retry: 1000\n\n", 13) != 0)
            return -1;
        ms->started = true;
    }
    /* The state first, then the chunks: the worker stores a message's chunks before it ends it,
     * so a message read as finished has all of its chunks in the read that follows. */
    enum store_status rc = store_message_get(st, ms->app_id, ms->session_id, ms->message_id, &m);
    if (rc == STORE_NOT_FOUND) {
        *ended = true; /* its Session was deleted meanwhile */
        return 0;
    }
    if (rc != STORE_OK)
        return -1;
    rc = store_chunk_list(st, ms->app_id, ms->session_id, ms->message_id, ms->next_index,
                          CHUNK_PAGE, &c, &n, &dropped);
    int out = rc == STORE_OK || rc == STORE_NOT_FOUND ? 0 : -1;
    for (size_t i = 0; out == 0 && i < n; i++) {
        out = sse_append_event(s, c[i].index, "chunk", c[i].value_json);
        ms->next_index = c[i].index + 1;
    }
    if (rc == STORE_OK)
        store_chunk_list_free(c, n);
    if (rc == STORE_NOT_FOUND)
        *ended = true;
    else if (out == 0 && finished(&m) && n < CHUNK_PAGE) {
        out = append_end(s, &m, dropped);
        *ended = true;
    }
    store_message_clear(&m);
    return out;
}

enum MHD_Result http_message_stream(struct request *r)
{
    struct gateway *gw = r->gw;
    struct store_chunk *c = NULL;
    size_t n = 0;
    int64_t last;

    if (!sse_last_event_id(r, &last))
        return reply_problem(r, PROBLEM_INVALID_PARAMETER, "Last-Event-ID",
                             "Last-Event-ID must be the index of a chunk (a decimal number)");
    /* 404 before any stream: the same lookup the stream makes, for no chunk at all. */
    enum store_status st =
        store_chunk_list(gw->st, r->app_id, r->params[0], r->params[1], INT64_MAX, 1, &c, &n, NULL);
    if (st != STORE_OK)
        return reply_store_error(r, st, "message");
    store_chunk_list_free(c, n);
    struct message_stream *ms = calloc(1, sizeof *ms);
    if (!ms)
        return reply_problem(r, PROBLEM_INTERNAL, NULL, "out of memory");
    ms->st = gw->st;
    snprintf(ms->app_id, sizeof ms->app_id, "%s", r->app_id);
    snprintf(ms->session_id, sizeof ms->session_id, "%s", r->params[0]);
    snprintf(ms->message_id, sizeof ms->message_id, "%s", r->params[1]);
    ms->next_index = last + 1;
    return sse_reply(r, SSE_TOPIC_MESSAGE, ms->message_id, message_produce, ms, free);
}
