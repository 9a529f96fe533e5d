/*
 * lifecycle.c: a Sandbox's life in this worker: boot (for the pool or cold), activation (claim,
 * attach the Workspace, start the App's command), delivery of messages one at a time, the
 * keep-alive timer, and termination. Driver calls block, so they run as jobs (jobs.h); every
 * other step runs on the event loop, and every state change is written to the store first.
 */
#include "sandbox/lifecycle.h"
#include "sandbox/agent_channel.h"
#include "sandbox/egress.h"
#include "sandbox/jobs.h"
#include "log.h"
#include "sandbox/pool.h"
#include "clock.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void sandbox_on_line(void *arg, json_t *line);
static void sandbox_on_closed(void *arg, const char *reason);

static bool shape_equal(const struct store_shape *a, const struct store_shape *b)
{
    return strcmp(a->driver, b->driver) == 0 && strcmp(a->image, b->image) == 0 &&
           a->vcpu_count == b->vcpu_count && a->mem_size_mib == b->mem_size_mib;
}

static bool serving(const struct sandbox *sb)
{
    return sb->phase == SB_ACTIVATING || sb->phase == SB_IDLE || sb->phase == SB_BUSY;
}

struct sandbox *lifecycle_find_session(struct worker *w, const char *session_id)
{
    for (struct sandbox *sb = w->sandboxes; sb; sb = sb->next)
        if (serving(sb) && strcmp(sb->session_id, session_id) == 0)
            return sb;
    return NULL;
}

struct sandbox *lifecycle_find_cold_boot(struct worker *w, const char *session_id)
{
    for (struct sandbox *sb = w->sandboxes; sb; sb = sb->next)
        if (sb->phase == SB_BOOTING && sb->delivery && strcmp(sb->session_id, session_id) == 0)
            return sb;
    return NULL;
}

struct sandbox *lifecycle_find(struct worker *w, const char *sandbox_id)
{
    for (struct sandbox *sb = w->sandboxes; sb; sb = sb->next)
        if (strcmp(sb->rt.sandbox_id, sandbox_id) == 0)
            return sb;
    return NULL;
}

size_t lifecycle_count_pool(struct worker *w, const struct store_shape *shape, size_t *booting)
{
    size_t n = 0, b = 0;
    for (struct sandbox *sb = w->sandboxes; sb; sb = sb->next) {
        if (!shape_equal(&sb->rt.shape, shape) || sb->cold || sb->reaping)
            continue;
        if (sb->phase == SB_WARM)
            n++;
        else if (sb->phase == SB_BOOTING && !sb->stop_wanted)
            b++;
    }
    if (booting)
        *booting = b;
    return n + b;
}

static struct sandbox *sandbox_new(struct worker *w, const struct driver *drv,
                                   const struct store_shape *shape)
{
    struct sandbox *sb = calloc(1, sizeof *sb);
    if (!sb)
        return NULL;
    sb->w = w;
    sb->drv = drv;
    sb->rt.shape = *shape;
    sb->rt.channel_fd = -1;
    sb->keepalive_ev = evtimer_new(w->base, NULL, NULL);
    sb->timeout_ev = evtimer_new(w->base, NULL, NULL);
    if (!sb->keepalive_ev || !sb->timeout_ev) {
        if (sb->keepalive_ev)
            event_free(sb->keepalive_ev);
        if (sb->timeout_ev)
            event_free(sb->timeout_ev);
        free(sb);
        return NULL;
    }
    sb->next = w->sandboxes;
    w->sandboxes = sb;
    return sb;
}

static void sandbox_unlink_free(struct sandbox *sb)
{
    struct worker *w = sb->w;
    for (struct sandbox **p = &w->sandboxes; *p; p = &(*p)->next)
        if (*p == sb) {
            *p = sb->next;
            break;
        }
    event_free(sb->keepalive_ev);
    event_free(sb->timeout_ev);
    agent_channel_free(sb->chan);
    if (sb->delivery) {
        store_delivery_clear(sb->delivery);
        free(sb->delivery);
    }
    free(sb);
}

static void arm_timer(struct event *ev, event_callback_fn cb, void *arg, int64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    event_del(ev);
    event_assign(ev, event_get_base(ev), -1, 0, cb, arg);
    /* libevent measures a timeout from the time it cached before running this callback; the
     * SQLite commits since then would make a keep-alive end that much early. */
    event_base_update_cache_time(event_get_base(ev));
    event_add(ev, &tv);
}

