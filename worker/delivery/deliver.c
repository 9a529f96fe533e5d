/*
 * deliver.c: a delivery from its Sandbox back to the store (delivery.h): the reply recorded (or the
 * agent's error failed with backoff; its partial output stored first, chunks.c), the attempt failed
 * when its Sandbox is lost, or handed back untried while the worker stops; the leases renewed while
 * in flight; and delivery_end, the one place where a delivery is freed and w->n_deliveries goes
 * down.
 */
#include "delivery/chunks.h"
#include "store_queue.h"
#include "delivery/delivery.h"
#include "log.h"
#include "sandbox/pool.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void delivery_end(struct worker *w, struct store_delivery *d, bool kick)
{
    store_delivery_clear(d);
    free(d);
    w->n_deliveries--;
    if (kick)
        consumer_kick(w);
}

/* Ends the delivery sb carries. */
static void end_carried(struct sandbox *sb)
{
    struct store_delivery *d = sb->delivery;
    sb->delivery = NULL;
    delivery_end(sb->w, d, true);
}

/* Records the failed attempt; frees nothing. */
static void record_failure(struct worker *w, const struct store_delivery *d, const char *sandbox_id,
                           const char *reason)
{
    bool final = false;
    int64_t backoff =
        backoff_delay_ms(d->message.attempts, w->cfg.retry_base_ms, w->cfg.retry_max_ms);
    enum store_status rc =
        store_queue_fail(w->st, &w->ctx, d->message.id, w->id, sandbox_id, reason, backoff, &final);
    if (rc == STORE_OK && final)
        log_emit(LOG_LEVEL_WARN, d->message.request_id, "worker: %s failed after %lld attempts: %s",
                 d->message.id, (long long)d->message.attempts, reason);
    else if (rc == STORE_OK)
        log_emit(LOG_LEVEL_INFO, d->message.request_id,
                 "worker: %s attempt %lld failed (%s); retry in %lld ms", d->message.id,
                 (long long)d->message.attempts, reason, (long long)backoff);
    else if (rc != STORE_CONFLICT)
        log_error("worker: cannot record the failed attempt of %s: %s", d->message.id,
                  store_status_name(rc));
    worker_notify_gateway(w, "msg", d->message.id);
}

void delivery_fail(struct worker *w, struct store_delivery *d, const char *sandbox_id,
                   const char *reason)
{
    record_failure(w, d, sandbox_id, reason);
    delivery_end(w, d, true);
}

/* Writes a pending `running` on its own; false when the store refused and the Sandbox was
 * terminated (its delivery went to delivery_lost: sb->delivery is gone). */
static bool record_running_or_end(struct sandbox *sb)
{
    enum store_status rc = sandbox_record_running(sb);
    if (rc == STORE_OK)
        return true;
    sandbox_terminate(sb, rc == STORE_CONFLICT ? "session deleted" : "store error", false);
    return false;
}

/* The reply, with a pending `running` in its transaction (one commit: sandbox.h). *ended when
 * the Sandbox was terminated meanwhile (the delivery is gone then). */
static enum store_status record_reply(struct sandbox *sb, const char *text, bool *ended)
{
    struct worker *w = sb->w;
    struct store_delivery *d = sb->delivery;
    *ended = false;
    if (sb->running_pending) {
        enum store_status rc = store_queue_complete_first(w->st, &w->ctx, d->message.id, w->id,
                                                          sb->rt.sandbox_id, sb->session_id, text);
        if (rc == STORE_OK) {
            sandbox_running_recorded(sb);
            return rc;
        }
        /* Nothing was written: the steps one at a time tell which one refused. */
        if (!record_running_or_end(sb)) {
            *ended = true;
            return rc;
        }
    }
    return store_queue_complete(w->st, &w->ctx, d->message.id, w->id, sb->rt.sandbox_id, text);
}

void delivery_replied(struct sandbox *sb, json_t *line)
{
    struct worker *w = sb->w;
    struct store_delivery *d = sb->delivery;
    json_t *reply = json_object_get(line, "reply");
    json_t *error = json_object_get(line, "error");

    chunks_flush(sb); /* the message's partial output is stored before it ends */
    chunks_free(sb);
    if (reply) {
        char *text = json_dumps(reply, JSON_COMPACT | JSON_ENCODE_ANY);
        bool ended = false;
        enum store_status rc = text ? record_reply(sb, text, &ended) : STORE_ERROR;
        free(text);
        if (ended)
            return; /* terminated: delivery_lost ended the attempt */
        if (rc == STORE_OK)
            log_emit(LOG_LEVEL_DEBUG, d->message.request_id, "worker: %s completed", d->message.id);
        else
            log_emit(LOG_LEVEL_WARN, d->message.request_id, "worker: reply to %s not recorded: %s",
                     d->message.id, store_status_name(rc));
        worker_notify_gateway(w, "msg", d->message.id);
    } else {
        char reason[512];
        if (!record_running_or_end(sb))
            return; /* terminated: delivery_lost ended the attempt */
        const char *msg = json_string_value(error);
        char *dumped = msg ? NULL : json_dumps(error, JSON_COMPACT | JSON_ENCODE_ANY);
        snprintf(reason, sizeof reason, "agent error: %s", msg ? msg : dumped ? dumped : "?");
        free(dumped);
        record_failure(w, d, sb->rt.sandbox_id, reason);
    }
    bool refill = sb->refill_pending; /* read first: sandbox_idle may end and free sb */
    sb->refill_pending = false;
    end_carried(sb);
    sandbox_idle(sb);
    if (refill || w->pool_deferred)
        pool_replenish(w);
}

void delivery_lost(struct sandbox *sb, const char *reason)
{
    struct worker *w = sb->w;
    struct store_delivery *d = sb->delivery;
    chunks_flush(sb); /* what the agent printed before it was lost */
    chunks_free(sb);
    if (w->stopping) {
        /* Handed back untried: another worker (or this one restarted) delivers it. */
        enum store_status rc = store_queue_release(w->st, &w->ctx, d->message.id, w->id);
        if (rc != STORE_OK && rc != STORE_CONFLICT)
            log_error("worker: cannot release %s: %s", d->message.id, store_status_name(rc));
    } else {
        record_failure(w, d, sb->rt.sandbox_id, reason);
    }
    end_carried(sb);
}

void delivery_renew_leases(struct worker *w)
{
    for (struct sandbox *sb = w->sandboxes; sb; sb = sb->next) {
        if (!sb->delivery)
            continue;
        int64_t lease = w->cfg.lease_ms + w->cfg.message_timeout * 1000;
        enum store_status rc =
            store_queue_extend_lease(w->st, sb->delivery->message.id, w->id, lease);
        if (rc == STORE_CONFLICT)
            log_warn("worker: lost the lease of %s", sb->delivery->message.id);
    }
}

void delivery_drop_all(struct worker *w)
{
    for (struct sandbox *sb = w->sandboxes; sb; sb = sb->next)
        if (sb->delivery) {
            struct store_delivery *d = sb->delivery;
            chunks_free(sb);
            sb->delivery = NULL;
            delivery_end(w, d, false);
        }
}
