/*
 * host_reconcile.h: this host's kernel state checked against the store: the links and firewall
 * elements (host/links.h), the NFS exports (host/nfs_export.h), the cgroups (host/cgroup.h) and
 * the jails (host/jail.h) of Sandboxes that no longer run are removed. The host/ files only ask "is
 * this Sandbox live?" through a callback; the answers come from the store here. Each call reads the
 * store once, after the host's state was read, so that anything a Sandbox made after it was
 * recorded as live is kept.
 */
#ifndef SBX_HOST_RECONCILE_H
#define SBX_HOST_RECONCILE_H

#include "config.h"
#include "host/links.h"
#include "store_records.h"

#include <stddef.h>

/* Removes the links and firewall elements this host must not keep (net_init done): those of a
 * Sandbox no worker runs any more that ended on this host (host_id) or that the store does not
 * know. A Sandbox live anywhere, or ended on another host (that host reaps its own: two host ids
 * on one machine share one nftables table and one set of links), is kept; so is everything when
 * the store cannot answer (-1, nothing removed). */
int reconcile_host_network(struct store *st, const char *host_id,
                           struct net_reconcile_report *report, char *err, size_t errlen);

/* What a start-up sweep of Sandbox directories removed (reconcile_host_leftovers). */
struct leftover_report {
    size_t cgroups; /* Sandboxes whose cgroups (v2 and v1 twins) were removed */
    size_t jails;   /* process-driver and qemu jails removed */
};

/* Removes the cgroups and the process-driver and qemu jails tagged with this installation
 * (host_tag.h) whose Sandbox the store does not list as live: their processes are killed, the
 * process jails unmounted and removed (never their files), the qemu jails removed with the files
 * sbx put in them. Another installation's, and untagged ones an older sbx may still run, are
 * left alone; so is everything when the store cannot answer (-1). */
int reconcile_host_leftovers(struct store *st, const struct sbx_config *cfg,
                             struct leftover_report *report, char *err, size_t errlen);

/* Withdraws the NFS exports of Sandboxes the store does not list as live (a worker died between
 * a VM's end and its export's removal); *removed says how many. */
int reconcile_host_nfs_exports(struct store *st, const struct sbx_config *cfg, size_t *removed,
                               char *err, size_t errlen);

#endif
