/*
 * http_pool.c: GET /v1/pool: warm, booting and claimed Sandboxes per shape, and the target; and
 * the pools of pre-started Sandboxes per App. The admin sees every shape and App; an App key sees
 * only its own App's shape and pool (other Apps' drivers, images and sizes are theirs to know).
 */
#include "gateway.h"
#include "store_apps.h"
#include "store_bounds.h"
#include "store_sandboxes.h"
#include "render.h"
#include "reply.h"

#include <stdlib.h>
#include <string.h>

static bool shape_equal(const struct store_shape *a, const struct store_shape *b)
{
    return strcmp(a->driver, b->driver) == 0 && strcmp(a->image, b->image) == 0 &&
           a->vcpu_count == b->vcpu_count && a->mem_size_mib == b->mem_size_mib;
}

enum MHD_Result http_pool_get(struct request *r)
{
    struct store *st = r->gw->st;
    struct store_pool_stat *shapes;
    struct store_shape own = {0};
    size_t n;
    enum store_status s;

    if (!r->is_admin) {
        struct store_app app;
        s = store_app_get(st, r->app_id, &app);
        if (s != STORE_OK)
            return reply_store_error(r, s, "App");
        snprintf(own.driver, sizeof own.driver, "%s", app.driver);
        /* The shape's image is the digest the App resolved to, as the workers boot it. */
        snprintf(own.image, sizeof own.image, "%s",
                 app.image_digest[0] ? app.image_digest : "default");
        own.vcpu_count = app.vcpu_count;
        own.mem_size_mib = app.mem_size_mib;
        store_app_clear(&app);
    }
    s = store_pool_stats(st, &shapes, &n);
    if (s != STORE_OK)
        return reply_store_error(r, s, "pool");
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        if (r->is_admin || shape_equal(&shapes[i].shape, &own))
            json_array_append_new(arr, render_pool_shape(&shapes[i], r->gw->cfg.pool_size));
    free(shapes);
    char **unbounded;
    size_t nu;
    if ((s = store_sandbox_unbounded(r->gw->st, &unbounded, &nu)) != STORE_OK) {
        json_decref(arr);
        return reply_store_error(r, s, "pool");
    }
    json_t *ub = json_array();
    for (size_t i = 0; i < nu; i++)
        json_array_append_new(ub, json_string(unbounded[i]));
    store_strings_free(unbounded, nu);
    struct store_pool_app_stat *apps;
    if ((s = store_pool_app_stats(st, &apps, &n)) != STORE_OK) {
        json_decref(arr);
        json_decref(ub);
        return reply_store_error(r, s, "pool");
    }
    json_t *per_app = json_array();
    for (size_t i = 0; i < n; i++)
        if (r->is_admin || strcmp(apps[i].app_id, r->app_id) == 0)
            json_array_append_new(per_app, render_pool_app(&apps[i]));
    free(apps);
    return reply_json(r, 200,
                      json_pack("{s:o, s:I, s:o, s:o}", "shapes", arr, "target",
                                (json_int_t)r->gw->cfg.pool_size, "unboundedLimits", ub, "apps",
                                per_app));
}
