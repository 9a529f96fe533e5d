/*
 * durable.c: with the claim that overlaps the enqueue's fsync (claim_overlap, commit_watermark.h),
 * a worker may claim a message whose 202 is not on disk yet; its line is held here until the
 * gateway's watermark says that batch is synced. Usually the fsync is over before the agent's
 * `started` and nothing is held. Lines held longer than HOLD_BOUND_MS (a lost wake-up, a gateway
 * that died before its sync) go out after the worker syncs the WAL itself: that sync makes every
 * commit it could see durable.
 */
#include "sandbox/sandbox.h"
#include "commit_watermark.h"
#include "log.h"

#include <errno.h>
#include <string.h>

#define HOLD_BOUND_MS 50

uint64_t sandbox_commit_gen(struct worker *w)
{
    /* PostgreSQL makes a commit visible only once it is durable: nothing to wait for. */
    if (w->cfg.store[0] && strcmp(w->cfg.store, "sqlite") != 0)
        return 0;
    if (!w->watermark) {
        char run_dir[600], err[256];
        snprintf(run_dir, sizeof run_dir, "%.500s/run", w->cfg.data_dir);
        /* Made by a gateway with claim_overlap before its first overlapped commit, and never
         * removed: while it is missing no message can be visible before it is on disk. */
        w->watermark = commit_watermark_open(run_dir, false, err, sizeof err);
        if (!w->watermark) {
            if (err[0])
                log_warn("worker: commit watermark: %s", err);
            return 0;
        }
    }
    return commit_watermark_written(w->watermark);
}

static void on_hold_bound(evutil_socket_t fd, short what, void *arg);

static void arm_bound(struct worker *w)
{
    if (!w->durable_ev && !(w->durable_ev = evtimer_new(w->base, on_hold_bound, w)))
        return;
    struct timeval tv = {0, HOLD_BOUND_MS * 1000};
    evtimer_add(w->durable_ev, &tv);
}

bool sandbox_durable_or_hold(struct sandbox *sb)
{
    struct worker *w = sb->w;
    uint64_t g = sb->delivery->durable_gen;
    if (g == 0 || !w->watermark || commit_watermark_reached(w->watermark, g))
        return true;
    if (w->n_held++ == 0) {
        commit_watermark_waiting(w->watermark, 1);
        /* Raised between the check above and the +1: the gateway may not have seen the +1. */
        if (commit_watermark_reached(w->watermark, g)) {
            commit_watermark_waiting(w->watermark, -1);
            w->n_held = 0;
            return true;
        }
        arm_bound(w);
    }
    sb->line_held = true;
    log_emit(LOG_LEVEL_DEBUG, sb->delivery->message.request_id,
             "worker: %s waits for its commit to be on disk", sb->delivery->message.id);
    return false;
}

/* One pass: sends what may go (everything when forced), forgets holds of Sandboxes that left
 * BUSY, and stops waiting once nothing is held. */
static void release(struct worker *w, bool force)
{
    if (w->n_held == 0)
        return;
again:
    for (struct sandbox *sb = w->sandboxes; sb; sb = sb->next) {
        if (!sb->line_held)
            continue;
        if (sb->state != SB_BUSY || !sb->delivery) {
            sb->line_held = false;
            continue;
        }
        if (force || commit_watermark_reached(w->watermark, sb->delivery->durable_gen)) {
            sb->line_held = false;
            sandbox_send_held_line(sb); /* may terminate sb: start over */
            goto again;
        }
    }
    size_t held = 0;
    for (struct sandbox *sb = w->sandboxes; sb; sb = sb->next)
        held += sb->line_held;
    if (held == 0) {
        commit_watermark_waiting(w->watermark, -1);
        if (w->durable_ev)
            evtimer_del(w->durable_ev);
    }
    w->n_held = held;
}

void sandbox_release_held(struct worker *w)
{
    release(w, false);
}

static void on_hold_bound(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    (void)fd;
    (void)what;
    release(w, false);
    if (w->n_held == 0)
        return;
    /* Every commit this worker could read is in the WAL's file: syncing it makes them durable. */
    if (commit_watermark_sync_wal(w->cfg.db_path) == 0) {
        log_warn("worker: a message's commit was not synced within %d ms; synced the WAL itself",
                 HOLD_BOUND_MS);
        release(w, true);
    } else {
        log_error("worker: cannot sync the WAL: %s; holding %zu messages", strerror(errno),
                  w->n_held);
        arm_bound(w);
    }
}
