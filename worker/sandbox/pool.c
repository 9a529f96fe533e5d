/*
 * pool.c: keeping the warm pool full (pool.h). Boots for the pool run on the background job
 * threads where they can (sandbox/priority.h), limited to half of them at a time so that
 * terminations (and, without background boots, cold boots) are never stuck behind a refill.
 */
#include "sandbox/pool.h"
#include "store_apps.h"
#include "images/image_cache.h"
#include "sandbox/jobs.h"
#include "drivers/shared.h"
#include "sandbox/sandbox.h"
#include "log.h"
#include "clock.h"

#include <stdlib.h>
#include <string.h>

/* The longest a refill waits for activations under way. */
#define POOL_DEFER_MAX_MS 200

void pool_refresh_shapes(struct worker *w)
{
    struct store_shape *shapes = NULL;
    size_t n = 0;
    enum store_status rc = store_app_shapes(w->st, &shapes, &n);
    if (rc != STORE_OK) {
        log_warn("worker: cannot list App shapes: %s", store_status_name(rc));
        return;
    }
    free(w->shapes);
    w->shapes = shapes;
    w->n_shapes = n;
}

void pool_ensure_shape(struct worker *w, const struct store_shape *shape)
{
    for (size_t i = 0; i < w->n_shapes; i++)
        if (shape_equal(&w->shapes[i], shape))
            return;
    struct store_shape *grown = realloc(w->shapes, (w->n_shapes + 1) * sizeof *grown);
    if (!grown)
        return;
    w->shapes = grown;
    w->shapes[w->n_shapes++] = *shape;
}

void pool_replenish(struct worker *w)
{
    size_t boot_limit = w->cfg.job_threads > 1 ? (size_t)w->cfg.job_threads / 2 : 1;
    size_t booting_total = 0;
    char err[128];
    if (w->stopping || w->cfg.pool_size <= 0)
        return;
    /* Not while a warm activation is under way (many, in a burst): a refill's boot and its
     * commits on this loop would compete with it. The next first reply calls here again
     * (w->pool_deferred), so does a Sandbox's end, and the fallback poll, ... */
    int64_t now = clock_mono_ms();
    bool defer = sandbox_activations_under_way(w);
    if (defer && !w->pool_deferred)
        w->pool_deferred_since = now;
    /* ... but never for long: under a steady stream of activations one is nearly always under
     * way, and a pool never refilled would make every activation cold. */
    if (defer && now - w->pool_deferred_since < POOL_DEFER_MAX_MS) {
        w->pool_deferred = true;
        return;
    }
    w->pool_deferred = false;
    for (size_t i = 0; i < w->n_shapes; i++) {
        size_t booting = 0;
        sandbox_count_pool(w, &w->shapes[i], &booting);
        booting_total += booting;
    }
    for (size_t i = 0; i < w->n_shapes; i++) {
        const struct driver *drv = sandbox_driver(w, w->shapes[i].driver);
        if (!drv)
            continue;
        /* An image this host's cache lacks (not imported here yet, or being fetched): nothing
         * to boot it from (import_jobs.c fetches pulled ones). */
        if (!image_is_default(w->shapes[i].image) &&
            !image_cache_ready(&w->cfg, w->shapes[i].image))
            continue;
        size_t have = sandbox_count_pool(w, &w->shapes[i], NULL);
        while (have < (size_t)w->cfg.pool_size && booting_total < boot_limit) {
            sandbox_boot(w, drv, &w->shapes[i], NULL, err, sizeof err); /* logs a failure */
            have++;
            booting_total++;
        }
    }
}
