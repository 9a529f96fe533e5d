/*
 * http_metrics.c: GET /metrics in the Prometheus text format (metrics.c renders it). With
 * metrics_token set, a scraper must present it as a bearer token: the metrics name every App's
 * shapes and images.
 */
#include "app_quotas.h"
#include "auth.h"
#include "gateway.h"
#include "log.h"
#include "metrics.h"
#include "reply.h"

#include <nettle/memops.h>
#include <stdlib.h>

enum MHD_Result http_metrics(struct request *r)
{
    size_t len = 0;
    if (r->gw->cfg.metrics_token[0]) {
        const char *token =
            auth_bearer(MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization"));
        uint8_t hash[32];
        if (token)
            auth_hash(token, hash);
        if (!token || !memeql_sec(hash, r->gw->metrics_hash, sizeof hash)) {
            log_emit(LOG_LEVEL_INFO, r->request_id, "metrics: %s metrics token",
                     token ? "wrong" : "no");
            return reply_problem_header(r, PROBLEM_UNAUTHORIZED, NULL, "WWW-Authenticate", "Bearer",
                                        "/metrics needs the metrics token (metrics_token)");
        }
    }
    int64_t quota_defaults[STORE_QUOTA_COUNT];
    app_quota_defaults(&r->gw->cfg, quota_defaults);
    char *text = metrics_render(r->gw->metrics, r->gw->st, quota_defaults, &len);
    if (!text)
        return reply_problem(r, PROBLEM_INTERNAL, NULL, "out of memory rendering metrics");
    enum MHD_Result ret = reply_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
    free(text);
    return ret;
}
