/*
 * workspace_idmap.c: idmapped Workspace bind mounts (see workspace_idmap.h).
 *
 * An idmapped mount takes its mapping from a user namespace: on-disk id k is shown as what k maps
 * to in that namespace's uid_map ("k uid 1"; host/userns_map.h makes the namespace); the mount
 * keeps the namespace alive after its descriptor is closed.
 * Then open_tree(OPEN_TREE_CLONE) detaches a copy of host_dir, mount_setattr(MOUNT_ATTR_IDMAP)
 * maps it, and move_mount() puts it on the target.
 */
#include "host/workspace_idmap.h"
#include "host/userns_map.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* From linux/mount.h, which conflicts with glibc's sys/mount.h. */
#define SBX_OPEN_TREE_CLONE 1
#define SBX_MOUNT_ATTR_IDMAP 0x00100000
#define SBX_MOVE_MOUNT_F_EMPTY_PATH 0x00000004
struct sbx_mount_attr {
    uint64_t attr_set;
    uint64_t attr_clr;
    uint64_t propagation;
    uint64_t userns_fd;
};

/* A user namespace mapping disk ids to the Sandbox's ids; its fd, or -1. */
static int mapping_namespace(uid_t disk_uid, gid_t disk_gid, uid_t uid, gid_t gid, char *err,
                             size_t errlen)
{
    char uid_map[64], gid_map[64];
    snprintf(uid_map, sizeof uid_map, "%u %u 1\n", (unsigned)disk_uid, (unsigned)uid);
    snprintf(gid_map, sizeof gid_map, "%u %u 1\n", (unsigned)disk_gid, (unsigned)gid);
    return userns_map_open(uid_map, gid_map, err, errlen);
}

int workspace_idmap_mount(const char *host_dir, const char *target, uid_t disk_uid, gid_t disk_gid,
                          uid_t uid, gid_t gid, char *err, size_t errlen)
{
    int userns = mapping_namespace(disk_uid, disk_gid, uid, gid, err, errlen);
    if (userns < 0)
        return -1;
    int rc = -1;
    int tree = (int)syscall(SYS_open_tree, AT_FDCWD, host_dir, SBX_OPEN_TREE_CLONE | O_CLOEXEC);
    if (tree < 0) {
        snprintf(err, errlen, "open_tree %s: %s", host_dir, strerror(errno));
        goto out;
    }
    struct sbx_mount_attr attr = {.attr_set = SBX_MOUNT_ATTR_IDMAP, .userns_fd = (uint64_t)userns};
    if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) {
        snprintf(err, errlen, "idmap %s (its filesystem must support idmapped mounts): %s",
                 host_dir, strerror(errno));
        goto out;
    }
    if (syscall(SYS_move_mount, tree, "", AT_FDCWD, target, SBX_MOVE_MOUNT_F_EMPTY_PATH) != 0) {
        snprintf(err, errlen, "move_mount %s on %s: %s", host_dir, target, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (tree >= 0)
        close(tree);
    close(userns);
    return rc;
}
