/*
 * loop.c: the worker process around its libevent loop: registration in the store, wake-ups
 * (notify.h), the heartbeat and fallback-poll timers, signals, and the orderly shutdown on SIGTERM
 * (stop claiming, let deliveries in flight finish for shutdown_grace, release what is left,
 * terminate every Sandbox, exit 0). It wires the Sandboxes' news (sandbox_hooks) to delivery/
 * and to itself: a Sandbox warm or gone refills the pool, kicks the consumer, and lets a stopping
 * worker exit once it holds nothing.
 */
#include "worker.h"
#include "store.h"
#include "store_apps.h"
#include "cache_sweep.h"
#include "callback.h"
#include "import_jobs.h"
#include "delivery/chunks.h"
#include "delivery/delivery.h"
#include "delivery/webhook_sender.h"
#include "host/firewall.h"
#include "host/host_tag.h"
#include "host/links.h"
#include "host/nfs_export.h"
#include "images/image_run.h"
#include "id.h"
#include "clock.h"
#include "commit_watermark.h"
#include "log.h"
#include "notify.h"
#include "pki.h"
#include "secret_box.h"
#include "recovery/host_beat.h"
#include "recovery/reconcile.h"
#include "recovery/workspace_mounts.h"
#include "sandbox/egress.h"
#include "sandbox/egress_dns.h"
#include "sandbox/egress_events.h"
#include "sandbox/secret_broker.h"
#include "sandbox/jobs.h"
#include "sandbox/pool.h"
#include "sandbox/priority.h"
#include "sandbox/sandbox.h"

#include <errno.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* At the end, how long the job threads get to finish what they run (a Sandbox's teardown takes
 * a few seconds at most; a boot past its deadline may never end). */
#define JOBS_STOP_WAIT_MS 10000

static struct timeval ms_tv(int64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    return tv;
}

/* Exits the loop once a stopping worker holds nothing any more. */
static void maybe_exit(struct worker *w)
{
    if (!w->stopping || w->sandboxes || w->n_deliveries > 0)
        return;
    event_base_loopexit(w->base, NULL);
}

/* sandbox_hooks: a pool Sandbox became warm (the pool may want another). */
static void on_sandbox_warm(struct worker *w)
{
    pool_replenish(w);
}

/* sandbox_hooks: a Sandbox ended: its place in the pool and its capacity are free again. */
static void on_sandbox_gone(struct worker *w)
{
    pool_replenish(w);
    consumer_kick(w);
    maybe_exit(w);
}

static const struct sandbox_hooks hooks = {
    .activating = activation_continue,
    .started = activation_started,
    .replied = delivery_replied,
    .chunk = delivery_chunk,
    .lost = delivery_lost,
    .warm = on_sandbox_warm,
    .events = worker_notify_feeds,
    .gone = on_sandbox_gone,
};

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    consumer_run(arg);
}

static void on_notify(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    char buf[256];
    bool any = false, queue = false, stop = false, images = false, durable = false;
    (void)fd;
    (void)what;
    /* Every hint follows committed events, which the webhook threads may have to send; each of
     * the others asks for one look at the store: "queue" a claim, "stop" the stop requests,
     * "images" an import to claim, "durable" the lines held for their commit
     * (sandbox/durable.c). Only what the hint names is looked at, so that a message's wake-up
     * costs one claim and no other transaction on its way to the agent; NOTIFY_RESYNC (a lost
     * LISTEN connection) or anything else means all of them. The slow poll looks at all anyway. */
    while (notify_recv(w->notify, buf, sizeof buf) > 0) {
        if (strcmp(buf, "durable") == 0) {
            durable = true;
            continue;
        }
        any = true;
        if (strcmp(buf, "events") == 0)
            continue;
        if (strcmp(buf, "queue") == 0)
            queue = true;
        else if (strcmp(buf, "stop") == 0)
            queue = stop = true;
        else if (strcmp(buf, "images") == 0)
            images = true;
        else
            queue = stop = images = true;
    }
    if (durable)
        sandbox_release_held(w);
    if (any)
        webhook_sender_wake(w->webhooks);
    if (w->stopping)
        return;
    /* Claim first: a new message is the common case and its Sandbox starts work at once. */
    if (queue)
        consumer_run(w);
    if (stop)
        sandbox_check_stop_requests(w);
    if (images)
        images_poll(w);
}

