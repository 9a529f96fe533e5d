/*
 * test_pki.c: the installation's keys (common/pki.h): made once with private modes, the same
 * keys on every later open and for two processes starting at once, a damaged directory refused
 * by name rather than replaced, server certificates a TLS client accepts for their address only,
 * and identity tokens whose signature checks with the published JWKS key.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fs.h"
#include "pki.h"

#include <arpa/inet.h>
#include <stdbool.h>
#include <fcntl.h>
#include <pthread.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <nettle/eddsa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char base[64];
static char ca_dir[128];

static int setup(void **state)
{
    (void)state;
    snprintf(base, sizeof base, "/tmp/sbx-test-pki-XXXXXX");
    assert_non_null(mkdtemp(base));
    snprintf(ca_dir, sizeof ca_dir, "%s/ca", base);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fs_remove_tree(base);
    return 0;
}

static char *slurp(const char *dir, const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = calloc(1, 65536);
    assert_non_null(buf);
    size_t n = fread(buf, 1, 65535, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void spit(const char *dir, const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static mode_t mode_of(const char *dir, const char *name)
{
    char path[256];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(stat(path, &st), 0);
    return st.st_mode & 07777;
}

/* base64url without padding, as JWTs and JWKs carry it: the bytes, or -1. */
static int b64url_decode(const char *s, size_t len, uint8_t *out, size_t outcap)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    uint32_t acc = 0;
    int bits = 0;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        const char *c = memchr(tab, s[i], 64);
        if (!c || !s[i])
            return -1;
        acc = (acc << 6) | (uint32_t)(c - tab);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (n >= outcap)
                return -1;
            out[n++] = (uint8_t)(acc >> bits);
        }
    }
    return (int)n;
}

static void test_creation_makes_private_files(void **state)
{
    (void)state;
    struct pki *p;
    char err[512], path[256];
    assert_int_equal(pki_open(ca_dir, &p, err, sizeof err), 0);
    assert_int_equal(mode_of(base, "ca"), 0700);
    assert_int_equal(mode_of(ca_dir, "ca.key"), 0600);
    assert_int_equal(mode_of(ca_dir, "jwt.key"), 0600);
    assert_int_equal(mode_of(ca_dir, "ca.pem"), 0644);

    snprintf(path, sizeof path, "%s/ca.pem", ca_dir);
    assert_string_equal(pki_ca_file(p), path);
    char *pem = slurp(ca_dir, "ca.pem");
    assert_string_equal(pki_ca_pem(p), pem);
    assert_non_null(strstr(pem, "-----BEGIN CERTIFICATE-----"));
    free(pem);

    /* The CA certificate is a CA's: it may sign certificates. */
    gnutls_x509_crt_t ca;
    gnutls_datum_t d = {(unsigned char *)pki_ca_pem(p), (unsigned)strlen(pki_ca_pem(p))};
    unsigned critical, usage;
    assert_int_equal(gnutls_x509_crt_init(&ca), 0);
    assert_int_equal(gnutls_x509_crt_import(ca, &d, GNUTLS_X509_FMT_PEM), 0);
    assert_int_equal(gnutls_x509_crt_get_ca_status(ca, &critical), 1);
    assert_true(gnutls_x509_crt_get_key_usage(ca, &usage, &critical) >= 0);
    assert_true(usage & GNUTLS_KEY_KEY_CERT_SIGN);
    gnutls_x509_crt_deinit(ca);

    json_t *jwks = pki_jwks(p);
    json_t *key = json_array_get(json_object_get(jwks, "keys"), 0);
    assert_int_equal(json_array_size(json_object_get(jwks, "keys")), 1);
    assert_string_equal(json_string_value(json_object_get(key, "kty")), "OKP");
    assert_string_equal(json_string_value(json_object_get(key, "crv")), "Ed25519");
    assert_string_equal(json_string_value(json_object_get(key, "alg")), "EdDSA");
    assert_string_equal(json_string_value(json_object_get(key, "use")), "sig");
    assert_int_equal(strlen(json_string_value(json_object_get(key, "x"))), 43);
    assert_int_equal(strlen(json_string_value(json_object_get(key, "kid"))), 22);
    json_decref(jwks);
    pki_free(p);
}

