/*
 * http_apps.c: /v1/apps and /v1/apps/{appId} (admin only): create, list, get, patch, delete.
 */
#include "egress_policy.h"
#include "gateway.h"
#include "json_input.h"
#include "render.h"
#include "reply.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const app_fields[] = {
    "name",  "keepAliveSeconds", "vcpuCount", "memSizeMib", "driver",
    "image", "maxAttempts",      "command",   "network",    NULL};

/* The App fields present in obj, validated; command_json is a new string the caller frees. */
struct app_input {
    const char *name, *driver, *image;
    int64_t keep_alive, vcpu, mem, max_attempts;
    bool has_keep_alive, has_vcpu, has_mem, has_max_attempts;
    char *command_json;
    char *network_json; /* the policy's normal form, when "network" was given */
};

/* "network": validated (422 naming e.g. network.allow[2]) and written back in its normal form. */
static bool network_read(json_t *obj, struct app_input *in, struct input_error *e)
{
    json_t *network = json_object_get(obj, "network");
    if (!network)
        return true;
    struct egress_policy *p = malloc(sizeof *p);
    if (!p) {
        e->code = "invalid-field";
        snprintf(e->field, sizeof e->field, "network");
        snprintf(e->detail, sizeof e->detail, "out of memory");
        return false;
    }
    int rc =
        egress_policy_parse(network, p, e->field, sizeof e->field, e->detail, sizeof e->detail);
    bool ok = rc == 0;
    if (!ok) {
        e->code = rc == EGRESS_POLICY_UNKNOWN_FIELD ? "unknown-field"
                  : rc == EGRESS_POLICY_BAD_TYPE    ? "invalid-field"
                                                    : "invalid-value";
    } else {
        json_t *norm = egress_policy_json(p);
        in->network_json = norm ? json_dumps(norm, JSON_COMPACT) : NULL;
        json_decref(norm);
        ok = in->network_json != NULL;
        if (!ok) {
            e->code = "invalid-field";
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
        e->code = "invalid-field";
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
        e->code = "invalid-value";
        snprintf(e->field, sizeof e->field, "driver");
        snprintf(e->detail, sizeof e->detail,
                 "field \"driver\" must be process, qemu or firecracker");
        return false;
    }
    if (input_string(obj, "image", 1, 128, false, &in->image, NULL, e) < 0)
        return false;
    if (input_string_array(obj, "command", 64, 4096, &in->command_json, e) < 0)
        return false;
    return network_read(obj, in, e);
}

static enum MHD_Result reply_app(struct request *r, unsigned status, struct store_app *a)
{
    char location[96];
    json_t *body = render_app(a);
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
        free(in.command_json);
        free(in.network_json);
        return reply_input_error(r, &e);
    }
    if (!in.name) {
        json_decref(obj);
        free(in.command_json);
        free(in.network_json);
        return reply_problem(r, "invalid-field", "name", "field \"name\" is required");
    }
    snprintf(a.name, sizeof a.name, "%s", in.name);
    a.keep_alive_seconds = in.has_keep_alive ? in.keep_alive : 60;
    a.vcpu_count = in.has_vcpu ? in.vcpu : 1;
    a.mem_size_mib = in.has_mem ? in.mem : 256;
    a.max_attempts = in.has_max_attempts ? in.max_attempts : 3;
    snprintf(a.driver, sizeof a.driver, "%s", in.driver ? in.driver : r->gw->cfg.driver);
    snprintf(a.image, sizeof a.image, "%s", in.image ? in.image : "default");
    a.command_json = in.command_json ? in.command_json : strdup("[\"/usr/bin/sbx-echo-agent\"]");
    a.network_json = in.network_json; /* NULL: the store's default, public */
    json_decref(obj);
    if (!a.command_json)
        return reply_problem(r, "internal", NULL, "out of memory");

    enum store_status s = r->gw->st->app_create(r->gw->st, &r->ctx, &a);
    if (s == STORE_CONFLICT) {
        ret = reply_problem(r, "conflict", "name", "an App named \"%s\" already exists", a.name);
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
    enum store_status s = r->gw->st->app_list(r->gw->st, cursor, limit, &items, &n, next);
    if (s != STORE_OK)
        return reply_store_error(r, s, "App list");
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, render_app(&items[i]));
    store_app_list_free(items, n);
    return reply_json(r, 200, render_page(arr, next));
}

enum MHD_Result http_app_get(struct request *r)
{
    struct store_app a;
    enum store_status s = r->gw->st->app_get(r->gw->st, r->params[0], &a);
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
        free(in.command_json);
        free(in.network_json);
        return reply_input_error(r, &e);
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
        .network_json = in.network_json,
    };
    enum store_status s = r->gw->st->app_update(r->gw->st, &r->ctx, r->params[0], &p, &a);
    if (s == STORE_CONFLICT)
        ret = reply_problem(r, "conflict", "name", "an App named \"%s\" already exists",
                            in.name ? in.name : "");
    else if (s != STORE_OK)
        ret = reply_store_error(r, s, "App");
    else
        ret = reply_app(r, 200, &a);
    json_decref(obj);
    free(in.command_json);
    free(in.network_json);
    return ret;
}

enum MHD_Result http_app_delete(struct request *r)
{
    enum store_status s = r->gw->st->app_delete(r->gw->st, &r->ctx, r->params[0]);
    if (s == STORE_CONFLICT)
        return reply_problem(r, "conflict", NULL,
                             "the App still has live Sessions or Workspaces; delete them first");
    if (s != STORE_OK)
        return reply_store_error(r, s, "App");
    return reply_empty(r, 204);
}
