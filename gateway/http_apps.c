/*
 * http_apps.c: /v1/apps and /v1/apps/{appId} (admin only): create, list, get, patch, delete.
 */
#include "app_quotas.h"
#include "clock.h"
#include "egress_policy.h"
#include "store_worker_drivers.h"
#include "store_apps.h"
#include "gateway.h"
#include "json_input.h"
#include "render.h"
#include "sandbox_context.h"
#include "reply.h"
#include "secret_rules.h"
#include "store_secrets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const app_fields[] = {
    "name",        "keepAliveSeconds", "vcpuCount", "memSizeMib", "driver",  "image",
    "maxAttempts", "command",          "limits",    "env",        "network", "quotas",
    "prestart",    "warmPool",         "readiness", NULL};

/* The App fields present in obj, validated; command_json is a new string the caller frees. */
struct app_input {
    const char *name, *driver, *image;
    int64_t keep_alive, vcpu, mem, max_attempts;
    bool has_keep_alive, has_vcpu, has_mem, has_max_attempts;
    char *command_json;
    char *limits_json; /* NULL: absent; "": null or {} (no caps) */
    char *env_json;
    char image_id[STORE_ID_LEN], image_digest[STORE_DIGEST_LEN];
    char *network_json; /* the policy's normal form, when "network" was given */
    bool has_quotas;
    int64_t quotas[STORE_QUOTA_COUNT]; /* STORE_QUOTA_KEEP: not given; -1: null (the default) */
    bool prestart, has_prestart;
    int64_t warm_pool;
    bool has_warm_pool;
    const char *readiness;
};

/* "quotas": {"liveSandboxes", "sessions", "workspaces", "workspaceMib", "keepAliveSeconds"},
 * each an integer >= 0 (0: no bound) or null (the host's default), or null for all of them
 * back to the defaults. */
static bool quotas_read(json_t *obj, struct app_input *in, struct input_error *e)
{
    static const char *const fields[] = {"liveSandboxes", "sessions",         "workspaces",
                                         "workspaceMib",  "keepAliveSeconds", NULL};
    static const int64_t max[STORE_QUOTA_COUNT] = {1000000, 1000000000, 1000000000, 1099511627776LL,
                                                   86400};
    json_t *v = json_object_get(obj, "quotas");
    for (int i = 0; i < STORE_QUOTA_COUNT; i++)
        in->quotas[i] = v && json_is_null(v) ? -1 : STORE_QUOTA_KEEP;
    if (!v)
        return true;
    in->has_quotas = true;
    if (json_is_null(v))
        return true;
    if (!json_is_object(v)) {
        e->code = PROBLEM_INVALID_FIELD;
        snprintf(e->field, sizeof e->field, "quotas");
        snprintf(e->detail, sizeof e->detail, "field \"quotas\" must be an object or null");
        return false;
    }
    bool ok = input_known_fields(v, fields, e);
    for (int i = 0; ok && i < STORE_QUOTA_COUNT; i++) {
        bool is_null = false;
        int rc = input_int(v, app_quota_field(i), 0, max[i], true, &in->quotas[i], &is_null, e);
        if (rc > 0 && is_null)
            in->quotas[i] = -1;
        ok = rc >= 0;
    }
    if (!ok) {
        char inner[sizeof e->field];
        snprintf(inner, sizeof inner, "%s", e->field);
        snprintf(e->field, sizeof e->field, inner[0] ? "quotas.%.60s" : "quotas", inner);
    }
    return ok;
}

/* Pre-started agents: "prestart" (boolean), "warmPool" (0..64), "readiness" ("none" | "line"). */
static bool prestart_read(json_t *obj, struct app_input *in, struct input_error *e)
{
    json_t *v = json_object_get(obj, "prestart");
    int rc;
    if (v && !json_is_boolean(v)) {
        e->code = PROBLEM_INVALID_FIELD;
        snprintf(e->field, sizeof e->field, "prestart");
        snprintf(e->detail, sizeof e->detail, "field \"prestart\" must be true or false");
        return false;
    }
    in->has_prestart = v != NULL;
    in->prestart = json_is_true(v);
    if ((rc = input_int(obj, "warmPool", 0, 64, false, &in->warm_pool, NULL, e)) < 0)
        return false;
    in->has_warm_pool = rc > 0;
    if ((rc = input_string(obj, "readiness", 1, 8, false, &in->readiness, NULL, e)) < 0)
        return false;
    if (rc > 0 && strcmp(in->readiness, "none") != 0 && strcmp(in->readiness, "line") != 0) {
        e->code = PROBLEM_INVALID_VALUE;
        snprintf(e->field, sizeof e->field, "readiness");
        snprintf(e->detail, sizeof e->detail, "field \"readiness\" must be none or line");
        return false;
    }
    return true;
}

