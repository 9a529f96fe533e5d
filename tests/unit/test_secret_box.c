/*
 * test_secret_box.c: App secrets at rest and their rules (common/secret_box.h,
 * common/secret_rules.h): a sealed value opens only with the same key, App and name and unchanged
 * bytes; the key file is made once, 0600, and refused when others may read it; names and hosts
 * are refused as the API documents.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "secret_box.h"
#include "secret_rules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static struct secret_box *box_of(uint8_t fill)
{
    uint8_t key[SECRET_BOX_KEY_LEN];
    memset(key, fill, sizeof key);
    struct secret_box *b;
    assert_int_equal(secret_box_from_key(key, &b), 0);
    return b;
}

static void test_round_trip_and_tamper(void **state)
{
    (void)state;
    struct secret_box *b = box_of(1), *other = box_of(2);
    const char *value = "sk-live-0123456789";
    uint8_t nonce[SECRET_BOX_NONCE_LEN], nonce2[SECRET_BOX_NONCE_LEN], *ct, *ct2;
    size_t ct_len, ct2_len, len;
    char *out;
    assert_int_equal(
        secret_box_seal(b, "app_1", "MODEL_KEY", value, strlen(value), nonce, &ct, &ct_len), 0);
    assert_int_equal(ct_len, strlen(value) + SECRET_BOX_TAG_LEN);
    assert_null(memmem(ct, ct_len, "sk-live", 7));

    assert_int_equal(secret_box_unseal(b, "app_1", "MODEL_KEY", nonce, ct, ct_len, &out, &len), 0);
    assert_int_equal(len, strlen(value));
    assert_string_equal(out, value);
    secret_wipe(out, len);
    free(out);

    /* The same value sealed again differs (a fresh nonce). */
    assert_int_equal(
        secret_box_seal(b, "app_1", "MODEL_KEY", value, strlen(value), nonce2, &ct2, &ct2_len), 0);
    assert_memory_not_equal(nonce, nonce2, sizeof nonce);
    assert_memory_not_equal(ct, ct2, ct_len);
    free(ct2);

    /* Wrong associated data: another App, another name. */
    assert_int_equal(secret_box_unseal(b, "app_2", "MODEL_KEY", nonce, ct, ct_len, &out, &len), -1);
    assert_int_equal(secret_box_unseal(b, "app_1", "OTHER_KEY", nonce, ct, ct_len, &out, &len), -1);
    assert_int_equal(secret_box_unseal(b, "app_1M", "ODEL_KEY", nonce, ct, ct_len, &out, &len), -1);
    /* Wrong key. */
    assert_int_equal(secret_box_unseal(other, "app_1", "MODEL_KEY", nonce, ct, ct_len, &out, &len),
                     -1);
    assert_string_not_equal(secret_box_key_id(b), secret_box_key_id(other));
    assert_int_equal(strlen(secret_box_key_id(b)), SECRET_BOX_KEY_ID_LEN);
    /* Any changed byte: ciphertext, tag, nonce; a truncated one. */
    for (size_t i = 0; i < ct_len; i++) {
        ct[i] ^= 0x01;
        assert_int_equal(secret_box_unseal(b, "app_1", "MODEL_KEY", nonce, ct, ct_len, &out, &len),
                         -1);
        ct[i] ^= 0x01;
    }
    nonce[0] ^= 0x80;
    assert_int_equal(secret_box_unseal(b, "app_1", "MODEL_KEY", nonce, ct, ct_len, &out, &len), -1);
    nonce[0] ^= 0x80;
    assert_int_equal(secret_box_unseal(b, "app_1", "MODEL_KEY", nonce, ct, ct_len - 1, &out, &len),
                     -1);
    assert_int_equal(secret_box_unseal(b, "app_1", "MODEL_KEY", nonce, ct, 3, &out, &len), -1);

    /* An empty value round-trips too. */
    free(ct);
    assert_int_equal(secret_box_seal(b, "app_1", "E", "", 0, nonce, &ct, &ct_len), 0);
    assert_int_equal(secret_box_unseal(b, "app_1", "E", nonce, ct, ct_len, &out, &len), 0);
    assert_int_equal(len, 0);
    free(out);
    free(ct);
    secret_box_free(b);
    secret_box_free(other);
}

