/*
 * expiry.c: how a Sandbox ends (sandbox.h): its deadlines (the agent's start and each message's
 * answer within message_timeout), the keep-alive of an idle one, stop requests (DELETE, a deleted
 * Session), the worker's shutdown, termination (the driver's terminate job, then the store's
 * record of the end) and the reaping of what a dead worker left. A terminated Sandbox's delivery
 * goes up to delivery/ (hooks->lost) and its end to the loop (hooks->gone).
 *
 * Also the `running` record of a Sandbox whose App started (sandbox.h): its timer ends the
 * Sandbox when the store refuses, and termination writes a pending one first, so the two live
 * together here; boot.c and agent_protocol.c call into this file and it calls into neither.
 */
#include "sandbox/agent_channel.h"
#include "store_sandboxes.h"
#include "store_sessions.h"
#include "log.h"
#include "sandbox/jobs.h"
#include "sandbox/secrets.h"
#include "sandbox/sandbox.h"
#include "clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void deadline_missed(evutil_socket_t fd, short what, void *arg)
{
    struct sandbox *sb = arg;
    char reason[96];
    (void)fd;
    (void)what;
    if (sb->state == SB_BUSY)
        snprintf(reason, sizeof reason, "message timeout: no answer within %llds",
                 (long long)sb->w->cfg.message_timeout);
    else
        snprintf(reason, sizeof reason, "agent did not start within %llds",
                 (long long)sb->w->cfg.message_timeout);
    sandbox_terminate(sb, reason, false);
}

void sandbox_arm_deadline(struct sandbox *sb)
{
    arm_timer(sb->timeout_ev, deadline_missed, sb, sb->w->cfg.message_timeout * 1000);
}

static void ready_missed(evutil_socket_t fd, short what, void *arg)
{
    struct sandbox *sb = arg;
    char reason[128];
    (void)fd;
    (void)what;
    if (sb->state != SB_BOOTING || sb->prestart_phase == PRESTART_NONE)
        return;
    snprintf(reason, sizeof reason, "not ready: the pre-started agent was not %s within %llds",
             sb->prestart_phase == PRESTART_STARTING ? "started" : "ready",
             (long long)sb->w->cfg.prestart_ready_timeout);
    sandbox_prestart_failed(sb->w, sb->app_id);
    sandbox_terminate(sb, reason, false);
}

void sandbox_arm_ready_deadline(struct sandbox *sb)
{
    arm_timer(sb->timeout_ev, ready_missed, sb, sb->w->cfg.prestart_ready_timeout * 1000);
}

static void keepalive_expired(evutil_socket_t fd, short what, void *arg)
{
    struct sandbox *sb = arg;
    (void)fd;
    (void)what;
    if (sb->state == SB_IDLE)
        sandbox_terminate(sb, "keep-alive expired", false);
}

/* The OOM killer ended a process of the Sandbox other than its agent (which went on to answer)
 * since the last look: a count on the Sandbox and an event, so the App's owner sees what its
 * memory bound cost (an OOM kill of the agent itself ends the Sandbox, agent_protocol.c). One
 * small cgroup file read per reply, after the reply is recorded. */
static void note_oom_kills(struct sandbox *sb)
{
    int64_t n = sb->drv->oom_kills ? sb->drv->oom_kills(&sb->w->cfg, &sb->rt) : -1;
    if (n <= sb->oom_kills_seen)
        return;
    sb->oom_kills_seen = n;
    log_warn("sandbox %s: the OOM killer ended %lld process(es) inside it (memSizeMib %lld); "
             "its agent goes on",
             sb->rt.sandbox_id, (long long)n, (long long)sb->rt.shape.mem_size_mib);
    enum store_status rc = store_sandbox_oom_killed(sb->w->st, &sb->w->ctx, sb->rt.sandbox_id, n);
    if (rc != STORE_OK)
        log_warn("worker: cannot record the OOM kills of %s: %s", sb->rt.sandbox_id,
                 store_status_name(rc));
}

void sandbox_idle(struct sandbox *sb)
{
    struct worker *w = sb->w;
    event_del(sb->timeout_ev);
    sandbox_set_state(sb, SB_IDLE);
    sb->idle_since = clock_mono_ms();
    note_oom_kills(sb);
    if (w->stopping) {
        sandbox_terminate(sb, "worker shutdown", false);
        return;
    }
    enum store_status rc =
        store_session_touch(w->st, sb->session_id, clock_wall_ms() + sb->keep_alive_ms);
    if (rc != STORE_OK)
        log_warn("worker: cannot record the keep-alive of %s: %s", sb->session_id,
                 store_status_name(rc));
    arm_timer(sb->keepalive_ev, keepalive_expired, sb, sb->keep_alive_ms);
}

/* ---- `running`: with the first reply, or RUNNING_RECORD_MS after the App started ---- */

static void running_due(evutil_socket_t fd, short what, void *arg)
{
    struct sandbox *sb = arg;
    (void)fd;
    (void)what;
    enum store_status rc = sandbox_record_running(sb);
    if (rc != STORE_OK)
        sandbox_terminate(sb, rc == STORE_CONFLICT ? "session deleted" : "store error", false);
}