/* "limits": {"vmmMemoryMib": 64..1048576, "vmmCpus": 1..256}, each optional, or null: the host
 * caps of the App's microVMs' VMM process. Written back as canonical JSON text. */
static int limits_read(json_t *obj, char **limits_json, struct input_error *e)
{
    static const char *const fields[] = {"vmmMemoryMib", "vmmCpus", NULL};
    json_t *v = json_object_get(obj, "limits");
    if (!v)
        return 0;
    if (json_is_null(v))
        return (*limits_json = strdup("")) ? 1 : -1;
    int64_t mem = 0, cpus = 0;
    int rc = 0;
    if (!json_is_object(v)) {
        e->code = PROBLEM_INVALID_FIELD;
        snprintf(e->detail, sizeof e->detail, "field \"limits\" must be an object or null");
        rc = -1;
    } else if (!input_known_fields(v, fields, e) ||
               input_int(v, "vmmMemoryMib", 64, 1048576, false, &mem, NULL, e) < 0 ||
               input_int(v, "vmmCpus", 1, 256, false, &cpus, NULL, e) < 0) {
        rc = -1;
    }
    if (rc != 0) {
        char inner[sizeof e->field];
        snprintf(inner, sizeof inner, "%s", e->field);
        snprintf(e->field, sizeof e->field, inner[0] ? "limits.%.60s" : "limits", inner);
        char detail[sizeof e->detail];
        snprintf(detail, sizeof detail, "%s", e->detail);
        snprintf(e->detail, sizeof e->detail, "limits: %.200s", detail);
        return -1;
    }
    json_t *canon = json_object();
    if (mem > 0)
        json_object_set_new(canon, "vmmMemoryMib", json_integer(mem));
    if (cpus > 0)
        json_object_set_new(canon, "vmmCpus", json_integer(cpus));
    *limits_json =
        json_object_size(canon) ? json_dumps(canon, JSON_COMPACT | JSON_SORT_KEYS) : strdup("");
    json_decref(canon);
    return *limits_json ? 1 : -1;
}

/* An App's env: an object of at most 128 variables, names [A-Za-z_][A-Za-z0-9_]*, string values
 * of at most 4096 bytes (no NUL). *out_json is new compact JSON text the caller frees. */
