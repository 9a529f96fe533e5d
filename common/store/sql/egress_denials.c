/*
 * egress_denials.c: the events of the firewall's denials, `sandbox.egress_denied`,
 * written in batches by the one worker of a host that reads the firewall's log; and, the same
 * way, the brokering proxy's `sandbox.secret_request` and `sandbox.secret_misuse`. Both engines.
 */
#include "store_sql.h"

static enum store_status record_one(struct store *st, const struct store_ctx *ctx, const char *type,
                                    const struct store_egress_denial *d)
{
    char app_id[STORE_ID_LEN] = "", session_id[STORE_ID_LEN] = "";
    struct sql_stmt *s = sql_stmt(st, "SELECT app_id, session_id FROM sandboxes WHERE id = ?1");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, d->sandbox_id);
    int rc = sql_step(s);
    if (rc == SQL_ROW) {
        sql_col_copy(s, 0, app_id, sizeof app_id);
        sql_col_copy(s, 1, session_id, sizeof session_id);
    }
    sql_done(s);
    if (rc != SQL_ROW && rc != SQL_DONE)
        return sql_status(st, rc);
    return sql_event(st, ctx, type, "sandbox", d->sandbox_id, app_id[0] ? app_id : NULL,
                     session_id[0] ? session_id : NULL, d->data_json);
}

enum store_status store_egress_denials_record(struct store *st, const struct store_ctx *ctx,
                                              const struct store_egress_denial *v, size_t n)
{
    if (n == 0)
        return STORE_OK;
    enum store_status r = sql_begin(st);
    if (r != STORE_OK)
        return r;
    for (size_t i = 0; r == STORE_OK && i < n; i++)
        r = record_one(st, ctx, "sandbox.egress_denied", &v[i]);
    return sql_end(st, r);
}

enum store_status store_sandbox_events_record(struct store *st, const struct store_ctx *ctx,
                                              const char *const *types,
                                              const struct store_egress_denial *v, size_t n)
{
    if (n == 0)
        return STORE_OK;
    enum store_status r = sql_begin(st);
    if (r != STORE_OK)
        return r;
    for (size_t i = 0; r == STORE_OK && i < n; i++)
        r = record_one(st, ctx, types[i], &v[i]);
    return sql_end(st, r);
}
