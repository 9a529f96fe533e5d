/*
 * workspace_fs.c: a Workspace's ext4 image, its loop device and its mount (see workspace_fs.h).
 *
 * The loop device is configured with LO_FLAGS_AUTOCLEAR: it detaches by itself when the last
 * mount of the filesystem goes, so an unmount is all that removal takes and no loop device is
 * left behind by a crash. LOOP_CONFIGURE (Linux 5.8) binds the image and sets the flags in one
 * call; a free device found by LOOP_CTL_GET_FREE may be taken by another process before that
 * call (EBUSY), so the search is retried.
 */
#include "workspace_fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/loop.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define LOOP_MAJOR 7
/* How often a free loop device is looked for when others take it first. */
#define LOOP_ATTEMPTS 16

static void image_path(const char *dir, char *out, size_t len)
{
    snprintf(out, len, "%s.img", dir);
}

/* True when dir is the root of a mount (another device than its parent's). */
static int is_mounted(const char *dir)
{
    char parent[PATH_MAX];
    struct stat a, b;
    snprintf(parent, sizeof parent, "%s/..", dir);
    if (stat(dir, &a) != 0 || stat(parent, &b) != 0)
        return -1;
    return a.st_dev != b.st_dev;
}

/* Runs mkfs.ext4 on path; 0 when it succeeded. */
static int make_filesystem(const char *path, uid_t uid, gid_t gid, char *err, size_t errlen)
{
    char extended[96];
    /* root_owner: the Workspace's root belongs to the Sandbox user; lazy init: the kernel zeroes
     * inode tables in the background instead of mkfs writing the whole image now. */
    snprintf(extended, sizeof extended, "root_owner=%u:%u,lazy_itable_init=1,lazy_journal_init=1",
             (unsigned)uid, (unsigned)gid);
    char *argv[] = {"mkfs.ext4",  "-q",     "-F", "-m",
                    "0", /* no blocks for root */
                    "-E",         extended, "-L", "sbx-workspace",
                    (char *)path, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, "mkfs.ext4", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        snprintf(err, errlen, "cannot run mkfs.ext4 (e2fsprogs): %s", strerror(rc));
        return -1;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(err, errlen, "mkfs.ext4 %s failed (status %d)", path, status);
        return -1;
    }
    return 0;
}

/* Binds image_fd to a free loop device; its path in dev. Returns the device's fd, or -1. */
static int attach_loop(int image_fd, char *dev, size_t devlen, char *err, size_t errlen)
{
    int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (ctl < 0) {
        snprintf(err, errlen, "open /dev/loop-control: %s", strerror(errno));
        return -1;
    }
    int fd = -1;
    for (int attempt = 0; attempt < LOOP_ATTEMPTS && fd < 0; attempt++) {
        int n = ioctl(ctl, LOOP_CTL_GET_FREE);
        if (n < 0) {
            snprintf(err, errlen, "no free loop device: %s", strerror(errno));
            break;
        }
        snprintf(dev, devlen, "/dev/loop%d", n);
        /* Without udev (a container's /dev) the node may be missing. */
        if (mknod(dev, S_IFBLK | 0600, makedev(LOOP_MAJOR, n)) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "mknod %s: %s", dev, strerror(errno));
            break;
        }
        fd = open(dev, O_RDWR | O_CLOEXEC);
        if (fd < 0) {
            snprintf(err, errlen, "open %s: %s", dev, strerror(errno));
            break;
        }
        struct loop_config config = {.fd = (__u32)image_fd};
        config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
        if (ioctl(fd, LOOP_CONFIGURE, &config) != 0) {
            int e = errno;
            close(fd);
            fd = -1;
            if (e == EBUSY)
                continue; /* taken meanwhile: look again */
            snprintf(err, errlen, "LOOP_CONFIGURE %s: %s", dev, strerror(e));
            break;
        }
    }
    if (fd < 0 && !err[0])
        snprintf(err, errlen, "no free loop device after %d attempts", LOOP_ATTEMPTS);
    close(ctl);
    return fd;
}

/* Mounts the image on dir; the caller holds the image's lock. The loop device gets an open file
 * of its own: it keeps its backing file open while it is bound, and a lock held through that file
 * would never be released. */