static void test_reopen_gives_the_same_keys(void **state)
{
    (void)state;
    struct pki *p;
    char err[512];
    assert_int_equal(pki_open(ca_dir, &p, err, sizeof err), 0);
    char *pem = strdup(pki_ca_pem(p));
    json_t *jwks = pki_jwks(p);
    pki_free(p);

    assert_int_equal(pki_open(ca_dir, &p, err, sizeof err), 0);
    assert_string_equal(pki_ca_pem(p), pem);
    json_t *again = pki_jwks(p);
    assert_true(json_equal(jwks, again));
    json_decref(again);
    pki_free(p);
    free(pem);
    json_decref(jwks);
}

/* Two processes open a directory that has no keys yet at the same moment (a gateway and a
 * worker starting together): both end with the same CA, the one on disk. */
static void test_concurrent_creation_yields_one_ca(void **state)
{
    (void)state;
    for (int round = 0; round < 8; round++) {
        char dir[160];
        int go[2], res[2][2];
        pid_t pid[2];
        snprintf(dir, sizeof dir, "%s/ca%d", base, round);
        assert_int_equal(pipe(go), 0);
        for (int i = 0; i < 2; i++) {
            assert_int_equal(pipe(res[i]), 0);
            pid[i] = fork();
            assert_true(pid[i] >= 0);
            if (pid[i] == 0) {
                char c, err[512];
                struct pki *p;
                close(go[1]);
                close(res[i][0]);
                (void)read(go[0], &c, 1); /* returns when the parent closes its end */
                if (pki_open(dir, &p, err, sizeof err) != 0) {
                    fprintf(stderr, "child %d: %s\n", i, err);
                    _exit(1);
                }
                const char *pem = pki_ca_pem(p);
                bool whole = write(res[i][1], pem, strlen(pem)) == (ssize_t)strlen(pem);
                pki_free(p);
                _exit(whole ? 0 : 1);
            }
            close(res[i][1]);
        }
        close(go[0]);
        close(go[1]); /* both start now */
        char got[2][8192];
        for (int i = 0; i < 2; i++) {
            size_t n = 0;
            ssize_t r;
            while ((r = read(res[i][0], got[i] + n, sizeof got[i] - 1 - n)) > 0)
                n += (size_t)r;
            got[i][n] = '\0';
            close(res[i][0]);
            int status;
            assert_int_equal(waitpid(pid[i], &status, 0), pid[i]);
            assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        }
        assert_string_equal(got[0], got[1]);
        char *on_disk = slurp(dir, "ca.pem");
        assert_string_equal(got[0], on_disk);
        free(on_disk);
    }
}

static int is_ipv4_accepted(gnutls_x509_crt_t crt, const char *ip)
{
    struct in_addr a;
    assert_int_equal(inet_pton(AF_INET, ip, &a), 1);
    return (int)gnutls_x509_crt_check_ip(crt, (const unsigned char *)&a, 4, 0);
}