/* ---- deliveries ---- */

/* The delivery is over (completed, failed or released): free it and make room for the next. */
static void delivery_end(struct sandbox *sb)
{
    struct worker *w = sb->w;
    if (!sb->delivery)
        return;
    store_delivery_clear(sb->delivery);
    free(sb->delivery);
    sb->delivery = NULL;
    w->n_deliveries--;
    consumer_kick(w);
}

/* The attempt failed, or (while shutting down) is handed back untried. */
static void delivery_abandon(struct sandbox *sb, const char *reason)
{
    struct worker *w = sb->w;
    struct store_delivery *d = sb->delivery;
    if (!d)
        return;
    if (w->stopping) {
        enum store_status rc = w->st->queue_release(w->st, &w->ctx, d->message.id, w->id);
        if (rc != STORE_OK && rc != STORE_CONFLICT)
            log_error("worker: cannot release %s: %s", d->message.id, store_status_name(rc));
    } else {
        consumer_fail_attempt(w, d, sb->rt.sandbox_id, reason);
    }
    delivery_end(sb);
}

static void keepalive_expired(evutil_socket_t fd, short what, void *arg)
{
    struct sandbox *sb = arg;
    (void)fd;
    (void)what;
    if (sb->phase == SB_IDLE)
        lifecycle_terminate(sb, "keep-alive expired", false);
}

/* After a delivery ended on a Sandbox that is still fine: back to idle, keep-alive armed. */
static void sandbox_idle(struct sandbox *sb)
{
    struct worker *w = sb->w;
    event_del(sb->timeout_ev);
    sb->phase = SB_IDLE;
    if (w->stopping) {
        lifecycle_terminate(sb, "worker shutdown", false);
        return;
    }
    enum store_status rc =
        w->st->session_touch(w->st, sb->session_id, clock_wall_ms() + sb->keep_alive_ms);
    if (rc != STORE_OK)
        log_warn("worker: cannot record the keep-alive of %s: %s", sb->session_id,
                 store_status_name(rc));
    arm_timer(sb->keepalive_ev, keepalive_expired, sb, sb->keep_alive_ms);
}

static void message_timed_out(evutil_socket_t fd, short what, void *arg)
{
    struct sandbox *sb = arg;
    char reason[96];
    (void)fd;
    (void)what;
    if (sb->phase == SB_BUSY)
        snprintf(reason, sizeof reason, "message timeout: no answer within %llds",
                 (long long)sb->w->cfg.message_timeout);
    else
        snprintf(reason, sizeof reason, "agent did not start within %llds",
                 (long long)sb->w->cfg.message_timeout);
    lifecycle_terminate(sb, reason, false);
}

void lifecycle_deliver(struct sandbox *sb, struct store_delivery *d)
{
    struct worker *w = sb->w;
    char head[160];
    sb->delivery = d;
    sb->phase = SB_BUSY;
    event_del(sb->keepalive_ev);
    sb->keep_alive_ms = d->session.effective_keep_alive_seconds * 1000;
    /* The body is canonical JSON from the store and the id is [a-z0-9_]: no re-encoding needed. */
    int hlen = snprintf(head, sizeof head, "{\"id\":\"%s\",\"seq\":%lld,\"body\":", d->message.id,
                        (long long)d->message.seq);
    size_t blen = strlen(d->message.body_json);
    char *line = malloc((size_t)hlen + blen + 2);
    if (!line) {
        lifecycle_terminate(sb, "out of memory", false);
        return;
    }
    memcpy(line, head, (size_t)hlen);
    memcpy(line + hlen, d->message.body_json, blen);
    line[hlen + blen] = '}';
    int rc = agent_channel_send(sb->chan, line, (size_t)hlen + blen + 1);
    free(line);
    log_emit(LOG_LEVEL_DEBUG, d->message.request_id, "worker: delivering %s (seq %lld) to %s",
             d->message.id, (long long)d->message.seq, sb->rt.sandbox_id);
    if (rc != 0) {
        lifecycle_terminate(sb, "agent channel closed", false);
        return;
    }
    arm_timer(sb->timeout_ev, message_timed_out, sb, w->cfg.message_timeout * 1000);
}

