/*
 * image_erofs.h: the read-only block image of an imported image, for the microVM drivers.
 *
 * <cache dir>/rootfs.erofs (image_cache.h) is made from rootfs/ once per digest, on first use, by
 * Debian's mkfs.erofs (erofs-utils): uncompressed (TCG guests pay for every decompressed byte),
 * owners, modes, links and xattrs as in the tree. Builders on one host (or on several sharing the
 * cache) serialise on an flock of <cache dir>/rootfs.erofs.lock; the file is written under a
 * temporary name and renamed into place, so a reader never sees half an image. It ends root-owned
 * and mode 0444, so a hard link of it in a jail is read-only to the VMM.
 */
#ifndef SBX_IMAGE_EROFS_H
#define SBX_IMAGE_EROFS_H

#include "config.h"

#include <stddef.h>

/* Writes the path of digest's rootfs.erofs to out, building it first when it is absent (this
 * blocks for as long as mkfs.erofs runs, or another builder holds the lock). The digest must be
 * ready in the cache. Returns 0, or -1 with a reason. */
int image_erofs_ensure(const struct sbx_config *cfg, const char *digest, char *out, size_t outlen,
                       char *err, size_t errlen);

#endif