static void test_server_cert_verifies_for_its_address(void **state)
{
    (void)state;
    struct pki *p;
    char err[512], *cert_pem, *key_pem;
    const char *ips[] = {"10.213.0.1"};
    const char *names[] = {"callback.sbx.internal"};
    assert_int_equal(pki_open(ca_dir, &p, err, sizeof err), 0);
    assert_int_equal(
        pki_issue_server_cert(p, ips, 1, names, 1, 86400, &cert_pem, &key_pem, err, sizeof err), 0);

    gnutls_x509_crt_t ca, crt;
    gnutls_datum_t ca_d = {(unsigned char *)pki_ca_pem(p), (unsigned)strlen(pki_ca_pem(p))};
    gnutls_datum_t crt_d = {(unsigned char *)cert_pem, (unsigned)strlen(cert_pem)};
    unsigned verify = ~0u;
    assert_int_equal(gnutls_x509_crt_init(&ca), 0);
    assert_int_equal(gnutls_x509_crt_init(&crt), 0);
    assert_int_equal(gnutls_x509_crt_import(ca, &ca_d, GNUTLS_X509_FMT_PEM), 0);
    assert_int_equal(gnutls_x509_crt_import(crt, &crt_d, GNUTLS_X509_FMT_PEM), 0);
    assert_int_equal(gnutls_x509_crt_verify(crt, &ca, 1, 0, &verify), 0);
    assert_int_equal(verify, 0);

    assert_true(is_ipv4_accepted(crt, "10.213.0.1"));
    assert_false(is_ipv4_accepted(crt, "10.213.0.5"));
    assert_true(gnutls_x509_crt_check_hostname(crt, "callback.sbx.internal"));
    assert_false(gnutls_x509_crt_check_hostname(crt, "other.sbx.internal"));

    /* It is a TLS server's certificate, and the key that came with it is its key. */
    char oid[128];
    size_t oidlen = sizeof oid;
    assert_int_equal(gnutls_x509_crt_get_key_purpose_oid(crt, 0, oid, &oidlen, NULL), 0);
    assert_string_equal(oid, GNUTLS_KP_TLS_WWW_SERVER);
    assert_int_equal(gnutls_x509_crt_get_ca_status(crt, NULL), 0);
    gnutls_x509_privkey_t key;
    gnutls_datum_t key_d = {(unsigned char *)key_pem, (unsigned)strlen(key_pem)};
    uint8_t id1[64], id2[64];
    size_t id1len = sizeof id1, id2len = sizeof id2;
    assert_int_equal(gnutls_x509_privkey_init(&key), 0);
    assert_int_equal(gnutls_x509_privkey_import(key, &key_d, GNUTLS_X509_FMT_PEM), 0);
    assert_int_equal(gnutls_x509_privkey_get_key_id(key, 0, id1, &id1len), 0);
    assert_int_equal(gnutls_x509_crt_get_key_id(crt, 0, id2, &id2len), 0);
    assert_memory_equal(id1, id2, id1len);

    /* Two certificates never share a serial number. */
    char *cert2, *key2;
    uint8_t s1[32], s2[32];
    size_t s1len = sizeof s1, s2len = sizeof s2;
    gnutls_x509_crt_t crt2;
    assert_int_equal(pki_issue_server_cert(p, ips, 1, NULL, 0, 60, &cert2, &key2, err, sizeof err),
                     0);
    gnutls_datum_t crt2_d = {(unsigned char *)cert2, (unsigned)strlen(cert2)};
    assert_int_equal(gnutls_x509_crt_init(&crt2), 0);
    assert_int_equal(gnutls_x509_crt_import(crt2, &crt2_d, GNUTLS_X509_FMT_PEM), 0);
    assert_int_equal(gnutls_x509_crt_get_serial(crt, s1, &s1len), 0);
    assert_int_equal(gnutls_x509_crt_get_serial(crt2, s2, &s2len), 0);
    assert_false(s1len == s2len && memcmp(s1, s2, s1len) == 0);

    /* What is not an address or a name is refused, not signed. */
    const char *bad[] = {"10.213.0.300"};
    char *c3 = (char *)1, *k3 = (char *)1;
    assert_int_equal(pki_issue_server_cert(p, bad, 1, NULL, 0, 60, &c3, &k3, err, sizeof err), -1);
    assert_non_null(strstr(err, "10.213.0.300"));
    assert_null(c3);
    assert_int_equal(pki_issue_server_cert(p, NULL, 0, NULL, 0, 60, &c3, &k3, err, sizeof err), -1);

    gnutls_x509_crt_deinit(crt2);
    gnutls_x509_privkey_deinit(key);
    gnutls_x509_crt_deinit(crt);
    gnutls_x509_crt_deinit(ca);
    free(cert2);
    free(key2);
    free(cert_pem);
    free(key_pem);
    pki_free(p);
}

