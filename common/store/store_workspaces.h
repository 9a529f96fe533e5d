/*
 * store_workspaces.h: the store's operations on workspaces (workspaces.c).
 *
 * Plain functions over the one store implementation (common/store/sql/); the conventions of
 * store.h apply.
 */
#ifndef SBX_STORE_WORKSPACES_H
#define SBX_STORE_WORKSPACES_H

#include "store_records.h"

struct store;

enum store_status store_workspace_create(struct store *st, const struct store_ctx *ctx,
                                         const char *app_id, const char *name, int64_t size_mib,
                                         const char *data_dir, struct store_workspace *out);
/* store_workspace_create within the App's Workspaces and Workspace MiB quotas (q's defaults for
 * those it has none of) and q's disk budget: STORE_OVER_QUOTA (q->hit says which) and nothing is
 * written when the new Workspace would go over one. */
enum store_status store_workspace_create_within(struct store *st, const struct store_ctx *ctx,
                                                const char *app_id, const char *name,
                                                int64_t size_mib, const char *data_dir,
                                                struct store_quotas *q,
                                                struct store_workspace *out);
enum store_status store_workspace_get(struct store *st, const char *app_id, const char *ws_id,
                                      struct store_workspace *out);
enum store_status store_workspace_list(struct store *st, const char *app_id, const char *after,
                                       size_t limit, struct store_workspace **out, size_t *n,
                                       char *next_cursor);
/* STORE_CONFLICT while a live Session names it. The caller removes the directory after OK. */
enum store_status store_workspace_delete(struct store *st, const struct store_ctx *ctx,
                                         const char *app_id, const char *ws_id,
                                         struct store_workspace *out);

#endif
