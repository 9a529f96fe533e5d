/*
 * sandbox.c: the Sandbox records of this worker (sandbox.h): making and freeing one, finding one
 * by id or Session, counting the pool's, and the drivers they run on (each initialised at its
 * first use, once per worker: w->drivers), and sandbox_set_state, the one place a state changes
 * (boot.c, expiry.c and agent_protocol.c decide when), checked against sandbox.h's table.
 */
#include "sandbox/sandbox.h"
#include "store_bounds.h"
#include "store_worker_drivers.h"
#include "drivers/shared.h"
#include "log.h"
#include "clock.h"
#include "sandbox/agent_channel.h"
#include "sandbox/egress_dns.h"
#include "sandbox/egress_events.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* sandbox.h's transition table: allowed[from][to]. "(new) -> BOOTING" is sandbox_new's, and
 * "(new) -> STOPPING" (a reap) is BOOTING -> STOPPING, since a new record is BOOTING. */
static const bool allowed[SB_STOPPING + 1][SB_STOPPING + 1] = {
    [SB_BOOTING] = {[SB_WARM] = true, [SB_ACTIVATING] = true, [SB_STOPPING] = true},
    [SB_WARM] = {[SB_ACTIVATING] = true, [SB_STOPPING] = true},
    [SB_ACTIVATING] = {[SB_BUSY] = true, [SB_STOPPING] = true},
    [SB_IDLE] = {[SB_BUSY] = true, [SB_STOPPING] = true},
    [SB_BUSY] = {[SB_IDLE] = true, [SB_STOPPING] = true},
};

const char *sandbox_state_name(enum sandbox_state s)
{
    static const char *const names[] = {"BOOTING", "WARM", "ACTIVATING",
                                        "IDLE",    "BUSY", "STOPPING"};
    return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}

bool sandbox_transition_ok(enum sandbox_state from, enum sandbox_state to)
{
    return (unsigned)from <= SB_STOPPING && (unsigned)to <= SB_STOPPING && allowed[from][to];
}

void sandbox_set_state(struct sandbox *sb, enum sandbox_state to)
{
    if (!sandbox_transition_ok(sb->state, to)) {
        log_error("worker: sandbox %s: %s -> %s is not a transition of sandbox.h's table",
                  sb->rt.sandbox_id, sandbox_state_name(sb->state), sandbox_state_name(to));
#ifndef NDEBUG
        /* A debug build stops here, where the lifecycle went wrong, not later where it shows. */
        abort();
#endif
    }
    sb->state = to;
}

static bool serving(const struct sandbox *sb)
{
    return sb->state == SB_ACTIVATING || sb->state == SB_IDLE || sb->state == SB_BUSY;
}

struct sandbox *sandbox_find_session(struct worker *w, const char *session_id)
{
    for (struct sandbox *sb = w->sandboxes; sb; sb = sb->next)
        if (serving(sb) && strcmp(sb->session_id, session_id) == 0)
            return sb;
    return NULL;
}

struct sandbox *sandbox_find_cold_boot(struct worker *w, const char *session_id)
{
    for (struct sandbox *sb = w->sandboxes; sb; sb = sb->next)
        if (sb->state == SB_BOOTING && sb->delivery && strcmp(sb->session_id, session_id) == 0)
            return sb;
    return NULL;
}

struct sandbox *sandbox_find(struct worker *w, const char *sandbox_id)
{
    for (struct sandbox *sb = w->sandboxes; sb; sb = sb->next)
        if (strcmp(sb->rt.sandbox_id, sandbox_id) == 0)
            return sb;
    return NULL;
}

size_t sandbox_count_pool(struct worker *w, const struct store_shape *shape, size_t *booting)
{
    size_t n = 0, b = 0;
    for (struct sandbox *sb = w->sandboxes; sb; sb = sb->next) {
        if (!shape_equal(&sb->rt.shape, shape) || sb->cold || sb->reaping || sb->prestart_rev)
            continue;
        if (sb->state == SB_WARM)
            n++;
        else if (sb->state == SB_BOOTING && !sb->stop_wanted)
            b++;
    }
    if (booting)
        *booting = b;
    return n + b;
}

size_t sandbox_count_prestarted(struct worker *w, const char *app_id, int64_t rev, size_t *booting)
{
    size_t n = 0, b = 0;
    for (struct sandbox *sb = w->sandboxes; sb; sb = sb->next) {
        if (sb->prestart_rev != rev || strcmp(sb->app_id, app_id) != 0 || sb->stop_wanted)
            continue;
        if (sb->state == SB_WARM || sb->state == SB_BOOTING)
            n++;
        if (sb->state == SB_BOOTING && sb->job_running)
            b++;
    }
    if (booting)
        *booting = b;
    return n;
}

