/*
 * test_jail.c: jail paths are built only from safe components, and reap's guard recognises only
 * the exact jail of a Sandbox (a corrupted row must not make the worker remove other directories).
 * Jails are tagged with the installation (host_tag.h), and the start-up sweep removes only this
 * installation's jails of Sandboxes no longer live: never another installation's or an untagged
 * one.
 */
#include "host/host_tag.h"
#include "fs.h"
#include "host/jail.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

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

static void test_jail_path_tagged(void **state)
{
    (void)state;
    char out[256], id[64];
    host_tag_set("inst0001");
    assert_int_equal(jail_path("/srv/jail", "process", "sbx_abc123", out, sizeof out), 0);
    assert_string_equal(out, "/srv/jail/process/inst0001-sbx_abc123");
    /* Reap recognises both the tagged jail and one made before tagging. */
    assert_true(jail_path_is("/srv/jail", "process", "sbx_a", "/srv/jail/process/inst0001-sbx_a"));
    assert_true(jail_path_is("/srv/jail", "process", "sbx_a", "/srv/jail/process/sbx_a"));
    assert_false(jail_path_is("/srv/jail", "process", "sbx_a", "/srv/jail/process/inst0002-sbx_a"));
    assert_int_equal(host_tag_owner("inst0001-sbx_abc", id, sizeof id), HOST_TAG_OURS);
    assert_string_equal(id, "sbx_abc");
    assert_int_equal(host_tag_owner("inst0001-sbx-abc", id, sizeof id), HOST_TAG_OURS);
    assert_string_equal(id, "sbx_abc"); /* the firecracker jailer's spelling */
    assert_int_equal(host_tag_owner("inst0002-sbx_abc", id, sizeof id), HOST_TAG_OTHERS);
    assert_int_equal(host_tag_owner("sbx_abc", id, sizeof id), HOST_TAG_LEGACY);
    assert_int_equal(host_tag_owner("inst0001-../x", id, sizeof id), HOST_TAG_OTHERS);
    assert_int_equal(host_tag_owner("inst0001", id, sizeof id), HOST_TAG_OTHERS);
    host_tag_set("");
}

static bool live_is_sbx_live(const char *sandbox_id, void *arg)
{
    (*(int *)arg)++;
    return strcmp(sandbox_id, "sbx_live") == 0;
}

static bool jail_exists(const char *base, const char *driver, const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s/%s", base, driver, name);
    return access(p, F_OK) == 0;
}

/* Sweeps <base>/<driver> as installation inst0001 with remove and checks that, of the jails the
 * caller made, only inst0001-sbx_dead went: inst0001-sbx_live (live), inst0002-sbx_dead (another
 * installation's) and sbx_dead (untagged: an older sbx may run it) stay, and only this
 * installation's two were judged. */
static void expect_only_own_dead_swept(const char *base, const char *driver,
                                       int (*remove)(const char *, char *, size_t))
{
    host_tag_set("inst0001");
    size_t removed = 0;
    int asked = 0;
    assert_int_equal(jail_sweep(base, driver, remove, live_is_sbx_live, &asked, &removed), 0);
    assert_int_equal(removed, 1);
    assert_int_equal(asked, 2);
    assert_false(jail_exists(base, driver, "inst0001-sbx_dead"));
    assert_true(jail_exists(base, driver, "inst0001-sbx_live"));
    assert_true(jail_exists(base, driver, "inst0002-sbx_dead"));
    assert_true(jail_exists(base, driver, "sbx_dead"));
}

static void test_jail_sweep_only_own_dead(void **state)
{
    (void)state;
    char base[] = "/tmp/sbx-test-jail-XXXXXX", p[512];
    assert_non_null(mkdtemp(base));
    const char *names[] = {"inst0001-sbx_live", "inst0001-sbx_dead", "inst0002-sbx_dead",
                           "sbx_dead", "unrelated"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(p, sizeof p, "%s/process/%s", base, names[i]);
        assert_int_equal(jail_create(p, false, p, sizeof p), 0);
    }
    expect_only_own_dead_swept(base, "process", jail_remove);
    assert_true(jail_exists(base, "process", "unrelated"));
    /* A jail that holds a file is not emptied: removal only ever rmdir()s. */
    snprintf(p, sizeof p, "%s/process/inst0002-sbx_dead/root/kept", base);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fclose(f);
    host_tag_set("inst0002");
    size_t removed = 0;
    int asked = 0;
    assert_int_equal(jail_sweep(base, "process", jail_remove, live_is_sbx_live, &asked, &removed),
                     0);
    assert_int_equal(removed, 0);
    assert_int_equal(access(p, F_OK), 0);
    assert_true(jail_exists(base, "process", "inst0001-sbx_live"));
    host_tag_set("");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    assert_int_equal(system(cmd), 0);
}

/* A qemu jail as the driver leaves it: files, a link to the kernel outside, a socket's place. */
static void make_qemu_jail(const char *base, const char *name, const char *outside)
{
    char p[600];
    snprintf(p, sizeof p, "%s/qemu/%s/root/dev", base, name);
    assert_int_equal(fs_mkdir_p(p, 0755), 0);
    snprintf(p, sizeof p, "%s/qemu/%s/qemu.log", base, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("qemu: terminating on signal 9\n", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/qemu/%s/root/vmlinuz", base, name);
    assert_int_equal(symlink(outside, p), 0);
}

static void test_jail_sweep_qemu_removes_files(void **state)
{
    (void)state;
    char base[] = "/tmp/sbx-test-jail-XXXXXX", outside[600];
    assert_non_null(mkdtemp(base));
    /* What a link in a jail points to is not the jail's: it stays. */
    snprintf(outside, sizeof outside, "%s/vmlinuz", base);
    FILE *f = fopen(outside, "w");
    assert_non_null(f);
    fclose(f);
    const char *names[] = {"inst0001-sbx_live", "inst0001-sbx_dead", "inst0002-sbx_dead",
                           "sbx_dead"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        make_qemu_jail(base, names[i], outside);
    expect_only_own_dead_swept(base, "qemu", jail_remove_tree); /* the dead one with its files */
    assert_int_equal(access(outside, F_OK), 0);
    /* The same jail under the process driver's removal keeps its files (rmdir only). */
    char p[600];
    snprintf(p, sizeof p, "%s/qemu/inst0002-sbx_dead", base);
    char err[256];
    assert_int_not_equal(jail_remove(p, err, sizeof err), 0);
    assert_true(jail_exists(base, "qemu", "inst0002-sbx_dead"));
    host_tag_set("");
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jail_path_layout),
        cmocka_unit_test(test_jail_path_rejects_unsafe_ids),
        cmocka_unit_test(test_jail_path_is_exact),
        cmocka_unit_test(test_jail_path_tagged),
        cmocka_unit_test(test_jail_sweep_only_own_dead),
        cmocka_unit_test(test_jail_sweep_qemu_removes_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
