/*
 * store_workers.h: the store's operations on workers (workers.c).
 *
 * Plain functions over the one store implementation (common/store/sql/); the conventions of
 * store.h apply.
 */
#ifndef SBX_STORE_WORKERS_H
#define SBX_STORE_WORKERS_H

#include "store_records.h"

struct store;

/* Worker processes: registration, liveness, adoption of a dead one's work. */
enum store_status store_worker_register(struct store *st, const char *worker_id, const char *host,
                                        int64_t pid);
/* STORE_CONFLICT when the worker was adopted (taken for dead) or stopped: it must exit. */
enum store_status store_worker_heartbeat(struct store *st, const char *worker_id);
/* A worker's clean exit: marks it stopped and, in the same transaction, hands back what it still
 * holds as for a dead worker (sql_worker_release_in_tx): a Session it had begun to activate whose
 * cold Sandbox the shutdown ended before it was the Session's (released messages leave their
 * Session's owner as it was), and any lease it did not give back (*requeued: how many; their
 * attempt counts). STORE_OK also when a peer had taken it for dead and released it already. */
enum store_status store_worker_stop(struct store *st, const struct store_ctx *ctx,
                                    const char *worker_id, size_t *requeued);
/* Workers that have not stopped (stopped_at unset), this one included, so that a worker can
 * tell a dead peer by its pid on this host without waiting for its heartbeat to go stale. */
enum store_status store_worker_list_active(struct store *st, struct store_worker **out, size_t *n);
/* The host worker_id belongs to ("" for a worker registered before hosts), stopped or not.
 * STORE_NOT_FOUND for an unknown worker. */
enum store_status store_worker_host(struct store *st, const char *worker_id, char *host_id,
                                    size_t len);
/* Moves the Sandboxes and Sessions of a dead worker to new_owner (for reconciliation), in one
 * transaction that also requeues the dead worker's leases at once, sends its Sessions back to
 * idle and marks it stopped. STORE_NOT_FOUND when it is already stopped (another worker
 * adopted it first). */
enum store_status store_worker_adopt(struct store *st, const struct store_ctx *ctx,
                                     const char *dead_worker_id, const char *new_owner);

#endif
