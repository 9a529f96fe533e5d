/*
 * http_secrets.c: /v1/apps/{appId}/secrets (admin only): an App's secrets, write-only. A PUT
 * seals the value (common/secret_box.h) before the store sees it and replaces any earlier one
 * (rotation); reads give names, hosts and times, never a value. The worker opens them at each
 * activation and hands the agent placeholders (docs/secrets.md).
 */
#include "gateway.h"
#include "json_input.h"
#include "render.h"
#include "reply.h"
#include "secret_box.h"
#include "secret_rules.h"
#include "store_apps.h"
#include "store_secrets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *render_secret(const struct store_secret *s)
{
    json_t *hosts = s->hosts_json ? json_loads(s->hosts_json, 0, NULL) : NULL;
    return json_pack("{s:s, s:s, s:o, s:o, s:o}", "appId", s->app_id, "name", s->name, "hosts",
                     hosts ? hosts : json_array(), "createdAt", render_time(s->created_at),
                     "updatedAt", render_time(s->updated_at));
}

/* "hosts": a non-empty list of host entries (secret_rules.h), written back in their normal form
 * without duplicates. NULL with the reply in *ret. */
static char *hosts_read(struct request *r, json_t *obj, enum MHD_Result *ret)
{
    json_t *hosts = json_object_get(obj, "hosts");
    if (!hosts) {
        *ret = reply_problem(r, PROBLEM_INVALID_FIELD, "hosts",
                             "field \"hosts\" is required: the host names the value may be sent "
                             "to");
        return NULL;
    }
    if (!json_is_array(hosts)) {
        *ret = reply_problem(r, PROBLEM_INVALID_FIELD, "hosts",
                             "field \"hosts\" must be a list of host names");
        return NULL;
    }
    size_t n = json_array_size(hosts);
    if (n == 0 || n > SECRET_HOSTS_MAX) {
        *ret = reply_problem(r, PROBLEM_INVALID_VALUE, "hosts",
                             "field \"hosts\" must name 1 to %d hosts", SECRET_HOSTS_MAX);
        return NULL;
    }
    json_t *canon = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *h = json_array_get(hosts, i);
        char norm[SECRET_HOST_MAX + 1], why[256], field[32];
        snprintf(field, sizeof field, "hosts[%zu]", i);
        if (!json_is_string(h) || json_string_length(h) > SECRET_HOST_MAX ||
            strlen(json_string_value(h)) != json_string_length(h)) {
            json_decref(canon);
            *ret = reply_problem(r, PROBLEM_INVALID_FIELD, field,
                                 "field \"%s\" must be a host name of at most %d characters", field,
                                 SECRET_HOST_MAX);
            return NULL;
        }
        if (!secret_host_parse(json_string_value(h), norm, why, sizeof why)) {
            json_decref(canon);
            *ret = reply_problem(r, PROBLEM_INVALID_VALUE, field, "%s", why);
            return NULL;
        }
        bool dup = false;
        for (size_t j = 0; j < json_array_size(canon) && !dup; j++)
            dup = strcmp(json_string_value(json_array_get(canon, j)), norm) == 0;
        if (!dup)
            json_array_append_new(canon, json_string(norm));
    }
    char *text = json_dumps(canon, JSON_COMPACT);
    json_decref(canon);
    if (!text)
        *ret = reply_problem(r, PROBLEM_INTERNAL, NULL, "out of memory");
    return text;
}

