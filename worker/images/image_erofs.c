/*
 * image_erofs.c: builds a digest's rootfs.erofs once (image_erofs.h).
 */
#include "images/image_erofs.h"
#include "images/image_cache.h"
#include "fs.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* The build tool; Debian's erofs-utils installs it in /usr/bin. */
#define MKFS_EROFS "mkfs.erofs"

static bool is_built(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

/* Appends the last line of mkfs.erofs's output (its reason) to err. */
static void append_log_tail(const char *log, char *err, size_t errlen)
{
    char line[512];
    if (fs_last_line(log, line, sizeof line) != 0)
        return;
    size_t used = strlen(err);
    snprintf(err + used, errlen - used, ": %s", line);
}

/* Runs mkfs.erofs tmp rootfs with its output in log. */
static int run_mkfs(const char *tmp, const char *rootfs, const char *log, char *err, size_t errlen)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
    char *const argv[] = {MKFS_EROFS, "--quiet", (char *)tmp, (char *)rootfs, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, MKFS_EROFS, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        snprintf(err, errlen, "cannot run %s (install erofs-utils): %s", MKFS_EROFS, strerror(rc));
        return -1;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            snprintf(err, errlen, "waitpid %s: %s", MKFS_EROFS, strerror(errno));
            return -1;
        }
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(err, errlen, "%s %s failed (status %d)", MKFS_EROFS, rootfs,
                 WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        append_log_tail(log, err, errlen);
        return -1;
    }
    return 0;
}

/* Removes the temporary files of builders that died (holding the lock, nobody else writes one). */
static void remove_stale_temporaries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    size_t plen = strlen(".rootfs.erofs."), slen = strlen(".tmp");
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t n = strlen(e->d_name);
        if (n > plen + slen && strncmp(e->d_name, ".rootfs.erofs.", plen) == 0 &&
            strcmp(e->d_name + n - slen, ".tmp") == 0 && unlinkat(dirfd(d), e->d_name, 0) == 0)
            log_info("images: removed %s/%s, left by a builder that died", dir, e->d_name);
    }
    closedir(d);
}

/* Builds path from rootfs while holding the lock: into a temporary file, then renamed. */
static int build_locked(const char *dir, const char *path, char *err, size_t errlen)
{
    char rootfs[PATH_MAX], tmp[PATH_MAX], log[PATH_MAX];
    snprintf(rootfs, sizeof rootfs, "%.4000s/rootfs", dir);
    snprintf(tmp, sizeof tmp, "%.4000s/.rootfs.erofs.%d.tmp", dir, (int)getpid());
    snprintf(log, sizeof log, "%.4000s/.rootfs.erofs.log", dir);
    remove_stale_temporaries(dir);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (run_mkfs(tmp, rootfs, log, err, errlen) != 0) {
        unlink(tmp);
        return -1;
    }
    int fd = open(tmp, O_RDONLY | O_CLOEXEC);
    int rc = fd >= 0 && fchown(fd, 0, 0) == 0 && fchmod(fd, 0444) == 0 && fsync(fd) == 0 ? 0 : -1;
    if (rc != 0)
        snprintf(err, errlen, "finish %s: %s", tmp, strerror(errno));
    if (fd >= 0)
        close(fd);
    if (rc == 0 && rename(tmp, path) != 0) {
        snprintf(err, errlen, "rename %s to %s: %s", tmp, path, strerror(errno));
        rc = -1;
    }
    if (rc != 0) {
        unlink(tmp);
        return -1;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd); /* the rename survives a crash */
        close(dfd);
    }
    unlink(log);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    log_info("images: built %s in %lld ms", path,
             (long long)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000));
    return 0;
}

int image_erofs_ensure(const struct sbx_config *cfg, const char *digest, char *out, size_t outlen,
                       char *err, size_t errlen)
{
    char dir[PATH_MAX], lock[PATH_MAX];
    if (image_cache_dir(cfg, digest, dir, sizeof dir, err, errlen) != 0)
        return -1;
    if (!image_cache_ready(cfg, digest)) {
        snprintf(err, errlen, "image %s is not in this host's image cache (%s has no ready marker)",
                 digest, dir);
        return -1;
    }
    int n = snprintf(out, outlen, "%s/rootfs.erofs", dir);
    if (n < 0 || (size_t)n >= outlen) {
        snprintf(err, errlen, "image path under %s is too long", dir);
        return -1;
    }
    if (is_built(out))
        return 0;
    snprintf(lock, sizeof lock, "%.4000s/rootfs.erofs.lock", dir);
    int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lfd < 0) {
        snprintf(err, errlen, "open %s: %s", lock, strerror(errno));
        return -1;
    }
    int rc;
    while ((rc = flock(lfd, LOCK_EX)) != 0 && errno == EINTR) {
    }
    if (rc != 0) {
        snprintf(err, errlen, "flock %s: %s", lock, strerror(errno));
    } else if (!is_built(out)) {
        /* Threads of one worker share the process: a second thread waits on its own flock of a
         * separate open file description, so the kernel serialises them like two workers. */
        rc = build_locked(dir, out, err, errlen);
    }
    close(lfd); /* releases the lock */
    return rc;
}
