/*
 * process_image.h: the process driver's root for an App's imported image (images/image_cache.h).
 *
 * The root is an overlay: its lower layer is the cached rootfs/, read-only and shared by every
 * Sandbox of the digest; its upper and work directories are on a tmpfs of the Sandbox, bounded by
 * its memSizeMib, so the root is writable and every change vanishes with the Sandbox while the
 * cache never changes. sbx-agent comes from sbx, never from the image: the static binary of the
 * built-in rootfs, bind-mounted read-only at PROCESS_IMAGE_AGENT on a read-only tmpfs at /.sbx.
 *
 * The image's user (config.json's User, looked up in the image's own /etc/passwd and /etc/group)
 * maps onto the Sandbox's unprivileged uid and gid: when the worker is root, the lower layer is an
 * idmapped mount (mount_setattr MOUNT_ATTR_IDMAP) of the cached tree through a user namespace whose
 * maps swap that uid and gid with the Sandbox's and keep every other id. What the image gives its
 * user, the Sandbox owns (for the usual root image: the whole tree, so every file can be written,
 * in the upper layer); files of other ids keep their owners and are "other" to it. The host's tree
 * keeps its owners. Where the cache's file system cannot idmap (NFS, for one) the tree is used as
 * it is.
 *
 * process_image_prepare() runs in the worker before clone(); process_image_mount()
 * (drivers/process_child.h) runs in sbx-process-init, in the Sandbox's own mount namespace, before
 * pivot_root; process_image_release() closes what prepare opened once the child exists.
 */
#ifndef SBX_PROCESS_IMAGE_H
#define SBX_PROCESS_IMAGE_H

#include "config.h"
#include "store_records.h"

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Where the Sandbox finds its init when its root is an image. */
#define PROCESS_IMAGE_AGENT "/.sbx/sbx-agent"

struct process_image_plan {
    bool enabled; /* false: the built-in rootfs (bind-mounted read-only, as before images) */
    char root[PATH_MAX];
    char rw_options[64]; /* the writable layer's tmpfs: size=<memSizeMib>m */
    char upper[PATH_MAX + 16];
    char work[PATH_MAX + 16];
    char overlay_options[3 * PATH_MAX + 64];
    /* The idmapped lower layer: the cache's tree cloned (lower_src) and mounted at lower_mount,
     * through the user namespace userns_fd (-1: no mapping, lowerdir is the tree itself). */
    int userns_fd;
    char lower_src[PATH_MAX + 16];
    char lower_mount[PATH_MAX + 16];
    char plain_overlay_options[3 * PATH_MAX + 64];
    char agent[PATH_MAX];                /* host path of the static sbx-agent */
    char sbx_dir[PATH_MAX + 16];         /* <root>/.sbx */
    char sbx_agent[PATH_MAX + 32];       /* <root>/.sbx/sbx-agent */
    char mount_points[5][PATH_MAX + 16]; /* <root>/{tmp,proc,dev,workspace,.sbx} */
};

/* Plans the root of a Sandbox of shape at root (<jail>/root) when shape->image is a digest: the
 * digest must be complete in this host's cache. default_rootfs is the built-in rootfs whose
 * /usr/bin/sbx-agent the Sandbox runs. When map_ids (a root worker), the image's user maps onto
 * sandbox_uid:sandbox_gid. Writes the digest to image_hash. For "default" it only sets
 * plan->enabled = false. Returns 0, or -1 with a reason (nothing left open). */
int process_image_prepare(const struct sbx_config *cfg, const struct store_shape *shape,
                          const char *root, const char *default_rootfs, bool map_ids,
                          uid_t sandbox_uid, gid_t sandbox_gid, struct process_image_plan *plan,
                          char *image_hash, size_t hashlen, char *err, size_t errlen);

/* Closes the plan's user namespace descriptor (idempotent). */
void process_image_release(struct process_image_plan *plan);

#endif
