/*
 * image_manifest.c: OCI image layout and docker-archive manifests, image configs and platform
 * selection (image_manifest.h). JSON is read with jansson; every blob the plan names is checked
 * against its digest before the plan is returned.
 */
#include "images/image_manifest.h"
#include "images/layer_apply.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MANIFEST_LIMIT (4 << 20) /* manifests, indexes and configs are small */

int image_blobs_add(struct image_blobs *b, const char *name, const char *path, const char *digest,
                    int64_t size)
{
    struct image_blob *grown = realloc(b->items, (b->n + 1) * sizeof *grown);
    if (!grown)
        return -1;
    b->items = grown;
    struct image_blob *it = &b->items[b->n];
    memset(it, 0, sizeof *it);
    it->name = strdup(name);
    it->path = strdup(path);
    if (!it->name || !it->path) {
        free(it->name);
        free(it->path);
        return -1;
    }
    snprintf(it->digest, sizeof it->digest, "%s", digest);
    it->size = size;
    b->n++;
    return 0;
}

const struct image_blob *image_blobs_find(const struct image_blobs *b, const char *name)
{
    for (size_t i = b->n; i-- > 0;) /* the last of a repeated name wins, as tar extraction */
        if (strcmp(b->items[i].name, name) == 0)
            return &b->items[i];
    return NULL;
}

void image_blobs_free(struct image_blobs *b)
{
    for (size_t i = 0; i < b->n; i++) {
        free(b->items[i].name);
        free(b->items[i].path);
    }
    free(b->items);
    b->items = NULL;
    b->n = 0;
}

void image_plan_free(struct image_plan *plan)
{
    for (size_t i = 0; i < plan->n_layers; i++)
        free(plan->layers[i]);
    free(plan->layers);
    free(plan->diff_ids);
    free(plan->entrypoint_json);
    free(plan->cmd_json);
    free(plan->env_json);
    memset(plan, 0, sizeof *plan);
}

char *image_read_small(const char *path, size_t limit, struct image_problem *p)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        image_fail(p, IMAGE_IO_ERROR, "cannot read a staged blob: %s", strerror(errno));
        return NULL;
    }
    char *buf = malloc(limit + 1);
    size_t n = buf ? fread(buf, 1, limit + 1, f) : 0;
    fclose(f);
    if (!buf) {
        image_fail(p, IMAGE_IO_ERROR, "out of memory");
        return NULL;
    }
    if (n > limit) {
        free(buf);
        image_fail(p, IMAGE_BAD_MANIFEST, "a manifest or config is larger than %zu bytes", limit);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

int image_media_is_index(const char *mt)
{
    return mt && (strcmp(mt, "application/vnd.oci.image.index.v1+json") == 0 ||
                  strcmp(mt, "application/vnd.docker.distribution.manifest.list.v2+json") == 0);
}

static json_t *parse(const char *text, const char *what, struct image_problem *p)
{
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr);
    if (!j)
        image_fail(p, IMAGE_BAD_MANIFEST, "%s is not JSON: %s (line %d)", what, jerr.text,
                   jerr.line);
    return j;
}

static int take_digest(json_t *v, char out[IMAGE_DIGEST_LEN], const char *what,
                       struct image_problem *p)
{
    const char *d = json_string_value(v);
    if (!image_digest_valid(d))
        return image_fail(
            p, d && strncmp(d, "sha256:", 7) != 0 ? IMAGE_UNSUPPORTED : IMAGE_BAD_MANIFEST,
            "%s digest '%.100s' is not sha256:<64 hex>", what, d ? d : "");
    snprintf(out, IMAGE_DIGEST_LEN, "%s", d);
    return 0;
}

