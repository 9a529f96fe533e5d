/*
 * image_digest.h: SHA-256 digests of blobs ("sha256:<64 hex>"), with nettle, for the importer
 * (every blob is verified against the digest that names it) and for uploads.
 */
#ifndef SBX_IMAGE_DIGEST_H
#define SBX_IMAGE_DIGEST_H

#include <nettle/sha2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IMAGE_DIGEST_LEN 72 /* "sha256:" + 64 hex + NUL */

struct image_hasher {
    struct sha256_ctx ctx;
};

void image_hasher_init(struct image_hasher *h);
void image_hasher_update(struct image_hasher *h, const void *data, size_t len);
/* Writes "sha256:<hex>" to out. */
void image_hasher_final(struct image_hasher *h, char out[IMAGE_DIGEST_LEN]);

/* The digest and size of a file. Returns 0, or -1 with errno set. */
int image_digest_file(const char *path, char out[IMAGE_DIGEST_LEN], int64_t *size);

/* True for "sha256:" followed by exactly 64 lowercase hex digits. */
bool image_digest_valid(const char *digest);

#endif