#define PRESTART_BACKOFF_FIRST_MS 1000
#define PRESTART_BACKOFF_MAX_MS 60000

/* The App's backoff entry; with make, a free (or the least failing) one taken for it. */
static struct prestart_backoff *backoff_of(struct worker *w, const char *app_id, bool make)
{
    struct prestart_backoff *free_slot = NULL;
    size_t n = sizeof w->prestart_backoff / sizeof w->prestart_backoff[0];
    for (size_t i = 0; i < n; i++) {
        struct prestart_backoff *b = &w->prestart_backoff[i];
        if (strcmp(b->app_id, app_id) == 0)
            return b;
        if (!free_slot || b->failures < free_slot->failures)
            free_slot = b;
    }
    if (!make)
        return NULL;
    memset(free_slot, 0, sizeof *free_slot);
    snprintf(free_slot->app_id, sizeof free_slot->app_id, "%s", app_id);
    return free_slot;
}

void sandbox_prestart_failed(struct worker *w, const char *app_id)
{
    struct prestart_backoff *b = backoff_of(w, app_id, true);
    int64_t wait = PRESTART_BACKOFF_FIRST_MS;
    for (int i = 0; i < b->failures && wait < PRESTART_BACKOFF_MAX_MS; i++)
        wait *= 2;
    if (wait > PRESTART_BACKOFF_MAX_MS)
        wait = PRESTART_BACKOFF_MAX_MS;
    b->failures++;
    b->not_before = clock_mono_ms() + wait;
}

void sandbox_prestart_succeeded(struct worker *w, const char *app_id)
{
    struct prestart_backoff *b = backoff_of(w, app_id, false);
    if (b)
        memset(b, 0, sizeof *b);
}

bool sandbox_prestart_due(struct worker *w, const char *app_id)
{
    struct prestart_backoff *b = backoff_of(w, app_id, false);
    return !b || clock_mono_ms() >= b->not_before;
}

bool sandbox_activations_under_way(struct worker *w)
{
    for (struct sandbox *sb = w->sandboxes; sb; sb = sb->next)
        if (sb->state == SB_ACTIVATING || (sb->state == SB_BUSY && sb->running_pending))
            return true;
    return false;
}

bool sandbox_serving(const struct sandbox *sb)
{
    return serving(sb) || (sb->state == SB_BOOTING && sb->delivery);
}

/* Records in the store what the initialised drivers cannot bound on this host ("process:cpu"),
 * which GET /v1/pool shows; each driver said it on the log at its init. */
static void record_unbounded(struct worker *w)
{
    char all[256] = "", one[64];
    size_t len = 0;
    for (size_t i = 0; i < w->n_drivers; i++) {
        const struct driver *drv = w->drivers[i].drv;
        if (!drv || !drv->unbounded)
            continue;
        drv->unbounded(&w->cfg, one, sizeof one);
        for (char *save = NULL, *b = strtok_r(one, ",", &save); b; b = strtok_r(NULL, ",", &save))
            len += (size_t)snprintf(all + len, len < sizeof all ? sizeof all - len : 0, "%s%s:%s",
                                    len ? "," : "", drv->name, b);
    }
    enum store_status rc = store_worker_set_unbounded(w->st, w->id, all);
    if (rc != STORE_OK)
        log_warn("worker: cannot record the bounds it cannot apply: %s", store_status_name(rc));
}

/* The names the gateway accepts for an App's driver. */
static const char *const driver_names[] = {"process", "qemu", "firecracker"};

