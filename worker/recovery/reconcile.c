/*
 * reconcile.c: adopting what dead workers of this host left behind, declaring other hosts lost,
 * and reaping what this host's own loss left on this machine (reconcile.h). Two live workers may
 * both see the same dead one; worker_adopt() lets exactly one of them take it. A worker never
 * adopts a worker of another host: it could not kill that machine's processes, and must not touch
 * its own kernel state for them; other hosts are handled by host loss (host_declare_lost).
 */
#include "recovery/reconcile.h"
#include "store_hosts.h"
#include "store_queue.h"
#include "store_sandboxes.h"
#include "store_workers.h"
#include "sandbox/sandbox.h"
#include "log.h"
#include "host/links.h"
#include "recovery/host_reconcile.h"
#include "clock.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool reconcile_pid_is_worker(int64_t pid)
{
    char path[64], buf[512];
    FILE *f;
    if (pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno == ESRCH))
        return false;
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    if (!(f = fopen(path, "r")))
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* "pid (comm) S ...": the comm may hold spaces or parentheses, so look after the last ')'. */
    char *close = strrchr(buf, ')'), *open = strchr(buf, '(');
    if (!close || !open || close[1] != ' ' || close[2] == 'Z' || close[2] == 'X')
        return false;
    *close = '\0';
    /* sbx-worker, or a test build of it (sbx-worker-fork). */
    return strncmp(open + 1, "sbx-worker", 10) == 0;
}

static void reap_adopted(struct worker *w)
{
    struct store_sandbox *list = NULL;
    size_t n = 0;
    if (store_sandbox_list_live(w->st, w->id, &list, &n) != STORE_OK)
        return;
    for (size_t i = 0; i < n; i++)
        if (!sandbox_find(w, list[i].id))
            sandbox_reap(w, &list[i]);
    free(list);
}

/* Once per worker process, at its first pass: NFS exports of Sandboxes that no longer run (a
 * worker died between a VM's end and its export's removal) are withdrawn. Reaping adopted
 * Sandboxes removes theirs one by one; this catches what no store record leads to. */
static void reconcile_nfs_exports(struct worker *w)
{
    char err[512];
    size_t removed = 0;
    if (w->reconciled.nfs_exports)
        return;
    w->reconciled.nfs_exports = true;
    if (reconcile_host_nfs_exports(w->st, &w->cfg, &removed, err, sizeof err) != 0)
        log_warn("worker: NFS exports: %s", err);
    else if (removed > 0)
        log_info("worker: withdrew %zu NFS exports of Sandboxes no longer running", removed);
}

/* Once per worker process, at its first pass: cgroups and jails of this installation's Sandboxes
 * that no longer run and that no store record led to (a removal that timed out, a worker killed
 * between a Sandbox's end and its cleanup). */
static void reconcile_leftovers(struct worker *w)
{
    struct leftover_report report;
    char err[512];
    if (w->reconciled.leftovers)
        return;
    w->reconciled.leftovers = true;
    if (reconcile_host_leftovers(w->st, &w->cfg, &report, err, sizeof err) != 0)
        log_warn("worker: leftover cgroups and jails: %s", err);
    else if (report.cgroups + report.jails > 0)
        log_info("worker: removed the cgroups of %zu and the jails of %zu Sandboxes no longer "
                 "running",
                 report.cgroups, report.jails);
}

/* Once per worker process, at its first pass: links and firewall elements of this host's
 * Sandboxes that no longer run (their worker died, or was stopped between a Sandbox's end and its
 * cleanup). Only once a driver's init set up the network (net_firewall). */
static void reconcile_network(struct worker *w)
{
    struct net_reconcile_report report = {0};
    char err[512];
    if (w->reconciled.network || !net_firewall())
        return;
    w->reconciled.network = true;
    if (reconcile_host_network(w->st, w->cfg.host_id, &report, err, sizeof err) != 0)
        log_warn("worker: network reconciliation: %s", err);
    else if (report.links_removed + report.elements_removed > 0)
        log_info("worker: removed %zu links and %zu firewall elements of Sandboxes no longer "
                 "running",
                 report.links_removed, report.elements_removed);
}

