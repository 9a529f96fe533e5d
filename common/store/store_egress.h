/*
 * store_egress.h: the store's operations on egress denials (egress_denials.c; the worker that reads
 * the host's firewall log).
 *
 * Plain functions over the one store implementation (common/store/sql/); the conventions of
 * store.h apply.
 */
#ifndef SBX_STORE_EGRESS_H
#define SBX_STORE_EGRESS_H

#include "store_records.h"

struct store;

/* Records n events `sandbox.egress_denied` in one transaction, each with the App and Session
 * its Sandbox serves (none for a warm one) and data_json as its data. */
enum store_status store_egress_denials_record(struct store *st, const struct store_ctx *ctx,
                                              const struct store_egress_denial *v, size_t n);
/* The same for events of other types about Sandboxes (types[i] for v[i]): the brokering proxy's
 * sandbox.secret_request and sandbox.secret_misuse. */
enum store_status store_sandbox_events_record(struct store *st, const struct store_ctx *ctx,
                                              const char *const *types,
                                              const struct store_egress_denial *v, size_t n);

#endif