void sandbox_running_pending(struct sandbox *sb)
{
    struct timeval tv = {0, RUNNING_RECORD_MS * 1000};
    sb->running_pending = true;
    event_del(sb->running_ev); /* never pending here; event_assign must not meet a pending one */
    event_assign(sb->running_ev, sb->w->base, -1, 0, running_due, sb);
    event_add(sb->running_ev, &tv);
}

void sandbox_running_recorded(struct sandbox *sb)
{
    sb->running_pending = false;
    event_del(sb->running_ev);
    /* No "events" hint: the caller's "msg" hint follows at once and wakes the same feeds and
     * webhook senders (a gateway's hub reads new events on any hint). Sent first, it woke the
     * gateway's hub for a store read ahead of the hint that answers the reply's long poll. */
}

enum store_status sandbox_record_running(struct sandbox *sb)
{
    struct worker *w = sb->w;
    if (!sb->running_pending)
        return STORE_OK;
    sb->running_pending = false;
    event_del(sb->running_ev);
    enum store_status rc =
        store_sandbox_mark_running(w->st, &w->ctx, sb->rt.sandbox_id, sb->session_id);
    if (rc == STORE_OK)
        w->sandbox_hooks->events(w);
    return rc;
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
        store_sandbox_finish(w->st, &w->ctx, sb->rt.sandbox_id, failed, reason, &sb->usage);
    if (rc != STORE_OK && rc != STORE_CONFLICT)
        log_error("worker: cannot record the end of %s: %s", sb->rt.sandbox_id,
                  store_status_name(rc));
    log_info("worker: sandbox %s %s (%s)", sb->rt.sandbox_id, failed ? "failed" : "terminated",
             reason);
    w->sandbox_hooks->events(w);
    sandbox_free(sb);
    w->sandbox_hooks->gone(w);
}

void sandbox_terminate(struct sandbox *sb, const char *reason, bool failed)
{
    struct worker *w = sb->w;
    if (sb->state == SB_STOPPING)
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
    if (sandbox_serving(sb))
        w->n_serving--;
    sandbox_set_state(sb, SB_STOPPING);
    /* Nothing of it may use a secret any more: out of the proxy, and the values go now, not with
     * the record. */
    sandbox_secrets_clear(sb);
    event_del(sb->keepalive_ev);
    event_del(sb->timeout_ev);
    /* The App did run (its first message went out): the store says so before the end. A refusal
     * (the Session was deleted) changes nothing here: the Sandbox is ending anyway. */
    if (sb->running_pending && sandbox_record_running(sb) != STORE_OK)
        log_debug("worker: %s ends before `running` could be recorded", sb->rt.sandbox_id);
    if (sb->delivery)
        w->sandbox_hooks->lost(sb, reason);
    agent_channel_free(sb->chan);
    sb->chan = NULL;
    enum store_status rc = store_sandbox_mark_stopping(w->st, &w->ctx, sb->rt.sandbox_id, reason);
    if (rc != STORE_OK && rc != STORE_CONFLICT)
        log_error("worker: cannot record that %s is stopping: %s", sb->rt.sandbox_id,
                  store_status_name(rc));
    /* In the background: no reply waits for a teardown (sandbox/priority.h). */
    if (jobs_submit(w->background, terminate_work, terminate_done, sb) != 0) {
        terminate_work(sb);
        terminate_done(sb);
    }
}

void sandbox_reap(struct worker *w, const struct store_sandbox *rec)
{
    if (sandbox_find(w, rec->id))
        return;
    struct sandbox *sb = sandbox_new(w, sandbox_driver(w, rec->shape.driver), &rec->shape);
    if (!sb)
        return;
    sb->reaping = true;
    sb->record = *rec;
    snprintf(sb->rt.sandbox_id, sizeof sb->rt.sandbox_id, "%s", rec->id);
    if (!sb->drv)
        log_warn("worker: no \"%s\" driver to reap %s; marking it terminated only",
                 rec->shape.driver, rec->id);
    sandbox_terminate(sb, "worker restart", false);
}

void sandbox_check_stop_requests(struct worker *w)
{
    struct store_sandbox *list = NULL;
    size_t n = 0;
    if (store_sandbox_list_stop_requested(w->st, w->id, &list, &n) != STORE_OK)
        return;
    for (size_t i = 0; i < n; i++) {
        struct sandbox *sb = sandbox_find(w, list[i].id);
        if (sb)
            sandbox_terminate(sb, list[i].stop_requested_at ? "stop requested" : "session deleted",
                              false);
    }
    free(list);
}

void sandbox_shutdown(struct worker *w)
{
    struct sandbox *sb = w->sandboxes;
    while (sb) {
        struct sandbox *next = sb->next;
        if (sb->state != SB_BUSY || w->grace_expired)
            sandbox_terminate(sb, "worker shutdown", false);
        sb = next;
    }
}