static void delivery_replied(struct sandbox *sb, json_t *line)
{
    struct worker *w = sb->w;
    struct store_delivery *d = sb->delivery;
    json_t *reply = json_object_get(line, "reply");
    json_t *error = json_object_get(line, "error");

    if (reply) {
        char *text = json_dumps(reply, JSON_COMPACT | JSON_ENCODE_ANY);
        enum store_status rc = text ? w->st->queue_complete(w->st, &w->ctx, d->message.id, w->id,
                                                            sb->rt.sandbox_id, text)
                                    : STORE_ERROR;
        free(text);
        if (rc == STORE_OK)
            log_emit(LOG_LEVEL_DEBUG, d->message.request_id, "worker: %s completed", d->message.id);
        else
            log_emit(LOG_LEVEL_WARN, d->message.request_id, "worker: reply to %s not recorded: %s",
                     d->message.id, store_status_name(rc));
        worker_notify_gateway(w, "msg", d->message.id);
    } else {
        char reason[512];
        const char *msg = json_string_value(error);
        char *dumped = msg ? NULL : json_dumps(error, JSON_COMPACT | JSON_ENCODE_ANY);
        snprintf(reason, sizeof reason, "agent error: %s", msg ? msg : dumped ? dumped : "?");
        free(dumped);
        consumer_fail_attempt(w, d, sb->rt.sandbox_id, reason);
    }
    bool refill = sb->refill_pending; /* read first: sandbox_idle may end and free sb */
    sb->refill_pending = false;
    delivery_end(sb);
    sandbox_idle(sb);
    if (refill)
        pool_replenish(w);
}

/* ---- the agent channel ---- */

static void agent_started(struct sandbox *sb)
{
    struct worker *w = sb->w;
    event_del(sb->timeout_ev);
    /* Deliver first, then record `running`: the App works on the message while this commit
     * runs. The reply is read by this same loop only after the commit, so the store still sees
     * the Sandbox running before the message completed. */
    struct store_delivery *d = sb->delivery;
    sb->delivery = NULL;
    lifecycle_deliver(sb, d);
    if (sb->phase != SB_BUSY)
        return; /* the channel closed: terminated already */
    enum store_status rc =
        w->st->sandbox_mark_running(w->st, &w->ctx, sb->rt.sandbox_id, sb->session_id);
    if (rc != STORE_OK) {
        lifecycle_terminate(sb, rc == STORE_CONFLICT ? "session deleted" : "store error", false);
        return;
    }
    worker_notify_gateway(w, "sandbox", sb->rt.sandbox_id);
}

#define LOG_BUDGET_BYTES 65536
#define LOG_BUDGET_MS 10000

/* Logs one line of the agent's stderr within the Sandbox's budget; at the start of each new
 * window, says how many lines the last one dropped. */
static void sandbox_log_line(struct sandbox *sb, const char *text)
{
    int64_t now = clock_mono_ms();
    if (now - sb->log_window_start >= LOG_BUDGET_MS) {
        if (sb->log_dropped_lines > 0)
            log_warn("sandbox %s: %lld log lines dropped (over %d bytes in %d s)",
                     sb->rt.sandbox_id, (long long)sb->log_dropped_lines, LOG_BUDGET_BYTES,
                     LOG_BUDGET_MS / 1000);
        sb->log_window_start = now;
        sb->log_window_bytes = 0;
        sb->log_dropped_lines = 0;
    }
    int64_t len = (int64_t)strlen(text);
    if (sb->log_window_bytes + len > LOG_BUDGET_BYTES) {
        sb->log_dropped_lines++;
        return;
    }
    sb->log_window_bytes += len;
    log_info("sandbox %s: %s", sb->rt.sandbox_id, text);
}

static void sandbox_on_line(void *arg, json_t *line)
{
    struct sandbox *sb = arg;
    const char *type = json_string_value(json_object_get(line, "type"));
    const char *id = json_string_value(json_object_get(line, "id"));

    if (type && strcmp(type, "log") == 0) {
        sandbox_log_line(sb, json_string_value(json_object_get(line, "line")) ?: "");
    } else if (type && strcmp(type, "started") == 0 && sb->phase == SB_ACTIVATING) {
        agent_started(sb);
    } else if (type && strcmp(type, "error") == 0 && sb->phase == SB_ACTIVATING) {
        char reason[256];
        snprintf(reason, sizeof reason, "agent failed to start: %s",
                 json_string_value(json_object_get(line, "error")) ?: "?");
        lifecycle_terminate(sb, reason, false);
    } else if (type && strcmp(type, "exit") == 0) {
        char reason[64];
        snprintf(reason, sizeof reason, "agent exited with status %lld",
                 (long long)json_integer_value(json_object_get(line, "status")));
        lifecycle_terminate(sb, reason, false);
    } else if (type) {
        log_debug("sandbox %s: control line \"%s\" ignored", sb->rt.sandbox_id, type);
    } else if (id && sb->phase == SB_BUSY && sb->delivery &&
               strcmp(id, sb->delivery->message.id) == 0) {
        delivery_replied(sb, line);
    } else {
        log_warn("sandbox %s: unexpected line from the agent (id %s)", sb->rt.sandbox_id,
                 id ? id : "none");
    }
}

