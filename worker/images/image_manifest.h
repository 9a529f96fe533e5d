/*
 * image_manifest.h: from the blobs of an image (staged from an uploaded archive, or pulled from a
 * registry) to its plan: the config blob, the layers in order, each blob verified against the
 * digest that names it, and the config's run defaults (entrypoint, cmd, env, working dir, user).
 *
 * Blobs are looked up by their name in a struct image_blobs: an archive's entry names
 * ("manifest.json", "<hex>/layer.tar", "blobs/sha256/<hex>"), each with the digest and size that
 * were computed while it was written to disk. Two layouts are understood:
 *   OCI image layout: index.json -> manifest (an index or manifest list picks linux/amd64) ->
 *                     config + layers, every one named "blobs/sha256/<hex>" and verified;
 *   docker-archive:   manifest.json [{Config, Layers}] (what `docker save` writes); the config is
 *                     verified against its "<hex>.json" name.
 * Whatever the source, the plan carries the config's rootfs.diff_ids, and each layer is checked
 * against its diff id as it is applied (importer.h), so an image's digest (its config's) always
 * stands for the layers its config lists.
 */
#ifndef SBX_IMAGE_MANIFEST_H
#define SBX_IMAGE_MANIFEST_H

#include "images/image_digest.h"
#include "images/image_problem.h"

#include <stddef.h>
#include <stdint.h>

struct image_blob {
    char *name; /* entry name, cleaned ("a/b", no "./") */
    char *path; /* where it is on disk */
    char digest[IMAGE_DIGEST_LEN];
    int64_t size;
};

struct image_blobs {
    struct image_blob *items;
    size_t n;
};

/* Adds a blob (copies name and path). Returns 0 or -1 when out of memory. */
int image_blobs_add(struct image_blobs *b, const char *name, const char *path, const char *digest,
                    int64_t size);
const struct image_blob *image_blobs_find(const struct image_blobs *b, const char *name);
void image_blobs_free(struct image_blobs *b);

struct image_plan {
    char digest[IMAGE_DIGEST_LEN]; /* of the config blob: the image's identity */
    char config_path[4096];        /* the config blob on disk */
    char **layers;                 /* layer blob paths, bottom first */
    size_t n_layers;
    /* The config's rootfs.diff_ids, one per layer of the manifest: what each layer's
     * decompressed tar stream must hash to (layer_apply.h checks it as it applies). */
    char (*diff_ids)[IMAGE_DIGEST_LEN];
    /* The config's run defaults as JSON text (NULL when absent) and strings ("" when absent). */
    char *entrypoint_json, *cmd_json, *env_json;
    char working_dir[512];
    char user[128];
};
void image_plan_free(struct image_plan *plan);

/* Reads the layout the blobs hold (index.json first, else manifest.json) into plan. Returns 0,
 * or -1 with the problem (IMAGE_BAD_MANIFEST, IMAGE_LAYER_MISSING, IMAGE_DIGEST_MISMATCH,
 * IMAGE_UNSUPPORTED, ...). */
int image_plan_read(const struct image_blobs *blobs, struct image_plan *plan,
                    struct image_problem *p);

/* The index or manifest list entry for linux/amd64 in an OCI index or Docker manifest list
 * (parsed JSON text), or the only entry of a list without platforms. Writes its digest; returns
 * 0 or -1 with the problem. Used for archives and registries alike. */
int image_pick_platform(const char *index_json, char out[IMAGE_DIGEST_LEN],
                        struct image_problem *p);

/* From a manifest (OCI or Docker schema 2, JSON text): the config digest and the layer digests.
 * *layers is an array of n_layers digests the caller frees. */
int image_manifest_parse(const char *manifest_json, char config[IMAGE_DIGEST_LEN],
                         char (**layers)[IMAGE_DIGEST_LEN], size_t *n_layers,
                         struct image_problem *p);

/* Fills the plan's run defaults from the config blob's JSON and checks that it is a linux
 * image with n_layers diff ids (written to *diff_ids when not NULL; the caller frees). */
int image_config_parse(const char *config_json, size_t n_layers, struct image_plan *plan,
                       char (**diff_ids)[IMAGE_DIGEST_LEN], struct image_problem *p);

/* True for the media types of a multi-platform index (OCI index, Docker manifest list). */
int image_media_is_index(const char *media_type);

/* Reads a small file whole (at most limit bytes); NULL with the problem otherwise. */
char *image_read_small(const char *path, size_t limit, struct image_problem *p);

#endif
