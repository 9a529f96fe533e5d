/*
 * layer_apply.h: applies one image layer (a tar, possibly gzip- or zstd-compressed) onto an image
 * tree, as OCI's image-layer spec says: entries in order, replacing what lower layers left at the
 * same path; `.wh.NAME` deletes NAME, `.wh..wh..opq` empties its directory of what lower layers put
 * there. Modes, owners, times, symlinks and hard links are kept, and of extended attributes
 * `user.*`. Privilege is not: the setuid and setgid bits of files are cleared, and file
 * capabilities (`security.capability`) dropped, with the other attributes (`trusted.*`, SELinux
 * labels, ACLs). Device nodes, sockets and FIFOs are dropped too (a
 * Sandbox gets its /dev from sbx; nothing that reads the tree on the host can block on or be
 * misled by a special file).
 *
 * Nothing is written outside the tree: every path is resolved from the tree's directory fd with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS), so a symlink of this or a lower layer that
 * points out of the tree (absolute, or through ../) fails the import instead of being followed;
 * the last component is never followed (O_NOFOLLOW, AT_SYMLINK_NOFOLLOW); names with `..` or a
 * leading `/`, and hard links to such names, fail too.
 */
#ifndef SBX_LAYER_APPLY_H
#define SBX_LAYER_APPLY_H

#include "images/image_problem.h"

#include <stdint.h>

struct layer_stats {
    int64_t unpacked_bytes; /* regular file bytes written so far, over all layers (in and out) */
    int64_t stream_bytes;   /* decompressed layer bytes read so far, over all layers */
    int64_t entries;        /* entries read so far, over all layers (whiteouts, dropped ones too) */
    int64_t dropped;        /* device nodes, sockets and FIFOs left out */
    int64_t xattrs;         /* extended attributes kept */
    int64_t xattrs_dropped; /* left out: another namespace, or the filesystem holds none */
};

struct layer_limits {
    int64_t unpacked_bytes; /* image_unpacked_limit: file bytes, and decompressed layer bytes */
    int64_t entries;        /* image_entries_limit: entries of all layers */
};

/* Applies the layer at layer_path onto the tree whose directory is rootfd, checking that its
 * decompressed tar stream (all of it, as it is applied) hashes to diff_id (IMAGE_DIGEST_MISMATCH
 * otherwise). Fails with IMAGE_TREE_TOO_LARGE as soon as st->unpacked_bytes (before a file is
 * written, from its header) or st->stream_bytes (as the stream is decompressed, so a
 * decompression bomb stops at the limit) would exceed lim->unpacked_bytes, or st->entries
 * lim->entries. Returns 0, or -1 with the problem; the tree is then half-applied and only good
 * for removal. */
int layer_apply(int rootfd, const char *layer_path, const char *diff_id,
                const struct layer_limits *lim, struct layer_stats *st, struct image_problem *p);

/* The digest of the layer's uncompressed bytes (its diff id, what an image config lists), counted
 * in st->stream_bytes against lim->unpacked_bytes as layer_apply counts them. */
int layer_diff_id(const char *layer_path, const struct layer_limits *lim, struct layer_stats *st,
                  char out[72], struct image_problem *p);

/* Removes name (a file, or a directory and everything in it) under dirfd without following any
 * symlink. ENOENT is success. Returns 0 or -1 with errno. */
int tree_remove_at(int dirfd, const char *name);

#endif
