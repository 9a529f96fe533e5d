/*
 * agent_protocol.c: what the worker and a Sandbox's agent say to each other over the agent
 * channel (the lines of driver.h; agent_channel.c carries them): the start line and message lines
 * out, and each line in read for what it means to the Sandbox: "started", a reply and partial
 * output (a chunk) go up to its delivery (sandbox_hooks), a start error, an exit or a closed
 * channel terminate it (as "oom" when the Sandbox's memory bound killed a process in it), log
 * lines go to the worker's log within the Sandbox's budget.
 */
#include "sandbox/agent_channel.h"
#include "images/image_run.h"
#include "log.h"
#include "sandbox/egress.h"
#include "sandbox/sandbox.h"
#include "sandbox/secrets.h"
#include "store_sandboxes.h"
#include "clock.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOG_BUDGET_BYTES 65536
#define LOG_BUDGET_MS 10000

#define LOG_ID_SHOWN 64 /* bytes of an unexpected line's id that a warning shows */

/* Whether a line of len bytes that the agent caused fits the Sandbox's log budget (then it is
 * counted); at the start of each new window, says how many lines the last one dropped. Every
 * line an agent can make the worker log goes through here: a flood must not fill the log, nor
 * stall the event loop on a slow stderr. */
static bool sandbox_log_budget(struct sandbox *sb, int64_t len)
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
    if (sb->log_window_bytes + len > LOG_BUDGET_BYTES) {
        sb->log_dropped_lines++;
        return false;
    }
    sb->log_window_bytes += len;
    return true;
}

/* Logs one line of the agent's stderr within the Sandbox's budget. */
static void sandbox_log_line(struct sandbox *sb, const char *text)
{
    if (sb->prestart_rev && sb->state != SB_STOPPING)
        snprintf(sb->last_log, sizeof sb->last_log, "%s", text);
    if (sandbox_log_budget(sb, (int64_t)strlen(text)))
        log_info("sandbox %s: %s", sb->rt.sandbox_id, text);
}

/* A line the agent should not have sent (no type, an id that is not the message in delivery):
 * warned about within the budget, with at most LOG_ID_SHOWN bytes of its id. */
static void sandbox_unexpected_line(struct sandbox *sb, const char *id)
{
    char shown[LOG_ID_SHOWN + 1], msg[LOG_ID_SHOWN + 128];
    size_t len = id ? strlen(id) : 0, n = 0;
    for (; id && n < len && n < LOG_ID_SHOWN; n++)
        shown[n] = id[n] >= 0x20 && id[n] < 0x7f ? id[n] : '?';
    shown[n] = '\0';
    if (!id)
        snprintf(msg, sizeof msg, "unexpected line from the agent (no id)");
    else if (len > n)
        snprintf(msg, sizeof msg, "unexpected line from the agent (id %s... of %zu bytes)", shown,
                 len);
    else
        snprintf(msg, sizeof msg, "unexpected line from the agent (id %s)", shown);
    if (sandbox_log_budget(sb, (int64_t)strlen(msg)))
        log_warn("sandbox %s: %s", sb->rt.sandbox_id, msg);
}

/* The App's command or the agent ended. When the OOM killer ended a process inside the Sandbox,
 * the App exceeded its memory (memSizeMib, the Sandbox's cgroup bound): the message fails as
 * sandbox-oom and the Sandbox ends with terminationReason "oom"; the next message gets a fresh
 * Sandbox as after any end. */
static void sandbox_ended(struct sandbox *sb, const char *reason)
{
    char why[300];
    /* A pre-started agent that ends before any Session claimed it: the pool replaces it, and its
     * last log line goes with the reason (the rest is in the worker's log). */
    if (sb->prestart_rev && (sb->state == SB_WARM || sb->state == SB_BOOTING)) {
        snprintf(why, sizeof why, "%s while warm%s%.160s%s", reason,
                 sb->last_log[0] ? " (last log: " : "", sb->last_log, sb->last_log[0] ? ")" : "");
        reason = why;
        sandbox_prestart_failed(sb->w, sb->app_id);
    }
    if (!sb->drv->oom_kills || sb->drv->oom_kills(&sb->w->cfg, &sb->rt) <= 0) {
        sandbox_terminate(sb, reason, false);
        return;
    }
    if (sb->delivery && !sb->job_running) {
        char why[200];
        snprintf(why, sizeof why,
                 "sandbox-oom: the App used more than its memory (memSizeMib %lld) and was "
                 "killed inside its Sandbox",
                 (long long)sb->rt.shape.mem_size_mib);
        sb->w->sandbox_hooks->lost(sb, why);
    }
    sandbox_terminate(sb, "oom", false);
}

