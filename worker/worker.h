/*
 * worker.h: the state of one worker process, shared by the files that each own one part of it:
 *   loop.c                 setup, timers (heartbeat, fallback poll), wake-ups, signals, shutdown;
 *   delivery/claim.c       claiming messages and routing each to its Session's Sandbox;
 *   delivery/backoff.c     retry delays;
 *   sandbox/lifecycle.c    a Sandbox's life: boot, activate, deliver, expire, terminate;
 *   sandbox/pool.c         keeping warm Sandboxes ready per shape;
 *   recovery/reconcile.c   adopting and cleaning up after dead workers of this host, declaring
 *                          other hosts lost, reaping what this host's own loss left behind;
 *   recovery/host_beat.c   the host heartbeat, on a thread of its own.
 * Everything here is touched only on the event loop thread; the job threads get copies.
 */
#ifndef SBX_WORKER_H
#define SBX_WORKER_H

#include "config.h"
#include "drivers/driver.h"
#include "store.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>

struct jobs;
struct sandbox;
struct notify_listener;
struct notify_peer;
struct host_beat;

struct worker {
    struct sbx_config cfg;
    struct store *st;
    /* Maps an App's driver name to a driver; NULL for one this build or host does not have. */
    const struct driver *(*find_driver)(const char *name);
    struct event_base *base;
    struct jobs *jobs;
    char id[STORE_ID_LEN];
    char actor[64];
    struct store_ctx ctx;
    char hostname[256];
    int64_t host_was_lost_at;    /* when this host had been declared lost before it came back (0) */
    struct host_beat *host_beat; /* the host heartbeat thread (host_beat.h) while the loop runs */

    struct notify_listener *notify;   /* "queue"/"stop" from gateways; NULL: poll only */
    struct notify_peer *gateway_peer; /* "msg <id>"/"sandbox <id>" to gateways */
    struct event *notify_ev, *poll_ev, *heartbeat_ev, *kick_ev, *due_ev, *grace_ev, *sigterm_ev,
        *sigint_ev;

    struct sandbox *sandboxes;  /* every Sandbox this worker owns in memory */
    size_t n_serving;           /* Sandboxes claimed for a Session (activating or running) */
    size_t n_deliveries;        /* messages leased and not yet ended */
    struct store_shape *shapes; /* what the pool keeps warm (refreshed on the slow poll) */
    size_t n_shapes;
    struct {
        char name[16];
        const struct driver *drv; /* NULL: unavailable here */
    } drivers[8];
    size_t n_drivers;

    bool image_job_running; /* an Image import is queued or running (images/import_jobs.c) */

    bool stopping;      /* SIGTERM: no more claims, wind down */
    bool grace_expired; /* deliveries in flight are given up too */
    int exit_code;
};

/* loop.c */
int worker_init(struct worker *w, const struct sbx_config *cfg,
                const struct driver *(*find_driver)(const char *name), char *err, size_t errlen);
int worker_run(struct worker *w);
void worker_fini(struct worker *w);
/* Tells the gateway's long polls about a message ("msg <id>") or a Sandbox ("sandbox <id>"). */
void worker_notify_gateway(struct worker *w, const char *kind, const char *id);
/* Exits the loop once a stopping worker holds nothing any more. */
void worker_maybe_exit(struct worker *w);
/* The driver of that name, initialised on first use; NULL (logged once) when unavailable. */
const struct driver *worker_driver(struct worker *w, const char *name);

/* delivery/claim.c */
void consumer_kick(struct worker *w); /* claim soon (from any callback) */
void consumer_run(struct worker *w);  /* claim now, as much as capacity allows */
/* Ends a delivery attempt that did not produce a reply, with backoff; frees nothing. */
void consumer_fail_attempt(struct worker *w, struct store_delivery *d, const char *sandbox_id,
                           const char *reason);

/* delivery/backoff.c: the delay before retry number `attempt` (1 = first retry): base *
 * 2^(attempt-1), capped at max, with "equal jitter" (a uniform draw from the upper half) so that
 * many messages failing together do not retry together. */
int64_t backoff_delay_ms(int64_t attempt, int64_t base_ms, int64_t max_ms);

#endif