enum MHD_Result http_secret_put(struct request *r)
{
    static const char *const fields[] = {"value", "hosts", NULL};
    enum MHD_Result ret;
    char why[256];
    const char *app_id = r->params[0], *name = r->params[1];
    if (!r->gw->secrets)
        return reply_problem(r, PROBLEM_INTERNAL, NULL,
                             "this gateway has no key for App secrets (see its log)");
    if (!secret_name_ok(name, why, sizeof why))
        return reply_problem(r, PROBLEM_INVALID_VALUE, "name", "%s", why);
    json_t *obj = request_json(r, fields, &ret);
    if (!obj)
        return ret;
    json_t *value = json_object_get(obj, "value");
    if (!value || !json_is_string(value)) {
        json_decref(obj);
        return reply_problem(r, PROBLEM_INVALID_FIELD, "value",
                             "field \"value\" is required: a string");
    }
    size_t vlen = json_string_length(value);
    if (vlen > SECRET_VALUE_MAX) {
        json_decref(obj);
        return reply_problem(r, PROBLEM_INVALID_VALUE, "value",
                             "field \"value\" is longer than %d bytes", SECRET_VALUE_MAX);
    }
    if (vlen == 0 || strlen(json_string_value(value)) != vlen) {
        json_decref(obj);
        return reply_problem(r, PROBLEM_INVALID_VALUE, "value",
                             "field \"value\" must be a non-empty string without NUL characters");
    }
    char *hosts_json = hosts_read(r, obj, &ret);
    if (!hosts_json) {
        json_decref(obj);
        return ret;
    }
    struct store_secret in = {0};
    snprintf(in.app_id, sizeof in.app_id, "%s", app_id);
    snprintf(in.name, sizeof in.name, "%s", name);
    snprintf(in.key_id, sizeof in.key_id, "%s", secret_box_key_id(r->gw->secrets));
    in.hosts_json = hosts_json;
    int sealed = secret_box_seal(r->gw->secrets, app_id, name, json_string_value(value), vlen,
                                 in.nonce, &in.ciphertext, &in.ciphertext_len);
    /* The request's copy of the value goes with the body; the parsed one now. */
    secret_wipe((void *)json_string_value(value), vlen);
    json_decref(obj);
    secret_wipe(r->body, r->body_len);
    if (sealed != 0) {
        store_secret_clear(&in);
        return reply_problem(r, PROBLEM_INTERNAL, NULL, "cannot seal the value");
    }
    bool created = false;
    char clash[STORE_SECRET_NAME_LEN] = "";
    struct store_secret out;
    enum store_status s =
        store_secret_put(r->gw->st, &r->ctx, &in, secret_ca_bundle_vars, SECRETS_PER_APP_MAX,
                         &created, clash, sizeof clash, &out);
    store_secret_clear(&in);
    if (s == STORE_CONFLICT) {
        if (strcmp(clash, name) == 0)
            return reply_problem(r, PROBLEM_INVALID_VALUE, "name",
                                 "the App's env sets %s: an App's env and its secrets cannot "
                                 "share a name",
                                 name);
        return reply_problem(r, PROBLEM_INVALID_VALUE, "name",
                             "the App's env sets %s, which sbx sets for an App with secrets: "
                             "remove it from the env first",
                             clash);
    }
    if (s == STORE_INVALID)
        return reply_problem(r, PROBLEM_INVALID_VALUE, "name",
                             "the App has %d secrets already, the most it may have",
                             SECRETS_PER_APP_MAX);
    if (s != STORE_OK)
        return reply_store_error(r, s, "App");
    json_t *body = render_secret(&out);
    store_secret_clear(&out);
    if (!created)
        return reply_json(r, 200, body);
    char location[256];
    snprintf(location, sizeof location, "/v1/apps/%s/secrets/%s", app_id, name);
    return reply_json_header(r, 201, body, "Location", location);
}

enum MHD_Result http_secret_list(struct request *r)
{
    struct store_app a;
    enum store_status s = store_app_get(r->gw->st, r->params[0], &a);
    if (s != STORE_OK)
        return reply_store_error(r, s, "App");
    store_app_clear(&a);
    struct store_secret *items;
    size_t n;
    s = store_secret_list(r->gw->st, r->params[0], false, &items, &n);
    if (s != STORE_OK)
        return reply_store_error(r, s, "App");
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, render_secret(&items[i]));
    store_secret_list_free(items, n);
    return reply_json(r, 200, render_page(arr, ""));
}

enum MHD_Result http_secret_get(struct request *r)
{
    struct store_secret sec;
    enum store_status s = store_secret_get(r->gw->st, r->params[0], r->params[1], &sec);
    if (s != STORE_OK)
        return reply_store_error(r, s, "secret");
    json_t *body = render_secret(&sec);
    store_secret_clear(&sec);
    return reply_json(r, 200, body);
}

enum MHD_Result http_secret_delete(struct request *r)
{
    enum store_status s = store_secret_delete(r->gw->st, &r->ctx, r->params[0], r->params[1]);
    if (s != STORE_OK)
        return reply_store_error(r, s, "secret");
    return reply_empty(r, 204);
}

enum MHD_Result http_secrets_env_refused(struct request *r, const char *name)
{
    if (secret_ca_bundle_var(name))
        return reply_problem(r, PROBLEM_INVALID_VALUE, "env",
                             "field \"env\": %.60s is set by sbx for an App with secrets", name);
    return reply_problem(r, PROBLEM_INVALID_VALUE, "env",
                         "field \"env\": %.60s is a secret of the App: an App's env and its "
                         "secrets cannot share a name",
                         name);
}