/* A pre-started Sandbox's agent started, and is ready when its App asks for that: it joins the
 * pool (BOOTING -> WARM), offered to the claims of its App's Sessions. */
static void prestart_warm(struct sandbox *sb)
{
    struct worker *w = sb->w;
    int64_t boot_ms = clock_mono_ms() - sb->boot_started;
    event_del(sb->timeout_ev);
    sb->prestart_phase = PRESTART_NONE;
    enum store_status rc = store_sandbox_mark_warm(w->st, &w->ctx, sb->rt.sandbox_id, boot_ms);
    if (rc != STORE_OK) {
        sandbox_terminate(sb, "stop requested while starting", false);
        return;
    }
    sandbox_set_state(sb, SB_WARM);
    sandbox_prestart_succeeded(w, sb->app_id);
    log_debug("worker: pre-started sandbox %s of %s warm in %lld ms", sb->rt.sandbox_id, sb->app_id,
              (long long)boot_ms);
    w->sandbox_hooks->events(w);
    w->sandbox_hooks->warm(w);
}

/* Control lines of a pre-started Sandbox before it is warm (prestart_phase). */
static void prestart_on_line(struct sandbox *sb, const char *type, json_t *line)
{
    if (strcmp(type, "started") == 0 && sb->prestart_phase == PRESTART_STARTING) {
        if (!sb->readiness_line) {
            prestart_warm(sb);
            return;
        }
        sb->prestart_phase = PRESTART_READY_WAIT;
    } else if (strcmp(type, "app_ready") == 0 && sb->prestart_phase == PRESTART_READY_WAIT) {
        prestart_warm(sb);
    } else if (strcmp(type, "error") == 0 && sb->prestart_phase == PRESTART_STARTING) {
        char reason[256];
        snprintf(reason, sizeof reason, "agent failed to start: %s",
                 json_string_value(json_object_get(line, "error")) ?: "?");
        sandbox_prestart_failed(sb->w, sb->app_id);
        sandbox_terminate(sb, reason, false);
    } else {
        log_debug("sandbox %s: control line \"%s\" ignored", sb->rt.sandbox_id, type);
    }
}

static void sandbox_on_line(void *arg, json_t *line)
{
    struct sandbox *sb = arg;
    const char *type = json_string_value(json_object_get(line, "type"));
    const char *id = json_string_value(json_object_get(line, "id"));

    if (type && strcmp(type, "log") == 0) {
        sandbox_log_line(sb, json_string_value(json_object_get(line, "line")) ?: "");
    } else if (type && sb->state == SB_BOOTING && sb->prestart_phase != PRESTART_NONE &&
               strcmp(type, "exit") != 0) {
        prestart_on_line(sb, type, line);
    } else if (type && strcmp(type, "started") == 0 && sb->state == SB_ACTIVATING) {
        sb->w->sandbox_hooks->started(sb);
    } else if (type && strcmp(type, "error") == 0 && sb->state == SB_ACTIVATING) {
        char reason[256];
        snprintf(reason, sizeof reason, "agent failed to start: %s",
                 json_string_value(json_object_get(line, "error")) ?: "?");
        sandbox_terminate(sb, reason, false);
    } else if (type && strcmp(type, "exit") == 0) {
        char reason[64];
        snprintf(reason, sizeof reason, "agent exited with status %lld",
                 (long long)json_integer_value(json_object_get(line, "status")));
        sandbox_ended(sb, reason);
    } else if (type) {
        log_debug("sandbox %s: control line \"%s\" ignored", sb->rt.sandbox_id, type);
    } else if (id && json_object_get(line, "chunk") && !json_object_get(line, "reply") &&
               !json_object_get(line, "error")) {
        /* Partial output: only for the message in flight (a late one of an earlier message,
         * or one before any, is dropped). */
        if (sb->state == SB_BUSY && sb->delivery && strcmp(id, sb->delivery->message.id) == 0)
            sb->w->sandbox_hooks->chunk(sb, json_object_get(line, "chunk"));
        else
            log_debug("sandbox %s: chunk for %s, not the message in flight, dropped",
                      sb->rt.sandbox_id, id);
    } else if (id && sb->state == SB_BUSY && sb->delivery &&
               strcmp(id, sb->delivery->message.id) == 0) {
        sb->w->sandbox_hooks->replied(sb, line);
    } else {
        sandbox_unexpected_line(sb, id);
    }
}

