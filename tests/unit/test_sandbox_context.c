/*
 * test_sandbox_context.c: what common/sandbox_context.h promises the worker and the callback
 * server: tokens of the documented form ("sbxcb_" and 43 base64url characters), never the same
 * twice, whose hash is the one handed back with them (the store finds a Sandbox by it), and the
 * six context variables an App's env may not set.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sandbox_context.h"

#include <string.h>

static void test_token_form(void **state)
{
    (void)state;
    char token[CALLBACK_TOKEN_LEN + 1], hash[65];
    memset(token, 'x', sizeof token);
    assert_int_equal(callback_token_new(token, hash), 0);
    assert_int_equal(strlen(token), CALLBACK_TOKEN_LEN);
    assert_int_equal(CALLBACK_TOKEN_LEN, 6 + 43);
    assert_memory_equal(token, "sbxcb_", 6);
    static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    assert_int_equal(strspn(token + 6, b64url), 43);
}

static void test_tokens_differ(void **state)
{
    (void)state;
    char a[CALLBACK_TOKEN_LEN + 1], b[CALLBACK_TOKEN_LEN + 1], ha[65], hb[65];
    assert_int_equal(callback_token_new(a, ha), 0);
    assert_int_equal(callback_token_new(b, hb), 0);
    assert_string_not_equal(a, b);
    assert_string_not_equal(ha, hb);
}

static void test_token_hash(void **state)
{
    (void)state;
    char token[CALLBACK_TOKEN_LEN + 1], hash[65], again[65];
    assert_int_equal(callback_token_new(token, hash), 0);
    assert_int_equal(strlen(hash), 64);
    assert_int_equal(strspn(hash, "0123456789abcdef"), 64);
    callback_token_hash(token, strlen(token), again);
    assert_string_equal(hash, again);
    /* a known value: the SHA-256 of "abc" (FIPS 180-2) */
    callback_token_hash("abc", 3, again);
    assert_string_equal(again, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    /* one character less is another token */
    callback_token_hash(token, strlen(token) - 1, again);
    assert_string_not_equal(hash, again);
}

static void test_reserved_names(void **state)
{
    (void)state;
    static const char *const reserved[] = {"SBX_SESSION_ID", "SBX_APP_ID", "SBX_SANDBOX_ID",
                                           "SBX_API_URL",    "SBX_TOKEN",  "SBX_CA_FILE"};
    for (size_t i = 0; i < 6; i++)
        assert_true(sandbox_context_reserved(reserved[i]));
    size_t n = 0;
    while (sandbox_context_vars[n])
        n++;
    assert_int_equal(n, 6);
    static const char *const free_names[] = {"SBX_OTHER", "PATH", "sbx_token", "SBX_TOKEN_",
                                             "SBX_",      "",     "HOME"};
    for (size_t i = 0; i < sizeof free_names / sizeof free_names[0]; i++)
        assert_false(sandbox_context_reserved(free_names[i]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_form),
        cmocka_unit_test(test_tokens_differ),
        cmocka_unit_test(test_token_hash),
        cmocka_unit_test(test_reserved_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