/* Once per worker process, at its first pass, when this host had been declared lost before it
 * came back (host_register said when): the Sandboxes its loss ended in the store may still have
 * processes, jails, cgroups, links and exports here. Reap them like a dead worker's; the store
 * already records them terminated ("host lost"), so only the machine is cleaned. */
static void reap_host_lost(struct worker *w)
{
    struct store_sandbox *list = NULL;
    size_t n = 0;
    if (w->reconciled.host_lost || !w->host_was_lost_at)
        return;
    w->reconciled.host_lost = true;
    if (store_sandbox_list_host_lost(w->st, w->cfg.host_id, w->host_was_lost_at, &list, &n) !=
        STORE_OK) {
        log_warn("worker: cannot list the Sandboxes host %s lost", w->cfg.host_id);
        return;
    }
    if (n > 0)
        log_info("worker: host %s had been declared lost; reaping the %zu Sandboxes it left here",
                 w->cfg.host_id, n);
    for (size_t i = 0; i < n; i++)
        sandbox_reap(w, &list[i]);
    free(list);
}

bool reconcile_other_hosts(struct worker *w)
{
    size_t lost = 0;
    enum store_status rc =
        store_host_declare_lost(w->st, &w->ctx, w->cfg.host_id, w->cfg.host_lost_ms, &lost);
    if (rc != STORE_OK)
        log_warn("worker: declaring stale hosts lost failed: %s", store_status_name(rc));
    else if (lost > 0) {
        log_warn("worker: declared %zu host(s) lost (no heartbeat for %lld ms); their Sessions "
                 "and messages are free for this host",
                 lost, (long long)w->cfg.host_lost_ms);
        return true;
    }
    return false;
}

/* Whether another worker of this host is gone. On this machine the process table is the truth: a
 * live worker whose loop was held up (a long SQLite busy wait) is never taken for dead. A worker
 * of this host id on another machine (the host id moved, e.g. a container rescheduled) is judged
 * by its heartbeat. */
static bool same_host_worker_gone(const struct worker *w, const struct store_worker *o, int64_t now)
{
    if (strcmp(o->host, w->hostname) == 0)
        return !reconcile_pid_is_worker(o->pid);
    return now - o->heartbeat_at > w->cfg.worker_stale_ms;
}

bool reconcile_run(struct worker *w)
{
    reconcile_nfs_exports(w);
    reconcile_network(w);
    reconcile_leftovers(w);
    reap_host_lost(w);
    struct store_worker *workers = NULL;
    size_t n = 0, requeued = 0;
    bool adopted = false;
    int64_t now = clock_wall_ms();

    if (store_worker_list_active(w->st, &workers, &n) == STORE_OK) {
        for (size_t i = 0; i < n; i++) {
            const struct store_worker *o = &workers[i];
            if (strcmp(o->id, w->id) == 0 || strcmp(o->host_id, w->cfg.host_id) != 0)
                continue; /* another host's workers end with their host (host_declare_lost) */
            if (!same_host_worker_gone(w, o, now))
                continue;
            enum store_status rc = store_worker_adopt(w->st, &w->ctx, o->id, w->id);
            if (rc == STORE_OK) {
                log_info("worker: adopted dead worker %s (pid %lld)", o->id, (long long)o->pid);
                adopted = true;
            } else if (rc != STORE_NOT_FOUND) {
                log_warn("worker: cannot adopt %s: %s", o->id, store_status_name(rc));
            }
        }
        free(workers);
    }
    if (adopted)
        reap_adopted(w);
    if (store_queue_requeue_expired(w->st, &w->ctx, &requeued) == STORE_OK && requeued > 0)
        log_info("worker: requeued %zu messages whose lease expired", requeued);
    return adopted || requeued > 0;
}
