/*
 * importer.c: an uploaded archive into the per-host image cache (importer.h): stage its entries
 * as blobs (hashed as they are written), read the plan (image_manifest.h), apply the layers
 * (layer_apply.h) into a fresh tree and publish it by one rename.
 */
#include "images/importer.h"
#include "images/image_cache.h"
#include "images/layer_apply.h"
#include "clock.h"
#include "fs.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void import_result_clear(struct import_result *r)
{
    free(r->entrypoint_json);
    free(r->cmd_json);
    free(r->env_json);
    r->entrypoint_json = r->cmd_json = r->env_json = NULL;
}

int import_work_dir(const struct sbx_config *cfg, const char *work_id, char *out, size_t outlen)
{
    int n = snprintf(out, outlen, "%s/images/tmp/%s", cfg->data_dir, work_id);
    return n < 0 || (size_t)n >= outlen || strchr(work_id, '/') || work_id[0] == '.' ? -1 : 0;
}

int import_remove_tree(const char *path)
{
    char copy[4096], copy2[4096];
    snprintf(copy, sizeof copy, "%s", path);
    snprintf(copy2, sizeof copy2, "%s", path);
    int dfd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0 : -1;
    int rc = tree_remove_at(dfd, basename(copy2));
    close(dfd);
    return rc;
}

/* Cleans an outer archive entry name as layer_apply does ("./a" -> "a"); refuses ".." and "/". */
static int clean_entry(const char *name, char *out, size_t outlen, struct image_problem *p)
{
    size_t n = 0;
    if (!name || name[0] == '/')
        return image_fail(p, IMAGE_PATH_ESCAPE, "archive entry '%.200s' is an absolute path",
                          name ? name : "");
    for (const char *s = name; *s;) {
        while (*s == '/')
            s++;
        size_t len = strcspn(s, "/");
        if (len == 2 && s[0] == '.' && s[1] == '.')
            return image_fail(p, IMAGE_PATH_ESCAPE, "archive entry '%.200s' goes up with '..'",
                              name);
        if (len && !(len == 1 && s[0] == '.')) {
            if (n + len + 2 > outlen)
                return image_fail(p, IMAGE_BAD_MANIFEST, "archive entry name is too long");
            if (n)
                out[n++] = '/';
            memcpy(out + n, s, len);
            n += len;
        }
        s += len;
    }
    out[n] = '\0';
    return 0;
}

