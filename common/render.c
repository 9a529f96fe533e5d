/*
 * render.c: store records to API JSON (see render.h).
 */
#include "render.h"
#include "json_text.h"
#include "timefmt.h"

#include <stdio.h>
#include <string.h>

json_t *render_time(int64_t ms)
{
    char buf[32];
    if (ms <= 0)
        return json_null();
    time_format_ms(ms, buf, sizeof buf);
    return json_string(buf);
}

static json_t *str_or_null(const char *s)
{
    return s && *s ? json_string(s) : json_null();
}

static json_t *int_or_null(int64_t v)
{
    return v < 0 ? json_null() : json_integer(v);
}

/* Stored JSON text back to a value; a damaged column shows as null rather than failing. */
static json_t *stored_json(const char *text)
{
    json_t *v;
    if (!text)
        return json_null();
    v = json_loads(text, JSON_DECODE_ANY, NULL);
    return v ? v : json_null();
}

json_t *render_app(const struct store_app *a)
{
    json_t *limits = a->limits_json ? stored_json(a->limits_json) : json_null();
    if (!json_is_object(limits)) {
        json_decref(limits);
        limits = json_null();
    }
    json_t *network = stored_json(a->network_json);
    if (!json_is_object(network)) {
        json_decref(network);
        network = json_pack("{s:s}", "egress", "public"); /* a row from before 0007 */
    }
    json_t *env = stored_json(a->env_json);
    if (!json_is_object(env)) {
        json_decref(env);
        env = json_object();
    }
    json_t *out = json_pack(
        "{s:s, s:s, s:I, s:I, s:I, s:s, s:s, s:o, s:s, s:I, s:o, s:o, s:o, s:o, s:o, s:o}", "id",
        a->id, "name", a->name, "keepAliveSeconds", (json_int_t)a->keep_alive_seconds, "vcpuCount",
        (json_int_t)a->vcpu_count, "memSizeMib", (json_int_t)a->mem_size_mib, "driver", a->driver,
        "image", a->image, "imageId", str_or_null(a->image_id), "imageDigest",
        a->image_digest[0] ? a->image_digest : "default", "maxAttempts",
        (json_int_t)a->max_attempts, "command", stored_json(a->command_json), "limits", limits,
        "env", env, "createdAt", render_time(a->created_at), "updatedAt",
        render_time(a->updated_at), "network", network);
    /* Pre-started agents (docs/worker.md): beside the rest, so other fields keep their place. */
    if (out)
        json_object_update_new(out, json_pack("{s:b, s:I, s:s}", "prestart", a->prestart,
                                              "warmPool", (json_int_t)a->warm_pool, "readiness",
                                              a->readiness_line ? "line" : "none"));
    return out;
}

json_t *render_image(const struct store_image *im)
{
    json_t *problem = im->problem_code[0]
                          ? json_pack("{s:s, s:s}", "code", im->problem_code, "detail",
                                      im->problem_detail ? im->problem_detail : "")
                          : json_null();
    bool ready = strcmp(im->state, "ready") == 0;
    json_t *config =
        ready
            ? json_pack("{s:o, s:o, s:o, s:o, s:o}", "entrypoint", stored_json(im->entrypoint_json),
                        "cmd", stored_json(im->cmd_json), "env", stored_json(im->env_json),
                        "workingDir", str_or_null(im->working_dir), "user", str_or_null(im->user))
            : json_null();
    return json_pack("{s:s, s:s, s:s, s:o, s:o, s:s, s:o, s:o, s:o, s:o, s:o, s:I, s:o, s:o, s:o, "
                     "s:o}",
                     "id", im->id, "name", im->name, "state", im->state, "problem", problem,
                     "digest", str_or_null(im->digest), "source", im->source, "uploadBytes",
                     im->upload_bytes > 0 ? json_integer(im->upload_bytes) : json_null(),
                     "uploadSha256", str_or_null(im->upload_sha256), "layerCount",
                     ready ? json_integer(im->layer_count) : json_null(), "unpackedBytes",
                     ready ? json_integer(im->unpacked_bytes) : json_null(), "config", config,
                     "appCount", (json_int_t)im->app_count, "createdAt",
                     render_time(im->created_at), "readyAt", render_time(im->ready_at),
                     "lastUsedAt", render_time(im->last_used_at), "manifestDigest",
                     str_or_null(im->manifest_digest));
}

json_t *render_key(const struct store_key *k)
{
    return json_pack("{s:s, s:s, s:o, s:s, s:o, s:o}", "id", k->id, "appId", k->app_id, "name",
                     str_or_null(k->name), "prefix", k->prefix, "createdAt",
                     render_time(k->created_at), "revokedAt", render_time(k->revoked_at));
}

