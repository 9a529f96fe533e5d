/*
 * claim.c: claiming messages and routing each to its Session's Sandbox (delivery.h): the start of
 * every delivery, and the one place where w->n_deliveries goes up. Claims happen
 * when something may have changed (a wake-up from the gateway, a delivery that ended, a Sandbox
 * that went away, a retry coming due, the fallback poll), as many as capacity allows; never in a
 * busy loop. At the Sandbox limit, an idle Sandbox of the App holding the most may be ended for
 * another App's waiting message (evict_for_waiting_app).
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

/* One App's share of this worker's Sandboxes, as eviction sees it. */
struct holder {
    const char *app_id;
    size_t held;            /* its Sandboxes serving Sessions here */
    struct sandbox *idlest; /* its idle one idle the longest, or NULL */
};

static struct holder *holder_of(struct holder *h, size_t *n, const char *app_id)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp(h[i].app_id, app_id) == 0)
            return &h[i];
    h[*n] = (struct holder){app_id, 0, NULL};
    return &h[(*n)++];
}

/* Eviction under pressure (docs/worker.md, "Sharing Sandboxes between Apps"): at the Sandbox
 * limit, when an App below its quota waits for a Sandbox (store_queue_waiting_app) and holds
 * fewer of this worker's Sandboxes than its fair share (max_sandboxes over the Apps holding or
 * waiting for them), one idle Sandbox of the App holding the most (more than its share, and more
 * than one more than the waiting App, so that two Apps never take turns evicting each other) is
 * ended, the one idle the longest. A Sandbox with a message in flight is never chosen. True when
 * one was ended: its slot is free for the claim that follows. */
static bool evict_for_waiting_app(struct worker *w, const struct store_placement *placement)
{
    bool any_idle = false;
    for (struct sandbox *sb = w->sandboxes; sb && !any_idle; sb = sb->next)
        any_idle = sb->state == SB_IDLE;
    if (!any_idle)
        return false; /* nothing could be ended: spare the store the question */
    struct store_waiting_app wa;
    if (store_queue_waiting_app(w->st, w->id, placement, &wa) != STORE_OK)
        return false;
    struct holder *h = calloc(w->n_serving + 1, sizeof *h);
    size_t n = 0;
    if (!h)
        return false;
    for (struct sandbox *sb = w->sandboxes; sb; sb = sb->next) {
        if (!sandbox_serving(sb) || n >= w->n_serving)
            continue;
        struct holder *x = holder_of(h, &n, sb->app_id);
        x->held++;
        if (sb->state == SB_IDLE && (!x->idlest || sb->idle_since < x->idlest->idle_since))
            x->idlest = sb;
    }
    size_t waiting_held = holder_of(h, &n, wa.app_id)->held;
    size_t share = (size_t)w->cfg.max_sandboxes / n;
    if (share == 0)
        share = 1;
    struct holder *victim = NULL;
    for (size_t i = 0; i < n && waiting_held < share; i++) {
        struct holder *x = &h[i];
        if (!x->idlest || x->held <= share || x->held <= waiting_held + 1)
            continue;
        if (!victim || x->held > victim->held ||
            (x->held == victim->held && x->idlest->idle_since < victim->idlest->idle_since))
            victim = x;
    }
    bool ended = false;
    if (victim) {
        char reason[128];
        snprintf(reason, sizeof reason,
                 "evicted: %s was waiting; this App held %zu of %lld Sandboxes (fair share %zu)",
                 wa.app_id, victim->held, (long long)w->cfg.max_sandboxes, share);
        log_info("worker: sandbox %s of %s %s", victim->idlest->rt.sandbox_id, victim->app_id,
                 reason);
        sandbox_terminate(victim->idlest, reason, false);
        ended = true;
    }
    free(h);
    return ended;
}

void consumer_run(struct worker *w)
{
    bool claimed = false, evicted = false;
    if (w->stopping)
        return;
    while (w->n_deliveries < (size_t)w->cfg.max_sandboxes) {
        /* Placement: an idle Session's message goes to the host with a warm Sandbox of its
         * shape, else the least loaded one (or to any host once it has waited the grace); the
         * same transaction claims that warm Sandbox here for the Session (delivery_activate). */
        struct store_placement placement = {w->cfg.placement_grace_ms, w->cfg.host_lost_ms,
                                            w->cfg.quota_live_sandboxes};
        /* At the limit, another App's waiting message may end an idle Sandbox (at most one per
         * pass: the claims after it show whether another is due). */
        if (w->n_serving >= (size_t)w->cfg.max_sandboxes && !evicted)
            evicted = evict_for_waiting_app(w, &placement);
        struct store_delivery *d = calloc(1, sizeof *d);
        if (!d)
            break;
        /* At the Sandbox limit only Sessions that already have a Sandbox here can be served. */
        bool owned_only = w->n_serving >= (size_t)w->cfg.max_sandboxes;
        /* The lease covers the agent's time to answer from the start, so delivery needs no extra
         * write; the heartbeat renews it for as long as this worker lives. */
        int64_t lease = w->cfg.lease_ms + w->cfg.message_timeout * 1000;
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
