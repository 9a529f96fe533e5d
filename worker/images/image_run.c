/*
 * image_run.c: the agent's argv, env, cwd and user from the App and its image's config
 * (image_run.h).
 */
#include "images/image_run.h"
#include "images/image_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void image_run_clear(struct image_run *run)
{
    json_decref(run->argv);
    json_decref(run->env);
    memset(run, 0, sizeof *run);
}

/* Sets K=V in env (an array of "K=V"), replacing an earlier K. */
static void env_set(json_t *env, const char *kv)
{
    size_t klen = strcspn(kv, "="), i;
    json_t *v;
    json_array_foreach(env, i, v)
    {
        const char *s = json_string_value(v);
        if (s && strncmp(s, kv, klen) == 0 && s[klen] == '=') {
            json_array_set_new(env, i, json_string(kv));
            return;
        }
    }
    json_array_append_new(env, json_string(kv));
}

static void append_strings(json_t *to, json_t *from)
{
    size_t i;
    json_t *v;
    json_array_foreach(from, i, v) if (json_is_string(v)) json_array_append(to, v);
}

int image_run_resolve(const struct sbx_config *cfg, const char *image_digest,
                      const char *command_json, const char *env_json, struct image_run *run,
                      char *err, size_t errlen)
{
    json_t *config = NULL, *command = NULL, *app_env = NULL, *v;
    const char *k;
    int rc = -1;

    memset(run, 0, sizeof *run);
    run->argv = json_array();
    run->env = json_array();
    command = json_loads(command_json ? command_json : "[]", 0, NULL);
    app_env = json_loads(env_json ? env_json : "{}", 0, NULL);
    if (!image_is_default(image_digest)) {
        char dir[4096], path[4200];
        if (image_cache_dir(cfg, image_digest, dir, sizeof dir, err, errlen) != 0)
            goto out;
        if (!image_cache_ready(cfg, image_digest)) {
            snprintf(err, errlen, "image %s is not in this host's cache", image_digest);
            goto out;
        }
        snprintf(path, sizeof path, "%s/config.json", dir);
        json_error_t jerr;
        config = json_load_file(path, 0, &jerr);
        if (!config) {
            snprintf(err, errlen, "image %s: config.json: %s", image_digest, jerr.text);
            goto out;
        }
    }
    json_t *c = json_object_get(config, "config");
    if (json_is_array(command) && json_array_size(command) > 0) {
        append_strings(run->argv, command);
    } else {
        append_strings(run->argv, json_object_get(c, "Entrypoint"));
        append_strings(run->argv, json_object_get(c, "Cmd"));
    }
    if (json_array_size(run->argv) == 0) {
        snprintf(err, errlen, "the App has no command and its image no entrypoint or cmd");
        goto out;
    }
    size_t i;
    json_array_foreach(json_object_get(c, "Env"), i,
                       v) if (json_is_string(v) && strchr(json_string_value(v), '='))
        env_set(run->env, json_string_value(v));
    json_object_foreach(app_env, k, v)
    {
        if (!json_is_string(v))
            continue;
        char kv[4400];
        snprintf(kv, sizeof kv, "%s=%s", k, json_string_value(v));
        env_set(run->env, kv);
    }
    const char *wd = json_string_value(json_object_get(c, "WorkingDir"));
    const char *user = json_string_value(json_object_get(c, "User"));
    snprintf(run->cwd, sizeof run->cwd, "%s", wd ? wd : "");
    snprintf(run->user, sizeof run->user, "%s", user ? user : "");
    rc = 0;
out:
    json_decref(config);
    json_decref(command);
    json_decref(app_env);
    if (rc != 0)
        image_run_clear(run);
    return rc;
}

#define RUN_CACHE_SLOTS 16

struct image_run_cache {
    struct {
        char *key; /* digest \n command_json \n env_json; NULL: free slot */
        struct image_run run;
    } slot[RUN_CACHE_SLOTS];
    size_t next; /* the slot replaced next (round robin) */
};

struct image_run_cache *image_run_cache_new(void)
{
    return calloc(1, sizeof(struct image_run_cache));
}

void image_run_cache_free(struct image_run_cache *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < RUN_CACHE_SLOTS; i++) {
        free(c->slot[i].key);
        image_run_clear(&c->slot[i].run);
    }
    free(c);
}

/* Copies of the arrays (the strings shared), so that the caller may add to its env. */
static int run_copy(const struct image_run *from, struct image_run *to)
{
    *to = *from;
    to->argv = json_copy(from->argv);
    to->env = json_copy(from->env);
    if (to->argv && to->env)
        return 0;
    image_run_clear(to);
    return -1;
}

int image_run_resolve_cached(struct image_run_cache *c, const struct sbx_config *cfg,
                             const char *image_digest, const char *command_json,
                             const char *env_json, struct image_run *run, char *err, size_t errlen)
{
    char *key = NULL;
    if (!c || asprintf(&key, "%s\n%s\n%s", image_digest ? image_digest : "",
                       command_json ? command_json : "", env_json ? env_json : "") < 0)
        return image_run_resolve(cfg, image_digest, command_json, env_json, run, err, errlen);
    for (size_t i = 0; i < RUN_CACHE_SLOTS; i++)
        if (c->slot[i].key && strcmp(c->slot[i].key, key) == 0) {
            free(key);
            if (run_copy(&c->slot[i].run, run) == 0)
                return 0;
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    struct image_run fresh;
    if (image_run_resolve(cfg, image_digest, command_json, env_json, &fresh, err, errlen) != 0) {
        free(key);
        return -1;
    }
    if (run_copy(&fresh, run) != 0) {
        free(key);
        image_run_clear(&fresh);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t i = c->next;
    c->next = (c->next + 1) % RUN_CACHE_SLOTS;
    free(c->slot[i].key);
    image_run_clear(&c->slot[i].run);
    c->slot[i].key = key;
    c->slot[i].run = fresh;
    return 0;
}
