/*
 * worker.h: the state of one worker process, shared by the folders that each own one part of it.
 * Calls go one way, news comes back up through callbacks (sandbox_hooks, set by loop.c):
 *   loop.c, main.c   wiring, timers (heartbeat, fallback poll), wake-ups, signals, shutdown; it
 *                    refills the pool, kicks the consumer and exits when the Sandboxes say so
 *   delivery/        a message from the queue to a Sandbox and its reply back (delivery.h): the
 *                    sole owner of a delivery and of n_deliveries; the agent's partial output
 *                    (chunks.h); webhook delivery, on threads of its own (webhook_sender.h)
 *   sandbox/         a Sandbox's record and states (sandbox.h), the warm pool, the job threads,
 *                    the agent channel and protocol, expiry; owns n_serving and the Sandboxes
 *   recovery/        adopting dead workers of this host, declaring other hosts lost, reaping what
 *                    this host's own loss left behind, host-level reconciliation, host heartbeat
 *   drivers/         process, qemu, firecracker behind driver.h
 *   images/          the image cache and importer, nothing of this header; import_jobs.c and
 *                    cache_sweep.c, beside loop.c, drive them from the loop
 *   host/            the host's kernel state (jails, cgroups, links, firewall, NFS): no store, no
 *                    event loop, nothing of this header
 * loop.c -> delivery/ -> sandbox/ -> drivers/ -> images/ -> host/ -> common/ (recovery/ is called
 * by loop.c and calls sandbox/ and below); the includes follow it (docs/worker.md has the graph,
 * unit.worker.layers checks it). Everything here is touched only on the event loop thread; the
 * job threads get copies.
 */
#ifndef SBX_WORKER_H
#define SBX_WORKER_H

#include "config.h"
#include "installation.h"
#include "drivers/driver.h"
#include "notify.h"
#include "store_records.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct commit_watermark;
struct image_run_cache;
struct jobs;
struct sandbox;
struct sandbox_hooks;
struct host_beat;
struct webhook_sender;
struct secret_box;

struct worker {
    struct sbx_config cfg;
    struct store *st;
    /* Maps an App's driver name to a driver; NULL for one this build or host does not have. */
    const struct driver *(*find_driver)(const char *name);
    struct event_base *base;
    struct jobs *jobs;
    /* Threads at BACKGROUND_NICE for work no reply waits for: pool boots (where they can be put
     * back, sandbox/priority.h) and teardowns. */
    struct jobs *background;
    bool pool_deferred; /* pool_replenish waited for activations under way (sandbox/pool.c) */
    int64_t pool_deferred_since; /* mono ms: since when, for at most POOL_DEFER_MAX_MS */
    int nice; /* the worker's own nice level, which Sandboxes booted in the background get back */
    char id[STORE_ID_LEN];
    char actor[64];
    struct store_ctx ctx;
    char hostname[256];
    char installation[INSTALLATION_ID_LEN]; /* tags this worker's kernel state */
    int64_t host_was_lost_at;    /* when this host had been declared lost before it came back (0) */
    struct host_beat *host_beat; /* the host heartbeat thread (host_beat.h) while the loop runs */
    struct webhook_sender *webhooks; /* webhook delivery threads (delivery/webhook_sender.h) */
    /* The callback API (callback.h) this process serves, with the installation's keys (pki.h)
     * and a peer to wake the workers after an agent's message to a sibling Session; all NULL
     * when callback_listen is off. ca_pem (the CA's certificate, PEM) is what each Sandbox's
     * agent gets as SBX_CA_FILE. */
    struct pki *pki;
    struct callback_server *callbacks;
    struct notify_peer *worker_peer;
    const char *ca_pem;
    /* Opens App secrets at each activation (secret_box.h; sandbox/secrets.h). */
    struct secret_box *secrets;

    struct notify_listener *notify;   /* "queue"/"stop" from gateways; NULL: poll only */
    struct notify_peer *gateway_peer; /* "msg <id>"/"sandbox <id>" to gateways */
    struct event *notify_ev, *poll_ev, *heartbeat_ev, *kick_ev, *due_ev, *grace_ev, *sigterm_ev,
        *sigint_ev;

    /* Where a Sandbox's news goes (sandbox.h): its delivery's functions and the loop's. */
    const struct sandbox_hooks *sandbox_hooks;
    struct sandbox *sandboxes;  /* every Sandbox this worker owns in memory */
    size_t n_serving;           /* Sandboxes claimed for a Session (activating or running) */
    size_t n_deliveries;        /* messages leased and not yet ended */
    struct store_shape *shapes; /* what the pool keeps warm (refreshed on the slow poll) */
    size_t n_shapes;
    /* The Apps with pre-started agents (sandbox/pool.c, refreshed with the shapes). */
    struct store_app *prestart_apps;
    size_t n_prestart_apps;
    /* Per App whose pre-started agents keep ending before they are warm or claimed: how many in a
     * row, and no new one before not_before (mono ms), doubling up to a minute (sandbox.c). */
    struct prestart_backoff {
        char app_id[STORE_ID_LEN];
        int failures;
        int64_t not_before;
    } prestart_backoff[32];
    struct {
        char name[16];
        const struct driver *drv; /* NULL: unavailable here */
        char why[256];            /* why it is unavailable (its init's reason) */
    } drivers[8];
    size_t n_drivers;
    char drivers_sent[1024]; /* workers.drivers as this worker last wrote it ("" at start) */
    /* The gateway's commit watermark (commit_watermark.h), once a gateway made it; lines held
     * until their message's batch is on disk, and the timer that checks them without a wake-up
     * (sandbox/durable.c). */
    struct commit_watermark *watermark;
    size_t n_held;
    struct event *durable_ev;
    /* The Apps' start lines' argv and env as resolved lately (images/image_run.h). */
    struct image_run_cache *run_cache;
    char *ca_files_json; /* the start line's "files" with ca_pem, encoded once */

    bool image_job_running; /* an Image import is queued or running (import_jobs.c) */

    /* recovery/reconcile.c: the once-per-process passes already made */
    struct {
        bool nfs_exports, network, leftovers, host_lost;
    } reconciled;
    char firewall_metrics_sent[4096]; /* what the store holds from this worker ("" at start) */

    bool stopping;      /* SIGTERM: no more claims, wind down */
    bool grace_expired; /* deliveries in flight are given up too */
    int exit_code;
};

/* loop.c */
int worker_init(struct worker *w, const struct sbx_config *cfg,
                const struct driver *(*find_driver)(const char *name), char *err, size_t errlen);
int worker_run(struct worker *w);
void worker_fini(struct worker *w);

/* Asks for a claim pass soon: w->kick_ev runs consumer_run (delivery/claim.c) on the loop's next
 * turn. Any layer may ask (a delivery ended, a Sandbox went away); none calls the claim itself. */
static inline void consumer_kick(struct worker *w)
{
    if (w->kick_ev && !w->stopping)
        event_active(w->kick_ev, 0, 0);
}

#endif
