/*
 * boot.c: a Sandbox's way up (sandbox.h): BOOTING (the driver's boot job), then WARM in the pool
 * or, booted cold for a delivery, ACTIVATING; and a warm one claimed for a Session (writing
 * "running" once its App started is expiry.c's, with the timers). Driver calls block, so the
 * boot runs as a job (jobs.h); every other step runs on the event loop, and every other state
 * change is written to the store first.
 */
#include "sandbox/sandbox.h"
#include "store_images.h"
#include "store_sandboxes.h"
#include "images/image_cache.h"
#include "log.h"
#include "sandbox/jobs.h"
#include "sandbox/priority.h"
#include "clock.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static void boot_work(void *arg)
{
    struct sandbox *sb = arg;
    if (atomic_load(&sb->boot_cancelled)) {
        sb->job_rc = -1;
        snprintf(sb->job_err, sizeof sb->job_err, "abandoned before it started");
        return;
    }
    atomic_store(&sb->boot_job_started, clock_mono_ms());
    sb->job_rc = sb->drv->boot(&sb->w->cfg, &sb->rt, sb->job_err, sizeof sb->job_err);
    /* Booted by a background thread: its processes inherited that thread's nice level, and
     * they will answer replies (sandbox/priority.h). A Sandbox that cannot be put back would
     * serve slowly: it fails, and the pool boots another. */
    if (sb->job_rc == 0 && sb->background_boot &&
        priority_restore_tree(sb->rt.pid, sb->w->nice) != 0) {
        snprintf(sb->job_err, sizeof sb->job_err, "cannot restore its CPU priority: %m");
        sb->job_rc = -1;
    }
}

static int boot_deadline_ms(const struct sandbox *sb)
{
    return sb->drv->boot_deadline_ms > 0 ? sb->drv->boot_deadline_ms : SANDBOX_BOOT_DEADLINE_MS;
}

/* The boot job of an abandoned Sandbox came back at last: whatever it made goes (terminate is
 * idempotent, and a boot that failed may have left a process behind as well), then the record. */
static void abandoned_cleanup_work(void *arg)
{
    struct sandbox *sb = arg;
    struct store_usage usage;
    char err[512];
    if (sb->drv->terminate(&sb->w->cfg, &sb->rt, &usage, err, sizeof err) != 0)
        log_warn("worker: cleaning up the abandoned boot of %s: %s", sb->rt.sandbox_id, err);
}

static void abandoned_cleanup_done(void *arg)
{
    struct sandbox *sb = arg;
    log_info("worker: the abandoned boot of %s ended; cleaned up", sb->rt.sandbox_id);
    sandbox_free(sb);
}

/* The boot deadline: the boot job still runs past the longest a boot may take, stuck at some
 * step. The Sandbox fails now, without waiting for the job (which may never return): its message
 * goes back to be retried as after any failed boot, the pool boots another, and a stopping worker
 * does not wait for it. Its processes, if it made any yet, are killed; the record itself stays
 * with the job, which still uses it, until the job returns (boot_done). */
static void boot_overran(evutil_socket_t fd, short what, void *arg)
{
    struct sandbox *sb = arg;
    struct worker *w = sb->w;
    char reason[256];
    (void)fd;
    (void)what;
    if (!sb->job_running || sb->state != SB_BOOTING || sb->abandoned)
        return;
    /* The deadline counts from the boot's start on its thread; a boot still queued (every job
     * thread busy) gets as long again to start, then fails too, so that no message waits on a
     * pool of stuck threads without an end. */
    int deadline = boot_deadline_ms(sb);
    int64_t started = atomic_load(&sb->boot_job_started), now = clock_mono_ms();
    int64_t due = started ? started + deadline : sb->boot_started + 2 * (int64_t)deadline;
    if (now < due) {
        struct timeval tv = {(time_t)((due - now) / 1000),
                             (suseconds_t)((due - now) % 1000) * 1000};
        evtimer_add(sb->boot_ev, &tv);
        return;
    }
    atomic_store(&sb->boot_cancelled, true);
    const char *step = started ? atomic_load(&sb->rt.boot_step) : NULL;
    if (!started)
        snprintf(reason, sizeof reason,
                 "boot failed: not started within %d s (every job thread busy)",
                 2 * deadline / 1000);
    else
        snprintf(reason, sizeof reason, "boot failed: not done within %d s, stuck at %s",
                 deadline / 1000, step ? step : "the driver's boot");
    log_error("worker: sandbox %s %s; failed without waiting for it", sb->rt.sandbox_id, reason);
    pid_t pid = atomic_load(&sb->rt.boot_pid);
    if (pid > 0)
        kill(pid, SIGKILL);
    sb->abandoned = true;
    if (sandbox_serving(sb))
        w->n_serving--;
    sandbox_set_state(sb, SB_STOPPING);
    if (sb->delivery)
        w->sandbox_hooks->lost(sb, reason);
    sandbox_unlink(sb);
    enum store_status rc = store_sandbox_mark_stopping(w->st, &w->ctx, sb->rt.sandbox_id, reason);
    struct store_usage usage = {.cpu_usec = -1, .mem_peak_bytes = -1};
    if (rc == STORE_OK || rc == STORE_CONFLICT)
        rc = store_sandbox_finish(w->st, &w->ctx, sb->rt.sandbox_id, true, reason, &usage);
    if (rc != STORE_OK && rc != STORE_CONFLICT)
        log_error("worker: cannot record the end of %s: %s", sb->rt.sandbox_id,
                  store_status_name(rc));
    w->sandbox_hooks->events(w);
    w->sandbox_hooks->gone(w);
}

