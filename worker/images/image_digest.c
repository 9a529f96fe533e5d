/*
 * image_digest.c: SHA-256 of blobs and files with nettle, written as "sha256:<hex>".
 */
#include "images/image_digest.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void image_hasher_init(struct image_hasher *h)
{
    sha256_init(&h->ctx);
}

void image_hasher_update(struct image_hasher *h, const void *data, size_t len)
{
    sha256_update(&h->ctx, len, data);
}

void image_hasher_final(struct image_hasher *h, char out[IMAGE_DIGEST_LEN])
{
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_digest(&h->ctx, sizeof d, d);
    memcpy(out, "sha256:", 7);
    for (size_t i = 0; i < sizeof d; i++)
        snprintf(out + 7 + 2 * i, 3, "%02x", d[i]);
}

int image_digest_file(const char *path, char out[IMAGE_DIGEST_LEN], int64_t *size)
{
    struct image_hasher h;
    char buf[1 << 16];
    ssize_t n;
    int64_t total = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    image_hasher_init(&h);
    while ((n = read(fd, buf, sizeof buf)) > 0) {
        image_hasher_update(&h, buf, (size_t)n);
        total += n;
    }
    int saved = errno;
    close(fd);
    if (n < 0) {
        errno = saved;
        return -1;
    }
    image_hasher_final(&h, out);
    if (size)
        *size = total;
    return 0;
}

bool image_digest_valid(const char *digest)
{
    if (!digest || strncmp(digest, "sha256:", 7) != 0 || strlen(digest) != 7 + 64)
        return false;
    for (const char *p = digest + 7; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}