/* The Session without metadata (what render_session_text splices in). */
static json_t *session_fields(const struct store_session *s)
{
    return json_pack("{s:s, s:s, s:o, s:s, s:o, s:I, s:o, s:o, s:I, s:{s:I, s:o}, s:o, s:o, s:o}",
                     "id", s->id, "appId", s->app_id, "name", str_or_null(s->name), "state",
                     s->state, "sandboxId", str_or_null(s->sandbox_id), "keepAliveSeconds",
                     (json_int_t)s->effective_keep_alive_seconds, "keepAliveOverride",
                     s->keep_alive_seconds > 0 ? json_integer(s->keep_alive_seconds) : json_null(),
                     "workspaceId", str_or_null(s->workspace_id), "activationCount",
                     (json_int_t)s->activation_count, "usage", "cpuUsec", (json_int_t)s->cpu_usec,
                     "memPeakBytes", int_or_null(s->mem_peak_bytes), "createdAt",
                     render_time(s->created_at), "updatedAt", render_time(s->updated_at),
                     "lastActivityAt", render_time(s->last_activity_at));
}

void render_session_text(struct json_text *t, const struct store_session *s)
{
    const struct json_stored stored[] = {{"metadata", s->metadata_json, "{}", true}};
    json_text_object_with(t, session_fields(s), stored, 1);
}

/* The message without body and reply (what render_message_text splices in). */
static json_t *message_fields(const struct store_message *m)
{
    return json_pack("{s:s, s:s, s:I, s:s, s:o, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:I}", "id",
                     m->id, "sessionId", m->session_id, "seq", (json_int_t)m->seq, "state",
                     m->state, "error", str_or_null(m->error), "attempts", (json_int_t)m->attempts,
                     "maxAttempts", (json_int_t)m->max_attempts, "sandboxId",
                     str_or_null(m->sandbox_id), "requestId", str_or_null(m->request_id),
                     "createdAt", render_time(m->created_at), "updatedAt",
                     render_time(m->updated_at), "completedAt", render_time(m->completed_at),
                     "chunksDropped", (json_int_t)m->chunks_dropped);
}

void render_message_text(struct json_text *t, const struct store_message *m)
{
    const struct json_stored stored[] = {{"body", m->body_json, "null", false},
                                         {"reply", m->reply_json, "null", false}};
    json_text_object_with(t, message_fields(m), stored, 2);
}

/* The answer to an enqueue, without jansson: a message just queued has the same fields every
 * time (no attempt, no Sandbox, no reply), so its JSON is a template with the row's values in it,
 * which is what the answer costs most of, at thousands of enqueues a second. The same text as
 * render_message_text (test_render.c compares them). Its strings are ids and request ids, which
 * hold no character JSON escapes (input_request_id_ok, id.h); anything else takes the general
 * path. */
void render_message_queued_text(struct json_text *t, const struct store_message *m)
{
    char created[32], head[512];
    bool plain = strcmp(m->state, "queued") == 0 && m->attempts == 0 && !m->error &&
                 !m->reply_json && !m->sandbox_id[0] && m->completed_at <= 0 && m->created_at > 0 &&
                 m->created_at == m->updated_at && m->chunks_dropped == 0 && m->body_json;
    for (const char *c = m->request_id; plain && *c; c++)
        plain = *c != '"' && *c != '\\' && (unsigned char)*c >= 0x20 && (unsigned char)*c < 0x7f;
    if (!plain) {
        render_message_text(t, m);
        return;
    }
    time_format_ms(m->created_at, created, sizeof created);
    int n = snprintf(head, sizeof head,
                     "{\"id\":\"%s\",\"sessionId\":\"%s\",\"seq\":%lld,\"state\":\"queued\","
                     "\"error\":null,\"attempts\":0,\"maxAttempts\":%lld,\"sandboxId\":null,"
                     "\"requestId\":%s%s%s,\"createdAt\":\"%s\",\"updatedAt\":\"%s\","
                     "\"completedAt\":null,\"chunksDropped\":0,\"body\":",
                     m->id, m->session_id, (long long)m->seq, (long long)m->max_attempts,
                     m->request_id[0] ? "\"" : "", m->request_id[0] ? m->request_id : "null",
                     m->request_id[0] ? "\"" : "", created, created);
    if (n < 0 || (size_t)n >= sizeof head) {
        render_message_text(t, m);
        return;
    }
    json_text_append(t, head, (size_t)n);
    json_text_cstr(t, m->body_json);
    json_text_cstr(t, ",\"reply\":null}");
}

void render_message_end_text(struct json_text *t, const struct store_message *m,
                             int64_t chunks_dropped)
{
    const struct json_stored stored[] = {{"body", m->body_json, "null", false},
                                         {"reply", m->reply_json, "null", false}};
    json_t *fields = message_fields(m);
    if (fields)
        json_object_set_new(fields, "chunksDropped", json_integer(chunks_dropped));
    json_text_object_with(t, fields, stored, 2);
}

