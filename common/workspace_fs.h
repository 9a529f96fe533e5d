/*
 * workspace_fs.h: a Workspace as a filesystem of its own: an ext4 image of the Workspace's size
 * (sizeMib) next to its directory, loop-mounted on the directory. The directory stays the
 * Workspace's path for everything else (the process driver's bind mount, the NFS export), and
 * the filesystem enforces the size: a full Workspace is ENOSPC for its Sandboxes and for nothing
 * else on the host (the store's disk included), and an NFS file handle of one Workspace can never
 * name a file of another.
 *
 *   <data_dir>/workspaces/<appId>/<workspaceId>      the mount point (the Workspace's path)
 *   <data_dir>/workspaces/<appId>/<workspaceId>.img  its filesystem (sparse: takes what is used)
 *
 * The gateway makes and mounts the image when the Workspace is created and unmounts and removes
 * it when it is deleted; a worker mounts it again before attaching when it is not mounted (after a
 * host restart). Mounts are serialised by an exclusive flock on the image, so two processes never
 * mount one image twice. A Workspace without an image (made before sizes existed) is a plain
 * directory. Needs root (loop devices, mount); e2fsprogs' mkfs.ext4.
 */
#ifndef SBX_WORKSPACE_FS_H
#define SBX_WORKSPACE_FS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The sizes a Workspace may have (MiB): ext4 needs a few MiB for itself. */
#define WORKSPACE_MIN_MIB 16
#define WORKSPACE_MAX_MIB 1048576

/* Makes <dir>.img of size_mib MiB (ext4, root directory owned by uid:gid, mode 0770) and mounts
 * it on dir (which must exist). 0, or -1 with the reason (nothing left behind). */
int workspace_fs_create(const char *dir, int64_t size_mib, uid_t uid, gid_t gid, char *err,
                        size_t errlen);
/* Mounts <dir>.img on dir unless it is mounted already; 0 also when dir has no image. */
int workspace_fs_mount(const char *dir, char *err, size_t errlen);
/* Unmounts dir (lazily: a Sandbox may still hold it) and removes <dir>.img; idempotent. */
int workspace_fs_remove(const char *dir, char *err, size_t errlen);

#endif
