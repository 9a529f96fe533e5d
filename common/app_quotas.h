/*
 * app_quotas.h: an App's quotas as the API and the configuration name them (docs/tenants.md):
 * each quota's field in the App's `quotas` and `usage` objects, its host-wide default setting,
 * the problem a refusal answers, and the struct store_quotas that carries the host's side of a
 * check into the store. The counting and the checks themselves are the store's
 * (common/store/sql/quotas.c), inside the transaction of each create.
 */
#ifndef SBX_APP_QUOTAS_H
#define SBX_APP_QUOTAS_H

#include "config.h"
#include "problem.h"
#include "store_records.h"

/* The quota's JSON field: liveSandboxes, sessions, workspaces, workspaceMib, keepAliveSeconds. */
const char *app_quota_field(enum store_quota q);

/* The host's default of each quota, from the SBX_QUOTA_* settings (0: no bound). */
void app_quota_defaults(const struct sbx_config *cfg, int64_t out[STORE_QUOTA_COUNT]);

/* The host's side of a store check: its defaults, and no disk budget (-1). */
void app_quotas_init(struct store_quotas *q, const struct sbx_config *cfg);

/* The problem code that names a quota the store refused (q->hit: an enum store_quota or
 * STORE_QUOTA_DISK). */
enum problem_code app_quota_problem(int hit);

#endif
