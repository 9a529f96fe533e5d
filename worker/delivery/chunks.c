/*
 * chunks.c: partial output of the message in flight, batched into few transactions (chunks.h).
 */
#include "delivery/chunks.h"
#include "store_stream.h"
#include "delivery/delivery.h"
#include "clock.h"
#include "log.h"
#include "sandbox/sandbox.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A batch is committed at once when it reaches either size, whatever chunk_flush_ms says. */
#define BATCH_MAX_CHUNKS 64
#define BATCH_MAX_BYTES (256u << 10)

struct chunk_stream {
    struct sandbox *sb;
    char message_id[STORE_ID_LEN];
    bool loaded;        /* count and bytes read from the store (an earlier attempt's chunks) */
    int64_t next_index; /* index of the next chunk stored */
    int64_t bytes;      /* bytes stored or gathered for this message */
    int64_t dropped;    /* dropped past the bounds, not committed yet */
    char **pending;     /* gathered JSON texts, in order */
    size_t n_pending, cap_pending;
    size_t pending_bytes;
    int64_t last_flush_ms; /* monotonic: when a batch was last committed */
    struct event *timer;
};

static void pending_clear(struct chunk_stream *cs)
{
    for (size_t i = 0; i < cs->n_pending; i++)
        free(cs->pending[i]);
    cs->n_pending = 0;
    cs->pending_bytes = 0;
    cs->dropped = 0;
}

void chunks_flush(struct sandbox *sb)
{
    struct chunk_stream *cs = sb->chunks;
    struct worker *w = sb->w;
    if (!cs)
        return;
    event_del(cs->timer);
    if (cs->n_pending == 0 && cs->dropped == 0)
        return;
    cs->last_flush_ms = clock_mono_ms();
    enum store_status rc =
        store_chunk_append(w->st, cs->message_id, w->id, cs->next_index - (int64_t)cs->n_pending,
                           (const char *const *)cs->pending, cs->n_pending, cs->dropped);
    if (rc == STORE_OK) {
        worker_notify_gateway(w, "chunk", cs->message_id);
    } else {
        /* Not this worker's message any more (CONFLICT), or the store failed: the chunks are
         * lost, the reply is not affected. The next attempt continues from what is stored. */
        log_warn("worker: %zu chunks of %s not stored: %s", cs->n_pending, cs->message_id,
                 store_status_name(rc));
        cs->loaded = false;
    }
    pending_clear(cs);
}

static void flush_due(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    chunks_flush(arg);
}

static struct chunk_stream *stream_for(struct sandbox *sb, const char *message_id)
{
    struct chunk_stream *cs = sb->chunks;
    if (cs && strcmp(cs->message_id, message_id) != 0) {
        chunks_flush(sb);
        cs->loaded = false;
    }
    if (!cs) {
        if (!(cs = calloc(1, sizeof *cs)))
            return NULL;
        cs->sb = sb;
        cs->timer = evtimer_new(sb->w->base, flush_due, sb);
        if (!cs->timer) {
            free(cs);
            return NULL;
        }
        sb->chunks = cs;
    }
    if (!cs->loaded) {
        int64_t count = 0, bytes = 0;
        snprintf(cs->message_id, sizeof cs->message_id, "%s", message_id);
        enum store_status rc = store_chunk_totals(sb->w->st, message_id, &count, &bytes);
        if (rc != STORE_OK)
            log_warn("worker: cannot read the chunks of %s: %s", message_id, store_status_name(rc));
        cs->next_index = count;
        cs->bytes = bytes;
        cs->loaded = true;
    }
    return cs;
}

void delivery_chunk(struct sandbox *sb, json_t *value)
{
    struct worker *w = sb->w;
    /* The App runs: the store says so before its first chunk is stored (sandbox.h). */
    enum store_status rrc = sandbox_record_running(sb);
    if (rrc != STORE_OK) {
        sandbox_terminate(sb, rrc == STORE_CONFLICT ? "session deleted" : "store error", false);
        return;
    }
    const char *message_id = sb->delivery->message.id;
    struct chunk_stream *cs = stream_for(sb, message_id);
    if (!cs) {
        log_warn("worker: out of memory for a chunk of %s", message_id);
        return;
    }
    char *text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
    size_t len = text ? strlen(text) : 0;
    if (!text || cs->next_index >= w->cfg.chunk_max_count ||
        cs->bytes + (int64_t)len > w->cfg.chunk_max_bytes) {
        free(text);
        cs->dropped++;
    } else {
        if (cs->n_pending == cs->cap_pending) {
            size_t cap = cs->cap_pending ? cs->cap_pending * 2 : 8;
            char **grown = realloc(cs->pending, cap * sizeof *grown);
            if (!grown) {
                free(text);
                cs->dropped++;
                goto arm;
            }
            cs->pending = grown;
            cs->cap_pending = cap;
        }
        cs->pending[cs->n_pending++] = text;
        cs->pending_bytes += len;
        cs->next_index++;
        cs->bytes += (int64_t)len;
    }
arm:;
    /* A chunk after a quiet spell is committed at once (no added latency); one that follows a
     * commit within chunk_flush_ms waits for the rest of that interval, so that a burst costs at
     * most one commit per interval. */
    int64_t since = clock_mono_ms() - cs->last_flush_ms;
    if (cs->n_pending >= BATCH_MAX_CHUNKS || cs->pending_bytes >= BATCH_MAX_BYTES ||
        since >= w->cfg.chunk_flush_ms) {
        chunks_flush(sb);
    } else if (!evtimer_pending(cs->timer, NULL)) {
        int64_t wait = w->cfg.chunk_flush_ms - since;
        struct timeval tv = {(time_t)(wait / 1000), (suseconds_t)((wait % 1000) * 1000)};
        evtimer_add(cs->timer, &tv);
    }
}

void chunks_free(struct sandbox *sb)
{
    struct chunk_stream *cs = sb->chunks;
    if (!cs)
        return;
    pending_clear(cs);
    free(cs->pending);
    event_free(cs->timer);
    free(cs);
    sb->chunks = NULL;
}