int image_pick_platform(const char *index_json, char out[IMAGE_DIGEST_LEN], struct image_problem *p)
{
    json_t *idx = parse(index_json, "the image index", p), *m;
    size_t i;
    int rc = -1;
    if (!idx)
        return -1;
    json_t *list = json_object_get(idx, "manifests");
    if (!json_is_array(list) || json_array_size(list) == 0) {
        image_fail(p, IMAGE_BAD_MANIFEST, "the image index lists no manifests");
        goto out;
    }
    json_array_foreach(list, i, m)
    {
        json_t *plat = json_object_get(m, "platform");
        const char *os = json_string_value(json_object_get(plat, "os"));
        const char *arch = json_string_value(json_object_get(plat, "architecture"));
        if ((!plat && json_array_size(list) == 1) ||
            (os && arch && strcmp(os, "linux") == 0 && strcmp(arch, "amd64") == 0)) {
            rc = take_digest(json_object_get(m, "digest"), out, "the manifest", p);
            goto out;
        }
    }
    image_fail(p, IMAGE_UNSUPPORTED, "the image index has no linux/amd64 image");
out:
    json_decref(idx);
    return rc;
}

int image_manifest_parse(const char *manifest_json, char config[IMAGE_DIGEST_LEN],
                         char (**layers)[IMAGE_DIGEST_LEN], size_t *n_layers,
                         struct image_problem *p)
{
    json_t *m = parse(manifest_json, "the image manifest", p), *l;
    size_t i;
    if (!m)
        return -1;
    json_t *list = json_object_get(m, "layers");
    int rc = take_digest(json_object_get(json_object_get(m, "config"), "digest"), config,
                         "the config", p);
    if (!rc && !json_is_array(list))
        rc = image_fail(p, IMAGE_BAD_MANIFEST, "the image manifest has no layers list");
    *layers = NULL;
    *n_layers = 0;
    if (!rc && json_array_size(list) > 0) {
        *layers = calloc(json_array_size(list), IMAGE_DIGEST_LEN);
        if (!*layers)
            rc = image_fail(p, IMAGE_IO_ERROR, "out of memory");
    }
    if (!rc)
        json_array_foreach(list, i, l)
        {
            if (take_digest(json_object_get(l, "digest"), (*layers)[i], "a layer", p) != 0) {
                rc = -1;
                break;
            }
            *n_layers = i + 1;
        }
    if (rc) {
        free(*layers);
        *layers = NULL;
        *n_layers = 0;
    }
    json_decref(m);
    return rc;
}

/* JSON text of an array value, or NULL when absent or null. */
static char *array_text(json_t *v)
{
    return json_is_array(v) ? json_dumps(v, JSON_COMPACT) : NULL;
}

int image_config_parse(const char *config_json, size_t n_layers, struct image_plan *plan,
                       char (**diff_ids)[IMAGE_DIGEST_LEN], struct image_problem *p)
{
    json_t *c = parse(config_json, "the image config", p), *d;
    size_t i;
    int rc = 0;
    if (!c)
        return -1;
    const char *os = json_string_value(json_object_get(c, "os"));
    if (os && strcmp(os, "linux") != 0)
        rc = image_fail(p, IMAGE_UNSUPPORTED, "the image is for os '%.40s', not linux", os);
    json_t *ids = json_object_get(json_object_get(c, "rootfs"), "diff_ids");
    if (!rc && (!json_is_array(ids) || json_array_size(ids) != n_layers))
        rc = image_fail(p, IMAGE_BAD_MANIFEST, "the image config lists %zu diff ids for %zu layers",
                        json_is_array(ids) ? json_array_size(ids) : 0, n_layers);
    if (!rc && diff_ids) {
        *diff_ids = calloc(n_layers ? n_layers : 1, IMAGE_DIGEST_LEN);
        if (!*diff_ids)
            rc = image_fail(p, IMAGE_IO_ERROR, "out of memory");
        else
            json_array_foreach(ids, i, d) if (take_digest(d, (*diff_ids)[i], "a diff id", p) != 0)
            {
                rc = -1;
                break;
            }
        if (rc) {
            free(*diff_ids);
            *diff_ids = NULL;
        }
    }
    if (!rc) {
        json_t *cfg = json_object_get(c, "config");
        plan->entrypoint_json = array_text(json_object_get(cfg, "Entrypoint"));
        plan->cmd_json = array_text(json_object_get(cfg, "Cmd"));
        plan->env_json = array_text(json_object_get(cfg, "Env"));
        const char *wd = json_string_value(json_object_get(cfg, "WorkingDir"));
        const char *user = json_string_value(json_object_get(cfg, "User"));
        snprintf(plan->working_dir, sizeof plan->working_dir, "%s", wd ? wd : "");
        snprintf(plan->user, sizeof plan->user, "%s", user ? user : "");
    }
    json_decref(c);
    return rc;
}

