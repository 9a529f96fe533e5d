/*
 * image_cache.h: where an App's image lives on a worker host, by digest.
 *
 * An App's image is either the built-in rootfs ("default", STORE_IMAGE_DEFAULT) or an imported
 * OCI image named by its digest, "sha256:<64 hex>" (the digest of the image's config blob, which
 * is the same whichever archive format or registry brought the image). Each imported image is
 * one directory of the per-host cache:
 *
 *   <data_dir>/images/sha256/<hex>/rootfs/        the layers applied in order (owned as in the
 *                                                 image; never written once `ready` exists)
 *   <data_dir>/images/sha256/<hex>/config.json    the image's config blob, byte for byte
 *   <data_dir>/images/sha256/<hex>/ready          present once rootfs/ and config.json are whole
 *   <data_dir>/images/sha256/<hex>/rootfs.erofs   read-only block image for microVM drivers,
 *                                                 made once per digest on first use
 *
 * Nothing here touches the store: the importer fills the cache, drivers read it.
 */
#ifndef SBX_IMAGE_CACHE_H
#define SBX_IMAGE_CACHE_H

#include "config.h"

#include <stdbool.h>
#include <stddef.h>

#define STORE_IMAGE_DEFAULT "default"

/* True when `image` names the built-in rootfs rather than an imported digest. */
bool image_is_default(const char *image);

/* Writes the cache directory of digest "sha256:<hex>" to out. Returns 0, or -1 with a reason
 * when the digest is malformed (it must be exactly "sha256:" and 64 lowercase hex digits, so that
 * no digest can name a path outside the cache) or the path does not fit. */
int image_cache_dir(const struct sbx_config *cfg, const char *digest, char *out, size_t outlen,
                    char *err, size_t errlen);

/* True when the digest's directory is complete (its `ready` marker exists). */
bool image_cache_ready(const struct sbx_config *cfg, const char *digest);

#endif
