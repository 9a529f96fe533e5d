/*
 * reconcile.h: making the store and the host agree after a worker died: its leases go back to the
 * queue, its Sessions become idle, and its Sandboxes are reaped by this worker (their processes,
 * jails, cgroups and network state removed) and recorded terminated with reason "worker restart".
 * Only workers of this host are adopted; another host whose heartbeat stops is declared lost.
 */
#ifndef SBX_RECONCILE_H
#define SBX_RECONCILE_H

#include "worker.h"

/* Finds dead workers of this host (a pid on this machine that is no longer a worker), adopts and
 * reaps what they left; also requeues expired leases. At its first pass after this host came
 * back from being declared lost, reaps what the loss left on this machine. True when messages
 * may have become free to claim (the caller kicks the consumer). */
bool reconcile_run(struct worker *w);

/* Declares other hosts lost whose heartbeat is older than host_lost_ms (on the heartbeat timer;
 * this host's own heartbeat runs on its thread, host_beat.h). True when some were: their Sessions
 * and messages are free for this host. */
bool reconcile_other_hosts(struct worker *w);

/* Whether pid on this host is a live sbx-worker process (not a zombie, not a reused pid). */
bool reconcile_pid_is_worker(int64_t pid);

#endif