/* Copies the current entry's data to a new blob file, hashing it; counts it against the limit. */
static int stage_entry(struct archive *a, const char *path, int64_t *staged, int64_t limit,
                       char digest[IMAGE_DIGEST_LEN], int64_t *size, struct image_problem *p)
{
    struct image_hasher h;
    const void *buf;
    size_t len;
    la_int64_t off;
    int r, rc = 0;
    int64_t total = 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return image_fail(p, IMAGE_IO_ERROR, "cannot stage a blob: %s", strerror(errno));
    image_hasher_init(&h);
    while ((r = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK) {
        if (off != total) {
            /* Sparse entries in an image archive: hash the hole as zeros, as a reader would. */
            static const char zeros[4096];
            while (total < off) {
                size_t z =
                    (size_t)(off - total) < sizeof zeros ? (size_t)(off - total) : sizeof zeros;
                image_hasher_update(&h, zeros, z);
                total += (int64_t)z;
            }
        }
        if ((*staged += (int64_t)len) > limit) {
            rc =
                image_fail(p, IMAGE_ARCHIVE_TOO_LARGE,
                           "the archive exceeds image_upload_limit (%lld bytes)", (long long)limit);
            break;
        }
        image_hasher_update(&h, buf, len);
        if (pwrite(fd, buf, len, (off_t)off) != (ssize_t)len) {
            rc = image_fail(p, IMAGE_IO_ERROR, "cannot stage a blob: %s", strerror(errno));
            break;
        }
        total = off + (int64_t)len;
    }
    if (!rc && r != ARCHIVE_EOF) {
        const char *why = archive_error_string(a);
        rc = image_fail(p, why && strstr(why, "runcated") ? IMAGE_TRUNCATED : IMAGE_NOT_ARCHIVE,
                        "the archive: %s", why ? why : "unreadable");
    }
    if (close(fd) != 0 && !rc)
        rc = image_fail(p, IMAGE_IO_ERROR, "cannot stage a blob: %s", strerror(errno));
    if (!rc) {
        image_hasher_final(&h, digest);
        *size = total;
    }
    return rc;
}

/* Writes every regular file of the archive to work_dir/blobs/<n> as a blob named by its entry.
 * Symlinks within the archive (docker save links repeated layers) become aliases. */
static int stage_archive(const struct sbx_config *cfg, const char *archive_path,
                         const char *work_dir, struct image_blobs *blobs, struct image_problem *p)
{
    struct archive *a = archive_read_new();
    struct archive_entry *e;
    char dir[4200], path[4300], name[4096];
    int64_t staged = 0;
    size_t count = 0;
    int r, rc = 0;
    struct {
        char *name, *target;
    } *links = NULL;
    size_t n_links = 0;

    if (!a)
        return image_fail(p, IMAGE_IO_ERROR, "out of memory");
    snprintf(dir, sizeof dir, "%s/blobs", work_dir);
    if (mkdir(dir, 0700) != 0) {
        archive_read_free(a);
        return image_fail(p, IMAGE_IO_ERROR, "cannot create %s: %s", dir, strerror(errno));
    }
    archive_read_support_filter_all(a);
    archive_read_support_format_tar(a);
    if (archive_read_open_filename(a, archive_path, 1 << 16) != ARCHIVE_OK) {
        rc = image_fail(p, !archive_io_errno(archive_errno(a)) ? IMAGE_NOT_ARCHIVE : IMAGE_IO_ERROR,
                        "the upload is not a readable tar archive: %s", archive_error_string(a));
        archive_read_free(a);
        return rc;
    }
    int64_t entries = 0;
    while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK || r == ARCHIVE_WARN) {
        mode_t type = archive_entry_filetype(e);
        if (++entries > cfg->image_entries_limit) {
            rc = image_fail(p, IMAGE_ARCHIVE_TOO_LARGE,
                            "the archive holds more than image_entries_limit (%lld) entries",
                            (long long)cfg->image_entries_limit);
            break;
        }
        if (clean_entry(archive_entry_pathname(e), name, sizeof name, p) != 0) {
            rc = -1;
            break;
        }
        if (type == AE_IFLNK || archive_entry_hardlink(e)) {
            /* Resolved after the loop, relative to the link's directory (hard links: to the
             * archive root), and only to a blob of the archive itself. */
            const char *to =
                archive_entry_hardlink(e) ? archive_entry_hardlink(e) : archive_entry_symlink(e);
            char target[4096], joined[8200];
            if (!archive_entry_hardlink(e) && to && to[0] != '/' && strchr(name, '/'))
                snprintf(joined, sizeof joined, "%.*s/%s", (int)(strrchr(name, '/') - name), name,
                         to);
            else
                snprintf(joined, sizeof joined, "%s", to ? to : "");
            /* "a/../b" style targets: fold ".." against the path so far. */
            char folded[8200] = "";
            size_t fn = 0;
            bool escape = joined[0] == '/';
            for (char *tok = strtok(joined, "/"); tok && !escape; tok = strtok(NULL, "/")) {
                if (strcmp(tok, ".") == 0)
                    continue;
                if (strcmp(tok, "..") == 0) {
                    char *slash = fn ? strrchr(folded, '/') : NULL;
                    if (!fn)
                        escape = true;
                    fn = slash ? (size_t)(slash - folded) : 0;
                    folded[fn] = '\0';
                    continue;
                }
                fn += (size_t)snprintf(folded + fn, sizeof folded - fn, "%s%s", fn ? "/" : "", tok);
            }
            if (escape) {
                rc = image_fail(p, IMAGE_PATH_ESCAPE,
                                "archive entry '%.200s' links out of the archive", name);
                break;
            }
            snprintf(target, sizeof target, "%s", folded);
            void *grown = realloc(links, (n_links + 1) * sizeof *links);
            if (!grown) {
                rc = image_fail(p, IMAGE_IO_ERROR, "out of memory");
                break;
            }
            links = grown;
            links[n_links].name = strdup(name);
            links[n_links].target = strdup(target);
            n_links++;
            continue;
        }
        if (type != AE_IFREG)
            continue; /* directories, and anything else an image archive has no use for */
        char digest[IMAGE_DIGEST_LEN];
        int64_t size = 0;
        snprintf(path, sizeof path, "%s/%zu", dir, count++);
        if (stage_entry(a, path, &staged, cfg->image_upload_limit, digest, &size, p) != 0 ||
            image_blobs_add(blobs, name, path, digest, size) != 0) {
            rc = p->code ? -1 : image_fail(p, IMAGE_IO_ERROR, "out of memory");
            break;
        }
    }
    if (!rc && r != ARCHIVE_EOF) {
        const char *why = archive_error_string(a);
        rc = image_fail(p, why && strstr(why, "runcated") ? IMAGE_TRUNCATED : IMAGE_NOT_ARCHIVE,
                        "the upload is not a readable tar archive: %s",
                        why ? why : "unknown format");
    }
    if (!rc && blobs->n == 0)
        rc = image_fail(p, IMAGE_NOT_ARCHIVE, "the archive holds no files");
    for (size_t i = 0; i < n_links; i++) {
        const struct image_blob *b = !rc && links[i].name && links[i].target
                                         ? image_blobs_find(blobs, links[i].target)
                                         : NULL;
        if (b && image_blobs_add(blobs, links[i].name, b->path, b->digest, b->size) != 0)
            rc = image_fail(p, IMAGE_IO_ERROR, "out of memory");
        free(links[i].name);
        free(links[i].target);
    }
    free(links);
    archive_read_free(a);
    return rc;
}

