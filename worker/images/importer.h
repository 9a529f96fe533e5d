/*
 * importer.h: imports one image into the per-host cache (image_cache.h), from an uploaded archive
 * (docker-archive or OCI image layout, as a tar, possibly gzip- or zstd-compressed) or from blobs
 * a registry pull staged (registry_pull.h).
 *
 * An import works in <data_dir>/images/tmp/<work id>/ (its blobs, then the tree), and publishes
 * by renaming the finished <digest>/ directory, `ready` marker included, into
 * <data_dir>/images/sha256/, so a cache directory is either whole or absent. An image whose digest
 * is already ready is not unpacked again. On failure the work directory is removed and nothing
 * else on the host has changed. Runs on a job thread: it touches no worker state and no store.
 */
#ifndef SBX_IMPORTER_H
#define SBX_IMPORTER_H

#include "config.h"
#include "images/image_digest.h"
#include "images/image_manifest.h"
#include "images/image_problem.h"

#include <stdbool.h>
#include <stdint.h>

struct import_result {
    struct image_problem problem; /* problem.code NULL: imported */
    char digest[IMAGE_DIGEST_LEN];
    char manifest_digest[IMAGE_DIGEST_LEN]; /* a pull's image manifest ("" for an upload) */
    int64_t layer_count;
    int64_t unpacked_bytes;
    bool reused;                    /* the digest was in the cache already: nothing was unpacked */
    int64_t stage_ms, apply_ms;     /* time spent staging (and verifying) blobs, applying layers */
    int64_t xattrs, xattrs_dropped; /* extended attributes kept and left out (layer_apply.h) */
    char *entrypoint_json, *cmd_json, *env_json; /* NULL when the image has none */
    char working_dir[512];
    char user[128];
};
void import_result_clear(struct import_result *r);

/* The work directory of an import: <data_dir>/images/tmp/<work_id>. */
int import_work_dir(const struct sbx_config *cfg, const char *work_id, char *out, size_t outlen);

/* Imports the archive at archive_path; work_id (an Image id) names its work directory. The
 * archive's entries are limited to cfg->image_upload_limit bytes, the tree to
 * cfg->image_unpacked_limit. Returns 0, or -1 with res->problem. */
int import_archive(const struct sbx_config *cfg, const char *work_id, const char *archive_path,
                   struct import_result *res);

/* Unpacks a plan (blobs already staged and verified) and publishes it; what import_archive and
 * the registry pull share. */
int import_plan(const struct sbx_config *cfg, const char *work_dir, const struct image_plan *plan,
                struct import_result *res);

/* Removes a directory tree without following links (for work directories and eviction). */
int import_remove_tree(const char *path);

#endif
