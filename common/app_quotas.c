/*
 * app_quotas.c: the names, defaults and problem codes of an App's quotas (app_quotas.h).
 */
#include "app_quotas.h"

static const char *const fields[STORE_QUOTA_COUNT] = {
    [STORE_QUOTA_LIVE_SANDBOXES] = "liveSandboxes", [STORE_QUOTA_SESSIONS] = "sessions",
    [STORE_QUOTA_WORKSPACES] = "workspaces",        [STORE_QUOTA_WORKSPACE_MIB] = "workspaceMib",
    [STORE_QUOTA_KEEP_ALIVE] = "keepAliveSeconds",
};

const char *app_quota_field(enum store_quota q)
{
    return (unsigned)q < STORE_QUOTA_COUNT ? fields[q] : "disk";
}

void app_quota_defaults(const struct sbx_config *cfg, int64_t out[STORE_QUOTA_COUNT])
{
    out[STORE_QUOTA_LIVE_SANDBOXES] = cfg->quota_live_sandboxes;
    out[STORE_QUOTA_SESSIONS] = cfg->quota_sessions;
    out[STORE_QUOTA_WORKSPACES] = cfg->quota_workspaces;
    out[STORE_QUOTA_WORKSPACE_MIB] = cfg->quota_workspace_mib;
    out[STORE_QUOTA_KEEP_ALIVE] = cfg->quota_keep_alive_seconds;
}

void app_quotas_init(struct store_quotas *q, const struct sbx_config *cfg)
{
    app_quota_defaults(cfg, q->defaults);
    q->disk_budget_mib = -1;
    q->hit = -1;
    q->limit = q->used = 0;
}

enum problem_code app_quota_problem(int hit)
{
    switch (hit) {
    case STORE_QUOTA_SESSIONS:
        return PROBLEM_QUOTA_SESSIONS;
    case STORE_QUOTA_WORKSPACES:
        return PROBLEM_QUOTA_WORKSPACES;
    case STORE_QUOTA_WORKSPACE_MIB:
        return PROBLEM_QUOTA_WORKSPACE_MIB;
    case STORE_QUOTA_KEEP_ALIVE:
        return PROBLEM_QUOTA_KEEP_ALIVE;
    case STORE_QUOTA_DISK:
        return PROBLEM_WORKSPACE_DISK_FULL;
    default:
        return PROBLEM_INTERNAL; /* live Sandboxes are bounded at claim time, not by the API */
    }
}
