/*
 * pool.h: the warm pool of this worker: pool_size fresh, fully started Sandboxes per shape of the
 * live Apps, and warmPool pre-started Sandboxes per App with prestart (its command already
 * running), replenished in the background as they are claimed. A claimed Sandbox never returns.
 */
#ifndef SBX_POOL_H
#define SBX_POOL_H

#include "worker.h"

/* Re-reads the shapes of live Apps and the Apps with pre-started agents from the store, and
 * retires the pre-started Sandboxes their App no longer wants (docs/worker.md). */
void pool_refresh_shapes(struct worker *w);
/* Adds a shape seen on a claimed message (an App created since the last refresh). */
void pool_ensure_shape(struct worker *w, const struct store_shape *shape);
/* Starts boots until every shape has pool_size warm or booting Sandboxes; none while a warm
 * Sandbox's activation is under way (sandbox_activations_under_way). */
void pool_replenish(struct worker *w);

#endif
