/*
 * http_metrics.c: GET /metrics in the Prometheus text format (metrics.c renders it).
 */
#include "gateway.h"
#include "metrics.h"
#include "reply.h"

#include <stdlib.h>

enum MHD_Result http_metrics(struct request *r)
{
    size_t len = 0;
    char *text = metrics_render(r->gw->metrics, r->gw->st, &len);
    if (!text)
        return reply_problem(r, "internal", NULL, "out of memory rendering metrics");
    enum MHD_Result ret = reply_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
    free(text);
    return ret;
}
