/*
 * pki.c: the installation's keys in ca_dir (pki.h): making them once, loading them everywhere,
 * issuing server certificates with the CA (GnuTLS) and signing identity tokens with the Ed25519
 * key (nettle).
 *
 * The files are standard PEM, so an operator can inspect them with the usual tools: ca.key is
 * the CA's key as PKCS#8, ca.pem its self-signed certificate, jwt.key the Ed25519 key as PKCS#8
 * (its 32-byte seed inside). .lock serialises the first creation between processes.
 */
#include "pki.h"

#include "config.h"
#include "fs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <limits.h>
#include <nettle/eddsa.h>
#include <nettle/sha2.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CA_KEY "ca.key"
#define CA_PEM "ca.pem"
#define JWT_KEY "jwt.key"
#define LOCK_FILE ".lock"
/* Larger than any of the three files could be: a bigger one is not ours. */
#define KEY_FILE_MAX 65536

#define CA_LIFETIME (10LL * 365 * 86400)
/* Server certificates are valid from an hour ago: a host whose clock is a little behind the
 * issuer's still accepts them. */
#define BACKDATE 3600

struct pki {
    /* GnuTLS's certificate and key objects are not documented as safe to use from two threads
     * at once: every use of ca_crt and ca_key after pki_open holds mu. */
    pthread_mutex_t mu;
    gnutls_x509_crt_t ca_crt;
    gnutls_x509_privkey_t ca_key;
    char *ca_pem;
    char ca_file[PATH_MAX];
    uint8_t jwt_seed[ED25519_KEY_SIZE];
    uint8_t jwt_pub[ED25519_KEY_SIZE];
    char jwt_x[44];   /* base64url of jwt_pub: 43 characters */
    char jwt_kid[23]; /* base64url of the first 16 bytes of SHA-256(jwt_pub): 22 characters */
};

/* ---- base64url without padding (RFC 7515 section 2) ---- */

static size_t b64url_len(size_t n)
{
    return n / 3 * 4 + (n % 3 ? n % 3 + 1 : 0);
}

/* Writes b64url_len(n) characters and a NUL. */
static void b64url(const uint8_t *in, size_t n, char *out)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < n)
            v |= in[i + 2];
        out[o++] = tab[(v >> 18) & 63];
        out[o++] = tab[(v >> 12) & 63];
        if (i + 1 < n)
            out[o++] = tab[(v >> 6) & 63];
        if (i + 2 < n)
            out[o++] = tab[v & 63];
    }
    out[o] = '\0';
}

/* ---- files ---- */

static int path_of(char *out, size_t outlen, const char *dir, const char *name, char *err,
                   size_t errlen)
{
    int n = snprintf(out, outlen, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= outlen) {
        snprintf(err, errlen, "%s: the path is too long", dir);
        return -1;
    }
    return 0;
}

static bool file_exists(const char *dir, const char *name)
{
    char path[PATH_MAX];
    char ignored[8];
    struct stat st;
    return path_of(path, sizeof path, dir, name, ignored, sizeof ignored) == 0 &&
           stat(path, &st) == 0;
}

/* The whole file dir/name, NUL-terminated. A key file (secret) others can read is refused: a
 * signing key any local user could copy is no longer the installation's alone. */
static int read_key_file(const char *dir, const char *name, bool secret, gnutls_datum_t *out,
                         char *err, size_t errlen)
{
    char path[PATH_MAX];
    struct stat st;
    if (path_of(path, sizeof path, dir, name, err, errlen) != 0)
        return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open it: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        st.st_size > KEY_FILE_MAX) {
        snprintf(err, errlen, "%s: not a key file (a regular file of at most %d bytes)", path,
                 KEY_FILE_MAX);
        close(fd);
        return -1;
    }
    if (secret && (st.st_mode & 0007)) {
        snprintf(err, errlen, "%s: others may access it (mode %04o): chmod o-rwx it", path,
                 (unsigned)(st.st_mode & 07777));
        close(fd);
        return -1;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        snprintf(err, errlen, "%s: out of memory", path);
        close(fd);
        return -1;
    }
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            snprintf(err, errlen, "%s: cannot read it: %s", path,
                     r < 0 ? strerror(errno) : "shorter than its size");
            free(buf);
            close(fd);
            return -1;
        }
        got += (size_t)r;
    }
    close(fd);
    buf[got] = '\0';
    out->data = (unsigned char *)buf;
    out->size = (unsigned)got;
    return 0;
}

