/*
 * store_bounds.h: the store's operations on Sandbox bounds a host cannot apply (workers.unbounded;
 * bounds.c).
 *
 * Plain functions over the one store implementation (common/store/sql/); the conventions of
 * store.h apply.
 */
#ifndef SBX_STORE_BOUNDS_H
#define SBX_STORE_BOUNDS_H

#include "store_records.h"

struct store;

/* Records what worker_id's drivers cannot bound on its host: "driver:bound" items,
 * comma-separated ("process:cpu"), "" when every bound applies. */
enum store_status store_worker_set_unbounded(struct store *st, const char *worker_id,
                                             const char *unbounded);
/* The distinct items that live workers recorded; *out (n strings) for store_strings_free. */
enum store_status store_sandbox_unbounded(struct store *st, char ***out, size_t *n);

/* Frees what store_sandbox_unbounded returned. */
void store_strings_free(char **items, size_t n);

#endif
