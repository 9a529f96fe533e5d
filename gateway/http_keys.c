/*
 * http_keys.c: /v1/apps/{appId}/keys (admin only): create (the secret is shown once), list,
 * revoke.
 */
#include "auth.h"
#include "store_keys.h"
#include "gateway.h"
#include "json_input.h"
#include "key_cache.h"
#include "notify.h"
#include "render.h"
#include "reply.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum MHD_Result http_key_create(struct request *r)
{
    static const char *const fields[] = {"name", NULL};
    enum MHD_Result ret;
    struct input_error e;
    const char *name = NULL;
    char secret[80];
    char prefix[AUTH_KEY_SHOWN_PREFIX + 1];
    uint8_t hash[32];
    struct store_key k;
    json_t *obj = request_json(r, fields, &ret);
    if (!obj)
        return ret;
    if (input_string(obj, "name", 1, 128, true, &name, NULL, &e) < 0) {
        json_decref(obj);
        return reply_input_error(r, &e);
    }
    if (auth_new_secret(AUTH_KEY_PREFIX, secret, sizeof secret) != 0) {
        json_decref(obj);
        return reply_problem(r, PROBLEM_INTERNAL, NULL, "the random number generator failed");
    }
    snprintf(prefix, sizeof prefix, "%.*s", AUTH_KEY_SHOWN_PREFIX, secret);
    auth_hash(secret, hash);
    enum store_status s =
        store_key_create(r->gw->st, &r->ctx, r->params[0], name, prefix, hash, &k);
    json_decref(obj);
    if (s != STORE_OK) {
        memset(secret, 0, sizeof secret);
        return reply_store_error(r, s, "App");
    }
    json_t *body = render_key(&k);
    json_object_set_new(body, "key", json_string(secret));
    memset(secret, 0, sizeof secret);
    return reply_json(r, 201, body);
}

enum MHD_Result http_key_list(struct request *r)
{
    struct store_key *keys;
    size_t n;
    enum store_status s = store_key_list(r->gw->st, r->params[0], &keys, &n);
    if (s != STORE_OK)
        return reply_store_error(r, s, "App");
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, render_key(&keys[i]));
    free(keys);
    return reply_json(r, 200, render_page(arr, NULL));
}

void http_keys_changed(struct gateway *gw)
{
    key_cache_clear(gw->keys); /* before the 204: this gateway refuses the key from now on */
    notify_send(gw->gateways, "keys");
}

enum MHD_Result http_key_delete(struct request *r)
{
    enum store_status s = store_key_revoke(r->gw->st, &r->ctx, r->params[0], r->params[1]);
    if (s != STORE_OK)
        return reply_store_error(r, s, "API key");
    http_keys_changed(r->gw);
    return reply_empty(r, 204);
}