static void test_key_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/sbx-secret-box-XXXXXX", path[128], err[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/secrets.key", dir);
    struct secret_box *a, *b;
    /* Without create, a missing file is an error naming it. */
    assert_int_equal(secret_box_open(path, 0, &a, err, sizeof err), -1);
    assert_non_null(strstr(err, "secrets.key"));
    /* Made at first open, 0600; opened again, the same key. */
    assert_int_equal(secret_box_open(path, 1, &a, err, sizeof err), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0077, 0);
    assert_int_equal(st.st_size, 2 * SECRET_BOX_KEY_LEN + 1);
    assert_int_equal(secret_box_open(path, 1, &b, err, sizeof err), 0);
    assert_string_equal(secret_box_key_id(a), secret_box_key_id(b));
    uint8_t nonce[SECRET_BOX_NONCE_LEN], *ct;
    size_t ct_len, len;
    char *out;
    assert_int_equal(secret_box_seal(a, "app_1", "K", "v", 1, nonce, &ct, &ct_len), 0);
    assert_int_equal(secret_box_unseal(b, "app_1", "K", nonce, ct, ct_len, &out, &len), 0);
    free(out);
    free(ct);
    secret_box_free(a);
    secret_box_free(b);
    /* Readable by others: refused. */
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(secret_box_open(path, 1, &a, err, sizeof err), -1);
    assert_non_null(strstr(err, "others may access it"));
    /* Not a key: refused, never replaced. */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("not a key\n", f);
    fclose(f);
    assert_int_equal(chmod(path, 0600), 0);
    assert_int_equal(secret_box_open(path, 1, &a, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a secrets key"));
    unlink(path);
    snprintf(path, sizeof path, "%s/.lock", dir);
    unlink(path);
    rmdir(dir);
}

static void test_names(void **state)
{
    (void)state;
    char why[256];
    assert_true(secret_name_ok("MODEL_KEY", why, sizeof why));
    assert_true(secret_name_ok("_x1", why, sizeof why));
    assert_false(secret_name_ok("", why, sizeof why));
    assert_false(secret_name_ok("1KEY", why, sizeof why));
    assert_false(secret_name_ok("MODEL-KEY", why, sizeof why));
    assert_false(secret_name_ok("A=B", why, sizeof why));
    assert_false(secret_name_ok("SBX_TOKEN", why, sizeof why));
    assert_false(secret_name_ok("SBX_ANYTHING", why, sizeof why));
    assert_false(secret_name_ok("SSL_CERT_FILE", why, sizeof why));
    assert_false(secret_name_ok("NODE_EXTRA_CA_CERTS", why, sizeof why));
    char long_name[SECRET_NAME_MAX + 2];
    memset(long_name, 'A', sizeof long_name - 1);
    long_name[SECRET_NAME_MAX + 1] = '\0';
    assert_false(secret_name_ok(long_name, why, sizeof why));
    long_name[SECRET_NAME_MAX] = '\0';
    assert_true(secret_name_ok(long_name, why, sizeof why));
}

static void test_hosts(void **state)
{
    (void)state;
    char out[SECRET_HOST_MAX + 1], why[256];
    assert_true(secret_host_parse("API.Example.com.", out, why, sizeof why));
    assert_string_equal(out, "api.example.com");
    assert_true(secret_host_parse("*.example.org", out, why, sizeof why));
    assert_string_equal(out, "*.example.org");
    const char *bad[] = {"",
                         "*.",
                         "com",
                         "*.com",
                         "a..b",
                         "-a.com",
                         "a b.com",
                         "*.*.x.com",
                         "x.*.com",
                         "1.2.3.4",
                         "10.0.0.1",
                         "[::1]",
                         "::1",
                         "2001:db8::1",
                         "localhost",
                         "a.localhost",
                         "printer.local",
                         "*.internal",
                         "1.0.0.127.in-addr.arpa",
                         "example.123"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = '\0';
        if (secret_host_parse(bad[i], out, why, sizeof why))
            fail_msg("\"%s\" was accepted", bad[i]);
        assert_true(why[0] != '\0');
    }
    assert_false(secret_host_parse("169.254.169.254", out, why, sizeof why));
    assert_non_null(strstr(why, "metadata"));
    assert_false(secret_host_parse("8.8.8.8", out, why, sizeof why));
    assert_non_null(strstr(why, "IP address"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_and_tamper),
        cmocka_unit_test(test_key_file),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_hosts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