static int mount_locked(const char *dir, const char *image, char *err, size_t errlen)
{
    char dev[64];
    err[0] = '\0';
    int image_fd = open(image, O_RDWR | O_CLOEXEC);
    if (image_fd < 0) {
        snprintf(err, errlen, "open %s: %s", image, strerror(errno));
        return -1;
    }
    int loop = attach_loop(image_fd, dev, sizeof dev, err, errlen);
    close(image_fd); /* the loop device holds its own reference */
    if (loop < 0)
        return -1;
    int rc = mount(dev, dir, "ext4", MS_NOSUID | MS_NODEV, "errors=remount-ro");
    if (rc != 0)
        snprintf(err, errlen, "mount %s on %s: %s", dev, dir, strerror(errno));
    /* Mounted: the mount holds the device. Not mounted: closing it detaches it (autoclear). */
    close(loop);
    return rc == 0 ? 0 : -1;
}

/* Opens the image and takes its lock (the lock's own open file, never given to a loop device). */
static int lock_image(const char *image, int flags, char *err, size_t errlen)
{
    int fd = open(image, flags | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (errno != ENOENT || !(flags & O_CREAT))
            snprintf(err, errlen, "open %s: %s", image, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX) != 0) {
        snprintf(err, errlen, "lock %s: %s", image, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* True when dir has no entry but . and .. (-1: cannot tell). */
static int is_empty_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int empty = 1;
    struct dirent *e;
    while (empty && (e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            empty = 0;
    closedir(d);
    return empty;
}

/* Makes the image under a name of its own and links it into place: two processes making it at
 * once never see each other's half-made file, and the first link wins (EEXIST for the other). */
static int make_image(const char *image, int64_t size_mib, uid_t uid, gid_t gid, char *err,
                      size_t errlen)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.new.%d.%ld", image, (int)getpid(), (long)syscall(SYS_gettid));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "create %s: %s", tmp, strerror(errno));
        return -1;
    }
    int rc = -1;
    if (ftruncate(fd, (off_t)size_mib * 1024 * 1024) != 0)
        snprintf(err, errlen, "size %s: %s", tmp, strerror(errno));
    else if (make_filesystem(tmp, uid, gid, err, errlen) == 0) {
        if (link(tmp, image) == 0 || errno == EEXIST)
            rc = 0;
        else
            snprintf(err, errlen, "link %s: %s", image, strerror(errno));
    }
    close(fd);
    unlink(tmp);
    return rc;
}

int workspace_fs_ensure(const char *dir, int64_t size_mib, uid_t uid, gid_t gid, char *err,
                        size_t errlen)
{
    char image[PATH_MAX];
    image_path(dir, image, sizeof image);
    if (access(image, F_OK) != 0) {
        /* No size (a Workspace from before sizes), or files already there that a mount would
         * hide: it stays a plain directory. */
        if (size_mib <= 0 || is_empty_dir(dir) != 1)
            return 0;
        if (make_image(image, size_mib, uid, gid, err, errlen) != 0)
            return -1;
    }
    int fd = lock_image(image, 0, err, errlen);
    if (fd < 0)
        return -1;
    int mounted = is_mounted(dir);
    int rc = 0;
    if (mounted < 0) {
        snprintf(err, errlen, "stat %s: %s", dir, strerror(errno));
        rc = -1;
    } else if (!mounted && (rc = mount_locked(dir, image, err, errlen)) == 0) {
        /* mkfs makes the root 0755 (owned by uid:gid); a Workspace directory is 0770. */
        struct stat st;
        if (stat(dir, &st) == 0 && (st.st_mode & 07777) == 0755 && chmod(dir, 0770) != 0) {
            snprintf(err, errlen, "chmod %s: %s", dir, strerror(errno));
            umount2(dir, MNT_DETACH);
            rc = -1;
        }
    }
    close(fd);
    return rc;
}

int workspace_fs_remove(const char *dir, char *err, size_t errlen)
{
    char image[PATH_MAX];
    image_path(dir, image, sizeof image);
    int fd = lock_image(image, 0, err, errlen);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    int rc = 0;
    while (is_mounted(dir) == 1)
        if (umount2(dir, MNT_DETACH) != 0) {
            snprintf(err, errlen, "unmount %s: %s", dir, strerror(errno));
            rc = -1;
            break;
        }
    if (rc == 0 && unlink(image) != 0 && errno != ENOENT) {
        snprintf(err, errlen, "remove %s: %s", image, strerror(errno));
        rc = -1;
    }
    close(fd);
    return rc;
}