static void boot_done(void *arg)
{
    struct sandbox *sb = arg;
    struct worker *w = sb->w;
    struct store_sandbox rec;
    enum store_status rc;
    char reason[600];

    sb->job_running = false;
    if (sb->boot_ev)
        event_del(sb->boot_ev);
    if (sb->abandoned) {
        if (atomic_load(&sb->boot_job_started) == 0) { /* never started: nothing to remove */
            sandbox_free(sb);
            return;
        }
        if (jobs_submit(w->background, abandoned_cleanup_work, abandoned_cleanup_done, sb) != 0) {
            abandoned_cleanup_work(sb);
            abandoned_cleanup_done(sb);
        }
        return;
    }
    if (sb->job_rc != 0) {
        snprintf(reason, sizeof reason, "boot failed: %s", sb->job_err);
        log_error("worker: sandbox %s %s", sb->rt.sandbox_id, reason);
        sandbox_terminate(sb, reason, true);
        return;
    }
    memset(&rec, 0, sizeof rec);
    snprintf(rec.id, sizeof rec.id, "%s", sb->rt.sandbox_id);
    rec.pid = sb->rt.pid;
    snprintf(rec.jail_dir, sizeof rec.jail_dir, "%s", sb->rt.jail_dir);
    snprintf(rec.cgroup_path, sizeof rec.cgroup_path, "%s", sb->rt.cgroup_path);
    snprintf(rec.net_address, sizeof rec.net_address, "%s", sb->rt.net_address);
    snprintf(rec.image_hash, sizeof rec.image_hash, "%s", sb->rt.image_hash);
    /* The token is made now, with the Sandbox, so that a claim writes nothing more for it: it is
     * only good while the store says the Sandbox serves a Session (docs/callbacks.md). */
    if (w->callbacks && callback_token_new(sb->callback_token, rec.callback_token_hash) != 0) {
        sandbox_terminate(sb, "cannot make its callback token: no randomness", true);
        return;
    }
    if ((rc = store_sandbox_set_runtime(w->st, &rec)) != STORE_OK) {
        log_error("worker: cannot record the runtime of %s: %s", sb->rt.sandbox_id,
                  store_status_name(rc));
        sb->callback_token[0] = '\0'; /* unknown to the store: its agent is told of no API */
    }
    if (agent_protocol_watch(sb) != 0) {
        sandbox_terminate(sb, "cannot watch the agent channel", true);
        return;
    }
    if (sb->stop_wanted) {
        sandbox_terminate(sb, sb->stop_reason, sb->stop_failed);
        return;
    }
    int64_t boot_ms = clock_mono_ms() - sb->boot_started;
    if (sb->prestart_rev && !sb->delivery) {
        /* Pre-started: its App's command starts now; it is warm once started (or ready). */
        const struct store_app *app = NULL;
        for (size_t i = 0; i < w->n_prestart_apps; i++)
            if (strcmp(w->prestart_apps[i].id, sb->app_id) == 0)
                app = &w->prestart_apps[i];
        if (!app || app->definition_rev != sb->prestart_rev || !app->prestart) {
            sandbox_terminate(sb, "retired: the App changed while it booted", false);
            return;
        }
        log_debug("worker: sandbox %s booted in %lld ms; starting %s's agent", sb->rt.sandbox_id,
                  (long long)boot_ms, sb->app_id);
        prestart_begin(sb, app);
        return;
    }
    if (sb->delivery) {
        rc = store_sandbox_assign(w->st, &w->ctx, sb->rt.sandbox_id, sb->app_id, sb->session_id);
        if (rc != STORE_OK) {
            sandbox_terminate(sb, rc == STORE_CONFLICT ? "session deleted" : "store error", false);
            return;
        }
        sandbox_set_state(sb, SB_ACTIVATING);
        log_info("worker: cold sandbox %s booted in %lld ms for %s", sb->rt.sandbox_id,
                 (long long)boot_ms, sb->session_id);
        w->sandbox_hooks->activating(sb);
        return;
    }
    rc = store_sandbox_mark_warm(w->st, &w->ctx, sb->rt.sandbox_id, boot_ms);
    if (rc != STORE_OK) {
        sandbox_terminate(sb, "stop requested while booting", false);
        return;
    }
    sandbox_set_state(sb, SB_WARM);
    log_debug("worker: sandbox %s warm in %lld ms", sb->rt.sandbox_id, (long long)boot_ms);
    w->sandbox_hooks->events(w);
    w->sandbox_hooks->warm(w);
}

