/*
 * reconcile.h: making the store and the host agree after a worker died: its leases go back to the
 * queue, its Sessions become idle, and its Sandboxes are reaped by this worker (their processes,
 * jails, cgroups and network state removed) and recorded terminated with reason "worker restart".
 */
#ifndef SBX_RECONCILE_H
#define SBX_RECONCILE_H

#include "worker.h"

/* Finds dead workers (stale heartbeat, or a pid on this host that is no longer a worker), adopts
 * and reaps what they left; also requeues expired leases. */
void reconcile_run(struct worker *w);

/* Whether pid on this host is a live sbx-worker process (not a zombie, not a reused pid). */
bool reconcile_pid_is_worker(int64_t pid);

#endif
