/*
 * tls.c: the gateway's HTTPS certificate and key: loading a pair from its two PEM files (a chain
 * and its key, checked to match), handing the current pair to libmicrohttpd at each handshake,
 * and replacing it on reload without disturbing open connections (tls.h).
 */
#include "tls.h"

#include <nettle/base16.h>
#include <nettle/sha2.h>
#include <errno.h>
#include <gnutls/x509.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A chain longer than this is not a server certificate chain anyone sends. */
#define TLS_CHAIN_MAX 8
/* PEM files larger than this are not a certificate chain or a key. */
#define TLS_FILE_MAX (1 << 20)

struct tls_pair {
    gnutls_pcert_st pcert[TLS_CHAIN_MAX];
    unsigned n_pcert;
    gnutls_privkey_t key;
    uint8_t files_hash[32]; /* of both files' contents: a reload of the same files is no change */
    char about[400];        /* subject, expiry, fingerprint */
    struct tls_pair *older; /* the pairs this one replaced, kept until tls_close() */
};

static struct {
    char cert_file[512];
    char key_file[512];
    struct tls_pair *current; /* read by the handshakes' threads, written by tls_open/tls_reload */
} tls;

static void pair_free(struct tls_pair *p)
{
    if (!p)
        return;
    for (unsigned i = 0; i < p->n_pcert; i++)
        gnutls_pcert_deinit(&p->pcert[i]);
    if (p->key)
        gnutls_privkey_deinit(p->key);
    free(p);
}

/* The whole file, NUL-terminated (PEM is text); -1 with err naming the file. */
static int read_file(const char *what, const char *path, gnutls_datum_t *out, char *err,
                     size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s %s: %s", what, path, strerror(errno));
        return -1;
    }
    char *buf = malloc(TLS_FILE_MAX + 1);
    size_t n = buf ? fread(buf, 1, TLS_FILE_MAX + 1, f) : 0;
    int failed = !buf || ferror(f);
    fclose(f);
    if (failed || n > TLS_FILE_MAX || n == 0) {
        snprintf(err, errlen, "%s %s: %s", what, path,
                 !buf     ? "out of memory"
                 : failed ? "read error"
                 : n == 0 ? "empty file"
                          : "larger than 1 MiB");
        free(buf);
        return -1;
    }
    buf[n] = '\0';
    out->data = (unsigned char *)buf;
    out->size = (unsigned)n;
    return 0;
}

/* SHA-256 key id of a public key; 0 or -1. */
static int key_id(gnutls_pubkey_t pub, uint8_t id[32])
{
    size_t len = 32;
    return gnutls_pubkey_get_key_id(pub, GNUTLS_KEYID_USE_SHA256, id, &len) == 0 && len == 32 ? 0
                                                                                              : -1;
}

/* Subject, expiry and fingerprint of the chain's first certificate into p->about; refuses an
 * expired one (every client would refuse it). */
static int describe_leaf(struct tls_pair *p, const char *cert_file, char *err, size_t errlen)
{
    gnutls_x509_crt_t crt = NULL;
    gnutls_datum_t dn = {0};
    uint8_t fp[32];
    char fp_hex[65], until[32];
    int rc = -1;

    if (gnutls_x509_crt_init(&crt) != 0 ||
        gnutls_x509_crt_import(crt, &p->pcert[0].cert, GNUTLS_X509_FMT_DER) != 0) {
        snprintf(err, errlen, "tls_cert_file %s: its first certificate cannot be read", cert_file);
        goto out;
    }
    time_t expires = gnutls_x509_crt_get_expiration_time(crt);
    struct tm tm;
    if (expires == (time_t)-1 || !gmtime_r(&expires, &tm))
        snprintf(until, sizeof until, "?");
    else
        strftime(until, sizeof until, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (expires != (time_t)-1 && expires < time(NULL)) {
        snprintf(err, errlen, "tls_cert_file %s: the certificate expired at %s", cert_file, until);
        goto out;
    }
    struct sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, p->pcert[0].cert.size, p->pcert[0].cert.data);
    sha256_digest(&c, sizeof fp, fp);
    base16_encode_update(fp_hex, sizeof fp, fp);
    fp_hex[2 * sizeof fp] = '\0';
    if (gnutls_x509_crt_get_dn3(crt, &dn, 0) != 0)
        dn.data = NULL;
    snprintf(p->about, sizeof p->about, "\"%s\" valid until %s, SHA-256 fingerprint %s",
             dn.data ? (const char *)dn.data : "?", until, fp_hex);
    rc = 0;
out:
    gnutls_free(dn.data);
    if (crt)
        gnutls_x509_crt_deinit(crt);
    return rc;
}

/* Loads cert_file (a PEM chain, the server's certificate first) and key_file (its PEM private
 * key) and checks that the key is the certificate's. */