static void on_poll(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    (void)fd;
    (void)what;
    if (w->stopping)
        return;
    if (reconcile_run(w))
        consumer_kick(w);
    workspace_mounts_reconcile(w);
    sandbox_check_stop_requests(w);
    sandbox_egress_refresh(w);
    egress_events_tick(w);
    egress_dns_tick(w);
    secret_broker_tick(w);
    pool_refresh_shapes(w);
    pool_replenish(w);
    consumer_run(w);
    images_poll(w);
    images_sweep(w);
}

/* The firewall's drop counters reach /metrics through the store (the gateway never opens the
 * firewall itself): the worker publishes them as Prometheus text in the settings table, and only
 * when they changed, so an idle host costs no commit. Every worker reads the same shared table. */
static void publish_firewall_metrics(struct worker *w)
{
    char text[4096], err[256];
    struct fw *fw = net_firewall();
    if (!fw || fw_metrics_text(fw, text, sizeof text, err, sizeof err) != 0)
        return;
    if (strcmp(text, w->firewall_metrics_sent) == 0)
        return;
    if (store_setting_put(w->st, "firewall_metrics", text) == STORE_OK)
        memcpy(w->firewall_metrics_sent, text, sizeof w->firewall_metrics_sent);
}

static void on_heartbeat(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    (void)fd;
    (void)what;
    enum store_status rc = store_worker_heartbeat(w->st, w->id);
    if (rc == STORE_CONFLICT) {
        /* Another worker took this one for dead and adopted its Sandboxes and leases (it reaps
         * them): carrying on would deliver twice. Leave at once, touching nothing. */
        log_error("worker %s: stopped by another worker (adopted, or its host declared lost: "
                  "heartbeat too late); exiting",
                  w->id);
        w->exit_code = 1;
        w->stopping = true;
        event_base_loopbreak(w->base);
        return;
    }
    if (rc != STORE_OK)
        log_warn("worker: heartbeat failed: %s", store_status_name(rc));
    if (reconcile_other_hosts(w))
        consumer_kick(w);
    delivery_renew_leases(w);
    publish_firewall_metrics(w);
    sandbox_record_drivers(w); /* a guest image built since start makes qemu usable */
}

/* The host heartbeat thread found this host declared lost: its Sandboxes are ended in the store
 * and its Sessions and leases moved to other hosts. Carrying on would deliver twice. Leave at
 * once, touching nothing: a restarted worker of this host reaps what is left here. */
static void on_host_lost(void *arg)
{
    struct worker *w = arg;
    log_error("worker %s: host %s was declared lost (heartbeat too late); exiting", w->id,
              w->cfg.host_id);
    w->exit_code = 1;
    w->stopping = true;
    event_base_loopbreak(w->base);
}

static void on_grace(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    (void)fd;
    (void)what;
    log_info("worker: shutdown grace over; releasing deliveries still in flight");
    w->grace_expired = true;
    sandbox_shutdown(w);
    maybe_exit(w);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct worker *w = arg;
    (void)what;
    if (w->stopping) {
        /* A second signal: do not wait for deliveries any more. */
        on_grace(-1, 0, w);
        return;
    }
    log_info("worker: %s: stopping (no new claims; %zu deliveries in flight)",
             sig == SIGTERM ? "SIGTERM" : "SIGINT", w->n_deliveries);
    w->stopping = true;
    event_del(w->poll_ev);
    struct timeval tv = ms_tv(w->cfg.shutdown_grace * 1000);
    evtimer_add(w->grace_ev, &tv);
    sandbox_shutdown(w);
    maybe_exit(w);
}

/* The callback API on callback_listen, with certificates from the installation's keys (made here
 * if this is the installation's first process). */
