/*
 * store_events.h: the store's operations on audit and metrics (events.c, counts.c).
 *
 * Plain functions over the one store implementation (common/store/sql/); the conventions of
 * store.h apply.
 */
#ifndef SBX_STORE_EVENTS_H
#define SBX_STORE_EVENTS_H

#include "store_records.h"

struct store;

/* session_id NULL: all of the App's events (app_id "": everything). after: last event id. */
enum store_status store_event_list(struct store *st, const char *app_id, const char *session_id,
                                   int64_t after, size_t limit, struct store_event **out,
                                   size_t *n);
enum store_status store_counts(struct store *st, struct store_counts *out);

#endif
