/*
 * metrics.h: the Prometheus text exposition of GET /metrics: HTTP requests by route template,
 * method and status, a latency histogram per route, and the queue, Session, Sandbox and message
 * counts read from the store at scrape time.
 */
#ifndef SBX_METRICS_H
#define SBX_METRICS_H

#include "store_records.h"

#include <stddef.h>
#include <stdint.h>

struct metrics;

struct metrics *metrics_new(void);
void metrics_free(struct metrics *m);
int64_t metrics_now_us(void);
/* route_index: index in gateway_routes, -1 for requests that matched no route. */
void metrics_observe(struct metrics *m, int route_index, const char *method, unsigned status,
                     double seconds);
/* The whole exposition; the caller frees it. NULL when out of memory. A store failure leaves
 * out the store's series and sets sbx_store_up 0. */
char *metrics_render(struct metrics *m, struct store *st,
                     const int64_t quota_defaults[STORE_QUOTA_COUNT], size_t *len);

#endif
