/*
 * secrets.c: a Sandbox's App secrets in the worker (secrets.h): opened at activation (or at a
 * pre-started agent's start) and handed to the brokering proxy, given to the agent as
 * placeholders, detached and wiped at the end.
 */
#include "sandbox/secrets.h"

#include "log.h"
#include "sandbox/sandbox.h"
#include "sandbox/secret_broker.h"
#include "sandbox_context.h"
#include "secret_box.h"
#include "secret_rules.h"
#include "store_secrets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sandbox_secrets_clear(struct sandbox *sb)
{
    secret_broker_detach(sb->w, sb);
    secret_set_clear(&sb->secrets);
}

/* Adds one stored secret to set: its value unsealed, its hosts from the JSON list. */
static int add_one(struct secret_box *box, const struct store_secret *s, struct secret_set *set,
                   char *err, size_t errlen)
{
    char *value = NULL;
    size_t len = 0;
    if (secret_box_unseal(box, s->app_id, s->name, s->nonce, s->ciphertext, s->ciphertext_len,
                          &value, &len) != 0) {
        snprintf(err, errlen,
                 "App secret %.128s does not open with the secrets key %s (sealed with %s): "
                 "every host must share one key file",
                 s->name, secret_box_key_id(box), s->key_id);
        return -1;
    }
    json_t *hosts = json_loads(s->hosts_json, 0, NULL);
    size_t n = json_array_size(hosts);
    const char **v = calloc(n ? n : 1, sizeof *v);
    int rc = v ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < n; i++)
        v[i] = json_string_value(json_array_get(hosts, i));
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (!v[i])
            rc = -1;
    if (rc == 0)
        rc = secret_set_add(set, s->name, value, len, v, n);
    if (rc != 0)
        snprintf(err, errlen, "App secret %.128s: out of memory or a malformed host list", s->name);
    free(v);
    json_decref(hosts);
    secret_wipe(value, len);
    free(value);
    return rc;
}

int sandbox_secrets_load(struct sandbox *sb, const char *app_id, char *err, size_t errlen)
{
    struct worker *w = sb->w;
    struct store_secret *items = NULL;
    size_t n = 0;
    sandbox_secrets_clear(sb);
    enum store_status s = store_secret_list(w->st, app_id, true, &items, &n);
    if (s != STORE_OK) {
        snprintf(err, errlen, "cannot read the App's secrets: %s", store_status_name(s));
        return -1;
    }
    int rc = 0;
    if (n > 0 && !w->secrets) {
        snprintf(err, errlen, "the App has secrets and this worker has no secrets key");
        rc = -1;
    }
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = add_one(w->secrets, &items[i], &sb->secrets, err, errlen);
    store_secret_list_free(items, n);
    /* The proxy holds the set before the agent learns a placeholder: the first request the agent
     * makes (a pre-started one may call its model API while it initialises) is brokered. */
    if (rc == 0 && sb->secrets.n > 0)
        rc = secret_broker_attach(w, sb, &sb->secrets, err, errlen);
    if (rc != 0)
        sandbox_secrets_clear(sb);
    return rc;
}

/* Sets K=V in env, dropping any K there first (the image's or the App's). */
static int env_set(json_t *env, const char *k, const char *v)
{
    size_t klen = strlen(k);
    for (size_t i = json_array_size(env); i-- > 0;) {
        const char *kv = json_string_value(json_array_get(env, i));
        if (kv && strncmp(kv, k, klen) == 0 && kv[klen] == '=')
            json_array_remove(env, i);
    }
    size_t vlen = strlen(v);
    char *kv = malloc(klen + vlen + 2);
    if (!kv)
        return -1;
    memcpy(kv, k, klen);
    kv[klen] = '=';
    memcpy(kv + klen + 1, v, vlen + 1);
    int rc = json_array_append_new(env, json_string(kv));
    free(kv);
    return rc;
}

int sandbox_secrets_start_line(const struct sandbox *sb, json_t *env, json_t *files)
{
    if (sb->secrets.n == 0)
        return 0;
    int rc = 0;
    for (size_t i = 0; i < sb->secrets.n; i++)
        rc |= env_set(env, sb->secrets.v[i].name, sb->secrets.v[i].placeholder);
    if (!sb->w->ca_pem)
        return rc;
    /* The image's own bundle and the installation CA, whose certificates the proxy presents:
     * clients that read these variables trust both, and the image is left as it is. */
    /* Node.js adds NODE_EXTRA_CA_CERTS to its built-in roots: the CA alone is what it needs (the
     * start line writes it at SANDBOX_CA_PATH whenever the CA is known). The others replace their
     * library's roots, so they get the whole bundle. */
    for (size_t i = 0; secret_ca_bundle_vars[i]; i++)
        rc |= env_set(env, secret_ca_bundle_vars[i],
                      strcmp(secret_ca_bundle_vars[i], "NODE_EXTRA_CA_CERTS") == 0
                          ? SANDBOX_CA_PATH
                          : SECRET_CA_BUNDLE_PATH);
    json_t *prepend = json_array();
    for (size_t i = 0; secret_image_ca_bundles[i]; i++)
        json_array_append_new(prepend, json_string(secret_image_ca_bundles[i]));
    json_t *f = json_pack("{s:s, s:s, s:o}", "path", SECRET_CA_BUNDLE_PATH, "content",
                          sb->w->ca_pem, "prependFirstOf", prepend);
    if (!f || json_array_append_new(files, f) != 0)
        rc = -1;
    return rc;
}