static void sandbox_on_closed(void *arg, const char *reason)
{
    struct sandbox *sb = arg;
    lifecycle_terminate(sb, reason, false);
}

/* ---- jobs: boot, attach, terminate, reap ---- */

static void boot_work(void *arg)
{
    struct sandbox *sb = arg;
    sb->job_rc = sb->drv->boot(&sb->w->cfg, &sb->rt, sb->job_err, sizeof sb->job_err);
}

static void start_attach(struct sandbox *sb);

static void boot_done(void *arg)
{
    struct sandbox *sb = arg;
    struct worker *w = sb->w;
    struct store_sandbox rec;
    enum store_status rc;
    char reason[600];

    sb->job_running = false;
    if (sb->job_rc != 0) {
        snprintf(reason, sizeof reason, "boot failed: %s", sb->job_err);
        log_error("worker: sandbox %s %s", sb->rt.sandbox_id, reason);
        lifecycle_terminate(sb, reason, true);
        return;
    }
    memset(&rec, 0, sizeof rec);
    snprintf(rec.id, sizeof rec.id, "%s", sb->rt.sandbox_id);
    rec.pid = sb->rt.pid;
    snprintf(rec.jail_dir, sizeof rec.jail_dir, "%s", sb->rt.jail_dir);
    snprintf(rec.cgroup_path, sizeof rec.cgroup_path, "%s", sb->rt.cgroup_path);
    snprintf(rec.net_address, sizeof rec.net_address, "%s", sb->rt.net_address);
    snprintf(rec.image_hash, sizeof rec.image_hash, "%s", sb->rt.image_hash);
    if ((rc = w->st->sandbox_set_runtime(w->st, &rec)) != STORE_OK)
        log_error("worker: cannot record the runtime of %s: %s", sb->rt.sandbox_id,
                  store_status_name(rc));
    struct agent_channel_handlers h = {sandbox_on_line, sandbox_on_closed, sb};
    sb->chan = agent_channel_new(w->base, sb->rt.channel_fd, (size_t)w->cfg.reply_limit, &h);
    if (!sb->chan) {
        lifecycle_terminate(sb, "cannot watch the agent channel", true);
        return;
    }
    sb->rt.channel_fd = -1; /* the channel owns it now; the driver must not close it again */
    if (sb->stop_wanted) {
        lifecycle_terminate(sb, sb->stop_reason, sb->stop_failed);
        return;
    }
    int64_t boot_ms = clock_mono_ms() - sb->boot_started;
    if (sb->delivery) {
        rc = w->st->sandbox_assign(w->st, &w->ctx, sb->rt.sandbox_id, sb->app_id, sb->session_id);
        if (rc != STORE_OK) {
            lifecycle_terminate(sb, rc == STORE_CONFLICT ? "session deleted" : "store error",
                                false);
            return;
        }
        sb->phase = SB_ACTIVATING;
        log_info("worker: cold sandbox %s booted in %lld ms for %s", sb->rt.sandbox_id,
                 (long long)boot_ms, sb->session_id);
        start_attach(sb);
        return;
    }
    rc = w->st->sandbox_mark_warm(w->st, &w->ctx, sb->rt.sandbox_id, boot_ms);
    if (rc != STORE_OK) {
        lifecycle_terminate(sb, "stop requested while booting", false);
        return;
    }
    sb->phase = SB_WARM;
    log_debug("worker: sandbox %s warm in %lld ms", sb->rt.sandbox_id, (long long)boot_ms);
    worker_notify_gateway(w, "sandbox", sb->rt.sandbox_id);
    pool_replenish(w);
}

void lifecycle_boot(struct worker *w, const struct driver *drv, const struct store_shape *shape,
                    struct store_delivery *d)
{
    struct sandbox *sb = sandbox_new(w, drv, shape);
    struct store_sandbox rec;
    enum store_status rc;

