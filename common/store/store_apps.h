/*
 * store_apps.h: the store's operations on apps (apps.c).
 *
 * Plain functions over the one store implementation (common/store/sql/); the conventions of
 * store.h apply.
 */
#ifndef SBX_STORE_APPS_H
#define SBX_STORE_APPS_H

#include "store_records.h"

struct store;

/* Created and changed by the admin; the workers read their shapes. */
enum store_status store_app_create(struct store *st, const struct store_ctx *ctx,
                                   struct store_app *app /* in: fields; out: id, times */);
enum store_status store_app_get(struct store *st, const char *app_id, struct store_app *out);
enum store_status store_app_list(struct store *st, const char *after, size_t limit,
                                 struct store_app **out, size_t *n, char *next_cursor);
enum store_status store_app_update(struct store *st, const struct store_ctx *ctx,
                                   const char *app_id, const struct store_app_patch *patch,
                                   struct store_app *out);
/* store_app_update within the App's keep-alive quota (q's defaults for those it has none of):
 * STORE_OVER_QUOTA (q->hit STORE_QUOTA_KEEP_ALIVE) when the App's keepAliveSeconds would be above
 * it, and nothing changes. A keep-alive quota that the patch sets also lowers its Sessions'
 * keepAliveSeconds overrides above it to it, in the same transaction. */
enum store_status store_app_update_within(struct store *st, const struct store_ctx *ctx,
                                          const char *app_id, const struct store_app_patch *patch,
                                          struct store_quotas *q, struct store_app *out);
/* Refused with STORE_CONFLICT while the App has live Sessions or Workspaces. Revokes its keys.
 */
enum store_status store_app_delete(struct store *st, const struct store_ctx *ctx,
                                   const char *app_id);
/* An App's use of its quotas (docs/tenants.md), in one snapshot; STORE_NOT_FOUND for a deleted
 * App. */
enum store_status store_app_usage(struct store *st, const char *app_id,
                                  struct store_app_usage *out);
/* The same for every App, in id order (/metrics); the caller frees *out. */
enum store_status store_app_usage_list(struct store *st, struct store_app_usage **out, size_t *n);
/* A quota's value for the App: its own (>= 0), else the host's default; 0 is no bound. */
int64_t store_quota_effective(int64_t app_quota, int64_t host_default);
/* The distinct shapes of live Apps: what the warm pool keeps ready. */
enum store_status store_app_shapes(struct store *st, struct store_shape **out, size_t *n);
/* The live Apps that keep pre-started Sandboxes (prestart, warm_pool > 0), for the workers'
 * pools; free with store_app_list_free. */
enum store_status store_app_prestart_list(struct store *st, struct store_app **out, size_t *n);

#endif
