/*
 * fs.c: making directories with their parents, removing trees by directory fds and reading a
 * log's last line (fs.h). No hidden state.
 */
#include "fs.h"
#include "log.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int fs_mkdir_p(const char *path, mode_t mode)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, mode) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(tmp, mode) != 0 && errno != EEXIST ? -1 : 0;
}

int fs_last_line(const char *path, char *out, size_t outlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    off_t size = lseek(fd, 0, SEEK_END);
    off_t window = (off_t)outlen - 1;
    ssize_t n = size > 0 ? pread(fd, out, (size_t)window, size > window ? size - window : 0) : 0;
    close(fd);
    if (n <= 0)
        return -1;
    out[n] = '\0';
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r'))
        out[--n] = '\0';
    char *nl = strrchr(out, '\n');
    if (nl)
        memmove(out, nl + 1, strlen(nl + 1) + 1);
    return out[0] ? 0 : -1;
}

/* Passes over the tree before giving up: entries moved by a concurrent writer during one pass
 * (renamed into a directory already walked) are found by the next. */
#define REMOVE_PASSES 8

struct tree_walk {
    int failures;    /* entries that could not be removed this pass */
    int first_errno; /* and why, for the first one */
    bool too_deep;
};

static void walk_fail(struct tree_walk *w, int err)
{
    if (w->failures++ == 0)
        w->first_errno = err;
}

/* The subdirectory name of dirfd, opened for reading, never through a symlink or into another
 * mount: -1 with errno ELOOP (a symlink), ENOTDIR (not a directory), EXDEV (a mount point)... */
static int open_beneath(int dirfd, const char *name)
{
    struct open_how how = {
        .flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV,
    };
    int fd = (int)syscall(SYS_openat2, dirfd, name, &how, sizeof how);
    if (fd < 0 && errno == ENOSYS) {
        /* Kernels before 5.6: one path component with O_NOFOLLOW cannot leave dirfd either;
         * a mount point is then checked by its device. */
        struct stat parent, child;
        fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0 && (fstat(dirfd, &parent) != 0 || fstat(fd, &child) != 0 ||
                        parent.st_dev != child.st_dev)) {
            close(fd);
            errno = EXDEV;
            return -1;
        }
    }
    return fd;
}

/* Removes what dirfd holds; dirfd stays open (the caller's). */
static void remove_contents(int dirfd, int depth, struct tree_walk *w)
{
    int listfd = dup(dirfd);
    DIR *d = listfd >= 0 ? fdopendir(listfd) : NULL;
    struct dirent *e;

    if (!d) {
        walk_fail(w, errno);
        if (listfd >= 0)
            close(listfd);
        return;
    }
    rewinddir(d);
    while ((errno = 0, e = readdir(d))) {
        const char *name = e->d_name;
        struct stat st;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            continue;
        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno != ENOENT)
                walk_fail(w, errno);
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            /* A file, a symlink (removed as a link, never followed), a socket... If it became a
             * directory meanwhile, EISDIR: the next pass sees it as one. */
            if (unlinkat(dirfd, name, 0) != 0 && errno != ENOENT)
                walk_fail(w, errno);
            continue;
        }
        if (depth >= FS_REMOVE_MAX_DEPTH) {
            w->too_deep = true;
            walk_fail(w, ELOOP);
            continue;
        }
        int sub = open_beneath(dirfd, name);
        if (sub < 0) {
            if (errno == ELOOP || errno == ENOTDIR) {
                /* Swapped for a symlink or a file since fstatat(): remove that, as a link. */
                if (unlinkat(dirfd, name, 0) != 0 && errno != ENOENT)
                    walk_fail(w, errno);
            } else if (errno != ENOENT) {
                walk_fail(w, errno); /* EXDEV: something is mounted there; leave it */
            }
            continue;
        }
        remove_contents(sub, depth + 1, w);
        close(sub);
        if (unlinkat(dirfd, name, AT_REMOVEDIR) != 0) {
            /* The name now holds something else (the directory we emptied was exchanged for a
             * symlink, which is removed as a link); or the directory is not empty yet. */
            if (errno == ENOTDIR) {
                if (unlinkat(dirfd, name, 0) != 0 && errno != ENOENT)
                    walk_fail(w, errno);
            } else if (errno != ENOENT) {
                walk_fail(w, errno);
            }
        }
    }
    if (errno != 0)
        walk_fail(w, errno);
    closedir(d);
}

int fs_remove_tree(const char *path)
{
    char parent[PATH_MAX];
    const char *slash = strrchr(path, '/'), *base;
    struct tree_walk w = {0};
    int parentfd, top;

    if (!slash || slash[1] == '\0' || (size_t)(slash - path) >= sizeof parent) {
        errno = EINVAL;
        return -1;
    }
    base = slash + 1;
    if (slash == path)
        snprintf(parent, sizeof parent, "/");
    else
        snprintf(parent, sizeof parent, "%.*s", (int)(slash - path), path);
    /* The components of path itself belong to sbx; only what is under it is untrusted. */
    parentfd = open(parent, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (parentfd < 0)
        return errno == ENOENT ? 0 : -1;
    for (int pass = 0; pass < REMOVE_PASSES; pass++) {
        w = (struct tree_walk){0};
        top = open_beneath(parentfd, base);
        if (top < 0) {
            if (errno == ENOENT)
                break;
            if (errno == ELOOP || errno == ENOTDIR) {
                /* The top itself is not a directory: remove the link or file, nothing under. */
                if (unlinkat(parentfd, base, 0) != 0 && errno != ENOENT)
                    walk_fail(&w, errno);
                continue;
            }
            walk_fail(&w, errno);
            break;
        }
        remove_contents(top, 0, &w);
        close(top);
        if (unlinkat(parentfd, base, AT_REMOVEDIR) == 0 || errno == ENOENT) {
            w.failures = 0;
            break;
        }
        if (errno != ENOTEMPTY && errno != EEXIST) {
            walk_fail(&w, errno);
            break;
        }
        if (w.too_deep)
            break;
    }
    close(parentfd);
    if (w.failures == 0 && faccessat(AT_FDCWD, path, F_OK, AT_SYMLINK_NOFOLLOW) != 0)
        return 0;
    log_warn("cannot remove all of %s: %d entries left%s%s%s", path,
             w.failures > 0 ? w.failures : 1, w.too_deep ? " (deeper than the removal goes)" : "",
             w.first_errno ? ": " : "", w.first_errno ? strerror(w.first_errno) : "");
    errno = w.too_deep ? ELOOP : w.first_errno == EXDEV ? EXDEV : ENOTEMPTY;
    return -1;
}