static int env_read(json_t *obj, char **out_json, struct input_error *e)
{
    json_t *env, *v;
    const char *k;
    int rc = input_object(obj, "env", &env, e);
    if (rc <= 0)
        return rc;
    e->code = PROBLEM_INVALID_VALUE;
    snprintf(e->field, sizeof e->field, "env");
    if (json_object_size(env) > 128) {
        snprintf(e->detail, sizeof e->detail, "field \"env\" has more than 128 variables");
        return -1;
    }
    json_object_foreach(env, k, v)
    {
        bool ok = (k[0] == '_' || (k[0] >= 'A' && k[0] <= 'Z') || (k[0] >= 'a' && k[0] <= 'z')) &&
                  strlen(k) <= 256;
        for (const char *c = k; ok && *c; c++)
            ok = *c == '_' || (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
                 (*c >= '0' && *c <= '9');
        if (!ok) {
            snprintf(e->detail, sizeof e->detail,
                     "field \"env\": \"%.60s\" is not a variable name ([A-Za-z_][A-Za-z0-9_]*)", k);
            return -1;
        }
        if (sandbox_context_reserved(k)) {
            snprintf(e->detail, sizeof e->detail,
                     "field \"env\": %.60s is set by sbx for every Sandbox (its context, "
                     "docs/callbacks.md) and cannot be given",
                     k);
            return -1;
        }
        if (!json_is_string(v) || json_string_length(v) > 4096 ||
            strlen(json_string_value(v)) != json_string_length(v)) {
            snprintf(e->detail, sizeof e->detail,
                     "field \"env\": the value of %.60s must be a string of at most 4096 bytes", k);
            return -1;
        }
    }
    *out_json = json_dumps(env, JSON_COMPACT | JSON_SORT_KEYS);
    if (!*out_json) {
        e->code = PROBLEM_INTERNAL;
        snprintf(e->detail, sizeof e->detail, "out of memory");
        return -1;
    }
    return 1;
}

/* "network": validated (422 naming e.g. network.allow[2]) and written back in its normal form. */
static bool network_read(json_t *obj, struct app_input *in, struct input_error *e)
{
    json_t *network = json_object_get(obj, "network");
    if (!network)
        return true;
    struct egress_policy *p = malloc(sizeof *p);
    if (!p) {
        e->code = PROBLEM_INVALID_FIELD;
        snprintf(e->field, sizeof e->field, "network");
        snprintf(e->detail, sizeof e->detail, "out of memory");
        return false;
    }
    int rc =
        egress_policy_parse(network, p, e->field, sizeof e->field, e->detail, sizeof e->detail);
    bool ok = rc == 0;
    if (!ok) {
        e->code = rc == EGRESS_POLICY_UNKNOWN_FIELD ? PROBLEM_UNKNOWN_FIELD
                  : rc == EGRESS_POLICY_BAD_TYPE    ? PROBLEM_INVALID_FIELD
                                                    : PROBLEM_INVALID_VALUE;
    } else {
        json_t *norm = egress_policy_json(p);
        in->network_json = norm ? json_dumps(norm, JSON_COMPACT) : NULL;
        json_decref(norm);
        ok = in->network_json != NULL;
        if (!ok) {
            e->code = PROBLEM_INVALID_FIELD;
            snprintf(e->field, sizeof e->field, "network");
            snprintf(e->detail, sizeof e->detail, "out of memory");
        }
    }
    free(p);
    return ok;
}

static bool app_input_read(json_t *obj, struct app_input *in, struct input_error *e)
{
    int rc;
    memset(in, 0, sizeof *in);
    if ((rc = input_string(obj, "name", 1, 128, false, &in->name, NULL, e)) < 0)
        return false;
    if (rc > 0 && !input_is_name(in->name)) {
        e->code = PROBLEM_INVALID_FIELD;
        snprintf(e->field, sizeof e->field, "name");
        snprintf(e->detail, sizeof e->detail,
                 "field \"name\" must be 1 to 128 characters of A-Z a-z 0-9 . _ -");
        return false;
    }
    if ((rc = input_int(obj, "keepAliveSeconds", 1, 86400, false, &in->keep_alive, NULL, e)) < 0)
        return false;
    in->has_keep_alive = rc > 0;
    if ((rc = input_int(obj, "vcpuCount", 1, 32, false, &in->vcpu, NULL, e)) < 0)
        return false;
    in->has_vcpu = rc > 0;
    if ((rc = input_int(obj, "memSizeMib", 32, 65536, false, &in->mem, NULL, e)) < 0)
        return false;
    in->has_mem = rc > 0;
    if ((rc = input_int(obj, "maxAttempts", 1, 100, false, &in->max_attempts, NULL, e)) < 0)
        return false;
    in->has_max_attempts = rc > 0;
    if ((rc = input_string(obj, "driver", 1, 15, false, &in->driver, NULL, e)) < 0)
        return false;
    if (rc > 0 && strcmp(in->driver, "process") != 0 && strcmp(in->driver, "qemu") != 0 &&
        strcmp(in->driver, "firecracker") != 0) {
        e->code = PROBLEM_INVALID_VALUE;
        snprintf(e->field, sizeof e->field, "driver");
        snprintf(e->detail, sizeof e->detail,
                 "field \"driver\" must be process, qemu or firecracker");
        return false;
    }
    if (input_string(obj, "image", 1, 128, false, &in->image, NULL, e) < 0)
        return false;
    if (input_string_array(obj, "command", 64, 4096, &in->command_json, e) < 0)
        return false;
    if (limits_read(obj, &in->limits_json, e) < 0 || env_read(obj, &in->env_json, e) < 0)
        return false;
    if (!quotas_read(obj, in, e) || !prestart_read(obj, in, e))
        return false;
    return network_read(obj, in, e);
}

/* An App's driver must be one that a live worker can run (workers.drivers): otherwise its
 * messages would only fail. Workers that have not said (none started yet, or all of them stopped)
 * are no evidence either way, so the App is accepted then; its messages wait for a worker. */
static bool driver_usable(struct request *r, const char *driver, enum MHD_Result *ret)
{
    size_t recorded, runnable;
    char why[256];
    int64_t fresh_after = clock_wall_ms() - r->gw->cfg.worker_stale_ms;
    enum store_status s =
        store_driver_support(r->gw->st, driver, fresh_after, &recorded, &runnable, why, sizeof why);
    if (s != STORE_OK) {
        *ret = reply_store_error(r, s, "workers' drivers");
        return false;
    }
    if (recorded == 0 || runnable > 0)
        return true;
    *ret = reply_problem(r, PROBLEM_INVALID_VALUE, "driver",
                         "driver \"%s\" cannot run on any of the %zu live workers: %s", driver,
                         recorded, why[0] ? why : "unavailable");
    return false;
}

static void app_input_free(struct app_input *in)
{
    free(in->command_json);
    free(in->env_json);
    free(in->limits_json);
    free(in->network_json);
    in->command_json = in->env_json = in->limits_json = in->network_json = NULL;
}

/* The App's quotas: their effective values (0: no bound), the names of those that are the host's
 * defaults, and with usage (an answer about one App, not a list) what the App uses of each. */
static void add_quotas(struct request *r, json_t *body, const struct store_app *a,
                       const struct store_app_usage *usage)
{
    int64_t defaults[STORE_QUOTA_COUNT];
    json_t *quotas = json_object(), *defaulted = json_array(), *used = json_object();
    app_quota_defaults(&r->gw->cfg, defaults);
    for (int i = 0; i < STORE_QUOTA_COUNT; i++) {
        json_object_set_new(quotas, app_quota_field(i),
                            json_integer(store_quota_effective(a->quotas[i], defaults[i])));
        if (a->quotas[i] < 0)
            json_array_append_new(defaulted, json_string(app_quota_field(i)));
        if (usage && i != STORE_QUOTA_KEEP_ALIVE)
            json_object_set_new(used, app_quota_field(i), json_integer(usage->used[i]));
    }
    json_object_set_new(body, "quotas", quotas);
    json_object_set_new(body, "defaultedQuotas", defaulted);
    if (usage)
        json_object_set_new(body, "usage", used);
    else
        json_decref(used);
}

/* One App, with what it uses of its quotas. */
static enum MHD_Result reply_app(struct request *r, unsigned status, struct store_app *a)
{
    char location[96];
    struct store_app_usage usage;
    enum store_status s = store_app_usage(r->gw->st, a->id, &usage);
    if (s != STORE_OK) {
        store_app_clear(a);
        return reply_store_error(r, s, "App");
    }
    json_t *body = render_app(a);
    add_quotas(r, body, a, &usage);
    store_app_clear(a);
    if (status == 201) {
        snprintf(location, sizeof location, "/v1/apps/%s", a->id);
        return reply_json_header(r, status, body, "Location", location);
    }
    return reply_json(r, status, body);
}

enum MHD_Result http_app_create(struct request *r)
{
    enum MHD_Result ret;
    struct input_error e;
    struct app_input in;
    struct store_app a = {0};
    json_t *obj = request_json(r, app_fields, &ret);
    if (!obj)
        return ret;
    if (!app_input_read(obj, &in, &e)) {
        json_decref(obj);
        app_input_free(&in);
        return reply_input_error(r, &e);
    }
    if (!in.name) {
        json_decref(obj);
        app_input_free(&in);
        return reply_problem(r, PROBLEM_INVALID_FIELD, "name", "field \"name\" is required");
    }
    if (http_image_resolve(r, in.image ? in.image : "default", in.image_id, sizeof in.image_id,
                           in.image_digest, sizeof in.image_digest, &ret) != 0) {
        json_decref(obj);
        app_input_free(&in);
        return ret;
    }
    if (!driver_usable(r, in.driver ? in.driver : r->gw->cfg.driver, &ret)) {
        json_decref(obj);
        app_input_free(&in);
        return ret;
    }
    store_app_defaults(&a, in.name, in.driver ? in.driver : r->gw->cfg.driver);
    if (in.has_keep_alive)
        a.keep_alive_seconds = in.keep_alive;
    if (in.has_vcpu)
        a.vcpu_count = in.vcpu;
    if (in.has_mem)
        a.mem_size_mib = in.mem;
    if (in.has_max_attempts)
        a.max_attempts = in.max_attempts;
    for (int i = 0; i < STORE_QUOTA_COUNT; i++)
        a.quotas[i] = in.quotas[i] == STORE_QUOTA_KEEP ? -1 : in.quotas[i];
    /* Within the keep-alive quota: a value given above it is refused; the default one is
     * lowered to it. */
    int64_t defaults[STORE_QUOTA_COUNT];
    app_quota_defaults(&r->gw->cfg, defaults);
    int64_t keep_alive_bound =
        store_quota_effective(a.quotas[STORE_QUOTA_KEEP_ALIVE], defaults[STORE_QUOTA_KEEP_ALIVE]);
    if (keep_alive_bound > 0 && a.keep_alive_seconds > keep_alive_bound) {
        if (in.has_keep_alive) {
            struct store_quotas q = {.hit = STORE_QUOTA_KEEP_ALIVE,
                                     .limit = keep_alive_bound,
                                     .used = a.keep_alive_seconds};
            json_decref(obj);
            app_input_free(&in);
            return reply_over_quota(r, &q, a.keep_alive_seconds, "keepAliveSeconds");
        }
        a.keep_alive_seconds = keep_alive_bound;
    }
    if (in.image)
        snprintf(a.image, sizeof a.image, "%s", in.image);
    a.prestart = in.prestart;
    a.warm_pool = in.warm_pool;
    a.readiness_line = in.readiness && strcmp(in.readiness, "line") == 0;
    snprintf(a.image_id, sizeof a.image_id, "%s", in.image_id);
    snprintf(a.image_digest, sizeof a.image_digest, "%s", in.image_digest);
    /* Without a command, the built-in rootfs runs its echo agent and an Image its entrypoint and
     * cmd ([] here; the worker reads them from the image's config). */
    a.command_json = in.command_json       ? in.command_json
                     : in.image_id[0] == 0 ? strdup("[\"/usr/bin/sbx-echo-agent\"]")
                                           : strdup("[]");
    a.env_json = in.env_json ? in.env_json : strdup("{}");
    /* "" (null or {}) is no caps: stored as NULL. */
    if (in.limits_json && in.limits_json[0])
        a.limits_json = in.limits_json;
    else
        free(in.limits_json);
    in.limits_json = NULL;
    a.network_json = in.network_json; /* NULL: the store's default, public */
    in.network_json = NULL;
    json_decref(obj);
    if (!a.command_json || !a.env_json) {
        store_app_clear(&a);
        return reply_problem(r, PROBLEM_INTERNAL, NULL, "out of memory");
    }

    enum store_status s = store_app_create(r->gw->st, &r->ctx, &a);
    if (s == STORE_CONFLICT && a.image_id[0] &&
        http_image_resolve(r, a.image, a.image_id, sizeof a.image_id, a.image_digest,
                           sizeof a.image_digest, &ret) != 0) {
        /* The Image was deleted or changed between the check and the insert. */
        store_app_clear(&a);
        return ret;
    }
    if (s == STORE_CONFLICT) {
        ret = reply_problem(r, PROBLEM_CONFLICT, "name", "an App named \"%s\" already exists",
                            a.name);
        store_app_clear(&a);
        return ret;
    }
    if (s != STORE_OK) {
        store_app_clear(&a);
        return reply_store_error(r, s, "App");
    }
    return reply_app(r, 201, &a);
}

enum MHD_Result http_app_list(struct request *r)
{
    enum MHD_Result ret;
    size_t limit, n;
    const char *cursor;
    char next[STORE_CURSOR_LEN];
    struct store_app *items;
    if (!paging_params(r, &limit, &cursor, &ret))
        return ret;
    enum store_status s = store_app_list(r->gw->st, cursor, limit, &items, &n, next);
    if (s != STORE_OK)
        return reply_store_error(r, s, "App list");
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *item = render_app(&items[i]);
        add_quotas(r, item, &items[i], NULL);
        json_array_append_new(arr, item);
    }
    store_app_list_free(items, n);
    return reply_json(r, 200, render_page(arr, next));
}

