/*
 * layer_apply.c: one layer onto an image tree, never writing outside it (layer_apply.h).
 *
 * Hidden state: while a layer is applied, `written` holds the paths this layer wrote, so that an
 * opaque whiteout (which may come after its directory's new entries in the tar) removes only
 * what lower layers put in the directory.
 */
#include "images/layer_apply.h"
#include "images/image_digest.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#define WH_PREFIX ".wh."
#define WH_OPAQUE ".wh..wh..opq"

int image_fail(struct image_problem *p, const char *code, const char *fmt, ...)
{
    if (p->code)
        return -1;
    p->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->detail, sizeof p->detail, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- the set of paths this layer wrote (open addressing; grows at half full) ---- */

struct path_set {
    char **slots;
    size_t cap, n;
};

static uint64_t path_hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static bool path_set_has(const struct path_set *ps, const char *path)
{
    if (!ps->cap)
        return false;
    for (size_t i = path_hash(path) & (ps->cap - 1);; i = (i + 1) & (ps->cap - 1)) {
        if (!ps->slots[i])
            return false;
        if (strcmp(ps->slots[i], path) == 0)
            return true;
    }
}

static int path_set_add(struct path_set *ps, const char *path)
{
    if (path_set_has(ps, path))
        return 0;
    if ((ps->n + 1) * 2 > ps->cap) {
        size_t cap = ps->cap ? ps->cap * 2 : 1024;
        char **slots = calloc(cap, sizeof *slots);
        if (!slots)
            return -1;
        for (size_t i = 0; i < ps->cap; i++) {
            if (!ps->slots[i])
                continue;
            size_t j = path_hash(ps->slots[i]) & (cap - 1);
            while (slots[j])
                j = (j + 1) & (cap - 1);
            slots[j] = ps->slots[i];
        }
        free(ps->slots);
        ps->slots = slots;
        ps->cap = cap;
    }
    char *copy = strdup(path);
    if (!copy)
        return -1;
    size_t i = path_hash(path) & (ps->cap - 1);
    while (ps->slots[i])
        i = (i + 1) & (ps->cap - 1);
    ps->slots[i] = copy;
    ps->n++;
    return 0;
}

static void path_set_free(struct path_set *ps)
{
    for (size_t i = 0; i < ps->cap; i++)
        free(ps->slots[i]);
    free(ps->slots);
    memset(ps, 0, sizeof *ps);
}

/* ---- paths ---- */

/* Turns a tar entry name into a path relative to the tree: "./a//b/" -> "a/b", "./" -> "".
 * Refuses absolute names and any ".." component. */
static int clean_name(const char *name, char *out, size_t outlen, struct image_problem *p)
{
    size_t n = 0;
    if (!name || name[0] == '/')
        return image_fail(p, IMAGE_PATH_ESCAPE, "entry '%s' is an absolute path", name ? name : "");
    const char *s = name;
    while (*s) {
        while (*s == '/')
            s++;
        const char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == 2 && s[0] == '.' && s[1] == '.')
            return image_fail(p, IMAGE_PATH_ESCAPE, "entry '%s' goes up with '..'", name);
        if (len > 0 && !(len == 1 && s[0] == '.')) {
            if (n + len + 2 > outlen)
                return image_fail(p, IMAGE_BAD_LAYER, "entry name '%.200s...' is too long", name);
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

static long sys_openat2(int dirfd, const char *path, int flags)
{
    struct open_how how = {.flags = (uint64_t)flags,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
    return syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

/* Fails the import for an error of resolving `what` beneath the tree. */
static int resolve_fail(struct image_problem *p, const char *what, int err)
{
    if (err == EXDEV || err == ELOOP)
        return image_fail(p, IMAGE_PATH_ESCAPE, "'%s' leads out of the image tree through a link",
                          what);
    if (err == ENOTDIR)
        return image_fail(p, IMAGE_BAD_LAYER, "a parent of '%s' is not a directory", what);
    return image_fail(p, IMAGE_IO_ERROR, "cannot open '%s' in the image tree: %s", what,
                      strerror(err));
}

/* Opens directory `dir` (relative, "" for the root) beneath rootfd, creating missing components
 * as root-owned 0755 directories. Returns an O_PATH fd or -1 with the problem. */
static int open_dir_beneath(int rootfd, const char *dir, struct image_problem *p, int depth)
{
    if (!*dir)
        return (int)sys_openat2(rootfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    long fd = sys_openat2(rootfd, dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0)
        return (int)fd;
    if (errno != ENOENT || depth > 512)
        return resolve_fail(p, dir, errno);
    /* Create it in its parent (which may itself be missing). */
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    const char *leaf = dir;
    if (slash) {
        *slash = '\0';
        leaf = dir + (slash - parent) + 1;
    } else {
        parent[0] = '\0';
    }
    int pfd = open_dir_beneath(rootfd, parent, p, depth + 1);
    if (pfd < 0)
        return -1;
    if (mkdirat(pfd, leaf, 0755) != 0 && errno != EEXIST) {
        int e = errno;
        close(pfd);
        return image_fail(p, IMAGE_IO_ERROR, "cannot create '%s': %s", dir, strerror(e));
    }
    close(pfd);
    fd = sys_openat2(rootfd, dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return resolve_fail(p, dir, errno);
    return (int)fd;
}

/* Splits a clean path into its directory and leaf; opens the directory beneath rootfd. */
static int open_parent(int rootfd, const char *path, const char **leaf, struct image_problem *p)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) {
        *leaf = path;
        dir[0] = '\0';
    } else {
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
        *leaf = slash + 1;
    }
    return open_dir_beneath(rootfd, dir, p, 0);
}

/* ---- removal without following links ---- */

int tree_remove_at(int at, const char *name)
{
    struct stat sb;
    if (fstatat(at, name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(sb.st_mode))
        return unlinkat(at, name, 0) == 0 || errno == ENOENT ? 0 : -1;
    int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        rc = tree_remove_at(dirfd(d), de->d_name);
    }
    closedir(d);
    if (rc != 0)
        return -1;
    return unlinkat(at, name, AT_REMOVEDIR) == 0 || errno == ENOENT ? 0 : -1;
}

/* An opaque whiteout: removes the children of dir (relative) that this layer did not write. */
static int apply_opaque(int rootfd, const char *dir, const struct path_set *written,
                        struct image_problem *p)
{
    int pfd = open_dir_beneath(rootfd, dir, p, 0);
    if (pfd < 0)
        return -1;
    int fd = openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    close(pfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return image_fail(p, IMAGE_IO_ERROR, "cannot read '%s': %s", dir, strerror(errno));
    }
    struct dirent *de;
    char child[4096];
    int rc = 0;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(child, sizeof child, "%s%s%s", dir, *dir ? "/" : "", de->d_name);
        if (path_set_has(written, child))
            continue;
        if (tree_remove_at(dirfd(d), de->d_name) != 0)
            rc = image_fail(p, IMAGE_IO_ERROR, "cannot remove '%s': %s", child, strerror(errno));
    }
    closedir(d);
    return rc;
}

/* ---- entries ---- */

/* Owner, mode and times of what is now at (dirfd, leaf). Without root the owners cannot be kept:
 * they stay the importer's. The cache holds no set-id program: the setuid and setgid bits of
 * files are cleared, so that no image, whoever uploaded it, puts a setuid-root binary on a host
 * (or in a guest) that a Sandbox or host user could run; a directory's setgid (group
 * inheritance, no privilege) is kept. */
static int set_meta(int dirfd, const char *leaf, struct archive_entry *e, bool is_link,
                    const char *path, struct image_problem *p)
{
    if (fchownat(dirfd, leaf, (uid_t)archive_entry_uid(e), (gid_t)archive_entry_gid(e),
                 AT_SYMLINK_NOFOLLOW) != 0 &&
        !(errno == EPERM && geteuid() != 0))
        return image_fail(p, IMAGE_IO_ERROR, "cannot set the owner of '%s': %s", path,
                          strerror(errno));
    mode_t mode = archive_entry_perm(e) & 07777;
    mode &= archive_entry_filetype(e) == AE_IFDIR ? ~(mode_t)S_ISUID : ~(mode_t)(S_ISUID | S_ISGID);
    if (!is_link && fchmodat(dirfd, leaf, mode, 0) != 0)
        return image_fail(p, IMAGE_IO_ERROR, "cannot set the mode of '%s': %s", path,
                          strerror(errno));
    struct timespec ts[2] = {{.tv_sec = archive_entry_mtime(e)},
                             {.tv_sec = archive_entry_mtime(e)}};
    ts[0].tv_nsec = ts[1].tv_nsec = archive_entry_mtime_nsec(e);
    (void)utimensat(dirfd, leaf, ts, AT_SYMLINK_NOFOLLOW); /* times are not worth failing for */
    return 0;
}

/* The extended attributes kept: the user namespace. File capabilities (security.capability)
 * are privilege, like setuid bits, and are left out; trusted.* needs CAP_SYS_ADMIN's trust,
 * SELinux labels and ACLs mean nothing in a Sandbox. */
static bool xattr_kept(const char *name)
{
    return strncmp(name, "user.", 5) == 0;
}

/* The entry's kept extended attributes onto (dirfd, leaf), a regular file or a directory. A
 * filesystem that holds none (ENOTSUP) drops them, counted; any other failure fails the import. */
static int set_xattrs(int dirfd, const char *leaf, struct archive_entry *e, const char *path,
                      struct layer_stats *st, struct image_problem *p)
{
    if (archive_entry_xattr_reset(e) == 0)
        return 0;
    int fd = openat(dirfd, leaf, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return image_fail(p, IMAGE_IO_ERROR, "cannot open '%s' for its attributes: %s", path,
                          strerror(errno));
    const char *name;
    const void *value;
    size_t size;
    int rc = 0;
    while (rc == 0 && archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK) {
        if (!xattr_kept(name)) {
            st->xattrs_dropped++;
            continue;
        }
        if (fsetxattr(fd, name, value, size, 0) == 0)
            st->xattrs++;
        else if (errno == ENOTSUP)
            st->xattrs_dropped++;
        else
            rc = image_fail(p, IMAGE_IO_ERROR, "cannot set attribute %s of '%s': %s", name, path,
                            strerror(errno));
    }
    close(fd);
    return rc;
}

/* Makes room for a new non-directory at (dirfd, leaf): whatever is there goes. */
static int clear_leaf(int dirfd, const char *leaf, const char *path, struct image_problem *p)
{
    if (tree_remove_at(dirfd, leaf) != 0)
        return image_fail(p, IMAGE_IO_ERROR, "cannot replace '%s': %s", path, strerror(errno));
    return 0;
}

static int write_file(struct archive *a, int dirfd, const char *leaf, struct archive_entry *e,
                      const char *path, struct image_problem *p)
{
    int fd = openat(dirfd, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return image_fail(p, IMAGE_IO_ERROR, "cannot create '%s': %s", path, strerror(errno));
    const void *buf;
    size_t len;
    la_int64_t off;
    int r, rc = 0;
    while ((r = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK) {
        /* Sparse files come as blocks at offsets: holes stay holes. */
        const char *b = buf;
        while (len > 0) {
            ssize_t w = pwrite(fd, b, len, (off_t)off);
            if (w < 0) {
                rc = image_fail(p, IMAGE_IO_ERROR, "cannot write '%s': %s", path, strerror(errno));
                break;
            }
            b += w;
            off += w;
            len -= (size_t)w;
        }
        if (rc)
            break;
    }
    if (!rc && r != ARCHIVE_EOF) {
        const char *why = archive_error_string(a);
        rc = image_fail(p, why && strstr(why, "runcated") ? IMAGE_TRUNCATED : IMAGE_BAD_LAYER,
                        "reading '%s': %s", path, why ? why : "unknown error");
    }
    if (!rc && ftruncate(fd, (off_t)archive_entry_size(e)) != 0)
        rc = image_fail(p, IMAGE_IO_ERROR, "cannot size '%s': %s", path, strerror(errno));
    if (close(fd) != 0 && !rc)
        rc = image_fail(p, IMAGE_IO_ERROR, "cannot write '%s': %s", path, strerror(errno));
    return rc;
}

static int apply_entry(struct archive *a, int rootfd, struct archive_entry *e,
                       int64_t unpacked_limit, struct layer_stats *st, struct path_set *written,
                       struct image_problem *p)
{
    char path[4096];
    const char *leaf;
    mode_t type = archive_entry_filetype(e);
    const char *hardlink = archive_entry_hardlink(e);

    if (clean_name(archive_entry_pathname(e), path, sizeof path, p) != 0)
        return -1;
    if (!*path) {
        /* The tree's root itself ("./"): keep its owner and mode. */
        if (type == AE_IFDIR && set_meta(rootfd, ".", e, false, "/", p) != 0)
            return -1;
        return 0;
    }
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;

    /* Whiteouts are instructions, not files. */
    if (strncmp(base, WH_PREFIX, strlen(WH_PREFIX)) == 0) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%.*s", (int)(base - path > 0 ? base - path - 1 : 0), path);
        if (strcmp(base, WH_OPAQUE) == 0)
            return apply_opaque(rootfd, dir, written, p);
        int dfd = open_dir_beneath(rootfd, dir, p, 0);
        if (dfd < 0)
            return -1;
        int rc = tree_remove_at(dfd, base + strlen(WH_PREFIX));
        int err = errno;
        close(dfd);
        if (rc != 0)
            return image_fail(p, IMAGE_IO_ERROR, "cannot delete '%s': %s", path, strerror(err));
        return 0;
    }

    /* Special files are left out: a FIFO, socket or device in the cache is something a reader on
     * the host (sbx reads the image's /etc/passwd) could block on or be misled by. */
    if (!hardlink &&
        (type == AE_IFCHR || type == AE_IFBLK || type == AE_IFSOCK || type == AE_IFIFO)) {
        st->dropped++;
        return 0;
    }
    if (!hardlink && type == AE_IFREG) {
        int64_t size = archive_entry_size(e);
        if (size < 0 || st->unpacked_bytes + size > unpacked_limit)
            return image_fail(p, IMAGE_TREE_TOO_LARGE,
                              "the unpacked tree exceeds image_unpacked_limit (%lld bytes) at "
                              "'%s'",
                              (long long)unpacked_limit, path);
        st->unpacked_bytes += size;
    }

    int dfd = open_parent(rootfd, path, &leaf, p);
    if (dfd < 0)
        return -1;
    int rc = 0;
    if (hardlink) {
        char target[4096];
        const char *tleaf;
        int tfd = -1;
        struct stat sb;
        if (clean_name(hardlink, target, sizeof target, p) != 0 || !*target)
            rc = p->code ? -1
                         : image_fail(p, IMAGE_PATH_ESCAPE, "hard link '%s' has no target", path);
        if (!rc && (tfd = open_parent(rootfd, target, &tleaf, p)) < 0)
            rc = -1;
        if (!rc && fstatat(tfd, tleaf, &sb, AT_SYMLINK_NOFOLLOW) != 0)
            rc = image_fail(p, IMAGE_BAD_LAYER, "hard link '%s' to missing '%s'", path, target);
        if (!rc && S_ISDIR(sb.st_mode))
            rc = image_fail(p, IMAGE_BAD_LAYER, "hard link '%s' to directory '%s'", path, target);
        if (!rc && strcmp(target, path) != 0 && (rc = clear_leaf(dfd, leaf, path, p)) == 0 &&
            linkat(tfd, tleaf, dfd, leaf, 0) != 0)
            rc = image_fail(p, IMAGE_IO_ERROR, "cannot link '%s' to '%s': %s", path, target,
                            strerror(errno));
        if (tfd >= 0)
            close(tfd);
    } else if (type == AE_IFDIR) {
        struct stat sb;
        if (fstatat(dfd, leaf, &sb, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(sb.st_mode))
            rc = clear_leaf(dfd, leaf, path, p);
        if (!rc && mkdirat(dfd, leaf, 0700) != 0 && errno != EEXIST)
            rc = image_fail(p, IMAGE_IO_ERROR, "cannot create '%s': %s", path, strerror(errno));
        if (!rc)
            rc = set_meta(dfd, leaf, e, false, path, p);
        if (!rc)
            rc = set_xattrs(dfd, leaf, e, path, st, p);
    } else if (type == AE_IFREG) {
        if ((rc = clear_leaf(dfd, leaf, path, p)) == 0 &&
            (rc = write_file(a, dfd, leaf, e, path, p)) == 0 &&
            (rc = set_meta(dfd, leaf, e, false, path, p)) == 0)
            rc = set_xattrs(dfd, leaf, e, path, st, p);
    } else if (type == AE_IFLNK) {
        const char *to = archive_entry_symlink(e);
        if ((rc = clear_leaf(dfd, leaf, path, p)) == 0 && symlinkat(to ? to : "", dfd, leaf) != 0)
            rc = image_fail(p, IMAGE_IO_ERROR, "cannot create symlink '%s': %s", path,
                            strerror(errno));
        if (!rc)
            rc = set_meta(dfd, leaf, e, true, path, p);
    } else {
        rc = image_fail(p, IMAGE_BAD_LAYER, "entry '%s' has an unknown type", path);
    }
    close(dfd);
    if (!rc && path_set_add(written, path) != 0)
        rc = image_fail(p, IMAGE_IO_ERROR, "out of memory");
    return rc;
}

/* A layer as a decompressed byte stream: the outer reader undoes the compression (libarchive's
 * filters, "raw" format), and the tar reader reads from it through stream_read, which hashes every
 * byte on the way, so the diff id is checked on exactly the bytes that were applied. */
struct layer_stream {
    struct archive *outer;
    struct image_hasher hash;
    int64_t *total; /* decompressed bytes of all layers so far (layer_stats.stream_bytes) */
    int64_t limit;
    struct image_problem *p;
    bool eof;
};

static la_ssize_t stream_read(struct archive *inner, void *arg, const void **buf)
{
    struct layer_stream *s = arg;
    size_t len = 0;
    la_int64_t off;
    if (s->eof)
        return 0;
    int r = archive_read_data_block(s->outer, buf, &len, &off);
    if (r == ARCHIVE_EOF) {
        s->eof = true;
        return 0;
    }
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
        const char *why = archive_error_string(s->outer);
        archive_set_error(inner, archive_errno(s->outer), "%s", why ? why : "unreadable layer");
        return -1;
    }
    if (*s->total + (int64_t)len > s->limit) {
        image_fail(s->p, IMAGE_TREE_TOO_LARGE,
                   "the decompressed layers exceed image_unpacked_limit (%lld bytes)",
                   (long long)s->limit);
        archive_set_error(inner, EFBIG, "over image_unpacked_limit");
        return -1;
    }
    image_hasher_update(&s->hash, *buf, len);
    *s->total += (int64_t)len;
    return (la_ssize_t)len;
}

/* Opens the outer (decompressing) reader of a layer; an empty file is an empty stream. */
static int stream_open(struct layer_stream *s, const char *layer_path,
                       const struct layer_limits *lim, struct layer_stats *st,
                       struct image_problem *p)
{
    struct archive_entry *e;
    memset(s, 0, sizeof *s);
    s->total = &st->stream_bytes;
    s->limit = lim->unpacked_bytes;
    s->p = p;
    image_hasher_init(&s->hash);
    if (!(s->outer = archive_read_new()))
        return image_fail(p, IMAGE_IO_ERROR, "out of memory");
    archive_read_support_filter_all(s->outer);
    archive_read_support_format_raw(s->outer);
    archive_read_support_format_empty(s->outer);
    int r = archive_read_open_filename(s->outer, layer_path, 1 << 16);
    if (r == ARCHIVE_OK)
        r = archive_read_next_header(s->outer, &e);
    if (r == ARCHIVE_EOF) {
        s->eof = true;
        return 0;
    }
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
        image_fail(p, !archive_io_errno(archive_errno(s->outer)) ? IMAGE_BAD_LAYER : IMAGE_IO_ERROR,
                   "cannot read a layer: %s", archive_error_string(s->outer));
        archive_read_free(s->outer);
        s->outer = NULL;
        return -1;
    }
    return 0;
}

/* Reads what is left of the stream (tar's end-of-archive padding) and checks the digest of the
 * whole against diff_id. */
static int stream_finish(struct archive *inner, struct layer_stream *s, const char *diff_id,
                         struct image_problem *p)
{
    const void *buf;
    la_ssize_t n;
    char got[IMAGE_DIGEST_LEN];
    while ((n = stream_read(inner, s, &buf)) > 0)
        ;
    if (n < 0) {
        const char *why = archive_error_string(inner);
        return image_fail(p, why && strstr(why, "runcated") ? IMAGE_TRUNCATED : IMAGE_BAD_LAYER,
                          "layer: %s", why ? why : "unreadable");
    }
    image_hasher_final(&s->hash, got);
    if (strcmp(got, diff_id) != 0)
        return image_fail(p, IMAGE_DIGEST_MISMATCH,
                          "the layer's uncompressed digest is %s, not the config's diff id %s", got,
                          diff_id);
    return 0;
}

int layer_apply(int rootfd, const char *layer_path, const char *diff_id,
                const struct layer_limits *lim, struct layer_stats *st, struct image_problem *p)
{
    struct path_set written = {0};
    struct archive_entry *e;
    struct layer_stream s;
    int r, rc = 0;
    bool any = false;

    if (stream_open(&s, layer_path, lim, st, p) != 0)
        return -1;
    struct archive *a = archive_read_new();
    if (!a) {
        archive_read_free(s.outer);
        return image_fail(p, IMAGE_IO_ERROR, "out of memory");
    }
    archive_read_support_format_tar(a);
    archive_read_support_format_empty(a);
    if (archive_read_open(a, &s, NULL, stream_read, NULL) != ARCHIVE_OK) {
        const char *why = archive_error_string(a);
        rc = image_fail(p, why && strstr(why, "runcated") ? IMAGE_TRUNCATED : IMAGE_NOT_ARCHIVE,
                        "layer: %s", why ? why : "not a tar archive");
        r = ARCHIVE_FATAL;
    } else {
        while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK || r == ARCHIVE_WARN) {
            any = true;
            if (++st->entries > lim->entries) {
                rc = image_fail(p, IMAGE_TREE_TOO_LARGE,
                                "the layers hold more than image_entries_limit (%lld) entries",
                                (long long)lim->entries);
                break;
            }
            if (apply_entry(a, rootfd, e, lim->unpacked_bytes, st, &written, p) != 0) {
                rc = -1;
                break;
            }
        }
    }
    if (!rc && r != ARCHIVE_EOF) {
        const char *why = archive_error_string(a);
        rc = image_fail(p,
                        why && strstr(why, "runcated") ? IMAGE_TRUNCATED
                        : any                          ? IMAGE_BAD_LAYER
                                                       : IMAGE_NOT_ARCHIVE,
                        "layer: %s", why ? why : "not a tar archive");
    }
    if (!rc)
        rc = stream_finish(a, &s, diff_id, p);
    archive_read_free(a);
    archive_read_free(s.outer);
    path_set_free(&written);
    return rc;
}

int layer_diff_id(const char *layer_path, const struct layer_limits *lim, struct layer_stats *st,
                  char out[72], struct image_problem *p)
{
    struct layer_stream s;
    if (stream_open(&s, layer_path, lim, st, p) != 0)
        return -1;
    struct archive *a = archive_read_new();
    const void *buf;
    la_ssize_t n = -1;
    if (a)
        while ((n = stream_read(a, &s, &buf)) > 0)
            ;
    if (n < 0) {
        const char *why = a ? archive_error_string(a) : "out of memory";
        image_fail(p, why && strstr(why, "runcated") ? IMAGE_TRUNCATED : IMAGE_BAD_LAYER,
                   "layer: %s", why ? why : "unreadable");
    } else {
        image_hasher_final(&s.hash, out);
    }
    archive_read_free(a);
    archive_read_free(s.outer);
    return n < 0 ? -1 : 0;
}
