/*
 * activate.c: giving a claimed message's Session a Sandbox (delivery.h): a warm one of the App's
 * shape claimed in the store (by the message's claim itself, queue_claim_with_sandbox, when the
 * Session was idle), else a cold boot; then the App's VMM limits applied and the
 * Session's Workspace attached (a driver job, skipped without either) and the App's command
 * started; when the agent says
 * "started", the message goes out (ACTIVATING -> BUSY) and the Sandbox is recorded running.
 */
#include "delivery/delivery.h"
#include "store_sandboxes.h"
#include "store_workspaces.h"
#include "log.h"
#include "sandbox/egress.h"
#include "sandbox/jobs.h"
#include "sandbox/pool.h"
#include "sandbox/secrets.h"
#include "workspace_fs.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

/* The App's host caps for its VMMs ("limits"), when it has any and the driver applies them. */
static bool wants_host_caps(const struct sandbox *sb)
{
    return sb->delivery && sb->delivery->app.limits_json && sb->drv->apply_host_caps;
}

static int apply_host_caps(struct sandbox *sb)
{
    json_error_t jerr;
    json_t *limits = json_loads(sb->delivery->app.limits_json, 0, &jerr);
    json_int_t mem = json_integer_value(json_object_get(limits, "vmmMemoryMib"));
    json_int_t cpus = json_integer_value(json_object_get(limits, "vmmCpus"));
    json_decref(limits);
    if (mem <= 0 && cpus <= 0)
        return 0;
    return sb->drv->apply_host_caps(&sb->w->cfg, &sb->rt, mem, cpus, sb->job_err,
                                    sizeof sb->job_err);
}

static void attach_work(void *arg)
{
    struct sandbox *sb = arg;
    if (wants_host_caps(sb) && apply_host_caps(sb) != 0) {
        sb->job_rc = -1;
        sb->caps_failed = true; /* the reason says what failed: not the Workspace */
        return;
    }
    /* A Workspace's filesystem is mounted on its directory once per host, and made by the first
     * worker to attach it when the gateway could not (common/workspace_fs.h). */
    if (sb->workspace_dir[0] &&
        workspace_fs_ensure(sb->workspace_dir, sb->workspace_size_mib,
                            (uid_t)sb->w->cfg.sandbox_uid, (gid_t)sb->w->cfg.sandbox_gid,
                            sb->job_err, sizeof sb->job_err) != 0) {
        sb->job_rc = -1;
        return;
    }
    sb->job_rc = sb->drv->attach_workspace(&sb->w->cfg, &sb->rt,
                                           sb->workspace_dir[0] ? sb->workspace_dir : NULL,
                                           sb->job_err, sizeof sb->job_err);
}

static void attach_done(void *arg)
{
    struct sandbox *sb = arg;
    char reason[600];
    sb->job_running = false;
    if (sb->stop_wanted) {
        sandbox_terminate(sb, sb->stop_reason, sb->stop_failed);
        return;
    }
    if (sb->job_rc != 0) {
        snprintf(reason, sizeof reason, "%s: %.500s",
                 sb->caps_failed ? "the App's VMM limits cannot be applied"
                                 : "workspace attach failed",
                 sb->job_err);
        sandbox_terminate(sb, reason, false);
        return;
    }
    char why[256];
    /* A pre-started agent runs already: it is told its Session (its Workspace is there first). */
    int rc = sb->prestart_rev ? agent_protocol_send_context(sb, why, sizeof why)
                              : agent_protocol_send_start(sb, &sb->delivery->app, why, sizeof why);
    if (rc != 0) {
        snprintf(reason, sizeof reason, "cannot start the agent: %s", why);
        sandbox_terminate(sb, reason, false);
        return;
    }
    sandbox_arm_deadline(sb);
}

/* The host directory of the Session's Workspace, or "" for none, and its size. */
static void workspace_dir_of(struct worker *w, const struct store_delivery *d, char *out,
                             size_t outlen, int64_t *size_mib)
{
    struct store_workspace ws;
    out[0] = '\0';
    *size_mib = 0;
    if (!d->session.workspace_id[0])
        return;
    if (store_workspace_get(w->st, d->app.id, d->session.workspace_id, &ws) == STORE_OK &&
        ws.path[0]) {
        snprintf(out, outlen, "%s", ws.path);
        *size_mib = ws.size_mib;
        return;
    }
    snprintf(out, outlen, "%.250s/workspaces/%s/%s", w->cfg.data_dir, d->app.id,
             d->session.workspace_id);
}