/* Writes data to a new temporary file in dir with exactly mode (whatever the umask), synced.
 * tmp receives its path. */
static int write_temp(const char *dir, const char *name, const gnutls_datum_t *data, mode_t mode,
                      char *tmp, size_t tmplen, char *err, size_t errlen)
{
    int n = snprintf(tmp, tmplen, "%s/.%s.XXXXXX", dir, name);
    if (n < 0 || (size_t)n >= tmplen) {
        snprintf(err, errlen, "%s: the path is too long", dir);
        return -1;
    }
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot create a file in it: %s", dir, strerror(errno));
        return -1;
    }
    size_t put = 0;
    int rc = fchmod(fd, mode);
    while (rc == 0 && put < data->size) {
        ssize_t w = write(fd, data->data + put, data->size - put);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            rc = -1;
        else
            put += (size_t)w;
    }
    if (rc == 0)
        rc = fsync(fd);
    if (close(fd) != 0)
        rc = -1;
    if (rc != 0) {
        snprintf(err, errlen, "%s: cannot write it: %s", tmp, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

static void sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* ---- the keys ---- */

static int gnutls_fail(int rc, const char *what, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s: %s", what, gnutls_strerror(rc));
    return -1;
}

static int fill_random(uint8_t *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t r = getrandom(buf + got, len - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

/* A positive serial number of 16 random bytes (RFC 5280 allows up to 20). */
static int random_serial(gnutls_x509_crt_t crt)
{
    uint8_t serial[16];
    if (fill_random(serial, sizeof serial) != 0)
        return GNUTLS_E_RANDOM_FAILED;
    serial[0] = (serial[0] & 0x7f) | 0x40;
    return gnutls_x509_crt_set_serial(crt, serial, sizeof serial);
}

/* The PKCS#8 PEM of the Ed25519 key whose seed is given. */
static int ed25519_key_pem(const uint8_t seed[ED25519_KEY_SIZE], gnutls_datum_t *out, char *err,
                           size_t errlen)
{
    uint8_t pub[ED25519_KEY_SIZE];
    gnutls_x509_privkey_t key;
    ed25519_sha512_public_key(pub, seed);
    gnutls_datum_t x = {pub, sizeof pub}, k = {(unsigned char *)seed, ED25519_KEY_SIZE};
    int rc = gnutls_x509_privkey_init(&key);
    if (rc < 0)
        return gnutls_fail(rc, "the token signing key", err, errlen);
    rc = gnutls_x509_privkey_import_ecc_raw(key, GNUTLS_ECC_CURVE_ED25519, &x, NULL, &k);
    if (rc >= 0)
        rc = gnutls_x509_privkey_export2_pkcs8(key, GNUTLS_X509_FMT_PEM, NULL, GNUTLS_PKCS_PLAIN,
                                               out);
    gnutls_x509_privkey_deinit(key);
    return rc < 0 ? gnutls_fail(rc, "the token signing key", err, errlen) : 0;
}

/* A new CA key and its self-signed certificate, and a new Ed25519 seed, as the files' text. */
static int generate(gnutls_datum_t *ca_key_pem, gnutls_datum_t *ca_pem, gnutls_datum_t *jwt_pem,
                    char *err, size_t errlen)
{
    gnutls_x509_privkey_t key = NULL;
    gnutls_x509_crt_t crt = NULL;
    uint8_t id[64], seed[ED25519_KEY_SIZE];
    size_t idlen = sizeof id;
    char cn[64];
    time_t now = time(NULL);
    int rc;

    if ((rc = gnutls_x509_privkey_init(&key)) < 0 ||
        (rc = gnutls_x509_privkey_generate(
             key, GNUTLS_PK_ECDSA, GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0)) < 0 ||
        (rc = gnutls_x509_privkey_get_key_id(key, GNUTLS_KEYID_USE_SHA1, id, &idlen)) < 0 ||
        (rc = gnutls_x509_crt_init(&crt)) < 0) {
        gnutls_fail(rc, "the CA key", err, errlen);
        goto fail;
    }
    /* The CN tells one installation's CA from another's when an operator looks at a chain. */
    snprintf(cn, sizeof cn, "sbx installation CA %02x%02x%02x%02x", id[0], id[1], id[2], id[3]);
    if ((rc = gnutls_x509_crt_set_version(crt, 3)) < 0 || (rc = random_serial(crt)) < 0 ||
        (rc = gnutls_x509_crt_set_activation_time(crt, now - BACKDATE)) < 0 ||
        (rc = gnutls_x509_crt_set_expiration_time(crt, (time_t)(now + CA_LIFETIME))) < 0 ||
        (rc = gnutls_x509_crt_set_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, cn,
                                            (unsigned)strlen(cn))) < 0 ||
        (rc = gnutls_x509_crt_set_key(crt, key)) < 0 ||
        /* Path length 0: it signs the hosts' certificates, never another CA. */
        (rc = gnutls_x509_crt_set_basic_constraints(crt, 1, 0)) < 0 ||
        (rc = gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_KEY_CERT_SIGN | GNUTLS_KEY_CRL_SIGN)) <
            0 ||
        (rc = gnutls_x509_crt_set_subject_key_id(crt, id, idlen)) < 0 ||
        (rc = gnutls_x509_crt_sign2(crt, crt, key, GNUTLS_DIG_SHA256, 0)) < 0 ||
        (rc = gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, ca_pem)) < 0) {
        gnutls_fail(rc, "the CA certificate", err, errlen);
        goto fail;
    }
    if ((rc = gnutls_x509_privkey_export2_pkcs8(key, GNUTLS_X509_FMT_PEM, NULL, GNUTLS_PKCS_PLAIN,
                                                ca_key_pem)) < 0) {
        gnutls_fail(rc, "the CA key", err, errlen);
        goto fail;
    }
    if (fill_random(seed, sizeof seed) != 0) {
        snprintf(err, errlen, "the token signing key: getrandom: %s", strerror(errno));
        goto fail;
    }
    rc = ed25519_key_pem(seed, jwt_pem, err, errlen);
    memset(seed, 0, sizeof seed);
    if (rc != 0)
        goto fail;
    gnutls_x509_crt_deinit(crt);
    gnutls_x509_privkey_deinit(key);
    return 0;
fail:
    gnutls_free(ca_pem->data);
    gnutls_free(ca_key_pem->data);
    ca_pem->data = ca_key_pem->data = NULL;
    if (crt)
        gnutls_x509_crt_deinit(crt);
    if (key)
        gnutls_x509_privkey_deinit(key);
    return -1;
}

/* Makes the three files in dir, which holds none of them; the caller holds the lock. Each is
 * written whole to a temporary name and linked into place, so a reader never sees part of one;
 * link() refuses to replace a file, so nothing another process made is overwritten. */
static int create_files(const char *dir, char *err, size_t errlen)
{
    gnutls_datum_t data[3] = {{NULL, 0}, {NULL, 0}, {NULL, 0}};
    /* ca.pem last: the file others fetch and trust appears once its key is in place. */
    const char *names[3] = {JWT_KEY, CA_KEY, CA_PEM};
    const mode_t modes[3] = {config_private_mode(0600), config_private_mode(0600), 0644};
    char tmp[3][PATH_MAX], final[PATH_MAX];
    int made = 0, linked = 0, rc = -1;

    if (generate(&data[1], &data[2], &data[0], err, errlen) != 0)
        return -1;
    for (; made < 3; made++)
        if (write_temp(dir, names[made], &data[made], modes[made], tmp[made], sizeof tmp[made], err,
                       errlen) != 0)
            goto out;
    for (; linked < 3; linked++) {
        if (path_of(final, sizeof final, dir, names[linked], err, errlen) != 0)
            goto out;
        if (link(tmp[linked], final) != 0) {
            snprintf(err, errlen, "%s: cannot create it: %s", final, strerror(errno));
            goto out;
        }
    }
    rc = 0;
out:
    for (int i = 0; i < made; i++)
        unlink(tmp[i]);
    /* A failure half way leaves the directory as it was (empty of keys), not half made, so
     * that the next start can make them. */
    for (int i = 0; rc != 0 && i < linked; i++)
        if (path_of(final, sizeof final, dir, names[i], err, errlen) == 0)
            unlink(final);
    sync_dir(dir);
    for (int i = 0; i < 3; i++) {
        if (data[i].data)
            memset(data[i].data, 0, data[i].size);
        gnutls_free(data[i].data);
    }
    return rc;
}

static int load_files(struct pki *p, const char *dir, char *err, size_t errlen)
{
    gnutls_datum_t key_pem = {NULL, 0}, crt_pem = {NULL, 0}, jwt_pem = {NULL, 0};
    gnutls_datum_t x = {NULL, 0}, y = {NULL, 0}, k = {NULL, 0};
    gnutls_x509_privkey_t jwt_key = NULL;
    gnutls_ecc_curve_t curve;
    uint8_t id1[64], id2[64];
    size_t id1len = sizeof id1, id2len = sizeof id2;
    char path[PATH_MAX];
    int rc = -1, g;

    if (read_key_file(dir, CA_KEY, true, &key_pem, err, errlen) != 0 ||
        read_key_file(dir, CA_PEM, false, &crt_pem, err, errlen) != 0 ||
        read_key_file(dir, JWT_KEY, true, &jwt_pem, err, errlen) != 0)
        goto out;

    path_of(path, sizeof path, dir, CA_KEY, err, errlen);
    if ((g = gnutls_x509_privkey_init(&p->ca_key)) < 0 ||
        (g = gnutls_x509_privkey_import(p->ca_key, &key_pem, GNUTLS_X509_FMT_PEM)) < 0) {
        snprintf(err, errlen, "%s: not a PEM private key (%s)", path, gnutls_strerror(g));
        goto out;
    }
    if (gnutls_x509_privkey_get_pk_algorithm(p->ca_key) != GNUTLS_PK_ECDSA) {
        snprintf(err, errlen, "%s: not an ECDSA key", path);
        goto out;
    }
    path_of(path, sizeof path, dir, CA_PEM, err, errlen);
    if ((g = gnutls_x509_crt_init(&p->ca_crt)) < 0 ||
        (g = gnutls_x509_crt_import(p->ca_crt, &crt_pem, GNUTLS_X509_FMT_PEM)) < 0) {
        snprintf(err, errlen, "%s: not a PEM certificate (%s)", path, gnutls_strerror(g));
        goto out;
    }
    if (gnutls_x509_crt_get_key_id(p->ca_crt, GNUTLS_KEYID_USE_SHA1, id1, &id1len) < 0 ||
        gnutls_x509_privkey_get_key_id(p->ca_key, GNUTLS_KEYID_USE_SHA1, id2, &id2len) < 0 ||
        id1len != id2len || memcmp(id1, id2, id1len) != 0) {
        snprintf(err, errlen, "%s: not the certificate of %s/%s (another CA's?)", path, dir,
                 CA_KEY);
        goto out;
    }

    path_of(path, sizeof path, dir, JWT_KEY, err, errlen);
    if ((g = gnutls_x509_privkey_init(&jwt_key)) < 0 ||
        (g = gnutls_x509_privkey_import(jwt_key, &jwt_pem, GNUTLS_X509_FMT_PEM)) < 0) {
        snprintf(err, errlen, "%s: not a PEM private key (%s)", path, gnutls_strerror(g));
        goto out;
    }
    if (gnutls_x509_privkey_get_pk_algorithm(jwt_key) != GNUTLS_PK_EDDSA_ED25519 ||
        gnutls_x509_privkey_export_ecc_raw(jwt_key, &curve, &x, &y, &k) < 0 ||
        k.size != ED25519_KEY_SIZE || x.size != ED25519_KEY_SIZE) {
        snprintf(err, errlen, "%s: not an Ed25519 key", path);
        goto out;
    }
    memcpy(p->jwt_seed, k.data, ED25519_KEY_SIZE);
    ed25519_sha512_public_key(p->jwt_pub, p->jwt_seed);
    if (memcmp(p->jwt_pub, x.data, ED25519_KEY_SIZE) != 0) {
        snprintf(err, errlen, "%s: its public key does not match its private key", path);
        goto out;
    }

    p->ca_pem = (char *)crt_pem.data; /* NUL-terminated by read_key_file */
    crt_pem.data = NULL;
    rc = 0;
out:
    if (k.data)
        memset(k.data, 0, k.size);
    if (key_pem.data)
        memset(key_pem.data, 0, key_pem.size);
    if (jwt_pem.data)
        memset(jwt_pem.data, 0, jwt_pem.size);
    gnutls_free(x.data);
    gnutls_free(y.data);
    gnutls_free(k.data);
    free(key_pem.data);
    free(crt_pem.data);
    free(jwt_pem.data);
    if (jwt_key)
        gnutls_x509_privkey_deinit(jwt_key);
    return rc;
}

/* The first of the files missing in dir, or NULL when all are there. */
static const char *first_missing(const char *dir, int *n_present)
{
    const char *names[3] = {CA_KEY, CA_PEM, JWT_KEY};
    const char *missing = NULL;
    *n_present = 0;
    for (int i = 0; i < 3; i++) {
        if (file_exists(dir, names[i]))
            (*n_present)++;
        else if (!missing)
            missing = names[i];
    }
    return missing;
}

/* Makes the files unless they exist, under an exclusive lock on dir/.lock, so that of two
 * processes starting at once one makes them and the other, once the lock is its, finds them. */
static int missing_error(const char *dir, const char *missing, char *err, size_t errlen)
{
    /* Some keys exist: others may trust them. Making the rest anew would not match them. */
    snprintf(err, errlen,
             "%s/%s is missing but the directory holds the other keys: restore it (from another "
             "host's %s), or empty the directory to make new keys that nothing trusts yet",
             dir, missing, dir);
    return -1;
}

static int ensure_files(const char *dir, char *err, size_t errlen)
{
    char lock_path[PATH_MAX];
    int n_present, rc;
    if (path_of(lock_path, sizeof lock_path, dir, LOCK_FILE, err, errlen) != 0)
        return -1;
    int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, config_private_mode(0600));
    if (fd < 0) {
        int e = errno;
        const char *missing = first_missing(dir, &n_present);
        if (missing && n_present > 0) /* a read-only directory that lacks a file */
            return missing_error(dir, missing, err, errlen);
        snprintf(err, errlen, "%s: cannot create it: %s", lock_path, strerror(e));
        return -1;
    }
    while ((rc = flock(fd, LOCK_EX)) != 0 && errno == EINTR)
        ;
    if (rc != 0) {
        snprintf(err, errlen, "%s: cannot lock it: %s", lock_path, strerror(errno));
        close(fd);
        return -1;
    }
    /* Looked at again under the lock: another process may have made them meanwhile. */
    const char *missing = first_missing(dir, &n_present);
    if (!missing)
        rc = 0;
    else if (n_present == 0)
        rc = create_files(dir, err, errlen);
    else
        rc = missing_error(dir, missing, err, errlen);
    flock(fd, LOCK_UN);
    close(fd);
    return rc;
}

