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
 * A gateway with root makes and mounts the image when the Workspace is created; otherwise (the
 * systemd unit runs it as a user without devices) the first worker to attach the Workspace makes
 * it. A worker mounts it again before attaching when it is not mounted (after a host restart).
 * Removal: the gateway when it can, else the workers' reconciliation of deleted Workspaces' mounts
 * (worker/recovery/workspace_mounts.c). Mounts are serialised by an exclusive flock on the image,
 * so two processes never mount one image twice. A Workspace without a size (made before sizes
 * existed) is a plain directory. Needs root (loop devices, mount); e2fsprogs' mkfs.ext4.
 */
#ifndef SBX_WORKSPACE_FS_H
#define SBX_WORKSPACE_FS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The sizes a Workspace may have (MiB): ext4 needs a few MiB for itself. */
#define WORKSPACE_MIN_MIB 16
#define WORKSPACE_MAX_MIB 1048576

/* Makes sure dir is the Workspace's filesystem: mounts <dir>.img on it unless it is mounted,
 * first making the image (size_mib MiB of ext4, root directory uid:gid, mode 0770) when there is
 * none, size_mib > 0 and dir is empty. 0 also when dir stays a plain directory (no size, or files
 * there that a mount would hide). */
int workspace_fs_ensure(const char *dir, int64_t size_mib, uid_t uid, gid_t gid, char *err,
                        size_t errlen);
/* Unmounts dir (lazily: a Sandbox may still hold it) and removes <dir>.img; idempotent. */
int workspace_fs_remove(const char *dir, char *err, size_t errlen);

#endif
