/*
 * image_problem.h: the stable problem codes an import ends with when it fails (an Image's
 * problem.code in the API), and the small record the importer's parts fill in on failure.
 *
 * The codes are a contract (openapi.yaml, docs/images.md): never rename one.
 */
#ifndef SBX_IMAGE_PROBLEM_H
#define SBX_IMAGE_PROBLEM_H

#include <errno.h>
#include <stddef.h>

#define IMAGE_NOT_ARCHIVE "image_not_archive"         /* not a tar (or gzip/zstd of one) */
#define IMAGE_TRUNCATED "image_truncated"             /* the archive or a layer ends early */
#define IMAGE_BAD_MANIFEST "image_bad_manifest"       /* no or malformed manifest/index/config */
#define IMAGE_LAYER_MISSING "image_layer_missing"     /* a manifest names a blob not there */
#define IMAGE_DIGEST_MISMATCH "image_digest_mismatch" /* a blob is not what its digest says */
#define IMAGE_PATH_ESCAPE "image_path_escape"         /* ../, absolute, or a link out of the tree */
#define IMAGE_BAD_LAYER "image_bad_layer"             /* a layer entry that cannot be applied */
#define IMAGE_ARCHIVE_TOO_LARGE "image_archive_too_large"   /* over image_upload_limit (entries) */
#define IMAGE_TREE_TOO_LARGE "image_tree_too_large"         /* over image_unpacked/entries_limit */
#define IMAGE_UNSUPPORTED "image_unsupported"               /* no linux/amd64 image, unknown type */
#define IMAGE_IO_ERROR "image_io_error"                     /* the host's disk failed us */
#define IMAGE_REGISTRY_UNREACHABLE "registry_unreachable"   /* cannot connect, or 5xx */
#define IMAGE_REGISTRY_UNAUTHORIZED "registry_unauthorized" /* credentials refused */
#define IMAGE_REGISTRY_NOT_FOUND "registry_not_found"       /* no such repository, tag or blob */
#define IMAGE_BAD_REFERENCE "image_bad_reference"           /* the reference does not parse */
#define IMAGE_REGISTRY_TOO_SLOW "registry_too_slow" /* over registry_pull_timeout, or too slow */

struct image_problem {
    const char *code; /* one of the above; NULL while all is well */
    char detail[512];
};

/* True for an errno that libarchive reports when the file could not be read at all (as opposed to
 * read and found not to be an archive). */
static inline int archive_io_errno(int e)
{
    return e == ENOENT || e == EACCES || e == EIO || e == ENOMEM || e == EISDIR;
}

/* Records the first failure (later ones are consequences); returns -1 for `return fail(...)`. */
int image_fail(struct image_problem *p, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
