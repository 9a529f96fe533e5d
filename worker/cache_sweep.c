/*
 * cache_sweep.c: keeps this host's image cache (<data_dir>/images/sha256/) to what the store
 * still needs (cache_sweep.h).
 *
 * Hidden state: the time of the last sweep (one every CACHE_SWEEP_MS per worker process) and the
 * sizes of the cache directories seen, by digest (a published directory never changes, so its
 * size is measured once).
 */
#include "cache_sweep.h"
#include "store_images.h"
#include "images/image_cache.h"
#include "images/image_digest.h"
#include "images/importer.h"
#include "log.h"
#include "clock.h"
#include "worker.h"

#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CACHE_SWEEP_MS 2000
/* A directory published less than this long ago may belong to an import that has not recorded
 * its outcome in the store yet: never removed as unreferenced before then. */
#define CACHE_PUBLISH_GRACE_MS 10000
#define SIZES_MAX 256

static int64_t last_sweep;
static struct {
    char hex[65];
    int64_t bytes;
} sizes[SIZES_MAX];
static size_t n_sizes;

static bool listed(char (*digests)[STORE_DIGEST_LEN], size_t n, const char *digest)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(digests[i], digest) == 0)
            return true;
    return false;
}

static int64_t walk_total;
static int walk_add(const char *path, const struct stat *sb, int flag, struct FTW *f)
{
    (void)path, (void)f;
    if (flag == FTW_F)
        walk_total += (int64_t)sb->st_blocks * 512 / (sb->st_nlink > 1 ? sb->st_nlink : 1);
    return 0;
}

/* Disk bytes of a cache directory (the worker's loop thread is the only caller). */
static int64_t dir_bytes(const char *dir, const char *hex)
{
    for (size_t i = 0; i < n_sizes; i++)
        if (strcmp(sizes[i].hex, hex) == 0)
            return sizes[i].bytes;
    walk_total = 0;
    nftw(dir, walk_add, 32, FTW_PHYS | FTW_MOUNT);
    if (n_sizes < SIZES_MAX) {
        snprintf(sizes[n_sizes].hex, sizeof sizes[n_sizes].hex, "%s", hex);
        sizes[n_sizes++].bytes = walk_total;
    }
    return walk_total;
}

static void forget_size(const char *hex)
{
    for (size_t i = 0; i < n_sizes; i++)
        if (strcmp(sizes[i].hex, hex) == 0) {
            sizes[i] = sizes[--n_sizes];
            return;
        }
}

static void evict(const char *dir, const char *hex, const char *why)
{
    if (import_remove_tree(dir) == 0) {
        log_info("images: removed sha256:%s from this host's cache (%s)", hex, why);
        forget_size(hex);
    } else {
        log_warn("images: cannot remove %s: %m", dir);
    }
}

void images_sweep(struct worker *w)
{
    int64_t now = clock_wall_ms();
    char(*in_use)[STORE_DIGEST_LEN] = NULL, (*ready)[STORE_DIGEST_LEN] = NULL;
    size_t n_use = 0, n_ready = 0;
    char base[600], dir[700], marker[720], digest[STORE_DIGEST_LEN];

    if (now - last_sweep < CACHE_SWEEP_MS)
        return;
    last_sweep = now;
    if (store_image_digests_in_use(w->st, &in_use, &n_use) != STORE_OK)
        return;
    if (store_image_digests_ready(w->st, &ready, &n_ready) != STORE_OK) {
        free(in_use);
        return;
    }
    snprintf(base, sizeof base, "%.500s/images/sha256", w->cfg.data_dir);
    DIR *d = opendir(base);
    int64_t total = 0;
    for (struct dirent *de; d && (de = readdir(d)) != NULL;) {
        snprintf(digest, sizeof digest, "sha256:%.64s", de->d_name);
        if (!image_digest_valid(digest) || strlen(de->d_name) != 64)
            continue;
        snprintf(dir, sizeof dir, "%s/%s", base, de->d_name);
        if (listed(ready, n_ready, digest) || listed(in_use, n_use, digest)) {
            total += dir_bytes(dir, de->d_name);
            continue;
        }
        /* No ready Image names it and nothing runs on it: deleted (or failed after publishing). */
        struct stat sb;
        snprintf(marker, sizeof marker, "%s/ready", dir);
        if (stat(marker, &sb) == 0 &&
            (int64_t)sb.st_mtim.tv_sec * 1000 > now - CACHE_PUBLISH_GRACE_MS)
            continue;
        evict(dir, de->d_name, "no Image or Sandbox uses it");
    }
    if (d)
        closedir(d);
    /* Over image_cache_limit: least recently used first, never what an App names or a live or
     * warm Sandbox runs. */
    for (size_t i = 0;
         w->cfg.image_cache_limit > 0 && total > w->cfg.image_cache_limit && i < n_ready; i++) {
        if (listed(in_use, n_use, ready[i]) ||
            image_cache_dir(&w->cfg, ready[i], dir, sizeof dir, marker, sizeof marker) != 0)
            continue;
        struct stat sb;
        if (stat(dir, &sb) != 0)
            continue;
        int64_t bytes = dir_bytes(dir, ready[i] + 7);
        evict(dir, ready[i] + 7, "image_cache_limit");
        total -= bytes;
    }
    free(in_use);
    free(ready);
}