int pki_open(const char *dir, struct pki **out, char *err, size_t errlen)
{
    int n_present;
    uint8_t digest[SHA256_DIGEST_SIZE];
    struct sha256_ctx h;

    *out = NULL;
    if (!dir || !*dir) {
        snprintf(err, errlen, "no directory for the installation's keys (ca_dir)");
        return -1;
    }
    if (fs_mkdir_p(dir, config_private_mode(0700)) != 0) {
        snprintf(err, errlen, "%s: cannot create it: %s", dir, strerror(errno));
        return -1;
    }
    /* Once all three exist they are only read: no lock (the directory may be read-only). */
    if (first_missing(dir, &n_present) && ensure_files(dir, err, errlen) != 0)
        return -1;

    struct pki *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    pthread_mutex_init(&p->mu, NULL);
    if (path_of(p->ca_file, sizeof p->ca_file, dir, CA_PEM, err, errlen) != 0 ||
        load_files(p, dir, err, errlen) != 0) {
        pki_free(p);
        return -1;
    }
    b64url(p->jwt_pub, sizeof p->jwt_pub, p->jwt_x);
    sha256_init(&h);
    sha256_update(&h, sizeof p->jwt_pub, p->jwt_pub);
    sha256_digest(&h, sizeof digest, digest);
    b64url(digest, 16, p->jwt_kid);
    *out = p;
    return 0;
}

