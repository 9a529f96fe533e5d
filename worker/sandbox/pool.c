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

/* The App's entry in w->prestart_apps, or NULL. */
static const struct store_app *prestart_app(struct worker *w, const char *app_id)
{
    for (size_t i = 0; i < w->n_prestart_apps; i++)
        if (strcmp(w->prestart_apps[i].id, app_id) == 0)
            return &w->prestart_apps[i];
    return NULL;
}

/* Ends the pre-started Sandboxes not yet claimed whose App changed what they were started from
 * (its driver, image, size, command or env: a new definition_rev), stopped pre-starting, or now
 * wants fewer of them (those past warmPool in w->sandboxes' order, newest first, go). A claim
 * never takes the outdated ones meanwhile: it asks for the App's current revision
 * (store_sandbox_claim_warm). */
static void pool_retire(struct worker *w)
{
    size_t *kept = calloc(w->n_prestart_apps + 1, sizeof *kept);
    if (!kept)
        return; /* the next poll retires them */
    for (struct sandbox *sb = w->sandboxes, *next; sb; sb = next) {
        next = sb->next;
        if (!sb->prestart_rev || sb->stop_wanted ||
            (sb->state != SB_WARM && sb->state != SB_BOOTING))
            continue;
        const struct store_app *app = prestart_app(w, sb->app_id);
        const char *why = NULL;
        if (!app)
            why = "retired: the App no longer pre-starts agents";
        else if (app->definition_rev != sb->prestart_rev)
            why = "retired: the App's definition changed";
        else if (kept[app - w->prestart_apps] >= (size_t)app->warm_pool)
            why = "retired: the App's warmPool was lowered";
        else
            kept[app - w->prestart_apps]++;
        if (why) {
            log_info("worker: sandbox %s of %s %s", sb->rt.sandbox_id, sb->app_id, why);
            sandbox_terminate(sb, why, false);
        }
    }
    free(kept);
}

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
    struct store_app *apps = NULL;
    rc = store_app_prestart_list(w->st, &apps, &n);
    if (rc != STORE_OK) {
        log_warn("worker: cannot list the Apps with pre-started agents: %s", store_status_name(rc));
        return;
    }
    store_app_list_free(w->prestart_apps, w->n_prestart_apps);
    w->prestart_apps = apps;
    w->n_prestart_apps = n;
    pool_retire(w);
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
    for (size_t i = 0; i < w->n_prestart_apps; i++) {
        size_t booting = 0;
        sandbox_count_prestarted(w, w->prestart_apps[i].id, w->prestart_apps[i].definition_rev,
                                 &booting);
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
    /* Each App with pre-started agents: warmPool Sandboxes of its own per worker process. */
    for (size_t i = 0; i < w->n_prestart_apps; i++) {
        const struct store_app *app = &w->prestart_apps[i];
        const struct driver *drv = sandbox_driver(w, app->driver);
        if (!drv || !sandbox_prestart_due(w, app->id) ||
            (!image_is_default(app->image_digest) &&
             !image_cache_ready(&w->cfg, app->image_digest)))
            continue;
        size_t have = sandbox_count_prestarted(w, app->id, app->definition_rev, NULL);
        while (have < (size_t)app->warm_pool && booting_total < boot_limit) {
            sandbox_boot_prestarted(w, drv, app, err, sizeof err); /* logs a failure */
            have++;
            booting_total++;
        }
    }
}
