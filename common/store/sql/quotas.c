/*
 * quotas.c: an App's quotas and their use (docs/tenants.md): the counts behind GET /v1/apps/{id}
 * and /metrics, and the check that the creates and updates of apps.c, sessions.c and
 * workspaces.c make inside their own transaction, so that two concurrent creates can never both
 * pass a quota (the writer lock serialises them on either engine). No hidden state: the host's
 * defaults come with each call (struct store_quotas).
 *
 * What counts: live Sandboxes are those claimed for or running a Session of the App (the warm
 * pool is nobody's); live Sessions are those in any state but deleted (idle ones too: each is a
 * mailbox that can activate at any time); Workspaces those not deleted, and their MiB the sum of
 * their sizeMib. Each count reads a partial index of live rows (migration 0021).
 */
#include "quota_sql.h"
#include "store_sql.h"

#include <stdlib.h>
#include <string.h>

#define QUOTA_USAGE_SQL                                                                            \
    "SELECT a.id, a.quota_live_sandboxes, a.quota_sessions, a.quota_workspaces, "                  \
    "a.quota_workspace_mib, a.quota_keep_alive_seconds, "                                          \
    "(SELECT count(*) FROM sandboxes b WHERE b.app_id = a.id "                                     \
    "AND b.state IN ('claimed', 'running')), "                                                     \
    "(SELECT count(*) FROM sessions s WHERE s.app_id = a.id AND s.state <> 'deleted'), "           \
    "(SELECT count(*) FROM workspaces w WHERE w.app_id = a.id AND w.deleted_at IS NULL), "         \
    "(SELECT COALESCE(sum(w.size_mib), 0) FROM workspaces w WHERE w.app_id = a.id "                \
    "AND w.deleted_at IS NULL) FROM apps a WHERE a.deleted_at IS NULL "

const char quota_usage_one_sql[] = QUOTA_USAGE_SQL "AND a.id = ?1";
const char quota_usage_all_sql[] = QUOTA_USAGE_SQL "ORDER BY a.id";
const char quota_disk_promised_sql[] =
    "SELECT COALESCE(sum(size_mib), 0) FROM workspaces WHERE deleted_at IS NULL";

static int64_t usage_from_row(struct sql_stmt *s, void *item)
{
    struct store_app_usage *u = item;
    sql_col_copy(s, 0, u->app_id, sizeof u->app_id);
    for (int i = 0; i < STORE_QUOTA_COUNT; i++)
        u->quotas[i] = sql_col_int64_or(s, 1 + i, -1);
    u->used[STORE_QUOTA_LIVE_SANDBOXES] = sql_col_int64(s, 6);
    u->used[STORE_QUOTA_SESSIONS] = sql_col_int64(s, 7);
    u->used[STORE_QUOTA_WORKSPACES] = sql_col_int64(s, 8);
    u->used[STORE_QUOTA_WORKSPACE_MIB] = sql_col_int64(s, 9);
    u->used[STORE_QUOTA_KEEP_ALIVE] = 0;
    return 0;
}

static const struct sql_page usage_page = {sizeof(struct store_app_usage), usage_from_row,
                                           sql_free_items};

enum store_status sql_app_usage_in_tx(struct store *st, const char *app_id,
                                      struct store_app_usage *out)
{
    struct sql_stmt *s = sql_stmt(st, quota_usage_one_sql);
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, app_id);
    return sql_read_one(st, s, &usage_page, out);
}

enum store_status store_app_usage(struct store *st, const char *app_id, struct store_app_usage *out)
{
    enum store_status r;
    /* One snapshot: the four counts agree with each other. */
    if ((r = sql_begin_read(st)) != STORE_OK)
        return r;
    r = sql_app_usage_in_tx(st, app_id, out);
    sql_rollback(st);
    return r;
}

enum store_status store_app_usage_list(struct store *st, struct store_app_usage **out, size_t *n)
{
    enum store_status r;
    if ((r = sql_begin_read(st)) != STORE_OK)
        return r;
    r = sql_read_all(st, sql_stmt(st, quota_usage_all_sql), &usage_page, (void *)out, n);
    sql_rollback(st);
    return r;
}

int64_t store_quota_effective(int64_t app_quota, int64_t host_default)
{
    return app_quota >= 0 ? app_quota : host_default;
}

bool sql_quota_over(struct store_quotas *q, const struct store_app_usage *u, enum store_quota which,
                    int64_t wanted)
{
    int64_t limit = store_quota_effective(u->quotas[which], q->defaults[which]);
    /* The keep-alive quota bounds a value; the others a count with the new object added. */
    int64_t used = which == STORE_QUOTA_KEEP_ALIVE ? 0 : u->used[which];
    if (limit <= 0 || used + wanted <= limit)
        return false;
    q->hit = which;
    q->limit = limit;
    q->used = which == STORE_QUOTA_KEEP_ALIVE ? wanted : used;
    return true;
}

enum store_status sql_disk_check_in_tx(struct store *st, struct store_quotas *q, int64_t size_mib)
{
    int64_t promised = 0;
    enum store_status r;
    if (!q || q->disk_budget_mib < 0 || size_mib <= 0)
        return STORE_OK;
    struct sql_stmt *s = sql_stmt(st, quota_disk_promised_sql);
    if (!s)
        return STORE_ERROR;
    if ((r = sql_step_int(st, s, &promised)) != STORE_OK)
        return r;
    if (promised + size_mib <= q->disk_budget_mib)
        return STORE_OK;
    q->hit = STORE_QUOTA_DISK;
    q->limit = q->disk_budget_mib;
    q->used = promised;
    return STORE_OVER_QUOTA;
}
