/*
 * store_hosts.h: the store's operations on hosts (hosts.c).
 *
 * Plain functions over the one store implementation (common/store/sql/); the conventions of
 * store.h apply.
 */
#ifndef SBX_STORE_HOSTS_H
#define SBX_STORE_HOSTS_H

#include "store_records.h"

struct store;

/* Several worker hosts on one store. */
/* Registers (or refreshes) host->id with its address and capacity, heartbeat now, and records
 * that worker_id (registered before) runs on it. A host that had been declared lost comes
 * back: lost_at is cleared and *was_lost_at (may be NULL) says when it was lost (0: it was
 * not), so that its worker can reap what the loss left on this machine. */
enum store_status store_host_register(struct store *st, const struct store_ctx *ctx,
                                      const struct store_host *host, const char *worker_id,
                                      int64_t *was_lost_at);
/* Heartbeats the host. STORE_CONFLICT when it was declared lost: its workers must exit. */
enum store_status store_host_heartbeat(struct store *st, const char *host_id);
/* Every registered host, lost ones too, by id. */
enum store_status store_host_list(struct store *st, struct store_host **out, size_t *n);
/* In one writer transaction, for each host other than self_host_id whose heartbeat is older
 * than stale_ms and that is not lost yet: lost_at = now; its live Sandboxes are terminated
 * with reason "host lost"; its workers are stopped; the messages they were delivering go back
 * to the queue (the attempt counts, as for a lost worker); their Sessions go back to idle so
 * that their next message activates on another host. *n_lost (may be NULL): how many hosts.
 * Reads first without the write lock, so that the common case (nothing lost) writes nothing. */
enum store_status store_host_declare_lost(struct store *st, const struct store_ctx *ctx,
                                          const char *self_host_id, int64_t stale_ms,
                                          size_t *n_lost);

#endif