void activation_continue(struct sandbox *sb)
{
    struct worker *w = sb->w;
    char why[512];
    /* The App's egress policy is in place before its command can run (fail closed). A pre-started
     * Sandbox has its App's policy from its start, unless the App changed it. */
    if (!(sb->prestart_rev && sandbox_egress_current(sb, sb->delivery->app.network_json)) &&
        sandbox_egress_apply(sb, sb->delivery->app.id, sb->delivery->app.network_json, why,
                             sizeof why) != 0) {
        log_error("worker: %s: %s", sb->rt.sandbox_id, why);
        sandbox_terminate(sb, "egress policy could not be applied", true);
        return;
    }
    /* The App's secrets as they are now (a PUT since the last activation is a rotation), and its
     * HTTP(S) egress through this worker's proxy, before its command can run (fail closed). A
     * pre-started Sandbox opened and attached them at its start: its agent already holds their
     * placeholders. */
    if (!sb->prestart_rev && sandbox_secrets_load(sb, sb->delivery->app.id, why, sizeof why) != 0) {
        log_error("worker: %s: %s", sb->rt.sandbox_id, why);
        sandbox_terminate(sb, "the App's secrets could not be opened or brokered", true);
        return;
    }
    workspace_dir_of(w, sb->delivery, sb->workspace_dir, sizeof sb->workspace_dir,
                     &sb->workspace_size_mib);
    if (!sb->workspace_dir[0] && !wants_host_caps(sb)) {
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
        sandbox_terminate(sb, "out of memory", false);
    }
}

void activation_started(struct sandbox *sb)
{
    /* Deliver first; `running` is written with the reply (one commit, queue_complete_first), or
     * on its own if the App takes longer than RUNNING_RECORD_MS (sandbox.h). Either way the
     * store sees the Sandbox running before the message completed. */
    sandbox_send_message(sb, sb->delivery);
    if (sb->state != SB_BUSY)
        return; /* the channel closed: terminated already */
    sandbox_running_pending(sb);
}

void delivery_activate(struct worker *w, struct store_delivery *d)
{
    struct store_shape shape;
    struct store_sandbox claimed;
    enum store_status rc;
    char reason[128];

    memset(&shape, 0, sizeof shape);
    snprintf(shape.driver, sizeof shape.driver, "%s", d->app.driver);
    snprintf(shape.image, sizeof shape.image, "%s", d->app.image_digest);
    shape.vcpu_count = d->app.vcpu_count;
    shape.mem_size_mib = d->app.mem_size_mib;
    const struct driver *drv = sandbox_driver(w, shape.driver);
    if (!drv) {
        snprintf(reason, sizeof reason, "driver \"%s\" is not available on this worker",
                 shape.driver);
        if (d->warm_claim_tried && d->sandbox.id[0])
            store_sandbox_finish(w->st, &w->ctx, d->sandbox.id, true, reason, NULL);
        delivery_fail(w, d, NULL, reason);
        return;
    }
    pool_ensure_shape(w, &shape);
    if (d->warm_claim_tried) {
        /* The claim took the warm Sandbox in its own transaction (queue_claim_with_sandbox). */
        rc = d->sandbox.id[0] ? STORE_OK : STORE_EMPTY;
        claimed = d->sandbox;
    } else {
        int64_t prestart_rev = d->app.prestart && d->app.warm_pool > 0 ? d->app.definition_rev : 0;
        rc = store_sandbox_claim_warm(w->st, &w->ctx, w->id, &shape, d->app.id, prestart_rev,
                                      d->session.id, &claimed);
    }
    struct sandbox *sb = rc == STORE_OK ? sandbox_find(w, claimed.id) : NULL;
    if (rc == STORE_OK && sb && sb->state == SB_WARM) {
        sandbox_claimed(sb, d);
        activation_continue(sb);
        return;
    }
    if (rc == STORE_OK) {
        /* The store handed us a Sandbox this process does not hold: never expected. */
        log_error("worker: claimed warm sandbox %s is not in memory", claimed.id);
        store_sandbox_finish(w->st, &w->ctx, claimed.id, true, "lost by its worker", NULL);
    } else if (rc == STORE_CONFLICT) {
        /* The Session was deleted between the claim and now: its message is failed already. */
        delivery_end(w, d, false);
        return;
    } else if (rc != STORE_EMPTY) {
        log_error("worker: warm claim failed: %s", store_status_name(rc));
    }
    if (sandbox_boot(w, drv, &shape, d, reason, sizeof reason) != 0)
        delivery_fail(w, d, NULL, reason);
}
