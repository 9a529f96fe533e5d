/*
 * commit_watermark.c: the shared counters of commit_watermark.h in a mapped file. Three 64-bit
 * atomics on one page; sequentially consistent, as the gateway's and a worker's orders rely on it.
 */
#include "commit_watermark.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct shared {
    _Atomic uint64_t written;
    _Atomic uint64_t durable;
    _Atomic int64_t waiters;
};

struct commit_watermark {
    struct shared *sh;
};

struct commit_watermark *commit_watermark_open(const char *run_dir, bool create, char *err,
                                               size_t errlen)
{
    char path[700];
    snprintf(path, sizeof path, "%.600s/commit-watermark", run_dir);
    int fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
    if (fd < 0) {
        if (!create && errno == ENOENT)
            err[0] = '\0';
        else
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat s;
    if (fstat(fd, &s) != 0 || (s.st_size < (off_t)sizeof(struct shared) &&
                               (!create || ftruncate(fd, sizeof(struct shared)) != 0))) {
        snprintf(err, errlen, "%s: %s", path, errno ? strerror(errno) : "too short");
        close(fd);
        return NULL;
    }
    void *map = mmap(NULL, sizeof(struct shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    struct commit_watermark *wm = map == MAP_FAILED ? NULL : malloc(sizeof *wm);
    if (!wm) {
        snprintf(err, errlen, "%s: cannot map it", path);
        if (map != MAP_FAILED)
            munmap(map, sizeof(struct shared));
        return NULL;
    }
    wm->sh = map;
    return wm;
}

void commit_watermark_close(struct commit_watermark *wm)
{
    if (!wm)
        return;
    munmap(wm->sh, sizeof(struct shared));
    free(wm);
}

uint64_t commit_watermark_begin(struct commit_watermark *wm)
{
    return atomic_fetch_add(&wm->sh->written, 1) + 1;
}

bool commit_watermark_durable(struct commit_watermark *wm, uint64_t g)
{
    uint64_t cur = atomic_load(&wm->sh->durable);
    while (cur < g && !atomic_compare_exchange_weak(&wm->sh->durable, &cur, g))
        ;
    return atomic_load(&wm->sh->waiters) > 0;
}

uint64_t commit_watermark_written(const struct commit_watermark *wm)
{
    return atomic_load(&wm->sh->written);
}

bool commit_watermark_reached(const struct commit_watermark *wm, uint64_t g)
{
    return atomic_load(&wm->sh->durable) >= g;
}

void commit_watermark_waiting(struct commit_watermark *wm, int delta)
{
    atomic_fetch_add(&wm->sh->waiters, delta);
}

int commit_watermark_sync_wal(const char *db_path)
{
    char path[4200];
    snprintf(path, sizeof path, "%.4000s-wal", db_path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1; /* no WAL: nothing is uncheckpointed */
    int rc = fdatasync(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}
