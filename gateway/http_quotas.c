/*
 * http_quotas.c: the answer to a create or update that an App's quota or the Workspaces' disk
 * refused (docs/tenants.md): one problem per quota, whose code names it and whose detail gives
 * the App its own numbers (never the host's: the disk's numbers go to the operator's log).
 */
#include "app_quotas.h"
#include "gateway.h"
#include "log.h"
#include "reply.h"

enum MHD_Result reply_over_quota(struct request *r, const struct store_quotas *q, int64_t wanted,
                                 const char *field)
{
    long long limit = (long long)q->limit, used = (long long)q->used, want = (long long)wanted;
    switch (q->hit) {
    case STORE_QUOTA_SESSIONS:
        return reply_problem(r, PROBLEM_QUOTA_SESSIONS, NULL,
                             "the App has %lld live Sessions, its quota (sessions); delete one "
                             "or ask the admin for a larger quota",
                             used);
    case STORE_QUOTA_WORKSPACES:
        return reply_problem(r, PROBLEM_QUOTA_WORKSPACES, NULL,
                             "the App has %lld Workspaces, its quota (workspaces); delete one or "
                             "ask the admin for a larger quota",
                             used);
    case STORE_QUOTA_WORKSPACE_MIB:
        return reply_problem(r, PROBLEM_QUOTA_WORKSPACE_MIB, field,
                             "the App's Workspaces hold %lld MiB of its quota of %lld "
                             "(workspaceMib): %lld more do not fit",
                             used, limit, want);
    case STORE_QUOTA_KEEP_ALIVE:
        return reply_problem(r, PROBLEM_QUOTA_KEEP_ALIVE, field,
                             "keepAliveSeconds %lld is above the App's quota of %lld "
                             "(quotas.keepAliveSeconds)",
                             used, limit);
    case STORE_QUOTA_DISK:
        log_emit(LOG_LEVEL_WARN, r->request_id,
                 "workspace of %lld MiB refused: Workspaces have %lld MiB promised of the %lld "
                 "the data filesystem can give them (free space + their images' blocks - "
                 "disk_reserve_mib)",
                 want, used, limit);
        return reply_problem(
            r, PROBLEM_WORKSPACE_DISK_FULL, field,
            "this host cannot reserve %lld MiB more for Workspaces; ask for a "
            "smaller sizeMib, delete a Workspace, or ask the operator (request %s)",
            want, r->request_id);
    default:
        return reply_problem(r, PROBLEM_INTERNAL, NULL, "refused by a quota the API does not know");
    }
}