/* The Session's fields a claimed Sandbox keeps after its delivery is gone. */
static void take_session(struct sandbox *sb, struct store_delivery *d)
{
    sb->delivery = d;
    snprintf(sb->app_id, sizeof sb->app_id, "%s", d->app.id);
    snprintf(sb->session_id, sizeof sb->session_id, "%s", d->session.id);
    sb->keep_alive_ms = d->session.effective_keep_alive_seconds * 1000;
    sb->w->n_serving++;
}

/* Boots for the pool (d NULL, app NULL), cold for d, or pre-started for app. */
static int boot_one(struct worker *w, const struct driver *drv, const struct store_shape *shape,
                    struct store_delivery *d, const struct store_app *app, char *err, size_t errlen)
{
    struct sandbox *sb = sandbox_new(w, drv, shape);
    struct store_sandbox rec;
    enum store_status rc;

    if (!sb) {
        log_error("worker: out of memory booting a sandbox");
        snprintf(err, errlen, "worker out of memory");
        return -1;
    }
    sb->cold = d != NULL;
    sb->boot_started = clock_mono_ms();
    if (app) {
        sb->prestart_rev = app->definition_rev;
        sb->readiness_line = app->readiness_line;
        snprintf(sb->app_id, sizeof sb->app_id, "%s", app->id);
        rc = store_sandbox_insert_prestarted(w->st, &w->ctx, w->id, shape, app->id,
                                             app->definition_rev, &rec);
    } else {
        rc = store_sandbox_insert(w->st, &w->ctx, w->id, shape, sb->cold, &rec);
    }
    /* For the image cache's least-recently-used eviction (cache_sweep.c). */
    if (rc == STORE_OK && !image_is_default(shape->image))
        (void)store_image_touch(w->st, shape->image);
    if (rc != STORE_OK) {
        log_error("worker: cannot record a new sandbox: %s", store_status_name(rc));
        snprintf(err, errlen, "store error recording a sandbox");
        sandbox_free(sb);
        return -1;
    }
    if (d)
        take_session(sb, d);
    snprintf(sb->rt.sandbox_id, sizeof sb->rt.sandbox_id, "%s", rec.id);
    sb->job_running = true;
    /* A pool refill boots in the background, a cold boot (a message waits) at full priority. */
    sb->background_boot = !sb->cold && priority_background_boots();
    int deadline = boot_deadline_ms(sb);
    struct timeval tv = {deadline / 1000, (deadline % 1000) * 1000};
    sb->boot_ev = evtimer_new(w->base, boot_overran, sb);
    if (!sb->boot_ev || evtimer_add(sb->boot_ev, &tv) != 0 ||
        jobs_submit(sb->background_boot ? w->background : w->jobs, boot_work, boot_done, sb) != 0) {
        sb->job_running = false;
        sb->job_rc = -1;
        snprintf(sb->job_err, sizeof sb->job_err, "out of memory");
        boot_done(sb);
    }
    return 0;
}

int sandbox_boot(struct worker *w, const struct driver *drv, const struct store_shape *shape,
                 struct store_delivery *d, char *err, size_t errlen)
{
    return boot_one(w, drv, shape, d, NULL, err, errlen);
}

int sandbox_boot_prestarted(struct worker *w, const struct driver *drv, const struct store_app *app,
                            char *err, size_t errlen)
{
    struct store_shape shape;
    memset(&shape, 0, sizeof shape);
    snprintf(shape.driver, sizeof shape.driver, "%s", app->driver);
    snprintf(shape.image, sizeof shape.image, "%s", app->image_digest);
    shape.vcpu_count = app->vcpu_count;
    shape.mem_size_mib = app->mem_size_mib;
    return boot_one(w, drv, &shape, NULL, app, err, errlen);
}

void sandbox_claimed(struct sandbox *sb, struct store_delivery *d)
{
    sandbox_set_state(sb, SB_ACTIVATING);
    take_session(sb, d);
    sb->refill_pending = true;
}
