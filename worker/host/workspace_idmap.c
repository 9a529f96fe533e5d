/*
 * workspace_idmap.c: idmapped Workspace bind mounts (see workspace_idmap.h).
 *
 * An idmapped mount takes its mapping from a user namespace: on-disk id k is shown as what k maps
 * to in that namespace's uid_map ("k uid 1"). The namespace is made by a short-lived child (a
 * raw clone with CLONE_NEWUSER, as the process driver clones: safe in a threaded worker), whose
 * maps this process writes as root; the mount keeps the namespace alive after the child is gone.
 * Then open_tree(OPEN_TREE_CLONE) detaches a copy of host_dir, mount_setattr(MOUNT_ATTR_IDMAP)
 * maps it, and move_mount() puts it on the target.
 */
#include "host/workspace_idmap.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
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

static int write_text(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    int saved = errno;
    close(fd);
    errno = saved;
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* A user namespace mapping disk ids to the Sandbox's ids; its fd, or -1. */
static int mapping_namespace(uid_t disk_uid, gid_t disk_gid, uid_t uid, gid_t gid, char *err,
                             size_t errlen)
{
    int hold[2];
    if (pipe2(hold, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, 0);
    if (pid == 0) {
        char c;
        close(hold[1]);
        ssize_t ignored = read(hold[0], &c, 1); /* until the parent has the namespace */
        (void)ignored;
        _exit(0);
    }
    close(hold[0]);
    if (pid < 0) {
        snprintf(err, errlen, "clone(CLONE_NEWUSER): %s", strerror(errno));
        close(hold[1]);
        return -1;
    }
    char path[64], map[64];
    int fd = -1;
    snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
    snprintf(map, sizeof map, "%u %u 1\n", (unsigned)disk_uid, (unsigned)uid);
    if (write_text(path, map) != 0) {
        snprintf(err, errlen, "write %s: %s", path, strerror(errno));
        goto out;
    }
    snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
    snprintf(map, sizeof map, "%u %u 1\n", (unsigned)disk_gid, (unsigned)gid);
    if (write_text(path, map) != 0) {
        snprintf(err, errlen, "write %s: %s", path, strerror(errno));
        goto out;
    }
    snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        snprintf(err, errlen, "open %s: %s", path, strerror(errno));
out:
    close(hold[1]);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    return fd;
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