void pki_free(struct pki *p)
{
    if (!p)
        return;
    if (p->ca_crt)
        gnutls_x509_crt_deinit(p->ca_crt);
    if (p->ca_key)
        gnutls_x509_privkey_deinit(p->ca_key);
    free(p->ca_pem);
    memset(p->jwt_seed, 0, sizeof p->jwt_seed);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

const char *pki_ca_pem(const struct pki *p)
{
    return p->ca_pem;
}

const char *pki_ca_file(const struct pki *p)
{
    return p->ca_file;
}

/* ---- server certificates ---- */

static char *dup_datum(const gnutls_datum_t *d)
{
    char *s = malloc(d->size + 1);
    if (s) {
        memcpy(s, d->data, d->size);
        s[d->size] = '\0';
    }
    return s;
}

static bool dns_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253)
        return false;
    return s[strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-*")] ==
           '\0';
}

int pki_issue_server_cert(struct pki *p, const char *const *ips, size_t n_ips,
                          const char *const *names, size_t n_names, int64_t valid_seconds,
                          char **cert_pem, char **key_pem, char *err, size_t errlen)
{
    gnutls_x509_privkey_t key = NULL;
    gnutls_x509_crt_t crt = NULL;
    gnutls_datum_t crt_out = {NULL, 0}, key_out = {NULL, 0};
    uint8_t id[64], ca_id[64];
    size_t idlen = sizeof id, ca_idlen = sizeof ca_id;
    time_t now = time(NULL);
    int rc = -1, g;

    *cert_pem = *key_pem = NULL;
    if (n_ips + n_names == 0) {
        snprintf(err, errlen, "a server certificate needs an address or a name");
        return -1;
    }
    if (valid_seconds <= 0 || valid_seconds > CA_LIFETIME) {
        snprintf(err, errlen, "a server certificate's validity must be 1 to %lld seconds",
                 (long long)CA_LIFETIME);
        return -1;
    }
    for (size_t i = 0; i < n_ips; i++) {
        struct in_addr a;
        if (inet_pton(AF_INET, ips[i], &a) != 1) {
            snprintf(err, errlen, "\"%.64s\" is not an IPv4 address", ips[i]);
            return -1;
        }
    }
    for (size_t i = 0; i < n_names; i++) {
        if (!dns_name_ok(names[i])) {
            snprintf(err, errlen, "\"%.64s\" is not a DNS name", names[i]);
            return -1;
        }
    }
    const char *cn = n_ips ? ips[0] : names[0];

    if ((g = gnutls_x509_privkey_init(&key)) < 0 ||
        (g = gnutls_x509_privkey_generate(
             key, GNUTLS_PK_ECDSA, GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0)) < 0 ||
        (g = gnutls_x509_privkey_get_key_id(key, GNUTLS_KEYID_USE_SHA1, id, &idlen)) < 0 ||
        (g = gnutls_x509_crt_init(&crt)) < 0 || (g = gnutls_x509_crt_set_version(crt, 3)) < 0 ||
        (g = random_serial(crt)) < 0 ||
        (g = gnutls_x509_crt_set_activation_time(crt, now - BACKDATE)) < 0 ||
        (g = gnutls_x509_crt_set_expiration_time(crt, (time_t)(now + valid_seconds))) < 0 ||
        (g = gnutls_x509_crt_set_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, cn,
                                           (unsigned)strlen(cn))) < 0 ||
        (g = gnutls_x509_crt_set_key(crt, key)) < 0 ||
        (g = gnutls_x509_crt_set_basic_constraints(crt, 0, -1)) < 0 ||
        (g = gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_DIGITAL_SIGNATURE)) < 0 ||
        (g = gnutls_x509_crt_set_key_purpose_oid(crt, GNUTLS_KP_TLS_WWW_SERVER, 0)) < 0 ||
        (g = gnutls_x509_crt_set_subject_key_id(crt, id, idlen)) < 0) {
        gnutls_fail(g, "the server certificate", err, errlen);
        goto out;
    }
    for (size_t i = 0; i < n_ips; i++) {
        struct in_addr a;
        inet_pton(AF_INET, ips[i], &a);
        if ((g = gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_IPADDRESS, &a, 4,
                                                      GNUTLS_FSAN_APPEND)) < 0) {
            gnutls_fail(g, "the server certificate's addresses", err, errlen);
            goto out;
        }
    }
    for (size_t i = 0; i < n_names; i++) {
        if ((g = gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_DNSNAME, names[i],
                                                      (unsigned)strlen(names[i]),
                                                      GNUTLS_FSAN_APPEND)) < 0) {
            gnutls_fail(g, "the server certificate's names", err, errlen);
            goto out;
        }
    }
    pthread_mutex_lock(&p->mu);
    g = gnutls_x509_crt_get_subject_key_id(p->ca_crt, ca_id, &ca_idlen, NULL);
    if (g >= 0)
        g = gnutls_x509_crt_set_authority_key_id(crt, ca_id, ca_idlen);
    if (g >= 0)
        g = gnutls_x509_crt_sign2(crt, p->ca_crt, p->ca_key, GNUTLS_DIG_SHA256, 0);
    pthread_mutex_unlock(&p->mu);
    if (g < 0 || (g = gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &crt_out)) < 0 ||
        (g = gnutls_x509_privkey_export2_pkcs8(key, GNUTLS_X509_FMT_PEM, NULL, GNUTLS_PKCS_PLAIN,
                                               &key_out)) < 0) {
        gnutls_fail(g, "signing the server certificate", err, errlen);
        goto out;
    }
    *cert_pem = dup_datum(&crt_out);
    *key_pem = dup_datum(&key_out);
    if (!*cert_pem || !*key_pem) {
        free(*cert_pem);
        free(*key_pem);
        *cert_pem = *key_pem = NULL;
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    rc = 0;
out:
    if (key_out.data)
        memset(key_out.data, 0, key_out.size);
    gnutls_free(key_out.data);
    gnutls_free(crt_out.data);
    if (crt)
        gnutls_x509_crt_deinit(crt);
    if (key)
        gnutls_x509_privkey_deinit(key);
    return rc;
}

