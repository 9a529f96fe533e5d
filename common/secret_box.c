/*
 * secret_box.c: the key of App secrets and their AEAD (secret_box.h): ChaCha20-Poly1305 from
 * nettle, the key in a file of its own beside (or instead of) the installation's keys.
 */
#include "secret_box.h"

#include "config.h"
#include "fs.h"
#include "id.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <nettle/chacha-poly1305.h>
#include <nettle/memops.h>
#include <nettle/sha2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* Bumped if the associated data ever changes: a row sealed under one layout never opens under
 * another. */
#define AAD_TAG "sbx-app-secret-v1"

struct secret_box {
    uint8_t key[SECRET_BOX_KEY_LEN];
    char key_id[SECRET_BOX_KEY_ID_LEN + 1];
};

void secret_wipe(void *p, size_t len)
{
    if (p)
        explicit_bzero(p, len);
}

int secret_box_from_key(const uint8_t key[SECRET_BOX_KEY_LEN], struct secret_box **out)
{
    struct secret_box *b = calloc(1, sizeof *b);
    if (!b)
        return -1;
    memcpy(b->key, key, SECRET_BOX_KEY_LEN);
    uint8_t digest[SHA256_DIGEST_SIZE];
    struct sha256_ctx h;
    sha256_init(&h);
    sha256_update(&h, SECRET_BOX_KEY_LEN, key);
    sha256_digest(&h, sizeof digest, digest);
    for (size_t i = 0; i < SECRET_BOX_KEY_ID_LEN / 2; i++)
        snprintf(b->key_id + 2 * i, 3, "%02x", digest[i]);
    *out = b;
    return 0;
}

void secret_box_free(struct secret_box *b)
{
    if (!b)
        return;
    secret_wipe(b, sizeof *b);
    free(b);
}

const char *secret_box_key_id(const struct secret_box *b)
{
    return b->key_id;
}

/* ---- the key file ---- */

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

static int read_key(const char *path, uint8_t key[SECRET_BOX_KEY_LEN], char *err, size_t errlen)
{
    char buf[160];
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open it: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return -1;
    }
    if (st.st_mode & 0007) {
        snprintf(err, errlen, "%s: others may access it (mode %04o): chmod o-rwx it", path,
                 (unsigned)(st.st_mode & 07777));
        close(fd);
        return -1;
    }
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf - 1)) < 0 && errno == EINTR)
        ;
    close(fd);
    if (n < 0) {
        snprintf(err, errlen, "%s: cannot read it: %s", path, strerror(errno));
        return -1;
    }
    size_t len = (size_t)n;
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' '))
        len--;
    int rc = 0;
    if (len != 2 * SECRET_BOX_KEY_LEN)
        rc = -1;
    for (size_t i = 0; rc == 0 && i < SECRET_BOX_KEY_LEN; i++) {
        int hi = hexval(buf[2 * i]), lo = hexval(buf[2 * i + 1]);
        if (hi < 0 || lo < 0)
            rc = -1;
        else
            key[i] = (uint8_t)(hi << 4 | lo);
    }
    secret_wipe(buf, sizeof buf);
    if (rc != 0)
        snprintf(err, errlen, "%s: not a secrets key (%d hex digits and a newline)", path,
                 2 * SECRET_BOX_KEY_LEN);
    return rc;
}

/* Writes a new random key to a temporary file beside path and links it into place; link()
 * never replaces a file another process made meanwhile. The caller holds the lock. */
static int create_key(const char *path, char *err, size_t errlen)
{
    char tmp[PATH_MAX], text[2 * SECRET_BOX_KEY_LEN + 2];
    uint8_t key[SECRET_BOX_KEY_LEN];
    if (snprintf(tmp, sizeof tmp, "%s.XXXXXX", path) >= (int)sizeof tmp) {
        snprintf(err, errlen, "%s: the path is too long", path);
        return -1;
    }
    if (random_bytes(key, sizeof key) != 0) {
        snprintf(err, errlen, "the kernel's random source failed");
        return -1;
    }
    for (size_t i = 0; i < sizeof key; i++)
        snprintf(text + 2 * i, 3, "%02x", key[i]);
    text[2 * SECRET_BOX_KEY_LEN] = '\n';
    text[2 * SECRET_BOX_KEY_LEN + 1] = '\0';
    secret_wipe(key, sizeof key);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        secret_wipe(text, sizeof text);
        snprintf(err, errlen, "%s: cannot create a file beside it: %s", path, strerror(errno));
        return -1;
    }
    size_t len = strlen(text);
    int rc = fchmod(fd, config_private_mode(0600));
    if (rc == 0 && write(fd, text, len) != (ssize_t)len)
        rc = -1;
    if (rc == 0)
        rc = fsync(fd);
    if (close(fd) != 0)
        rc = -1;
    secret_wipe(text, sizeof text);
    if (rc == 0 && link(tmp, path) != 0 && errno != EEXIST)
        rc = -1;
    int e = errno;
    unlink(tmp);
    if (rc != 0) {
        snprintf(err, errlen, "%s: cannot write it: %s", path, strerror(e));
        return -1;
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        int dfd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
    }
    return 0;
}