static int callbacks_start(struct worker *w, const char *run_dir, char *err, size_t errlen)
{
    char why[512];
    if (pki_open(w->cfg.ca_dir, &w->pki, why, sizeof why) != 0) {
        snprintf(err, errlen, "cannot open the installation's keys: %s", why);
        return -1;
    }
    w->ca_pem = pki_ca_pem(w->pki);
    w->worker_peer = notify_peer_new(w->cfg.store, run_dir, "worker");
    w->callbacks = callback_server_start(&w->cfg, w->st, w->pki, w->worker_peer, why, sizeof why);
    if (!w->callbacks) {
        snprintf(err, errlen, "callback API: %s (set callback_listen=off to run without it)", why);
        return -1;
    }
    return 0;
}

int worker_init(struct worker *w, const struct sbx_config *cfg,
                const struct driver *(*find_driver)(const char *name), char *err, size_t errlen)
{
    char run_dir[600], why[512];
    memset(w, 0, sizeof *w);
    w->cfg = *cfg;
    w->find_driver = find_driver;
    w->sandbox_hooks = &hooks;
    if (id_new("wrk", w->id, sizeof w->id) != 0) {
        snprintf(err, errlen, "cannot make a worker id: no randomness");
        return -1;
    }
    snprintf(w->actor, sizeof w->actor, "worker:%s", w->id);
    w->ctx.actor = w->actor;
    if (gethostname(w->hostname, sizeof w->hostname) != 0)
        snprintf(w->hostname, sizeof w->hostname, "localhost");
    /* The worker may start before the gateway has made the data directory. */
    if (config_make_data_dirs(cfg, err, errlen) != 0)
        return -1;
    /* NORMAL by default: a worker's state changes need not each wait for an fsync. WAL frames
     * are written in order, so the gateway's next FULL commit makes them durable too; a power
     * loss can only undo the latest ones, and undoing a completion means a redelivery (the lease
     * expires), never a message lost or recorded completed twice. */
    w->st = store_open(cfg->store, cfg->db_path, (int)cfg->busy_timeout_ms, cfg->worker_synchronous,
                       err, errlen);
    if (!w->st)
        return -1;
    /* Kernel state this worker makes (links, firewall elements, cgroups, jails, NFS exports) is
     * tagged with the installation,
     * so that another sbx on this host leaves it alone, and this one leaves the other's. */
    enum store_status rc = installation_id(w->st, w->installation);
    if (rc != STORE_OK) {
        snprintf(err, errlen, "cannot read the installation id in %s: %s", cfg->db_path,
                 store_status_name(rc));
        return -1;
    }
    net_set_installation(w->installation);
    host_tag_set(w->installation);
    rc = store_worker_register(w->st, w->id, w->hostname, (int64_t)getpid());
    if (rc != STORE_OK) {
        snprintf(err, errlen, "cannot register the worker in %s: %s", cfg->db_path,
                 store_status_name(rc));
        return -1;
    }
    struct store_host host = {.capacity = cfg->host_capacity};
    snprintf(host.id, sizeof host.id, "%s", cfg->host_id);
    snprintf(host.address, sizeof host.address, "%s", cfg->host_address);
    rc = store_host_register(w->st, &w->ctx, &host, w->id, &w->host_was_lost_at);
    if (rc != STORE_OK) {
        snprintf(err, errlen, "cannot register host %s in %s: %s", cfg->host_id, cfg->db_path,
                 store_status_name(rc));
        return -1;
    }
    errno = 0;
    w->nice = getpriority(PRIO_PROCESS, 0);
    if (errno != 0)
        w->nice = 0;
    w->base = event_base_new();
    /* Two priorities, before any event exists (an event takes the middle one when it is made):
     * SIGTERM and SIGINT get the first, so that a signal and a wake-up ready in the same loop
     * iteration stop the worker before it claims what the wake-up announced. */
    if (w->base && event_base_priority_init(w->base, 2) != 0) {
        snprintf(err, errlen, "cannot set the event loop's priorities");
        return -1;
    }
    if (!w->base || !(w->jobs = jobs_new(w->base, (size_t)cfg->job_threads, 0)) ||
        !(w->background = jobs_new(w->base, (size_t)cfg->job_threads, BACKGROUND_NICE))) {
        snprintf(err, errlen, "cannot start the event loop or its threads");
        return -1;
    }
    snprintf(run_dir, sizeof run_dir, "%.500s/run", cfg->data_dir);
    w->notify = notify_listen(cfg->store, run_dir, "worker", why, sizeof why);
    if (!w->notify)
        log_warn("worker: no wake-ups (%s); relying on the %lld ms poll", why,
                 (long long)cfg->poll_ms);
    w->gateway_peer = notify_peer_new(cfg->store, run_dir, "gateway");
    if (strcmp(cfg->callback_listen, "off") != 0 && callbacks_start(w, run_dir, err, errlen) != 0)
        return -1;
    /* Made here at first start like the installation's other keys; shared by every host. */
    int box = secret_box_open_config(cfg, &w->secrets, why, sizeof why);
    if (box < 0) {
        snprintf(err, errlen, "cannot open the key of App secrets: %s", why);
        return -1;
    }
    if (box > 0)
        log_warn("worker: no key for App secrets (%s): Apps with secrets cannot run here", why);
    w->kick_ev = event_new(w->base, -1, 0, on_kick, w);
    w->poll_ev = event_new(w->base, -1, EV_PERSIST, on_poll, w);
    w->heartbeat_ev = event_new(w->base, -1, EV_PERSIST, on_heartbeat, w);
    w->due_ev = evtimer_new(w->base, on_kick, w);
    w->grace_ev = evtimer_new(w->base, on_grace, w);
    w->sigterm_ev = evsignal_new(w->base, SIGTERM, on_signal, w);
    w->sigint_ev = evsignal_new(w->base, SIGINT, on_signal, w);
    if (w->notify)
        w->notify_ev =
            event_new(w->base, notify_listener_fd(w->notify), EV_READ | EV_PERSIST, on_notify, w);
    if (!w->kick_ev || !w->poll_ev || !w->heartbeat_ev || !w->due_ev || !w->grace_ev ||
        !w->sigterm_ev || !w->sigint_ev || (w->notify && !w->notify_ev)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (event_priority_set(w->sigterm_ev, 0) != 0 || event_priority_set(w->sigint_ev, 0) != 0) {
        snprintf(err, errlen, "cannot give the signal events their priority");
        return -1;
    }
    return 0;
}

/* The NFS server serves every worker of this host (one data_dir): the last one to leave stops it,
 * so that nothing of sbx keeps TCP 2049 open once sbx is down. A worker that starts later starts
 * the server again at its first export. */
static void nfs_stop_if_last(struct worker *w)
{
    struct store_worker *workers = NULL;
    size_t n = 0;
    bool others = false;
    char err[256];
    if (store_worker_list_active(w->st, &workers, &n) != STORE_OK) {
        log_warn("worker: cannot list workers; leaving the NFS server running");
        return;
    }
    for (size_t i = 0; i < n && !others; i++)
        others =
            strcmp(workers[i].id, w->id) != 0 && strcmp(workers[i].host_id, w->cfg.host_id) == 0 &&
            strcmp(workers[i].host, w->hostname) == 0 && reconcile_pid_is_worker(workers[i].pid);
    free(workers);
    if (!others && nfs_export_stop(&w->cfg, err, sizeof err) != 0)
        log_warn("worker: stopping the NFS server: %s", err);
}

int worker_run(struct worker *w)
{
    struct timeval poll = ms_tv(w->cfg.poll_ms), beat = ms_tv(w->cfg.heartbeat_ms);
    signal(SIGPIPE, SIG_IGN);
    event_add(w->sigterm_ev, NULL);
    event_add(w->sigint_ev, NULL);
    if (w->notify_ev)
        event_add(w->notify_ev, NULL);
    event_add(w->poll_ev, &poll);
    event_add(w->heartbeat_ev, &beat);
    w->host_beat =
        host_beat_start(w->st, w->cfg.host_id, w->cfg.heartbeat_ms, w->base, on_host_lost, w);
    if (!w->host_beat)
        log_warn("worker: no host heartbeat thread (%m): other hosts will declare host %s lost",
                 w->cfg.host_id);

    log_info("worker %s started on host %s (installation %s, pid %d, pool %lld per shape, at "
             "most %lld sandboxes)",
             w->id, w->cfg.host_id, w->installation, (int)getpid(), (long long)w->cfg.pool_size,
             (long long)w->cfg.max_sandboxes);
    sandbox_driver(w, w->cfg.driver); /* says at start what this host cannot do */
    sandbox_record_drivers(w);
    w->webhooks = webhook_sender_start(w->st, &w->cfg, w->id);
    reconcile_run(w);
    pool_refresh_shapes(w);
    pool_replenish(w);
    consumer_kick(w);

    event_base_dispatch(w->base);
    webhook_sender_stop(w->webhooks);
    w->webhooks = NULL;
    host_beat_stop(w->host_beat);
    w->host_beat = NULL;

    /* Hands back what the shutdown left owned: a Session whose cold boot it ended is idle again,
     * and another worker delivers its message. */
    size_t requeued = 0;
    enum store_status rc = store_worker_stop(w->st, &w->ctx, w->id, &requeued);
    if (rc != STORE_OK)
        log_error("worker: cannot record the stop: %s (peers take this worker for dead once its "
                  "heartbeat is stale)",
                  store_status_name(rc));
    else if (requeued > 0)
        log_warn("worker: %zu messages were still leased at the stop; requeued", requeued);
    nfs_stop_if_last(w);
    log_info("worker %s stopped", w->id);
    return w->exit_code;
}

void worker_fini(struct worker *w)
{
    egress_dns_stop();     /* its thread asks the store */
    secret_broker_stop(w); /* its threads, then its last events, before the store goes */
    egress_events_stop();  /* its event and batch, before the loop and the store go */
    /* Jobs still running use their Sandbox: let them end before freeing anything, but not for
     * ever: a boot stuck past its deadline (sandbox/boot.c) may never return, and its Sandbox
     * was already failed and taken out of w->sandboxes, so nothing below frees what it uses. */
    int64_t jobs_until = clock_mono_ms() + JOBS_STOP_WAIT_MS;
    bool jobs_ended = jobs_free(w->jobs, JOBS_STOP_WAIT_MS);
    int64_t left = jobs_until - clock_mono_ms();
    jobs_ended = jobs_free(w->background, left > 1000 ? (int)left : 1000) && jobs_ended;
    /* Sandboxes left only when the loop ended abnormally (adopted by another worker, which reaps
     * them): their rows stay for reconciliation. A job still busy may use one: then they are
     * left to the process's exit, like that job. */
    if (jobs_ended) {
        delivery_drop_all(w);
        sandbox_free_all(w);
    }
    struct event *evs[] = {w->notify_ev, w->poll_ev,    w->heartbeat_ev, w->kick_ev,   w->due_ev,
                           w->grace_ev,  w->sigterm_ev, w->sigint_ev,    w->durable_ev};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        if (evs[i])
            event_free(evs[i]);
    /* Its requests use the store: stopped before the store closes. */
    callback_server_stop(w->callbacks);
    notify_peer_free(w->worker_peer);
    pki_free(w->pki);
    secret_box_free(w->secrets);
    notify_listener_close(w->notify);
    notify_peer_free(w->gateway_peer);
    free(w->shapes);
    store_app_list_free(w->prestart_apps, w->n_prestart_apps);
    if (w->watermark && w->n_held)
        commit_watermark_waiting(w->watermark, -1);
    commit_watermark_close(w->watermark);
    image_run_cache_free(w->run_cache);
    free(w->ca_files_json);
    if (w->base)
        event_base_free(w->base);
    if (w->st)
        store_close(w->st);
}
