/*
 * host_beat.h: the host's heartbeat, on a thread of its own. A host is declared lost by the others
 * when its heartbeat is older than host_lost_ms: that must mean the machine (or all of its
 * workers) is gone, not that a worker's event loop was held up for a while by a burst of claims
 * waiting for the store's write lock. So the host heartbeat does not wait for the loop; only
 * whether it still succeeds comes back to the loop (the host was declared lost: the worker must
 * exit at once).
 */
#ifndef SBX_HOST_BEAT_H
#define SBX_HOST_BEAT_H

#include "store_records.h"

#include <event2/event.h>
#include <stdint.h>

struct host_beat;

/* Starts heartbeating host_id every interval_ms on its own thread (and once at once). on_lost runs
 * on base's loop, once, when the store says the host was declared lost. NULL on failure (errno). */
struct host_beat *host_beat_start(struct store *st, const char *host_id, int64_t interval_ms,
                                  struct event_base *base, void (*on_lost)(void *arg), void *arg);

/* Stops the thread and frees everything (NULL is fine). */
void host_beat_stop(struct host_beat *hb);

#endif
