/*
 * store_webhooks.h: the store's operations on webhooks (webhooks.c).
 *
 * Plain functions over the one store implementation (common/store/sql/); the conventions of
 * store.h apply.
 */
#ifndef SBX_STORE_WEBHOOKS_H
#define SBX_STORE_WEBHOOKS_H

#include "store_records.h"

struct store;

/* Admin: a new endpoint of app_id (STORE_NOT_FOUND for an unknown or deleted App) for the
 * events committed from now on; out gets it with its secret. */
enum store_status store_webhook_create(struct store *st, const struct store_ctx *ctx,
                                       const char *app_id, const char *url,
                                       const char *event_types_json, const char *secret,
                                       struct store_webhook *out);
enum store_status store_webhook_get(struct store *st, const char *app_id, const char *webhook_id,
                                    struct store_webhook *out);
enum store_status store_webhook_list(struct store *st, const char *app_id,
                                     struct store_webhook **out, size_t *n);
/* Its pending deliveries are not attempted any more; the record stays. */
enum store_status store_webhook_delete(struct store *st, const struct store_ctx *ctx,
                                       const char *app_id, const char *webhook_id);
/* The endpoint's deliveries with their attempts, oldest event first, after event id `after`
 * (the cursor). */
enum store_status store_webhook_delivery_list(struct store *st, const char *app_id,
                                              const char *webhook_id, int64_t after, size_t limit,
                                              struct store_webhook_delivery **out, size_t *n,
                                              char *next_cursor);
/* Worker: moves the events committed since each live endpoint's cursor that it wants into
 * the outbox (one transaction; at most `limit` events per endpoint). *added: deliveries. */
enum store_status store_webhook_fill(struct store *st, size_t limit, size_t *added);
/* Worker: leases an endpoint that no other worker holds (or whose lease expired) and whose
 * oldest pending delivery is due, until now + lease_ms. STORE_EMPTY when none. */
enum store_status store_webhook_claim(struct store *st, const char *worker_id, int64_t lease_ms,
                                      struct store_webhook_job *out);
/* Worker: records the attempt and releases the lease (STORE_CONFLICT when the lease was lost
 * meanwhile: nothing is recorded, the delivery stays pending). */
enum store_status store_webhook_record(struct store *st, const char *worker_id,
                                       const struct store_webhook_result *res);
/* Worker: the earliest time a pending delivery of a live endpoint comes due (0: none). */
enum store_status store_webhook_next_due(struct store *st, int64_t *at);

#endif
