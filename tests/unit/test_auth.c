/*
 * test_auth.c: token hashes (SHA-256, so stored key and admin token hashes keep matching),
 * base64url and the App key format, Bearer header parsing, a revoked key failing at once, and the
 * failed-auth rate limiter.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "auth.h"
#include "client_addr.h"
#include "store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* auth_hash is plain SHA-256 of the token: the hashes already stored for keys and the admin token
 * (admin_token_sha256) must keep matching the tokens their holders present. */
static void expect_hash(const char *token, const char *hex)
{
    uint8_t d[32], want[32];
    auth_hash(token, d);
    for (int i = 0; i < 32; i++) {
        unsigned v;
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
        want[i] = (uint8_t)v;
    }
    assert_memory_equal(d, want, 32);
}

static void test_auth_hash_is_sha256(void **state)
{
    (void)state;
    expect_hash("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    expect_hash("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    expect_hash("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
                "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_base64url(void **state)
{
    (void)state;
    char out[32];
    const struct {
        const char *in, *out;
    } v[] = {{"", ""},           {"f", "Zg"},          {"fo", "Zm8"},         {"foo", "Zm9v"},
             {"foob", "Zm9vYg"}, {"fooba", "Zm9vYmE"}, {"foobar", "Zm9vYmFy"}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        base64url_encode((const uint8_t *)v[i].in, strlen(v[i].in), out);
        assert_string_equal(out, v[i].out);
    }
    const uint8_t url[] = {0xfb, 0xff, 0xbf};
    base64url_encode(url, 3, out);
    assert_string_equal(out, "-_-_");
}

static void test_key_format(void **state)
{
    (void)state;
    char k1[80], k2[80], admin[80];
    assert_int_equal(auth_new_secret(AUTH_KEY_PREFIX, k1, sizeof k1), 0);
    assert_int_equal(auth_new_secret(AUTH_KEY_PREFIX, k2, sizeof k2), 0);
    assert_int_equal(strlen(k1), AUTH_KEY_LEN);
    assert_memory_equal(k1, "sbx_", 4);
    assert_true(auth_key_format_ok(k1));
    assert_string_not_equal(k1, k2);
    assert_int_equal(auth_new_secret(AUTH_ADMIN_PREFIX, admin, sizeof admin), 0);
    assert_int_equal(strlen(admin), 10 + 43);
    assert_false(auth_key_format_ok(admin));

    char bad[100];
    snprintf(bad, sizeof bad, "%s", k1);
    bad[20] = '+';
    assert_false(auth_key_format_ok(bad));
    bad[20] = '=';
    assert_false(auth_key_format_ok(bad));
    assert_false(auth_key_format_ok("sbx_short"));
    snprintf(bad, sizeof bad, "xbx_%s", k1 + 4);
    assert_false(auth_key_format_ok(bad));
    snprintf(bad, sizeof bad, "%sA", k1);
    assert_false(auth_key_format_ok(bad));
    char small[10];
    assert_int_equal(auth_new_secret(AUTH_KEY_PREFIX, small, sizeof small), -1);
}

static void test_bearer(void **state)
{
    (void)state;
    assert_string_equal(auth_bearer("Bearer abc"), "abc");
    assert_string_equal(auth_bearer("bearer   abc"), "abc");
    assert_null(auth_bearer("Bearer "));
    assert_null(auth_bearer("Basic abc"));
    assert_null(auth_bearer("Bearerabc"));
    assert_null(auth_bearer(NULL));
}

static void test_revoked_key_fails_at_once(void **state)
{
    (void)state;
    char path[] = "/tmp/sbx-test-auth-XXXXXX", err[256], secret[80], other[80], p[300];
    int fd = mkstemp(path);
    close(fd);
    unlink(path);
    struct store *st = store_sqlite_open(path, 1000, "FULL", err, sizeof err);
    assert_non_null(st);
    struct store_ctx ctx = {"admin", NULL};
    struct store_app app;
    store_app_defaults(&app, "a", "process");
    app.command_json = "[\"x\"]";
    assert_int_equal(store_app_create(st, &ctx, &app), STORE_OK);

    uint8_t hash[32], other_hash[32];
    struct store_key key, found;
    assert_int_equal(auth_new_secret(AUTH_KEY_PREFIX, secret, sizeof secret), 0);
    auth_hash(secret, hash);
    assert_int_equal(store_key_create(st, &ctx, app.id, NULL, "sbx_xxxxxx", hash, &key), STORE_OK);
    assert_int_equal(store_key_lookup(st, hash, &found), STORE_OK);
    assert_string_equal(found.app_id, app.id);
    /* A different key (one bit of the secret changed) is not found. */
    snprintf(other, sizeof other, "%s", secret);
    other[10] = other[10] == 'A' ? 'B' : 'A';
    auth_hash(other, other_hash);
    assert_int_equal(store_key_lookup(st, other_hash, &found), STORE_NOT_FOUND);
    assert_int_equal(store_key_revoke(st, &ctx, app.id, key.id), STORE_OK);
    assert_int_equal(store_key_lookup(st, hash, &found), STORE_NOT_FOUND);
    store_close(st);
    unlink(path);
    snprintf(p, sizeof p, "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", path);
    unlink(p);
}

static void test_rate_limiter(void **state)
{
    (void)state;
    struct ratelimit *rl = ratelimit_new(3, 1000);
    int64_t retry = 0, now = 5000;
    assert_non_null(rl);
    for (int i = 0; i < 3; i++) {
        assert_false(ratelimit_blocked(rl, "10.0.0.1", now, &retry));
        ratelimit_fail(rl, "10.0.0.1", now);
    }
    assert_true(ratelimit_blocked(rl, "10.0.0.1", now + 10, &retry));
    assert_int_equal(retry, 1);
    assert_false(ratelimit_blocked(rl, "10.0.0.2", now + 10, &retry));
    /* The window ends. */
    assert_false(ratelimit_blocked(rl, "10.0.0.1", now + 1000, &retry));
    /* Many addresses: the table stays bounded and keeps working. */
    char addr[48];
    for (int i = 0; i < 20000; i++) {
        snprintf(addr, sizeof addr, "192.168.%d.%d", i / 256, i % 256);
        ratelimit_fail(rl, addr, now + 2000);
    }
    for (int i = 0; i < 3; i++)
        ratelimit_fail(rl, "10.0.0.9", now + 2001);
    assert_true(ratelimit_blocked(rl, "10.0.0.9", now + 2002, &retry));
    ratelimit_free(rl);
}

static void test_client_address_through_trusted_proxies(void **state)
{
    char err[256], out[CLIENT_ADDR_LEN];
    struct trusted_proxies *none, *tp;
    (void)state;

    assert_non_null(none = trusted_proxies_parse("", err, sizeof err));
    assert_non_null(
        tp = trusted_proxies_parse(" 10.0.0.0/8, 192.0.2.1 ,2001:db8::/32", err, sizeof err));
    assert_true(trusted_proxies_match(tp, "10.1.2.3"));
    assert_true(trusted_proxies_match(tp, "192.0.2.1"));
    assert_false(trusted_proxies_match(tp, "192.0.2.2"));
    assert_true(trusted_proxies_match(tp, "2001:db8::7"));
    assert_true(trusted_proxies_match(tp, "::ffff:10.9.9.9")); /* IPv4-mapped is IPv4 */
    assert_false(trusted_proxies_match(tp, "not-an-address"));

    /* From a peer that is not a trusted proxy, X-Forwarded-For is ignored. */
    client_addr_resolve(none, "198.51.100.5", "203.0.113.9", out);
    assert_string_equal(out, "198.51.100.5");
    client_addr_resolve(tp, "198.51.100.5", "203.0.113.9", out);
    assert_string_equal(out, "198.51.100.5");
    /* From a trusted proxy: the right-most entry that is not a trusted proxy. What the client
     * wrote on the left (a forged address) does not count. */
    client_addr_resolve(tp, "10.0.0.1", "203.0.113.9", out);
    assert_string_equal(out, "203.0.113.9");
    client_addr_resolve(tp, "10.0.0.1", "1.2.3.4, 203.0.113.9, 10.0.0.2", out);
    assert_string_equal(out, "203.0.113.9");
    client_addr_resolve(tp, "10.0.0.1", " [2001:db9::1]:443 , 10.0.0.2", out);
    assert_string_equal(out, "2001:db9::1");
    client_addr_resolve(tp, "10.0.0.1", "203.0.113.9:5555", out);
    assert_string_equal(out, "203.0.113.9");
    /* No header, or garbage where the client should be: the last hop known. */
    client_addr_resolve(tp, "10.0.0.1", NULL, out);
    assert_string_equal(out, "10.0.0.1");
    client_addr_resolve(tp, "10.0.0.1", "evil, 10.0.0.3", out);
    assert_string_equal(out, "10.0.0.3");
    client_addr_resolve(tp, "10.0.0.1", "", out);
    assert_string_equal(out, "10.0.0.1");

    /* Bad lists are refused with the reason. */
    assert_null(trusted_proxies_parse("10.0.0.0/33", err, sizeof err));
    assert_non_null(strstr(err, "10.0.0.0/33"));
    assert_null(trusted_proxies_parse("10.0.0.1,,10.0.0.2", err, sizeof err));
    assert_null(trusted_proxies_parse("proxy.example", err, sizeof err));
    trusted_proxies_free(none);
    trusted_proxies_free(tp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auth_hash_is_sha256),
        cmocka_unit_test(test_base64url),
        cmocka_unit_test(test_key_format),
        cmocka_unit_test(test_bearer),
        cmocka_unit_test(test_revoked_key_fails_at_once),
        cmocka_unit_test(test_rate_limiter),
        cmocka_unit_test(test_client_address_through_trusted_proxies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
