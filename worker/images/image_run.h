/*
 * image_run.h: what the agent of an App's Sandbox runs with, from the App and its image: the
 * fields of the `start` line the worker sends the agent (drivers/driver.h):
 *   argv  the App's command, else the image's Entrypoint + Cmd
 *   env   the image's Env ("K=V"), then the App's env, a variable of the App replacing the image's
 *   cwd   the image's WorkingDir (NULL when empty)
 *   user  the image's User (NULL when empty)
 * The image's defaults come from its config.json in this host's cache (image_cache.h); the
 * built-in rootfs ("default") has none.
 */
#ifndef SBX_IMAGE_RUN_H
#define SBX_IMAGE_RUN_H

#include "config.h"

#include <jansson.h>
#include <stddef.h>

struct image_run {
    json_t *argv; /* array of strings, never empty */
    json_t *env;  /* array of "K=V" strings */
    char cwd[512];
    char user[128];
};

/* Fills run (the caller releases it with image_run_clear). Returns 0, or -1 with a reason (the
 * image is not in this host's cache, its config is damaged, or there is nothing to run). */
int image_run_resolve(const struct sbx_config *cfg, const char *image_digest,
                      const char *command_json, const char *env_json, struct image_run *run,
                      char *err, size_t errlen);
void image_run_clear(struct image_run *run);

/* The resolutions of the Apps activated lately, so that an activation neither reads the image's
 * config.json nor parses the App's command and env again while they are unchanged. Keyed by the
 * digest, command and env themselves: an App update that changes one misses. One thread. */
struct image_run_cache;
struct image_run_cache *image_run_cache_new(void);
void image_run_cache_free(struct image_run_cache *c);
/* image_run_resolve() through the cache c (NULL: none): run gets arrays of its own, which the
 * caller may change, and releases them with image_run_clear. */
int image_run_resolve_cached(struct image_run_cache *c, const struct sbx_config *cfg,
                             const char *image_digest, const char *command_json,
                             const char *env_json, struct image_run *run, char *err, size_t errlen);

#endif