    if (!sb) {
        log_error("worker: out of memory booting a sandbox");
        if (d) {
            consumer_fail_attempt(w, d, NULL, "worker out of memory");
            store_delivery_clear(d);
            free(d);
            w->n_deliveries--;
        }
        return;
    }
    sb->phase = SB_BOOTING;
    sb->cold = d != NULL;
    sb->boot_started = clock_mono_ms();
    if (d) {
        sb->delivery = d;
        snprintf(sb->app_id, sizeof sb->app_id, "%s", d->app.id);
        snprintf(sb->session_id, sizeof sb->session_id, "%s", d->session.id);
        sb->keep_alive_ms = d->session.effective_keep_alive_seconds * 1000;
        w->n_serving++;
    }
    rc = w->st->sandbox_insert(w->st, &w->ctx, w->id, shape, sb->cold, &rec);
    if (rc != STORE_OK) {
        log_error("worker: cannot record a new sandbox: %s", store_status_name(rc));
        if (d) {
            w->n_serving--;
            delivery_abandon(sb, "store error recording a sandbox");
        }
        sandbox_unlink_free(sb);
        return;
    }
    snprintf(sb->rt.sandbox_id, sizeof sb->rt.sandbox_id, "%s", rec.id);
    sb->job_running = true;
    if (jobs_submit(w->jobs, boot_work, boot_done, sb) != 0) {
        sb->job_running = false;
        sb->job_rc = -1;
        snprintf(sb->job_err, sizeof sb->job_err, "out of memory");
        boot_done(sb);
    }
}

static void attach_work(void *arg)
{
    struct sandbox *sb = arg;
    sb->job_rc = sb->drv->attach_workspace(&sb->w->cfg, &sb->rt,
                                           sb->workspace_dir[0] ? sb->workspace_dir : NULL,
                                           sb->job_err, sizeof sb->job_err);
}

static void attach_done(void *arg)
{
    struct sandbox *sb = arg;
    struct worker *w = sb->w;
    char reason[600];
    sb->job_running = false;
    if (sb->stop_wanted) {
        lifecycle_terminate(sb, sb->stop_reason, sb->stop_failed);
        return;
    }
    if (sb->job_rc != 0) {
        snprintf(reason, sizeof reason, "workspace attach failed: %s", sb->job_err);
        lifecycle_terminate(sb, reason, false);
        return;
    }
    /* Start the App's command: {"type":"start","argv":[...],"workspace":...}. */
    json_error_t jerr;
    json_t *argv = json_loads(
        sb->delivery->app.command_json ? sb->delivery->app.command_json : "[]", 0, &jerr);
    /* A driver serving the Workspace over NFS (qemu) names the source for the agent to mount. */
    json_t *ws = json_null();
    if (sb->workspace_dir[0] && sb->rt.workspace_nfs[0]) {
        json_decref(ws);
        ws = json_pack("{s:s,s:s}", "path", "/workspace", "nfs", sb->rt.workspace_nfs);
    } else if (sb->workspace_dir[0]) {
        json_decref(ws);
        ws = json_string("/workspace");
    }
    json_t *start = json_pack("{s:s,s:o,s:o}", "type", "start", "argv", argv ? argv : json_array(),
                              "workspace", ws ? ws : json_null());
    char *line = start ? json_dumps(start, JSON_COMPACT) : NULL;
    json_decref(start);
    int rc = line ? agent_channel_send(sb->chan, line, strlen(line)) : -1;
    free(line);
    if (rc != 0) {
        lifecycle_terminate(sb, "cannot start the agent", false);
        return;
    }
    arm_timer(sb->timeout_ev, message_timed_out, sb, w->cfg.message_timeout * 1000);
}

/* The host directory of the Session's Workspace, or "" for none. */
static void workspace_dir_of(struct worker *w, const struct store_delivery *d, char *out,
                             size_t outlen)
{
    struct store_workspace ws;
    out[0] = '\0';
    if (!d->session.workspace_id[0])
        return;
    if (w->st->workspace_get &&
        w->st->workspace_get(w->st, d->app.id, d->session.workspace_id, &ws) == STORE_OK &&
        ws.path[0]) {
        snprintf(out, outlen, "%s", ws.path);
        return;
    }
    snprintf(out, outlen, "%.250s/workspaces/%s/%s", w->cfg.data_dir, d->app.id,
             d->session.workspace_id);
}

