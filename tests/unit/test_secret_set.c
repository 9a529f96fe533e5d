/*
 * test_secret_set.c: what common/secret_set.h promises the worker and the egress proxy:
 * placeholders of the documented form, different in every Sandbox for the same secret, found only
 * by their exact text; host patterns that match exact names and "*." suffixes only.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "secret_set.h"

#include <string.h>

static void test_placeholders(void **state)
{
    (void)state;
    struct secret_set a = {0}, b = {0};
    const char *hosts[] = {"API.example.com"};
    assert_int_equal(secret_set_add(&a, "MODEL_KEY", "sk-real", 7, hosts, 1), 0);
    assert_int_equal(secret_set_add(&b, "MODEL_KEY", "sk-real", 7, hosts, 1), 0);
    const char *p = a.v[0].placeholder;
    assert_int_equal(strlen(p), SECRET_PLACEHOLDER_LEN);
    assert_memory_equal(p, "sbx_ph_", 7);
    static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    assert_int_equal(strspn(p + 7, b64url), 43);
    assert_string_not_equal(p, b.v[0].placeholder);
    assert_ptr_equal(secret_set_find_placeholder(&a, p, strlen(p)), &a.v[0]);
    assert_null(secret_set_find_placeholder(&b, p, strlen(p)));
    assert_null(secret_set_find_placeholder(&a, p, strlen(p) - 1));
    assert_memory_equal(a.v[0].value, "sk-real", 7);
    assert_string_equal(a.v[0].hosts[0], "api.example.com");
    secret_set_clear(&a);
    secret_set_clear(&b);
    assert_int_equal(a.n, 0);
    assert_null(a.v);
}

static void test_hosts(void **state)
{
    (void)state;
    struct secret_set s = {0};
    const char *hosts[] = {"api.example.com", "*.example.org"};
    assert_int_equal(secret_set_add(&s, "K", "v", 1, hosts, 2), 0);
    const struct secret_binding *b = &s.v[0];
    assert_true(secret_binding_allows_host(b, "api.example.com"));
    assert_true(secret_binding_allows_host(b, "API.Example.COM"));
    assert_true(secret_binding_allows_host(b, "eu.example.org"));
    assert_true(secret_binding_allows_host(b, "a.b.example.org"));
    assert_false(secret_binding_allows_host(b, "example.org"));
    assert_false(secret_binding_allows_host(b, "badexample.org"));
    assert_false(secret_binding_allows_host(b, "api.example.com.evil.net"));
    assert_false(secret_binding_allows_host(b, "evil-api.example.com"));
    assert_false(secret_binding_allows_host(b, ""));
    secret_set_clear(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_placeholders),
        cmocka_unit_test(test_hosts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
