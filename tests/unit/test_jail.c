/*
 * test_jail.c: jail paths are built only from safe components, and reap's guard recognises only
 * the exact jail of a Sandbox (a corrupted row must not make the worker remove other directories).
 */
#include "host/jail.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

static void test_jail_path_layout(void **state)
{
    (void)state;
    char out[512];
    assert_int_equal(jail_path("/srv/jail", "process", "sbx_abc123", out, sizeof out), 0);
    assert_string_equal(out, "/srv/jail/process/sbx_abc123");
}

static void test_jail_path_rejects_unsafe_ids(void **state)
{
    (void)state;
    char out[512];
    const char *bad[] = {
        "",      ".",
        "..",    "../etc",
        "a/b",   "sbx_x\n",
        "sbx x", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(jail_path("/srv/jail", "process", bad[i], out, sizeof out), -1);
    assert_int_equal(jail_path("relative", "process", "sbx_a", out, sizeof out), -1);
    assert_int_equal(jail_path("/srv/jail", "../x", "sbx_a", out, sizeof out), -1);
    assert_int_equal(jail_path("/srv/jail", "process", "sbx_a", out, 20), -1); /* too small */
}

static void test_jail_path_is_exact(void **state)
{
    (void)state;
    assert_true(jail_path_is("/srv/jail", "process", "sbx_a", "/srv/jail/process/sbx_a"));
    assert_false(jail_path_is("/srv/jail", "process", "sbx_a", "/srv/jail/process/sbx_b"));
    assert_false(jail_path_is("/srv/jail", "process", "sbx_a", "/srv/jail/process"));
    assert_false(jail_path_is("/srv/jail", "process", "sbx_a", "/srv/jail/process/sbx_a/.."));
    assert_false(jail_path_is("/srv/jail", "process", "sbx_a", "/"));
    assert_false(jail_path_is("/srv/jail", "process", "..", "/srv/jail/process/.."));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jail_path_layout),
        cmocka_unit_test(test_jail_path_rejects_unsafe_ids),
        cmocka_unit_test(test_jail_path_is_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