static void sandbox_on_closed(void *arg, const char *reason)
{
    struct sandbox *sb = arg;
    sandbox_ended(sb, reason);
}

int agent_protocol_watch(struct sandbox *sb)
{
    struct agent_channel_handlers h = {sandbox_on_line, sandbox_on_closed, sb};
    sb->chan =
        agent_channel_new(sb->w->base, sb->rt.channel_fd, (size_t)sb->w->cfg.reply_limit, &h);
    if (!sb->chan)
        return -1;
    sb->rt.channel_fd = -1; /* the channel owns it now; the driver must not close it again */
    return 0;
}

/* Sets K=V in env (an array of "K=V"), first dropping any K the image's Env had: the context
 * is the worker's to say (an App's env cannot name these, http_apps.c). -1: out of memory. */
static int env_put(json_t *env, const char *k, const char *v)
{
    size_t klen = strlen(k);
    for (size_t i = json_array_size(env); i-- > 0;) {
        const char *kv = json_string_value(json_array_get(env, i));
        if (kv && strncmp(kv, k, klen) == 0 && kv[klen] == '=')
            json_array_remove(env, i);
    }
    char *kv;
    if (asprintf(&kv, "%s=%s", k, v) < 0)
        return -1;
    int rc = json_array_append_new(env, json_string(kv));
    free(kv);
    return rc;
}

/* The callback API's URL for the Sandbox into url, or "" when it has none: the host side of its
 * link (the /30's first address, links.h). */
static void api_url(const struct sandbox *sb, char *url, size_t len)
{
    struct in_addr a;
    url[0] = '\0';
    if (!sb->w->callbacks || !sb->callback_token[0] ||
        inet_pton(AF_INET, sb->rt.net_address, &a) != 1)
        return;
    char host[INET_ADDRSTRLEN];
    a.s_addr = htonl(ntohl(a.s_addr) - 1);
    inet_ntop(AF_INET, &a, host, sizeof host);
    snprintf(url, len, "https://%s", host); /* port 443: config.c */
}

/* The Sandbox's context (sandbox_context.h): who it serves, and with the callback API on, where
 * and how it reaches it. A pre-started agent starts before its Session: SBX_SESSION_ID is not in
 * its environment (the context line says it), and nothing else there depends on the Session. */
static int add_context(struct sandbox *sb, json_t *env)
{
    int rc = (sb->session_id[0] ? env_put(env, "SBX_SESSION_ID", sb->session_id) : 0) |
             env_put(env, "SBX_APP_ID", sb->app_id) |
             env_put(env, "SBX_SANDBOX_ID", sb->rt.sandbox_id);
    char url[64];
    api_url(sb, url, sizeof url);
    if (!url[0])
        return rc;
    rc |= env_put(env, "SBX_API_URL", url) | env_put(env, "SBX_TOKEN", sb->callback_token);
    if (sb->w->ca_pem)
        rc |= env_put(env, "SBX_CA_FILE", SANDBOX_CA_PATH);
    return rc;
}

/* The start line's "files" for the callback API's CA, JSON, made on first use; NULL without the
 * callback API (or out of memory: then the line goes without it and the agent cannot verify). */
static const char *ca_files_json(struct worker *w)
{
    if (!w->ca_pem)
        return NULL;
    if (!w->ca_files_json) {
        json_t *files = json_pack("[{s:s,s:s}]", "path", SANDBOX_CA_PATH, "content", w->ca_pem);
        w->ca_files_json = files ? json_dumps(files, JSON_COMPACT) : NULL;
        json_decref(files);
    }
    return w->ca_files_json;
}

