/*
 * host_reconcile.c: this host's links, firewall elements and NFS exports against the store
 * (host_reconcile.h).
 */
#include "recovery/host_reconcile.h"
#include "store_sandboxes.h"
#include "store_workers.h"
#include "drivers/shared.h"
#include "host/cgroup.h"
#include "host/jail.h"
#include "host/nfs_export.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The store's live Sandboxes (of every worker), read at the first question: after the host's
 * state was listed, so a Sandbox that made its link or export since is live by then (it is
 * recorded before it boots). Unknown (a store error) counts as live. */
struct live_list {
    struct store *st;
    bool loaded;
    enum store_status status;
    struct store_sandbox *v;
    size_t n;
};

static bool listed_live(const char *sandbox_id, void *arg)
{
    struct live_list *l = arg;
    if (!l->loaded) {
        l->loaded = true;
        l->status = store_sandbox_list_live(l->st, "", &l->v, &l->n);
    }
    if (l->status != STORE_OK)
        return true;
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i].id, sandbox_id) == 0)
            return true;
    return false;
}

int reconcile_host_nfs_exports(struct store *st, const struct sbx_config *cfg, size_t *removed,
                               char *err, size_t errlen)
{
    struct live_list l = {.st = st};
    *removed = 0;
    int rc = nfs_export_reconcile(cfg, listed_live, &l, removed, err, errlen);
    free(l.v);
    return rc;
}

int reconcile_host_leftovers(struct store *st, const struct sbx_config *cfg,
                             struct leftover_report *report, char *err, size_t errlen)
{
    /* One list per sweep, each read after that sweep listed its directories: a Sandbox that
     * another worker of this installation recorded and then gave a cgroup or a jail meanwhile is
     * in it. */
    struct live_list l[3] = {{.st = st}, {.st = st}, {.st = st}};
    size_t qemu_jails = 0;
    *report = (struct leftover_report){0};
    report->cgroups = cgroup_sweep(driver_cgroups(cfg, "worker"), listed_live, &l[0]);
    int rc =
        jail_sweep(cfg->chroot_base, "process", jail_remove, listed_live, &l[1], &report->jails);
    /* After the cgroups: a VMM left running in its Sandbox's cgroup is dead by now. */
    int qrc =
        jail_sweep(cfg->chroot_base, "qemu", jail_remove_tree, listed_live, &l[2], &qemu_jails);
    report->jails += qemu_jails;
    enum store_status status = STORE_OK;
    for (int i = 0; i < 3; i++) {
        if (l[i].loaded && l[i].status != STORE_OK)
            status = l[i].status;
        free(l[i].v);
    }
    if (status != STORE_OK) {
        snprintf(err, errlen, "store: live Sandboxes: %s (what it could not judge was kept)",
                 store_status_name(status));
        return -1;
    }
    if (rc != 0 || qrc != 0) {
        snprintf(err, errlen, "cannot read the jails in %s/%s", cfg->chroot_base,
                 rc != 0 ? "process" : "qemu");
        return -1;
    }
    return 0;
}

/* Whether this host must keep a Sandbox's links and firewall elements (host_reconcile.h). */
struct net_keep {
    struct live_list live;
    const char *host_id;
};

static bool net_keep(const char *sandbox_id, void *arg)
{
    struct net_keep *k = arg;
    struct store *st = k->live.st;
    struct store_sandbox sb;
    char host[STORE_HOST_ID_LEN];
    if (listed_live(sandbox_id, &k->live))
        return true;
    enum store_status rc = store_sandbox_get(st, "", sandbox_id, &sb);
    if (rc == STORE_NOT_FOUND)
        return false;
    if (rc != STORE_OK)
        return true;
    rc = store_worker_host(st, sb.worker_id, host, sizeof host);
    if (rc == STORE_NOT_FOUND)
        return false;
    return rc != STORE_OK || (host[0] && strcmp(host, k->host_id) != 0);
}

int reconcile_host_network(struct store *st, const char *host_id,
                           struct net_reconcile_report *report, char *err, size_t errlen)
{
    struct net_keep keep = {.live = {.st = st}, .host_id = host_id};
    int rc = net_reconcile(net_keep, &keep, report, err, errlen);
    free(keep.live.v);
    if (rc == 0 && keep.live.loaded && keep.live.status != STORE_OK) {
        snprintf(err, errlen, "store: live Sandboxes: %s (nothing removed)",
                 store_status_name(keep.live.status));
        return -1;
    }
    return rc;
}