static void test_jwt_verifies_with_the_jwks_key(void **state)
{
    (void)state;
    struct pki *p;
    char err[512], *jwt;
    assert_int_equal(pki_open(ca_dir, &p, err, sizeof err), 0);
    json_t *claims = json_pack("{s:s, s:s, s:I}", "iss", "https://sbx.example", "aud", "vault",
                               "exp", (json_int_t)2000000000);
    assert_int_equal(pki_jwt_sign(p, claims, &jwt, err, sizeof err), 0);

    const char *dot1 = strchr(jwt, '.');
    assert_non_null(dot1);
    const char *dot2 = strchr(dot1 + 1, '.');
    assert_non_null(dot2);
    assert_null(strchr(dot2 + 1, '.'));
    assert_null(strchr(jwt, '=')); /* no padding */

    uint8_t buf[1024];
    int n = b64url_decode(jwt, (size_t)(dot1 - jwt), buf, sizeof buf);
    assert_true(n > 0);
    json_t *header = json_loadb((const char *)buf, (size_t)n, 0, NULL);
    assert_non_null(header);
    json_t *jwks = pki_jwks(p);
    json_t *jwk = json_array_get(json_object_get(jwks, "keys"), 0);
    assert_string_equal(json_string_value(json_object_get(header, "alg")), "EdDSA");
    assert_string_equal(json_string_value(json_object_get(header, "typ")), "JWT");
    assert_string_equal(json_string_value(json_object_get(header, "kid")),
                        json_string_value(json_object_get(jwk, "kid")));
    n = b64url_decode(dot1 + 1, (size_t)(dot2 - dot1 - 1), buf, sizeof buf);
    assert_true(n > 0);
    json_t *payload = json_loadb((const char *)buf, (size_t)n, 0, NULL);
    assert_true(json_equal(payload, claims));

    uint8_t pub[64], sig[128];
    const char *x = json_string_value(json_object_get(jwk, "x"));
    assert_int_equal(b64url_decode(x, strlen(x), pub, sizeof pub), ED25519_KEY_SIZE);
    assert_int_equal(b64url_decode(dot2 + 1, strlen(dot2 + 1), sig, sizeof sig),
                     ED25519_SIGNATURE_SIZE);
    size_t signed_len = (size_t)(dot2 - jwt);
    assert_int_equal(ed25519_sha512_verify(pub, signed_len, (const uint8_t *)jwt, sig), 1);

    /* Another payload under the same signature does not verify. */
    char *forged = strdup(jwt);
    char *pos = forged + (dot1 - jwt) + 1;
    *pos = *pos == 'A' ? 'B' : 'A';
    assert_int_equal(ed25519_sha512_verify(pub, signed_len, (const uint8_t *)forged, sig), 0);

    /* Claims that are not an object are refused. */
    json_t *arr = json_array();
    char *none = (char *)1;
    assert_int_equal(pki_jwt_sign(p, arr, &none, err, sizeof err), -1);
    assert_null(none);

    json_decref(arr);
    free(forged);
    json_decref(payload);
    json_decref(header);
    json_decref(jwks);
    json_decref(claims);
    free(jwt);
    pki_free(p);
}

/* The gateway's and the callback server's threads share one pki: certificates issued and tokens
 * signed from several threads at once all check. */
struct worker_arg {
    struct pki *p;
    int failures;
};