void sandbox_record_drivers(struct worker *w)
{
    char why[256];
    json_t *all = json_object();
    for (size_t i = 0; all && i < sizeof driver_names / sizeof *driver_names; i++) {
        const char *name = driver_names[i];
        const struct driver *drv = NULL;
        bool known = false;
        for (size_t j = 0; j < w->n_drivers && !known; j++)
            if (strcmp(w->drivers[j].name, name) == 0) {
                known = true;
                drv = w->drivers[j].drv;
                snprintf(why, sizeof why, "%s", w->drivers[j].why);
            }
        if (!known) {
            /* Not initialised yet: its probe says whether init would find what it needs. */
            snprintf(why, sizeof why, "not in this build");
            drv = w->find_driver(name);
            if (drv && drv->probe && drv->probe(&w->cfg, why, sizeof why) != 0)
                drv = NULL;
        } else if (drv && drv->probe && drv->probe(&w->cfg, why, sizeof why) != 0)
            drv = NULL; /* its files went away since */
        json_object_set_new(all, name, drv ? json_true() : json_string(why));
    }
    char *text = all ? json_dumps(all, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(all);
    if (!text || strlen(text) >= sizeof w->drivers_sent || strcmp(text, w->drivers_sent) == 0) {
        free(text);
        return;
    }
    enum store_status rc = store_worker_set_drivers(w->st, w->id, text);
    if (rc == STORE_OK)
        memcpy(w->drivers_sent, text, strlen(text) + 1);
    else
        log_warn("worker: cannot record the drivers it can run: %s", store_status_name(rc));
    free(text);
}

const struct driver *sandbox_driver(struct worker *w, const char *name)
{
    char err[512];
    for (size_t i = 0; i < w->n_drivers; i++)
        if (strcmp(w->drivers[i].name, name) == 0)
            return w->drivers[i].drv;
    if (w->n_drivers == sizeof w->drivers / sizeof w->drivers[0])
        return NULL;
    const struct driver *drv = w->find_driver(name);
    snprintf(err, sizeof err, "not in this build");
    if (!drv)
        log_error("worker: no driver named \"%s\" in this build", name);
    else if (drv->init && drv->init(&w->cfg, err, sizeof err) != 0) {
        log_error("worker: driver %s cannot run on this host: %s", name, err);
        drv = NULL;
    }
    snprintf(w->drivers[w->n_drivers].name, sizeof w->drivers[0].name, "%s", name);
    snprintf(w->drivers[w->n_drivers].why, sizeof w->drivers[0].why, "%s", drv ? "" : err);
    w->drivers[w->n_drivers++].drv = drv;
    if (!drv)
        sandbox_record_drivers(w);
    if (drv && drv->unbounded)
        record_unbounded(w);
    /* The firewall exists from a driver's init on: its log reader and the DNS forwarder start now,
     * before any Sandbox of this worker can be denied anything (later polls retry). */
    egress_events_tick(w);
    egress_dns_tick(w);
    return drv;
}

struct sandbox *sandbox_new(struct worker *w, const struct driver *drv,
                            const struct store_shape *shape)
{
    struct sandbox *sb = calloc(1, sizeof *sb);
    if (!sb)
        return NULL;
    sb->w = w;
    sb->drv = drv;
    sb->rt.shape = *shape;
    sb->rt.channel_fd = -1;
    sb->state = SB_BOOTING; /* the table's (new): every later change is sandbox_set_state's */
    sb->keepalive_ev = evtimer_new(w->base, NULL, NULL);
    sb->timeout_ev = evtimer_new(w->base, NULL, NULL);
    sb->running_ev = evtimer_new(w->base, NULL, NULL);
    if (!sb->keepalive_ev || !sb->timeout_ev || !sb->running_ev) {
        if (sb->keepalive_ev)
            event_free(sb->keepalive_ev);
        if (sb->timeout_ev)
            event_free(sb->timeout_ev);
        if (sb->running_ev)
            event_free(sb->running_ev);
        free(sb);
        return NULL;
    }
    sb->next = w->sandboxes;
    w->sandboxes = sb;
    return sb;
}

/* The record only: its delivery, if any, is delivery/'s and was ended or dropped before. */
static void sandbox_release(struct sandbox *sb)
{
    secret_set_clear(&sb->secrets);
    event_free(sb->keepalive_ev);
    event_free(sb->timeout_ev);
    event_free(sb->running_ev);
    if (sb->boot_ev)
        event_free(sb->boot_ev);
    agent_channel_free(sb->chan);
    free(sb);
}

void sandbox_unlink(struct sandbox *sb)
{
    struct worker *w = sb->w;
    for (struct sandbox **p = &w->sandboxes; *p; p = &(*p)->next)
        if (*p == sb) {
            *p = sb->next;
            break;
        }
    sb->next = NULL;
}

void sandbox_free(struct sandbox *sb)
{
    sandbox_unlink(sb);
    sandbox_release(sb);
}

void sandbox_free_all(struct worker *w)
{
    while (w->sandboxes) {
        struct sandbox *sb = w->sandboxes;
        w->sandboxes = sb->next;
        sandbox_release(sb);
    }
}