static int ensure_key(const char *path, char *err, size_t errlen)
{
    char lock_path[PATH_MAX];
    const char *slash = strrchr(path, '/');
    int n = slash ? snprintf(lock_path, sizeof lock_path, "%.*s/.lock", (int)(slash - path), path)
                  : snprintf(lock_path, sizeof lock_path, ".lock");
    if (n < 0 || (size_t)n >= sizeof lock_path) {
        snprintf(err, errlen, "%s: the path is too long", path);
        return -1;
    }
    int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, config_private_mode(0600));
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot create it: %s", lock_path, strerror(errno));
        return -1;
    }
    int rc;
    while ((rc = flock(fd, LOCK_EX)) != 0 && errno == EINTR)
        ;
    if (rc != 0) {
        snprintf(err, errlen, "%s: cannot lock it: %s", lock_path, strerror(errno));
        close(fd);
        return -1;
    }
    /* Looked at again under the lock: another process may have made it meanwhile. */
    rc = access(path, F_OK) == 0 ? 0 : create_key(path, err, errlen);
    flock(fd, LOCK_UN);
    close(fd);
    return rc;
}

int secret_box_open(const char *path, int create, struct secret_box **out, char *err, size_t errlen)
{
    uint8_t key[SECRET_BOX_KEY_LEN];
    *out = NULL;
    if (!path || !*path) {
        snprintf(err, errlen, "no file for the secrets key");
        return -1;
    }
    /* Once it exists it is only read: no lock (the directory may be read-only). */
    if (create && access(path, F_OK) != 0 && ensure_key(path, err, errlen) != 0)
        return -1;
    if (read_key(path, key, err, errlen) != 0)
        return -1;
    int rc = secret_box_from_key(key, out);
    secret_wipe(key, sizeof key);
    if (rc != 0)
        snprintf(err, errlen, "out of memory");
    return rc;
}

int secret_box_open_config(const struct sbx_config *cfg, struct secret_box **out, char *err,
                           size_t errlen)
{
    char path[PATH_MAX];
    if (cfg->secrets_key_file[0])
        return secret_box_open(cfg->secrets_key_file, 0, out, err, errlen);
    if (fs_mkdir_p(cfg->ca_dir, config_private_mode(0700)) != 0) {
        snprintf(err, errlen, "%s: cannot create it: %s", cfg->ca_dir, strerror(errno));
        return 1;
    }
    snprintf(path, sizeof path, "%s/%s", cfg->ca_dir, SECRET_BOX_DEFAULT_FILE);
    /* A key file that cannot be made (ca_dir mounted read-only before this file existed) leaves
     * the process without secrets rather than without a start: its other work needs none. */
    if (access(path, F_OK) != 0 && ensure_key(path, err, errlen) != 0)
        return 1;
    return secret_box_open(path, 0, out, err, errlen);
}

/* ---- the AEAD ---- */

/* The associated data: the tag, the App id and the name, each NUL-terminated (neither may hold
 * a NUL), so no two (App, name) pairs give the same bytes. */
static void start(struct chacha_poly1305_ctx *c, const struct secret_box *b, const char *app_id,
                  const char *name, const uint8_t nonce[SECRET_BOX_NONCE_LEN])
{
    chacha_poly1305_set_key(c, b->key);
    chacha_poly1305_set_nonce(c, nonce);
    chacha_poly1305_update(c, sizeof AAD_TAG, (const uint8_t *)AAD_TAG);
    chacha_poly1305_update(c, strlen(app_id) + 1, (const uint8_t *)app_id);
    chacha_poly1305_update(c, strlen(name) + 1, (const uint8_t *)name);
}

int secret_box_seal(const struct secret_box *b, const char *app_id, const char *name,
                    const void *value, size_t len, uint8_t nonce[SECRET_BOX_NONCE_LEN],
                    uint8_t **ct, size_t *ct_len)
{
    struct chacha_poly1305_ctx c;
    uint8_t *out = malloc(len + SECRET_BOX_TAG_LEN);
    if (!out || random_bytes(nonce, SECRET_BOX_NONCE_LEN) != 0) {
        free(out);
        return -1;
    }
    start(&c, b, app_id, name, nonce);
    chacha_poly1305_encrypt(&c, len, out, value);
    chacha_poly1305_digest(&c, SECRET_BOX_TAG_LEN, out + len);
    secret_wipe(&c, sizeof c);
    *ct = out;
    *ct_len = len + SECRET_BOX_TAG_LEN;
    return 0;
}

int secret_box_unseal(const struct secret_box *b, const char *app_id, const char *name,
                      const uint8_t nonce[SECRET_BOX_NONCE_LEN], const uint8_t *ct, size_t ct_len,
                      char **value, size_t *len)
{
    struct chacha_poly1305_ctx c;
    uint8_t tag[SECRET_BOX_TAG_LEN];
    if (ct_len < SECRET_BOX_TAG_LEN)
        return -1;
    size_t n = ct_len - SECRET_BOX_TAG_LEN;
    char *out = malloc(n + 1);
    if (!out)
        return -1;
    start(&c, b, app_id, name, nonce);
    chacha_poly1305_decrypt(&c, n, (uint8_t *)out, ct);
    chacha_poly1305_digest(&c, sizeof tag, tag);
    secret_wipe(&c, sizeof c);
    if (!memeql_sec(tag, ct + n, sizeof tag)) {
        secret_wipe(out, n);
        free(out);
        return -1;
    }
    out[n] = '\0';
    *value = out;
    *len = n;
    return 0;
}