enum MHD_Result http_app_get(struct request *r)
{
    struct store_app a;
    enum store_status s = store_app_get(r->gw->st, r->params[0], &a);
    if (s != STORE_OK)
        return reply_store_error(r, s, "App");
    return reply_app(r, 200, &a);
}

enum MHD_Result http_app_patch(struct request *r)
{
    enum MHD_Result ret;
    struct input_error e;
    struct app_input in;
    struct store_app a;
    json_t *obj = request_json(r, app_fields, &ret);
    if (!obj)
        return ret;
    if (!app_input_read(obj, &in, &e)) {
        json_decref(obj);
        app_input_free(&in);
        return reply_input_error(r, &e);
    }
    if (in.driver && !driver_usable(r, in.driver, &ret)) {
        json_decref(obj);
        app_input_free(&in);
        return ret;
    }
    /* A new image is resolved again, to the Image's digest now. */
    if (in.image && http_image_resolve(r, in.image, in.image_id, sizeof in.image_id,
                                       in.image_digest, sizeof in.image_digest, &ret) != 0) {
        json_decref(obj);
        app_input_free(&in);
        return ret;
    }
    struct store_app_patch p = {
        .name = in.name,
        .keep_alive_seconds = in.has_keep_alive ? &in.keep_alive : NULL,
        .vcpu_count = in.has_vcpu ? &in.vcpu : NULL,
        .mem_size_mib = in.has_mem ? &in.mem : NULL,
        .driver = in.driver,
        .image = in.image,
        .max_attempts = in.has_max_attempts ? &in.max_attempts : NULL,
        .command_json = in.command_json,
        .limits_json = in.limits_json,
        .image_id = in.image ? in.image_id : NULL,
        .image_digest = in.image ? in.image_digest : NULL,
        .env_json = in.env_json,
        .network_json = in.network_json,
        .quotas = in.has_quotas ? in.quotas : NULL,
        .prestart = in.has_prestart ? &in.prestart : NULL,
        .warm_pool = in.has_warm_pool ? &in.warm_pool : NULL,
        .readiness = in.readiness,
    };
    /* The built-in rootfs has no entrypoint: an App moving to it from an Image that ran the
     * image's own needs a command. */
    if (in.image && !in.image_id[0] && !in.command_json) {
        struct store_app cur;
        enum store_status g = store_app_get(r->gw->st, r->params[0], &cur);
        bool no_command = g == STORE_OK && cur.command_json && strcmp(cur.command_json, "[]") == 0;
        if (g == STORE_OK)
            store_app_clear(&cur);
        if (no_command) {
            json_decref(obj);
            app_input_free(&in);
            return reply_problem(r, PROBLEM_INVALID_VALUE, "command",
                                 "the App runs its Image's entrypoint; with image \"default\" "
                                 "give it a command");
        }
    }
    struct store_quotas q;
    app_quotas_init(&q, &r->gw->cfg);
    char env_clash[STORE_SECRET_NAME_LEN] = "";
    p.env_reserved = secret_ca_bundle_vars;
    p.env_clash = env_clash;
    p.env_clash_len = sizeof env_clash;
    enum store_status s = store_app_update_within(r->gw->st, &r->ctx, r->params[0], &p, &q, &a);
    if (s == STORE_INVALID && env_clash[0])
        ret = http_secrets_env_refused(r, env_clash);
    else if (s == STORE_OVER_QUOTA)
        /* The App's keep-alive above its keep-alive quota: the field the request changed. */
        ret = reply_over_quota(r, &q, q.used,
                               in.has_keep_alive ? "keepAliveSeconds" : "quotas.keepAliveSeconds");
    else if (s == STORE_CONFLICT && in.image_id[0] &&
             http_image_resolve(r, in.image, in.image_id, sizeof in.image_id, in.image_digest,
                                sizeof in.image_digest, &ret) != 0)
        ; /* the Image was deleted or changed meanwhile: replied */
    else if (s == STORE_CONFLICT)
        ret = reply_problem(r, PROBLEM_CONFLICT, "name", "an App named \"%s\" already exists",
                            in.name ? in.name : "");
    else if (s != STORE_OK)
        ret = reply_store_error(r, s, "App");
    else
        ret = reply_app(r, 200, &a);
    json_decref(obj);
    app_input_free(&in);
    return ret;
}

enum MHD_Result http_app_delete(struct request *r)
{
    enum store_status s = store_app_delete(r->gw->st, &r->ctx, r->params[0]);
    if (s == STORE_CONFLICT)
        return reply_problem(r, PROBLEM_CONFLICT, NULL,
                             "the App still has live Sessions or Workspaces; delete them first");
    if (s != STORE_OK)
        return reply_store_error(r, s, "App");
    http_keys_changed(r->gw); /* the App's keys end with it */
    return reply_empty(r, 204);
}
