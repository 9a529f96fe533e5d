/*
 * store_worker_drivers.h: which Sandbox drivers each worker can run on its host (workers.drivers,
 * migration 0020; worker_drivers.c), so that the gateway refuses an App no worker can serve.
 *
 * Plain functions over the one store implementation (common/store/sql/); the conventions of
 * store.h apply.
 */
#ifndef SBX_STORE_WORKER_DRIVERS_H
#define SBX_STORE_WORKER_DRIVERS_H

#include "store_records.h"

#include <stdbool.h>

struct store;

/* Records worker_id's drivers: a JSON object from driver name to true (it can run them) or to the
 * reason it cannot ("guest image ... (build it with the guest-image target)"). */
enum store_status store_worker_set_drivers(struct store *st, const char *worker_id,
                                           const char *drivers_json);

/* What the live workers (not stopped, heartbeat newer than fresh_after, drivers recorded) say of
 * driver: *recorded counts them, *runnable those that can run it; when none can, why holds the
 * reason one of them gave ("" when none said). */
enum store_status store_driver_support(struct store *st, const char *driver, int64_t fresh_after,
                                       size_t *recorded, size_t *runnable, char *why,
                                       size_t why_len);

#endif