static void start_attach(struct sandbox *sb)
{
    struct worker *w = sb->w;
    /* The App's egress policy is in place before its command can run (fail closed). */
    char why[512];
    if (sandbox_egress_apply(sb, sb->delivery->app.id, sb->delivery->app.network_json, why,
                             sizeof why) != 0) {
        log_error("worker: %s: %s", sb->rt.sandbox_id, why);
        lifecycle_terminate(sb, "egress policy could not be applied", true);
        return;
    }
    workspace_dir_of(w, sb->delivery, sb->workspace_dir, sizeof sb->workspace_dir);
    if (!sb->workspace_dir[0]) {
        /* Every driver's attach is a no-op without a Workspace: skip the job thread round trip
         * (two thread wake-ups and an eventfd) on the warm path. */
        sb->rt.workspace_nfs[0] = '\0';
        sb->job_rc = 0;
        attach_done(sb);
        return;
    }
    sb->job_running = true;
    if (jobs_submit(w->jobs, attach_work, attach_done, sb) != 0) {
        sb->job_running = false;
        lifecycle_terminate(sb, "out of memory", false);
    }
}

void lifecycle_activate(struct worker *w, struct store_delivery *d)
{
    struct store_shape shape;
    struct store_sandbox claimed;
    enum store_status rc;

    memset(&shape, 0, sizeof shape);
    snprintf(shape.driver, sizeof shape.driver, "%s", d->app.driver);
    snprintf(shape.image, sizeof shape.image, "%s", d->app.image);
    shape.vcpu_count = d->app.vcpu_count;
    shape.mem_size_mib = d->app.mem_size_mib;
    const struct driver *drv = worker_driver(w, shape.driver);
    if (!drv) {
        char reason[96];
        snprintf(reason, sizeof reason, "driver \"%s\" is not available on this worker",
                 shape.driver);
        consumer_fail_attempt(w, d, NULL, reason);
        store_delivery_clear(d);
        free(d);
        w->n_deliveries--;
        return;
    }
    pool_ensure_shape(w, &shape);
    rc = w->st->sandbox_claim_warm(w->st, &w->ctx, w->id, &shape, d->app.id, d->session.id,
                                   &claimed);
    struct sandbox *sb = rc == STORE_OK ? lifecycle_find(w, claimed.id) : NULL;
    if (rc == STORE_OK && sb && sb->phase == SB_WARM) {
        sb->phase = SB_ACTIVATING;
        sb->delivery = d;
        snprintf(sb->app_id, sizeof sb->app_id, "%s", d->app.id);
        snprintf(sb->session_id, sizeof sb->session_id, "%s", d->session.id);
        sb->keep_alive_ms = d->session.effective_keep_alive_seconds * 1000;
        w->n_serving++;
        sb->refill_pending = true;
        start_attach(sb);
        return;
    }
    if (rc == STORE_OK) {
        /* The store handed us a Sandbox this process does not hold: never expected. */
        log_error("worker: claimed warm sandbox %s is not in memory", claimed.id);
        w->st->sandbox_finish(w->st, &w->ctx, claimed.id, true, "lost by its worker", NULL);
    } else if (rc == STORE_CONFLICT) {
        /* The Session was deleted between the claim and now: its message is failed already. */
        store_delivery_clear(d);
        free(d);
        w->n_deliveries--;
        return;
    } else if (rc != STORE_EMPTY) {
        log_error("worker: warm claim failed: %s", store_status_name(rc));
    }
    lifecycle_boot(w, drv, &shape, d);
}

static void terminate_work(void *arg)
{
    struct sandbox *sb = arg;
    sb->usage.cpu_usec = -1;
    sb->usage.mem_peak_bytes = -1;
    if (sb->reaping)
        sb->job_rc =
            sb->drv ? sb->drv->reap(&sb->w->cfg, &sb->record, sb->job_err, sizeof sb->job_err) : 0;
    else
        sb->job_rc =
            sb->drv->terminate(&sb->w->cfg, &sb->rt, &sb->usage, sb->job_err, sizeof sb->job_err);
}