static struct tls_pair *pair_load(const char *cert_file, const char *key_file, char *err,
                                  size_t errlen)
{
    gnutls_datum_t cert = {0}, key = {0};
    gnutls_pubkey_t pub = NULL;
    uint8_t cert_id[32], key_id_[32];
    struct tls_pair *p = calloc(1, sizeof *p);
    int ret;

    if (!p) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (read_file("tls_cert_file", cert_file, &cert, err, errlen) != 0 ||
        read_file("tls_key_file", key_file, &key, err, errlen) != 0)
        goto fail;
    struct sha256_ctx h;
    sha256_init(&h);
    sha256_update(&h, cert.size, cert.data);
    sha256_update(&h, 4, (const uint8_t *)"\n--\n"); /* the boundary: moving bytes across files
                                                         is a change */
    sha256_update(&h, key.size, key.data);
    sha256_digest(&h, sizeof p->files_hash, p->files_hash);

    p->n_pcert = TLS_CHAIN_MAX;
    ret = gnutls_pcert_list_import_x509_raw(p->pcert, &p->n_pcert, &cert, GNUTLS_X509_FMT_PEM,
                                            GNUTLS_X509_CRT_LIST_FAIL_IF_UNSORTED);
    if (ret < 0 || p->n_pcert == 0) {
        p->n_pcert = 0;
        snprintf(err, errlen, "tls_cert_file %s: %s", cert_file,
                 ret == GNUTLS_E_SHORT_MEMORY_BUFFER ? "more than 8 certificates in the chain"
                 : ret == GNUTLS_E_CERTIFICATE_LIST_UNSORTED
                     ? "the chain is not in order (the server's certificate first, then each "
                       "issuer)"
                 : ret < 0 ? gnutls_strerror(ret)
                           : "no PEM certificate in it");
        goto fail;
    }
    if ((ret = gnutls_privkey_init(&p->key)) != 0 ||
        (ret = gnutls_privkey_import_x509_raw(p->key, &key, GNUTLS_X509_FMT_PEM, NULL, 0)) != 0) {
        snprintf(err, errlen, "tls_key_file %s: not a PEM private key (%s)", key_file,
                 gnutls_strerror(ret));
        goto fail;
    }
    if (gnutls_pubkey_init(&pub) != 0 || gnutls_pubkey_import_privkey(pub, p->key, 0, 0) != 0 ||
        key_id(pub, key_id_) != 0 || key_id(p->pcert[0].pubkey, cert_id) != 0) {
        snprintf(err, errlen, "tls_key_file %s: its public key cannot be derived", key_file);
        goto fail;
    }
    if (memcmp(cert_id, key_id_, sizeof cert_id) != 0) {
        snprintf(err, errlen, "tls_key_file %s is not the key of the certificate in %s", key_file,
                 cert_file);
        goto fail;
    }
    if (describe_leaf(p, cert_file, err, errlen) != 0)
        goto fail;
    gnutls_pubkey_deinit(pub);
    free(cert.data);
    /* The key's text is a secret: no copy of it stays in freed memory. */
    memset(key.data, 0, key.size);
    free(key.data);
    return p;
fail:
    if (pub)
        gnutls_pubkey_deinit(pub);
    free(cert.data);
    if (key.data)
        memset(key.data, 0, key.size);
    free(key.data);
    pair_free(p);
    return NULL;
}

int tls_open(const char *cert_file, const char *key_file, char *err, size_t errlen)
{
    struct tls_pair *p = pair_load(cert_file, key_file, err, errlen);
    if (!p)
        return -1;
    snprintf(tls.cert_file, sizeof tls.cert_file, "%s", cert_file);
    snprintf(tls.key_file, sizeof tls.key_file, "%s", key_file);
    __atomic_store_n(&tls.current, p, __ATOMIC_RELEASE);
    return 0;
}

int tls_reload(char *msg, size_t msglen)
{
    struct tls_pair *cur = __atomic_load_n(&tls.current, __ATOMIC_ACQUIRE);
    struct tls_pair *p = pair_load(tls.cert_file, tls.key_file, msg, msglen);
    if (!p)
        return -1;
    if (cur && memcmp(cur->files_hash, p->files_hash, sizeof p->files_hash) == 0) {
        snprintf(msg, msglen, "%s", cur->about);
        pair_free(p);
        return 0;
    }
    p->older = cur;
    snprintf(msg, msglen, "%s", p->about);
    __atomic_store_n(&tls.current, p, __ATOMIC_RELEASE);
    return 1;
}

void tls_describe(char *out, size_t outlen)
{
    struct tls_pair *cur = __atomic_load_n(&tls.current, __ATOMIC_ACQUIRE);
    snprintf(out, outlen, "%s", cur ? cur->about : "no certificate");
}

void tls_close(void)
{
    struct tls_pair *p = __atomic_exchange_n(&tls.current, NULL, __ATOMIC_ACQ_REL);
    while (p) {
        struct tls_pair *older = p->older;
        pair_free(p);
        p = older;
    }
}

int tls_cert_callback(gnutls_session_t session, const gnutls_datum_t *req_ca_rdn, int nreqs,
                      const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length,
                      gnutls_pcert_st **pcert, unsigned int *pcert_length,
                      gnutls_privkey_t *privkey)
{
    (void)session;
    (void)req_ca_rdn;
    (void)nreqs;
    (void)pk_algos;
    (void)pk_algos_length;
    struct tls_pair *p = __atomic_load_n(&tls.current, __ATOMIC_ACQUIRE);
    if (!p)
        return -1;
    /* Ours, not the session's: GnuTLS frees nothing given through this callback. */
    *pcert = p->pcert;
    *pcert_length = p->n_pcert;
    *privkey = p->key;
    return 0;
}
