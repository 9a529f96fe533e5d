/*
 * claim.c: claiming messages and routing each to its Session's Sandbox (delivery.h): the start of
 * every delivery, and the one place where w->n_deliveries goes up. Claims happen
 * when something may have changed (a wake-up from the gateway, a delivery that ended, a Sandbox
 * that went away, a retry coming due, the fallback poll), as many as capacity allows; never in a
 * busy loop.
 */
#include "delivery/delivery.h"
#include "store_queue.h"
#include "log.h"
#include "clock.h"

#include <stdlib.h>
#include <string.h>

/* Wakes up again when the earliest backed-off message is due (the fallback poll covers the
 * rest, so the timer is never longer than one poll). */
static void schedule_next_due(struct worker *w)
{
    int64_t at = 0, now = clock_wall_ms();
    if (store_queue_next_due(w->st, &at) != STORE_OK || at == 0 || at <= now)
        return;
    int64_t ms = at - now + 1;
    if (ms > w->cfg.poll_ms)
        ms = w->cfg.poll_ms;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    evtimer_add(w->due_ev, &tv);
}

/* Routes a claimed message; false when the claim loop should stop for now. */
static bool route(struct worker *w, struct store_delivery *d)
{
    struct sandbox *sb = sandbox_find_session(w, d->session.id);
    if (sb && sb->state == SB_IDLE) {
        sandbox_send_message(sb, d);
        return true;
    }
    if (!sb) {
        sb = sandbox_find_cold_boot(w, d->session.id);
        if (!sb) {
            delivery_activate(w, d);
            return true;
        }
    }
    if (sb->delivery && strcmp(sb->delivery->message.id, d->message.id) == 0) {
        /* Our own delivery, whose lease expired while this worker was held up (and was requeued
         * by a poll): claiming it again simply gave the lease back to us. Keep delivering it. */
        log_warn("worker: lease of %s had expired; reclaimed it", d->message.id);
    } else {
        /* One message per Session at a time is the store's rule; a second one here means the
         * store and this worker disagree. Hand it back untried and stop claiming for now. */
        log_error("worker: %s claimed while %s is still busy; releasing it", d->message.id,
                  sb->rt.sandbox_id);
        store_queue_release(w->st, &w->ctx, d->message.id, w->id);
    }
    delivery_end(w, d, false); /* no kick: the claim loop stops here for now */
    return false;
}

void consumer_run(struct worker *w)
{
    bool claimed = false;
    if (w->stopping)
        return;
    while (w->n_deliveries < (size_t)w->cfg.max_sandboxes) {
        struct store_delivery *d = calloc(1, sizeof *d);
        if (!d)
            break;
        /* At the Sandbox limit only Sessions that already have a Sandbox here can be served. */
        bool owned_only = w->n_serving >= (size_t)w->cfg.max_sandboxes;
        /* The lease covers the agent's time to answer from the start, so delivery needs no extra
         * write; the heartbeat renews it for as long as this worker lives. */
        int64_t lease = w->cfg.lease_ms + w->cfg.message_timeout * 1000;
        /* Placement: an idle Session's message goes to the host with a warm Sandbox of its
         * shape, else the least loaded one (or to any host once it has waited the grace); the
         * same transaction claims that warm Sandbox here for the Session (delivery_activate). */
        struct store_placement placement = {w->cfg.placement_grace_ms, w->cfg.host_lost_ms};
        enum store_status rc = owned_only ? store_queue_claim_owned(w->st, &w->ctx, w->id, lease, d)
                                          : store_queue_claim_with_sandbox(w->st, &w->ctx, w->id,
                                                                           lease, &placement, d);
        if (rc != STORE_OK) {
            free(d);
            if (rc != STORE_EMPTY)
                log_warn("worker: claim failed: %s", store_status_name(rc));
            break;
        }
        w->n_deliveries++;
        d->durable_gen = sandbox_commit_gen(w);
        log_emit(LOG_LEVEL_DEBUG, d->message.request_id,
                 "worker: claimed %s (seq %lld, attempt %lld)", d->message.id,
                 (long long)d->message.seq, (long long)d->message.attempts);
        claimed = true;
        if (!route(w, d))
            break;
    }
    /* The claims wrote events (message.delivering, session.activating): wake the event feeds,
     * once per round and after routing, so that the hint (a scan of the run directory and a
     * datagram per gateway) is not on the path from the claim to the agent's `start`. */
    if (claimed)
        worker_notify_feeds(w);
    schedule_next_due(w);
}