static void terminate_done(void *arg)
{
    struct sandbox *sb = arg;
    struct worker *w = sb->w;
    char reason[700];
    bool failed = sb->stop_failed;
    if (sb->job_rc != 0) {
        log_error("worker: cleaning up sandbox %s failed: %s", sb->rt.sandbox_id, sb->job_err);
        snprintf(reason, sizeof reason, "%s; cleanup failed: %s", sb->stop_reason, sb->job_err);
        failed = true;
    } else {
        snprintf(reason, sizeof reason, "%s", sb->stop_reason);
    }
    enum store_status rc =
        w->st->sandbox_finish(w->st, &w->ctx, sb->rt.sandbox_id, failed, reason, &sb->usage);
    if (rc != STORE_OK && rc != STORE_CONFLICT)
        log_error("worker: cannot record the end of %s: %s", sb->rt.sandbox_id,
                  store_status_name(rc));
    log_info("worker: sandbox %s %s (%s)", sb->rt.sandbox_id, failed ? "failed" : "terminated",
             reason);
    worker_notify_gateway(w, "sandbox", sb->rt.sandbox_id);
    sandbox_unlink_free(sb);
    pool_replenish(w);
    consumer_kick(w);
    worker_maybe_exit(w);
}

void lifecycle_terminate(struct sandbox *sb, const char *reason, bool failed)
{
    struct worker *w = sb->w;
    if (sb->phase == SB_STOPPING)
        return;
    if (sb->job_running) {
        if (!sb->stop_wanted) {
            sb->stop_wanted = true;
            sb->stop_failed = failed;
            snprintf(sb->stop_reason, sizeof sb->stop_reason, "%s", reason);
        }
        return;
    }
    if (sb->stop_reason != reason)
        snprintf(sb->stop_reason, sizeof sb->stop_reason, "%s", reason);
    sb->stop_failed = failed;
    if (serving(sb) || (sb->phase == SB_BOOTING && sb->delivery))
        w->n_serving--;
    sb->phase = SB_STOPPING;
    event_del(sb->keepalive_ev);
    event_del(sb->timeout_ev);
    delivery_abandon(sb, reason);
    agent_channel_free(sb->chan);
    sb->chan = NULL;
    enum store_status rc = w->st->sandbox_mark_stopping(w->st, &w->ctx, sb->rt.sandbox_id, reason);
    if (rc != STORE_OK && rc != STORE_CONFLICT)
        log_error("worker: cannot record that %s is stopping: %s", sb->rt.sandbox_id,
                  store_status_name(rc));
    if (jobs_submit(w->jobs, terminate_work, terminate_done, sb) != 0) {
        terminate_work(sb);
        terminate_done(sb);
    }
}

void lifecycle_reap(struct worker *w, const struct store_sandbox *rec)
{
    if (lifecycle_find(w, rec->id))
        return;
    struct sandbox *sb = sandbox_new(w, worker_driver(w, rec->shape.driver), &rec->shape);
    if (!sb)
        return;
    sb->reaping = true;
    sb->record = *rec;
    snprintf(sb->rt.sandbox_id, sizeof sb->rt.sandbox_id, "%s", rec->id);
    if (!sb->drv)
        log_warn("worker: no \"%s\" driver to reap %s; marking it terminated only",
                 rec->shape.driver, rec->id);
    lifecycle_terminate(sb, "worker restart", false);
}

void lifecycle_check_stop_requests(struct worker *w)
{
    struct store_sandbox *list = NULL;
    size_t n = 0;
    if (w->st->sandbox_list_stop_requested(w->st, w->id, &list, &n) != STORE_OK)
        return;
    for (size_t i = 0; i < n; i++) {
        struct sandbox *sb = lifecycle_find(w, list[i].id);
        if (sb)
            lifecycle_terminate(
                sb, list[i].stop_requested_at ? "stop requested" : "session deleted", false);
    }
    free(list);
}

void lifecycle_renew_leases(struct worker *w)
{
    for (struct sandbox *sb = w->sandboxes; sb; sb = sb->next) {
        if (!sb->delivery)
            continue;
        int64_t lease = w->cfg.lease_ms + w->cfg.message_timeout * 1000;
        enum store_status rc =
            w->st->queue_extend_lease(w->st, sb->delivery->message.id, w->id, lease);
        if (rc == STORE_CONFLICT)
            log_warn("worker: lost the lease of %s", sb->delivery->message.id);
    }
}

void lifecycle_shutdown(struct worker *w)
{
    struct sandbox *sb = w->sandboxes;
    while (sb) {
        struct sandbox *next = sb->next;
        if (sb->phase != SB_BUSY || w->grace_expired)
            lifecycle_terminate(sb, "worker shutdown", false);
        sb = next;
    }
}