static int copy_file(const char *from, const char *to)
{
    char buf[1 << 16];
    ssize_t n;
    int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, rc = -1;
    if (in >= 0)
        out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (out >= 0) {
        rc = 0;
        while ((n = read(in, buf, sizeof buf)) > 0)
            if (write(out, buf, (size_t)n) != n) {
                rc = -1;
                break;
            }
        if (n < 0 || close(out) != 0)
            rc = -1;
    }
    if (in >= 0)
        close(in);
    return rc;
}

static int64_t tree_bytes;
static int add_size(const char *path, const struct stat *sb, int flag, struct FTW *f)
{
    (void)path, (void)f;
    if (flag == FTW_F && S_ISREG(sb->st_mode) && sb->st_nlink == 1)
        tree_bytes += sb->st_size;
    else if (flag == FTW_F && S_ISREG(sb->st_mode))
        tree_bytes += sb->st_size / (int64_t)sb->st_nlink; /* hard links: each counted once */
    return 0;
}

/* Bytes of the regular files of a published tree (when the import reuses it). nftw keeps its
 * total in a static: the cache is per host and reuse is rare, so a lock is cheap enough. */
static int64_t published_bytes(const char *rootfs)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&lock);
    tree_bytes = 0;
    nftw(rootfs, add_size, 32, FTW_PHYS | FTW_MOUNT);
    int64_t n = tree_bytes;
    pthread_mutex_unlock(&lock);
    return n;
}

static void take_plan_fields(const struct image_plan *plan, struct import_result *res)
{
    snprintf(res->digest, sizeof res->digest, "%s", plan->digest);
    res->layer_count = (int64_t)plan->n_layers;
    res->entrypoint_json = plan->entrypoint_json ? strdup(plan->entrypoint_json) : NULL;
    res->cmd_json = plan->cmd_json ? strdup(plan->cmd_json) : NULL;
    res->env_json = plan->env_json ? strdup(plan->env_json) : NULL;
    snprintf(res->working_dir, sizeof res->working_dir, "%s", plan->working_dir);
    snprintf(res->user, sizeof res->user, "%s", plan->user);
}

int import_plan(const struct sbx_config *cfg, const char *work_dir, const struct image_plan *plan,
                struct import_result *res)
{
    struct image_problem *p = &res->problem;
    char cache[4096], err[200], img[4300], rootfs[4400], path[4400], parent[4200];
    struct layer_stats st = {0};