/* A blob of the OCI layout by digest, verified. */
static const struct image_blob *oci_blob(const struct image_blobs *blobs, const char *digest,
                                         const char *what, struct image_problem *p)
{
    char name[100];
    snprintf(name, sizeof name, "blobs/sha256/%s", digest + 7);
    const struct image_blob *b = image_blobs_find(blobs, name);
    if (!b) {
        image_fail(p, IMAGE_LAYER_MISSING, "%s %s is not in the archive", what, digest);
        return NULL;
    }
    if (strcmp(b->digest, digest) != 0) {
        image_fail(p, IMAGE_DIGEST_MISMATCH, "%s %s has digest %s", what, digest, b->digest);
        return NULL;
    }
    return b;
}

static int plan_add_layer(struct image_plan *plan, const char *path, struct image_problem *p)
{
    char **grown = realloc(plan->layers, (plan->n_layers + 1) * sizeof *grown);
    if (!grown)
        return image_fail(p, IMAGE_IO_ERROR, "out of memory");
    plan->layers = grown;
    if (!(plan->layers[plan->n_layers] = strdup(path)))
        return image_fail(p, IMAGE_IO_ERROR, "out of memory");
    plan->n_layers++;
    return 0;
}

static int plan_oci(const struct image_blobs *blobs, const struct image_blob *index,
                    struct image_plan *plan, struct image_problem *p)
{
    char manifest_digest[IMAGE_DIGEST_LEN], config[IMAGE_DIGEST_LEN];
    char(*layers)[IMAGE_DIGEST_LEN] = NULL;
    size_t n_layers = 0;
    char *text = image_read_small(index->path, MANIFEST_LIMIT, p);
    const struct image_blob *b;
    int rc = -1;

    /* index.json -> (nested indexes, by platform) -> the image manifest. */
    for (int depth = 0; text && depth < 4; depth++) {
        json_t *j = parse(text, depth ? "a manifest" : "index.json", p);
        const char *mt = j ? json_string_value(json_object_get(j, "mediaType")) : NULL;
        int is_index = j && (depth == 0 || image_media_is_index(mt) ||
                             (!mt && json_object_get(j, "manifests")));
        json_decref(j);
        if (!j)
            break;
        if (!is_index) {
            rc = 0;
            break;
        }
        if (image_pick_platform(text, manifest_digest, p) != 0)
            break;
        free(text);
        text = NULL;
        if ((b = oci_blob(blobs, manifest_digest, "the manifest", p)) != NULL)
            text = image_read_small(b->path, MANIFEST_LIMIT, p);
    }
    if (rc == 0 && text)
        rc = image_manifest_parse(text, config, &layers, &n_layers, p);
    else if (!p->code)
        rc = image_fail(p, IMAGE_BAD_MANIFEST, "index.json leads to no image manifest");
    free(text);
    text = NULL;
    if (!rc && (b = oci_blob(blobs, config, "the config", p)) == NULL)
        rc = -1;
    if (!rc) {
        snprintf(plan->digest, sizeof plan->digest, "%s", config);
        snprintf(plan->config_path, sizeof plan->config_path, "%s", b->path);
        text = image_read_small(b->path, MANIFEST_LIMIT, p);
        rc = text ? image_config_parse(text, n_layers, plan, &plan->diff_ids, p) : -1;
    }
    for (size_t i = 0; !rc && i < n_layers; i++)
        if ((b = oci_blob(blobs, layers[i], "layer", p)) == NULL ||
            plan_add_layer(plan, b->path, p) != 0)
            rc = -1;
    free(text);
    free(layers);
    return rc;
}