/* ---- identity tokens ---- */

int pki_jwt_sign(struct pki *p, json_t *claims, char **jwt, char *err, size_t errlen)
{
    char header[96];
    uint8_t sig[ED25519_SIGNATURE_SIZE];
    *jwt = NULL;
    if (!json_is_object(claims)) {
        snprintf(err, errlen, "a token's claims must be a JSON object");
        return -1;
    }
    char *payload = json_dumps(claims, JSON_COMPACT);
    if (!payload) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* Its fields in a fixed order, so that equal tokens are equal strings. */
    int hlen = snprintf(header, sizeof header, "{\"alg\":\"EdDSA\",\"typ\":\"JWT\",\"kid\":\"%s\"}",
                        p->jwt_kid);
    size_t plen = strlen(payload);
    size_t h64 = b64url_len((size_t)hlen), p64 = b64url_len(plen);
    size_t s64 = b64url_len(sizeof sig);
    char *out = malloc(h64 + 1 + p64 + 1 + s64 + 1);
    if (!out) {
        free(payload);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    b64url((const uint8_t *)header, (size_t)hlen, out);
    out[h64] = '.';
    b64url((const uint8_t *)payload, plen, out + h64 + 1);
    free(payload);
    /* The signature covers the encoded header and payload with the dot between them. */
    ed25519_sha512_sign(p->jwt_pub, p->jwt_seed, h64 + 1 + p64, (const uint8_t *)out, sig);
    out[h64 + 1 + p64] = '.';
    b64url(sig, sizeof sig, out + h64 + 1 + p64 + 1);
    *jwt = out;
    return 0;
}

json_t *pki_jwks(const struct pki *p)
{
    return json_pack("{s:[{s:s, s:s, s:s, s:s, s:s, s:s}]}", "keys", "kty", "OKP", "crv", "Ed25519",
                     "x", p->jwt_x, "kid", p->jwt_kid, "alg", "EdDSA", "use", "sig");
}