int agent_protocol_send_start(struct sandbox *sb, const struct store_app *app, char *err,
                              size_t errlen)
{
    /* {"type":"start","argv":[...],"env":[...],"cwd":...,"user":...,"workspace":...}, with the
     * image's defaults where the App gives none (images/image_run.h). */
    struct image_run run;
    struct worker *w = sb->w;
    if (!w->run_cache)
        w->run_cache = image_run_cache_new(); /* NULL: resolved every time */
    if (image_run_resolve_cached(w->run_cache, &w->cfg, app->image_digest, app->command_json,
                                 app->env_json, &run, err, errlen) != 0)
        return -1;
    /* A driver serving the Workspace over NFS (qemu) names the source for the agent to mount. */
    json_t *ws = json_null();
    if (sb->workspace_dir[0] && sb->rt.workspace_nfs[0]) {
        json_decref(ws);
        ws = json_pack("{s:s,s:s}", "path", "/workspace", "nfs", sb->rt.workspace_nfs);
    } else if (sb->workspace_dir[0]) {
        json_decref(ws);
        ws = json_string("/workspace");
    }
    if (add_context(sb, run.env) != 0) {
        image_run_clear(&run);
        json_decref(ws);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* For an App with secrets: their placeholders in env, and the files of the start line: the
     * callback API's CA and the CA bundle (secrets.h). Without secrets the files are the CA's
     * alone, the same for every Sandbox: encoded once and spliced in below. */
    json_t *files = NULL;
    if (sb->secrets.n > 0) {
        files = json_array();
        if (files && w->ca_pem)
            json_array_append_new(
                files, json_pack("{s:s,s:s}", "path", SANDBOX_CA_PATH, "content", w->ca_pem));
        if (!files || sandbox_secrets_start_line(sb, run.env, files) != 0) {
            json_decref(files);
            image_run_clear(&run);
            json_decref(ws);
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    }
    json_t *start = json_pack("{s:s,s:O,s:O,s:o}", "type", "start", "argv", run.argv, "env",
                              run.env, "workspace", ws ? ws : json_null());
    if (start && files)
        json_object_set(start, "files", files);
    json_decref(files);
    /* A pre-started agent: the relay lets its command say {"type":"ready"} and expects the
     * context line of its Session later (agent/relay.c). */
    if (start && sb->prestart_rev)
        json_object_set_new(start, "prestart", json_true());
    if (start && run.cwd[0])
        json_object_set_new(start, "cwd", json_string(run.cwd));
    if (start && run.user[0])
        json_object_set_new(start, "user", json_string(run.user));
    image_run_clear(&run);
    char *line = start ? json_dumps(start, JSON_COMPACT) : NULL;
    bool has_files = start && json_object_get(start, "files");
    json_decref(start);
    /* The CA certificate the agent verifies the callback API with, for the guest agent to write
     * where SBX_CA_FILE says: the same for every Sandbox, so encoded once and spliced in before
     * the object's closing brace. */
    const char *ca_files = has_files ? NULL : ca_files_json(w);
    size_t len = line ? strlen(line) : 0;
    if (line && ca_files) {
        size_t flen = strlen(ca_files);
        char *whole = malloc(len + flen + 10);
        if (whole) {
            memcpy(whole, line, len - 1);
            len = len - 1 + (size_t)sprintf(whole + len - 1, ",\"files\":%s}", ca_files);
        }
        free(line);
        line = whole;
    }
    int rc = line ? agent_channel_send(sb->chan, line, len) : -1;
    free(line);
    if (rc != 0)
        snprintf(err, errlen, "the agent channel is closed");
    return rc;
}

void prestart_begin(struct sandbox *sb, const struct store_app *app)
{
    char why[512], reason[600];
    /* The App's egress policy is in place before its command runs, as at any activation. */
    if (sandbox_egress_apply(sb, app->id, app->network_json, why, sizeof why) != 0) {
        log_error("worker: %s: %s", sb->rt.sandbox_id, why);
        sandbox_terminate(sb, "egress policy could not be applied", true);
        return;
    }
    /* Its secrets are opened and brokered now, for the placeholders in its start line and for
     * the requests its agent may make while it initialises (a model API's): the Sandbox keeps
     * this set whichever Session claims it (a later PUT retires the pool: docs/secrets.md). */
    if (sandbox_secrets_load(sb, app->id, why, sizeof why) != 0) {
        log_error("worker: %s: %s", sb->rt.sandbox_id, why);
        sandbox_terminate(sb, "the App's secrets could not be opened or brokered", true);
        return;
    }
    sb->workspace_dir[0] = '\0';
    sb->rt.workspace_nfs[0] = '\0';
    if (agent_protocol_send_start(sb, app, why, sizeof why) != 0) {
        snprintf(reason, sizeof reason, "cannot start the agent: %s", why);
        sandbox_terminate(sb, reason, false);
        return;
    }
    sb->prestart_phase = PRESTART_STARTING;
    sandbox_arm_ready_deadline(sb);
}

int agent_protocol_send_context(struct sandbox *sb, char *err, size_t errlen)
{
    /* {"type":"context","workspace":<as in a start line>,"context":{...}}: the agent mounts or
     * checks the Workspace, then writes "context" as one line to the App's stdin. */
    json_t *ws = json_null();
    if (sb->workspace_dir[0] && sb->rt.workspace_nfs[0]) {
        json_decref(ws);
        ws = json_pack("{s:s,s:s}", "path", "/workspace", "nfs", sb->rt.workspace_nfs);
    } else if (sb->workspace_dir[0]) {
        json_decref(ws);
        ws = json_string("/workspace");
    }
    json_t *ctx = json_pack("{s:s,s:s,s:s,s:s,s:o}", "type", "context", "sessionId", sb->session_id,
                            "appId", sb->app_id, "sandboxId", sb->rt.sandbox_id, "workspace",
                            sb->workspace_dir[0] ? json_string("/workspace") : json_null());
    char url[64];
    api_url(sb, url, sizeof url);
    if (ctx && url[0])
        json_object_set_new(ctx, "apiUrl", json_string(url));
    json_t *msg =
        ctx && ws ? json_pack("{s:s,s:O,s:O}", "type", "context", "workspace", ws, "context", ctx)
                  : NULL;
    json_decref(ctx);
    json_decref(ws);
    char *line = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
    json_decref(msg);
    int rc = line ? agent_channel_send(sb->chan, line, strlen(line)) : -1;
    if (rc != 0)
        snprintf(err, errlen, line ? "the agent channel is closed" : "out of memory");
    free(line);
    return rc;
}

/* One message line {"id","seq","body"}: 0, -1 when the channel is closed, -2 out of memory. */
static int send_message_line(struct sandbox *sb, const struct store_delivery *d)
{
    char head[160];
    /* The body is canonical JSON from the store and the id is [a-z0-9_]: no re-encoding needed. */
    int hlen = snprintf(head, sizeof head, "{\"id\":\"%s\",\"seq\":%lld,\"body\":", d->message.id,
                        (long long)d->message.seq);
    size_t blen = strlen(d->message.body_json);
    char *line = malloc((size_t)hlen + blen + 2);
    if (!line)
        return -2;
    memcpy(line, head, (size_t)hlen);
    memcpy(line + hlen, d->message.body_json, blen);
    line[hlen + blen] = '}';
    int rc = agent_channel_send(sb->chan, line, (size_t)hlen + blen + 1);
    free(line);
    return rc;
}

void sandbox_send_message(struct sandbox *sb, struct store_delivery *d)
{
    sb->delivery = d;
    sandbox_set_state(sb, SB_BUSY);
    event_del(sb->keepalive_ev);
    sb->keep_alive_ms = d->session.effective_keep_alive_seconds * 1000;
    if (!sandbox_durable_or_hold(sb)) {
        sandbox_arm_deadline(sb); /* the line goes out later: sandbox_send_held_line */
        return;
    }
    sandbox_send_held_line(sb);
}

void sandbox_send_held_line(struct sandbox *sb)
{
    struct store_delivery *d = sb->delivery;
    int rc = send_message_line(sb, d);
    if (rc == -2) {
        sandbox_terminate(sb, "out of memory", false);
        return;
    }
    log_emit(LOG_LEVEL_DEBUG, d->message.request_id, "worker: delivering %s (seq %lld) to %s",
             d->message.id, (long long)d->message.seq, sb->rt.sandbox_id);
    if (rc != 0) {
        sandbox_terminate(sb, "agent channel closed", false);
        return;
    }
    sandbox_arm_deadline(sb);
}