static void *issue_and_sign(void *arg)
{
    struct worker_arg *w = arg;
    char err[512];
    const char *ips[] = {"10.213.0.1"};
    gnutls_x509_crt_t ca; /* each thread its own: the test's objects are not what is tested */
    gnutls_datum_t ca_d = {(unsigned char *)pki_ca_pem(w->p), (unsigned)strlen(pki_ca_pem(w->p))};
    if (gnutls_x509_crt_init(&ca) != 0 ||
        gnutls_x509_crt_import(ca, &ca_d, GNUTLS_X509_FMT_PEM) != 0) {
        w->failures++;
        return NULL;
    }
    for (int i = 0; i < 8; i++) {
        char *cert_pem, *key_pem, *jwt;
        unsigned verify = ~0u;
        gnutls_x509_crt_t crt;
        if (pki_issue_server_cert(w->p, ips, 1, NULL, 0, 600, &cert_pem, &key_pem, err,
                                  sizeof err) != 0) {
            w->failures++;
            continue;
        }
        gnutls_datum_t d = {(unsigned char *)cert_pem, (unsigned)strlen(cert_pem)};
        if (gnutls_x509_crt_init(&crt) != 0 ||
            gnutls_x509_crt_import(crt, &d, GNUTLS_X509_FMT_PEM) != 0 ||
            gnutls_x509_crt_verify(crt, &ca, 1, 0, &verify) != 0 || verify != 0)
            w->failures++;
        gnutls_x509_crt_deinit(crt);
        free(cert_pem);
        free(key_pem);
        json_t *claims = json_pack("{s:i}", "n", i);
        if (pki_jwt_sign(w->p, claims, &jwt, err, sizeof err) != 0)
            w->failures++;
        else
            free(jwt);
        json_decref(claims);
    }
    gnutls_x509_crt_deinit(ca);
    return NULL;
}

static void test_threads_share_one_pki(void **state)
{
    (void)state;
    struct pki *p;
    char err[512];
    pthread_t t[4];
    struct worker_arg w[4];
    assert_int_equal(pki_open(ca_dir, &p, err, sizeof err), 0);
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker_arg){p, 0};
        assert_int_equal(pthread_create(&t[i], NULL, issue_and_sign, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(w[i].failures, 0);
    }
    pki_free(p);
}

/* A damaged directory is an error that names the file, and nothing in it is made anew: other
 * hosts may trust the CA that is there. */
static void test_damaged_directory_is_refused_by_name(void **state)
{
    (void)state;
    struct pki *p;
    char err[512], other[160];
    assert_int_equal(pki_open(ca_dir, &p, err, sizeof err), 0);
    pki_free(p);
    char *key = slurp(ca_dir, "ca.key"), *pem = slurp(ca_dir, "ca.pem");

    spit(ca_dir, "ca.key", "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n");
    assert_int_equal(pki_open(ca_dir, &p, err, sizeof err), -1);
    assert_null(p);
    assert_non_null(strstr(err, "/ca.key"));
    spit(ca_dir, "ca.key", key);
    assert_int_equal(pki_open(ca_dir, &p, err, sizeof err), 0);
    pki_free(p);

    /* A missing file: the others stay as they are. */
    char path[256];
    snprintf(path, sizeof path, "%s/ca.pem", ca_dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(pki_open(ca_dir, &p, err, sizeof err), -1);
    assert_non_null(strstr(err, "/ca.pem"));
    assert_int_equal(access(path, F_OK), -1);
    char *key_after = slurp(ca_dir, "ca.key");
    assert_string_equal(key_after, key);
    free(key_after);

    /* Another installation's certificate beside this key. */
    snprintf(other, sizeof other, "%s/other", base);
    assert_int_equal(pki_open(other, &p, err, sizeof err), 0);
    pki_free(p);
    char *other_pem = slurp(other, "ca.pem");
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    assert_true(fd >= 0);
    close(fd);
    spit(ca_dir, "ca.pem", other_pem);
    assert_int_equal(pki_open(ca_dir, &p, err, sizeof err), -1);
    assert_non_null(strstr(err, "/ca.pem"));
    spit(ca_dir, "ca.pem", pem);
    assert_int_equal(pki_open(ca_dir, &p, err, sizeof err), 0);
    pki_free(p);

    /* A signing key others may read. */
    snprintf(path, sizeof path, "%s/jwt.key", ca_dir);
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(pki_open(ca_dir, &p, err, sizeof err), -1);
    assert_non_null(strstr(err, "/jwt.key"));

    free(other_pem);
    free(key);
    free(pem);
}

int main(void)
{
    /* The modes asserted are those of a umask that leaves the group nothing to share. */
    umask(022);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_creation_makes_private_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reopen_gives_the_same_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_creation_yields_one_ca, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_cert_verifies_for_its_address, setup, teardown),
        cmocka_unit_test_setup_teardown(test_jwt_verifies_with_the_jwks_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads_share_one_pki, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_directory_is_refused_by_name, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
