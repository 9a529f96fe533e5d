/*
 * http_pool.c: GET /v1/pool: warm, booting and claimed Sandboxes per shape, and the target.
 */
#include "gateway.h"
#include "render.h"
#include "reply.h"

#include <stdlib.h>

enum MHD_Result http_pool_get(struct request *r)
{
    struct store_pool_stat *shapes;
    size_t n;
    enum store_status s = r->gw->st->pool_stats(r->gw->st, &shapes, &n);
    if (s != STORE_OK)
        return reply_store_error(r, s, "pool");
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, render_pool_shape(&shapes[i], r->gw->cfg.pool_size));
    free(shapes);
    char **unbounded;
    size_t nu;
    if ((s = r->gw->st->sandbox_unbounded(r->gw->st, &unbounded, &nu)) != STORE_OK) {
        json_decref(arr);
        return reply_store_error(r, s, "pool");
    }
    json_t *ub = json_array();
    for (size_t i = 0; i < nu; i++)
        json_array_append_new(ub, json_string(unbounded[i]));
    store_strings_free(unbounded, nu);
    return reply_json(r, 200,
                      json_pack("{s:o, s:I, s:o}", "shapes", arr, "target",
                                (json_int_t)r->gw->cfg.pool_size, "unboundedLimits", ub));
}
