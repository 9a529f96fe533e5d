/*
 * workspace_disk.c: the Workspaces' budget on the data filesystem (workspace_disk.h).
 */
#include "workspace_disk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define MIB (1024 * 1024)

/* The bytes the images in one App's folder (a directory fd, taken over) hold on device dev. */
static int64_t images_allocated(int dirfd, dev_t dev)
{
    DIR *d = fdopendir(dirfd);
    struct dirent *e;
    int64_t bytes = 0;
    if (!d) {
        close(dirfd);
        return 0;
    }
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        struct stat st;
        if (len < 5 || strcmp(e->d_name + len - 4, ".img") != 0)
            continue;
        if (fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
            st.st_dev != dev)
            continue;
        int64_t used = (int64_t)st.st_blocks * 512;
        bytes += used < (int64_t)st.st_size ? used : (int64_t)st.st_size;
    }
    closedir(d);
    return bytes;
}

int workspace_disk_budget(const char *data_dir, int64_t reserve_mib, int64_t *budget_mib, char *err,
                          size_t errlen)
{
    char path[1024];
    struct statvfs vfs;
    struct stat root;
    int64_t held = 0;

    snprintf(path, sizeof path, "%s/workspaces", data_dir);
    /* Followed if it is a symlink: an operator may put the Workspaces on a disk of their own. */
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        fd = open(data_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fstatvfs(fd, &vfs) != 0 || fstat(fd, &root) != 0) {
        snprintf(err, errlen, "cannot read the free space of %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    DIR *apps = fdopendir(fd);
    if (!apps) {
        close(fd);
        snprintf(err, errlen, "cannot list %s: %s", path, strerror(errno));
        return -1;
    }
    /* data_dir itself (no workspaces/ yet) holds no images: only app_* folders are looked in. */
    struct dirent *e;
    while ((e = readdir(apps))) {
        if (strncmp(e->d_name, "app_", 4) != 0)
            continue;
        int app = openat(dirfd(apps), e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (app >= 0)
            held += images_allocated(app, root.st_dev);
    }
    closedir(apps);
    int64_t free_bytes = (int64_t)vfs.f_bavail * (int64_t)vfs.f_frsize;
    int64_t budget = (free_bytes + held) / MIB - reserve_mib;
    *budget_mib = budget > 0 ? budget : 0;
    return 0;
}