    if (image_cache_dir(cfg, plan->digest, cache, sizeof cache, err, sizeof err) != 0)
        return image_fail(p, IMAGE_BAD_MANIFEST, "%s", err);
    take_plan_fields(plan, res);
    snprintf(rootfs, sizeof rootfs, "%s/rootfs", cache);
    if (image_cache_ready(cfg, plan->digest)) {
        /* The cached tree is the one this config's layers make: an archive holding the config
         * with other layers is refused here as it would be when unpacked (a registry pull of a
         * cached digest fetches no layers, so has none to check). */
        struct layer_limits lim = {.unpacked_bytes = cfg->image_unpacked_limit,
                                   .entries = cfg->image_entries_limit};
        for (size_t i = 0; i < plan->n_layers; i++) {
            char got[IMAGE_DIGEST_LEN];
            if (layer_diff_id(plan->layers[i], &lim, &st, got, p) != 0)
                return -1;
            if (strcmp(got, plan->diff_ids[i]) != 0)
                return image_fail(p, IMAGE_DIGEST_MISMATCH,
                                  "layer %zu of %zu has uncompressed digest %s, not the config's "
                                  "diff id %s",
                                  i + 1, plan->n_layers, got, plan->diff_ids[i]);
        }
        res->reused = true;
        res->unpacked_bytes = published_bytes(rootfs);
        return 0;
    }
    snprintf(img, sizeof img, "%s/image", work_dir);
    snprintf(rootfs, sizeof rootfs, "%s/rootfs", img);
    if (mkdir(img, 0755) != 0 || mkdir(rootfs, 0755) != 0)
        return image_fail(p, IMAGE_IO_ERROR, "cannot create %s: %s", rootfs, strerror(errno));
    int64_t t0 = clock_mono_ms();
    int rootfd = open(rootfs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (rootfd < 0)
        return image_fail(p, IMAGE_IO_ERROR, "cannot open %s: %s", rootfs, strerror(errno));
    struct layer_limits lim = {.unpacked_bytes = cfg->image_unpacked_limit,
                               .entries = cfg->image_entries_limit};
    for (size_t i = 0; i < plan->n_layers; i++)
        if (layer_apply(rootfd, plan->layers[i], plan->diff_ids[i], &lim, &st, p) != 0) {
            size_t len = strlen(p->detail);
            snprintf(p->detail + len, sizeof p->detail - len, " (layer %zu of %zu)", i + 1,
                     plan->n_layers);
            close(rootfd);
            return -1;
        }
    close(rootfd);
    res->apply_ms = clock_mono_ms() - t0;
    res->unpacked_bytes = st.unpacked_bytes;
    res->xattrs = st.xattrs;
    res->xattrs_dropped = st.xattrs_dropped;
    snprintf(path, sizeof path, "%s/config.json", img);
    if (copy_file(plan->config_path, path) != 0)
        return image_fail(p, IMAGE_IO_ERROR, "cannot write config.json: %s", strerror(errno));
    /* The tree and config.json reach the disk before `ready` says they are whole, so that after
     * a crash the marker (and the store's `ready`) never stands for files still in the page
     * cache. One syncfs instead of an fsync for each of thousands of files. */
    int imgfd = open(img, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (imgfd < 0 || syncfs(imgfd) != 0) {
        int e = errno;
        if (imgfd >= 0)
            close(imgfd);
        return image_fail(p, IMAGE_IO_ERROR, "cannot flush %s to disk: %s", img, strerror(e));
    }
    snprintf(path, sizeof path, "%s/ready", img);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 || close(fd) != 0 || fsync(imgfd) != 0) {
        int e = errno;
        close(imgfd);
        return image_fail(p, IMAGE_IO_ERROR, "cannot write the ready marker: %s", strerror(e));
    }
    close(imgfd);
    snprintf(parent, sizeof parent, "%s/images/sha256", cfg->data_dir);
    if (fs_mkdir_p(parent, 0755) != 0)
        return image_fail(p, IMAGE_IO_ERROR, "cannot create %s: %s", parent, strerror(errno));
    /* A directory without `ready` is what a crash left: replace it. */
    if (!image_cache_ready(cfg, plan->digest))
        (void)import_remove_tree(cache);
    if (rename(img, cache) != 0) {
        if ((errno == EEXIST || errno == ENOTEMPTY) && image_cache_ready(cfg, plan->digest)) {
            res->reused = true; /* another import of the same digest published first */
            return 0;
        }
        return image_fail(p, IMAGE_IO_ERROR, "cannot publish %s: %s", cache, strerror(errno));
    }
    /* The rename survives a crash too. */
    int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0 || fsync(pfd) != 0) {
        int e = errno;
        if (pfd >= 0)
            close(pfd);
        return image_fail(p, IMAGE_IO_ERROR, "cannot flush %s to disk: %s", parent, strerror(e));
    }
    close(pfd);
    return 0;
}

int import_archive(const struct sbx_config *cfg, const char *work_id, const char *archive_path,
                   struct import_result *res)
{
    struct image_problem *p = &res->problem;
    struct image_blobs blobs = {0};
    struct image_plan plan;
    char work[4096];
    int rc;

    if (import_work_dir(cfg, work_id, work, sizeof work) != 0)
        return image_fail(p, IMAGE_IO_ERROR, "bad work directory for '%s'", work_id);
    (void)import_remove_tree(work); /* a previous attempt's, if its worker died */
    if (fs_mkdir_p(work, 0700) != 0)
        return image_fail(p, IMAGE_IO_ERROR, "cannot create %s: %s", work, strerror(errno));
    int64_t t0 = clock_mono_ms();
    rc = stage_archive(cfg, archive_path, work, &blobs, p);
    if (!rc)
        rc = image_plan_read(&blobs, &plan, p);
    res->stage_ms = clock_mono_ms() - t0;
    if (!rc) {
        rc = import_plan(cfg, work, &plan, res);
        image_plan_free(&plan);
    }
    image_blobs_free(&blobs);
    (void)import_remove_tree(work);
    return rc;
}
