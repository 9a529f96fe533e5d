/*
 * image_cache.c: paths of the per-host image cache (image_cache.h).
 */
#include "images/image_cache.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

bool image_is_default(const char *image)
{
    return image == NULL || image[0] == '\0' || strcmp(image, STORE_IMAGE_DEFAULT) == 0;
}

int image_cache_dir(const struct sbx_config *cfg, const char *digest, char *out, size_t outlen,
                    char *err, size_t errlen)
{
    static const char prefix[] = "sha256:";
    if (digest == NULL || strncmp(digest, prefix, sizeof prefix - 1) != 0 ||
        strlen(digest) != sizeof prefix - 1 + 64) {
        snprintf(err, errlen, "image digest '%s' is not sha256:<64 hex digits>",
                 digest ? digest : "");
        return -1;
    }
    const char *hex = digest + sizeof prefix - 1;
    for (size_t i = 0; i < 64; i++) {
        char c = hex[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
            snprintf(err, errlen, "image digest '%s' is not sha256:<64 hex digits>", digest);
            return -1;
        }
    }
    int n = snprintf(out, outlen, "%s/images/sha256/%s", cfg->data_dir, hex);
    if (n < 0 || (size_t)n >= outlen) {
        snprintf(err, errlen, "image cache path under %s is too long", cfg->data_dir);
        return -1;
    }
    return 0;
}

bool image_cache_ready(const struct sbx_config *cfg, const char *digest)
{
    char dir[4096], marker[4200], err[160];
    if (image_cache_dir(cfg, digest, dir, sizeof dir, err, sizeof err) != 0)
        return false;
    snprintf(marker, sizeof marker, "%s/ready", dir);
    return access(marker, F_OK) == 0;
}