void render_page_begin(struct json_text *t)
{
    json_text_cstr(t, "{\"items\":[");
}

void render_page_item(struct json_text *t, size_t index)
{
    if (index > 0)
        json_text_cstr(t, ",");
}

void render_page_end(struct json_text *t, const char *next_cursor)
{
    json_text_cstr(t, "],\"nextCursor\":");
    json_text_string(t, next_cursor && *next_cursor ? next_cursor : NULL);
    json_text_cstr(t, "}");
}

json_t *render_sandbox(const struct store_sandbox *b)
{
    json_t *out = json_pack(
        "{s:s, s:s, s:s, s:s, s:o, s:I, s:I, s:o, s:o, s:b, s:o, s:{s:o, s:o, s:I}, "
        "s:o, s:o, s:o, s:o, s:o}",
        "id", b->id, "state", b->state, "driver", b->shape.driver, "image", b->shape.image,
        "imageHash", str_or_null(b->image_hash), "vcpuCount", (json_int_t)b->shape.vcpu_count,
        "memSizeMib", (json_int_t)b->shape.mem_size_mib, "appId", str_or_null(b->app_id),
        "sessionId", str_or_null(b->session_id), "cold", (int)b->cold, "bootMs",
        int_or_null(b->boot_ms), "usage", "cpuUsec", int_or_null(b->cpu_usec), "memPeakBytes",
        int_or_null(b->mem_peak_bytes), "oomKills", (json_int_t)b->oom_kills, "terminationReason",
        str_or_null(b->termination_reason), "createdAt", render_time(b->created_at), "readyAt",
        render_time(b->ready_at), "claimedAt", render_time(b->claimed_at), "terminatedAt",
        render_time(b->terminated_at));
    if (out) /* a pre-started Sandbox (docs/worker.md) */
        json_object_set_new(out, "prestarted", json_boolean(b->prestart_rev > 0));
    return out;
}

json_t *render_workspace(const struct store_workspace *w)
{
    return json_pack("{s:s, s:s, s:o, s:o, s:I, s:o}", "id", w->id, "appId", w->app_id, "name",
                     str_or_null(w->name), "sizeMib",
                     w->size_mib > 0 ? json_integer(w->size_mib) : json_null(), "attachedSessions",
                     (json_int_t)w->attached_sessions, "createdAt", render_time(w->created_at));
}

json_t *render_event(const struct store_event *e)
{
    json_t *data = stored_json(e->data_json);
    if (!json_is_object(data)) {
        json_decref(data);
        data = json_null();
    }
    return json_pack("{s:I, s:o, s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:o}", "id", (json_int_t)e->id,
                     "at", render_time(e->at), "actor", e->actor, "kind", e->kind, "objectType",
                     e->object_type, "objectId", e->object_id, "appId", str_or_null(e->app_id),
                     "sessionId", str_or_null(e->session_id), "requestId",
                     str_or_null(e->request_id), "data", data);
}

json_t *render_pool_app(const struct store_pool_app_stat *p)
{
    return json_pack("{s:s, s:b, s:I, s:s, s:I, s:I, s:I, s:I, s:I, s:I}", "appId", p->app_id,
                     "prestart", p->prestart, "warmPool", (json_int_t)p->warm_pool, "readiness",
                     p->readiness_line ? "line" : "none", "warm", (json_int_t)p->warm, "starting",
                     (json_int_t)p->starting, "claimed", (json_int_t)p->claimed, "notReady",
                     (json_int_t)p->not_ready, "retired", (json_int_t)p->retired, "endedWarm",
                     (json_int_t)p->ended_warm);
}

json_t *render_pool_shape(const struct store_pool_stat *p, int64_t target)
{
    return json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "driver",
                     p->shape.driver, "image", p->shape.image, "vcpuCount",
                     (json_int_t)p->shape.vcpu_count, "memSizeMib",
                     (json_int_t)p->shape.mem_size_mib, "warm", (json_int_t)p->warm, "booting",
                     (json_int_t)p->booting, "claimed", (json_int_t)p->claimed, "target",
                     (json_int_t)target, "coldActivations", (json_int_t)p->cold_activations,
                     "bootFailures", (json_int_t)p->boot_failures);
}

json_t *render_page(json_t *items, const char *next_cursor)
{
    return json_pack("{s:o, s:o}", "items", items, "nextCursor", str_or_null(next_cursor));
}

void render_message_page_text(struct json_text *t, const struct store_message *items, size_t n,
                              const char *next_cursor)
{
    render_page_begin(t);
    for (size_t i = 0; i < n; i++) {
        render_page_item(t, i);
        render_message_text(t, &items[i]);
    }
    render_page_end(t, next_cursor);
}
