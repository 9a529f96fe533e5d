/*
 * http_health.c: GET /healthz: 200 while the store answers, 503 when it does not.
 */
#include "gateway.h"
#include "store.h"
#include "reply.h"

enum MHD_Result http_healthz(struct request *r)
{
    char value[80];
    struct store *st = r->gw->st;
    enum store_status s = store_setting_get(st, "admin_token_sha256", value, sizeof value);
    if (s != STORE_OK && s != STORE_NOT_FOUND)
        return reply_problem(r, PROBLEM_STORE_BUSY, NULL, "the store does not answer (%s)",
                             store_status_name(s));
    return reply_json(
        r, 200, json_pack("{s:s, s:i}", "status", "ok", "schemaVersion", store_schema_version()));
}