/* A docker-archive's path names: relative to the archive root, cleaned of "./". */
static const struct image_blob *docker_entry(const struct image_blobs *blobs, const char *name)
{
    while (name && strncmp(name, "./", 2) == 0)
        name += 2;
    return name ? image_blobs_find(blobs, name) : NULL;
}

static int plan_docker(const struct image_blobs *blobs, const struct image_blob *manifest,
                       struct image_plan *plan, struct image_problem *p)
{
    char *text = image_read_small(manifest->path, MANIFEST_LIMIT, p), *config_text = NULL;
    json_t *m = text ? parse(text, "manifest.json", p) : NULL, *l;
    json_t *first = json_array_get(m, 0);
    json_t *layers = json_object_get(first, "Layers");
    const char *config_name = json_string_value(json_object_get(first, "Config"));
    const struct image_blob *b;
    size_t i;
    int rc = 0;

    free(text);
    if (!m)
        return -1;
    if (!config_name || !json_is_array(layers))
        rc = image_fail(p, IMAGE_BAD_MANIFEST, "manifest.json has no Config and Layers");
    if (!rc && json_array_size(m) != 1)
        rc = image_fail(p, IMAGE_UNSUPPORTED,
                        "manifest.json holds %zu images; an upload must hold one",
                        json_array_size(m));
    if (!rc && !(b = docker_entry(blobs, config_name)))
        rc = image_fail(p, IMAGE_LAYER_MISSING, "the config %.200s is not in the archive",
                        config_name);
    if (!rc) {
        /* A config named by its digest (<hex>.json, or blobs/sha256/<hex>) must match it. */
        const char *base = strrchr(config_name, '/');
        base = base ? base + 1 : config_name;
        if (strlen(base) >= 64 && strspn(base, "0123456789abcdef") == 64 &&
            strncmp(base, b->digest + 7, 64) != 0)
            rc = image_fail(p, IMAGE_DIGEST_MISMATCH, "the config %.200s has digest %s",
                            config_name, b->digest);
    }
    if (!rc) {
        snprintf(plan->digest, sizeof plan->digest, "%s", b->digest);
        snprintf(plan->config_path, sizeof plan->config_path, "%s", b->path);
        config_text = image_read_small(b->path, MANIFEST_LIMIT, p);
        rc = config_text ? image_config_parse(config_text, json_array_size(layers), plan,
                                              &plan->diff_ids, p)
                         : -1;
    }
    if (!rc)
        json_array_foreach(layers, i, l)
        {
            const char *name = json_string_value(l);
            if (!(b = docker_entry(blobs, name))) {
                rc = image_fail(p, IMAGE_LAYER_MISSING, "layer %.200s is not in the archive",
                                name ? name : "(not a string)");
                break;
            }
            if (plan_add_layer(plan, b->path, p) != 0) {
                rc = -1;
                break;
            }
        }
    free(config_text);
    json_decref(m);
    return rc;
}

int image_plan_read(const struct image_blobs *blobs, struct image_plan *plan,
                    struct image_problem *p)
{
    const struct image_blob *b;
    int rc;
    memset(plan, 0, sizeof *plan);
    if ((b = image_blobs_find(blobs, "index.json")) != NULL)
        rc = plan_oci(blobs, b, plan, p);
    else if ((b = image_blobs_find(blobs, "manifest.json")) != NULL)
        rc = plan_docker(blobs, b, plan, p);
    else
        rc = image_fail(p, IMAGE_BAD_MANIFEST,
                        "the archive holds neither index.json (OCI layout) nor manifest.json "
                        "(docker-archive)");
    if (rc)
        image_plan_free(plan);
    return rc;
}
