/*
 * test_tree_remove.c: fs_remove_tree() against a Sandbox that fights back. A thread keeps
 * exchanging a directory of the tree with a symlink to a victim directory outside it (renameat2
 * with RENAME_EXCHANGE) while the tree is removed, 400 times: the tree goes, the victim stays
 * whole. Also: planted symlinks are removed as links, a mount point inside is not crossed, depth is
 * bounded.
 */
#include "fs.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define ROUNDS 400
#define VICTIM_FILES 8

static char root[] = "/tmp/sbx-tree-remove-XXXXXX";
static char victim[256], ws[256];

static void touch(const char *dir, const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "x", 1), 1);
    close(fd);
}

static int victim_files(void)
{
    char p[512];
    int n = 0;
    for (int i = 0; i < VICTIM_FILES; i++) {
        snprintf(p, sizeof p, "%s/f%d", victim, i);
        n += access(p, F_OK) == 0;
    }
    snprintf(p, sizeof p, "%s/sub/f0", victim);
    n += access(p, F_OK) == 0;
    return n;
}

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(root))
        return -1;
    snprintf(victim, sizeof victim, "%s/victim", root);
    snprintf(ws, sizeof ws, "%s/workspace", root);
    return mkdir(victim, 0755);
}

static int teardown(void **state)
{
    char cmd[320];
    (void)state;
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    return system(cmd) == 0 ? 0 : -1;
}

/* The victim: files with the same names as the Workspace's, so that a walk steered into it by
 * path would find and delete them. */
static void make_victim(void)
{
    char sub[512];
    for (int i = 0; i < VICTIM_FILES; i++) {
        char name[16];
        snprintf(name, sizeof name, "f%d", i);
        touch(victim, name);
    }
    snprintf(sub, sizeof sub, "%s/sub", victim);
    mkdir(sub, 0755);
    touch(sub, "f0");
}

/* The Workspace: d/ (files f0..f7 and sub/f0, the victim's names) and s -> the victim. */
static void make_workspace(void)
{
    char d[512], sub[512], s[512];
    assert_int_equal(mkdir(ws, 0755), 0);
    snprintf(d, sizeof d, "%s/d", ws);
    assert_int_equal(mkdir(d, 0755), 0);
    for (int i = 0; i < VICTIM_FILES; i++) {
        char name[16];
        snprintf(name, sizeof name, "f%d", i);
        touch(d, name);
    }
    snprintf(sub, sizeof sub, "%s/sub", d);
    assert_int_equal(mkdir(sub, 0755), 0);
    touch(sub, "f0");
    snprintf(s, sizeof s, "%s/s", ws);
    assert_int_equal(symlink(victim, s), 0);
}

struct swapper {
    atomic_int stop;
    atomic_long swaps;
};

static void *swap_loop(void *arg)
{
    struct swapper *sw = arg;
    char d[512], s[512];
    snprintf(d, sizeof d, "%s/d", ws);
    snprintf(s, sizeof s, "%s/s", ws);
    while (!atomic_load(&sw->stop))
        if (renameat2(AT_FDCWD, d, AT_FDCWD, s, RENAME_EXCHANGE) == 0)
            atomic_fetch_add(&sw->swaps, 1);
    return NULL;
}

static void test_exchanging_a_directory_for_a_symlink_never_reaches_the_victim(void **state)
{
    long swaps = 0;
    int left = 0;
    (void)state;
    make_victim();
    for (int round = 0; round < ROUNDS; round++) {
        struct swapper sw = {0};
        pthread_t t;
        make_workspace();
        assert_int_equal(pthread_create(&t, NULL, swap_loop, &sw), 0);
        /* On a loaded machine the new thread may not run for a while: start the removal only
         * once it is exchanging, so that every round really races. */
        while (atomic_load(&sw.swaps) < 2)
            sched_yield();
        if (fs_remove_tree(ws) != 0)
            left++;
        atomic_store(&sw.stop, 1);
        pthread_join(t, NULL);
        swaps += atomic_load(&sw.swaps);
        if (victim_files() != VICTIM_FILES + 1)
            fail_msg("round %d: the removal reached the victim (%d of %d files left)", round,
                     victim_files(), VICTIM_FILES + 1);
        /* Whatever the swapper left behind (it may win the last race) goes now. */
        if (access(ws, F_OK) == 0)
            assert_int_equal(fs_remove_tree(ws), 0);
        assert_int_equal(access(ws, F_OK), -1);
    }
    print_message("%ld exchanges during %d removals; %d removals needed a second call\n", swaps,
                  ROUNDS, left);
    assert_true(swaps > ROUNDS); /* the race was really run */
    assert_int_equal(victim_files(), VICTIM_FILES + 1);
}

static void test_symlinks_are_removed_as_links_and_a_missing_tree_is_fine(void **state)
{
    char p[512];
    (void)state;
    make_workspace();
    snprintf(p, sizeof p, "%s/d/up", ws);
    assert_int_equal(symlink("../../victim", p), 0);
    snprintf(p, sizeof p, "%s/d/fifo", ws);
    assert_int_equal(mkfifo(p, 0600), 0);
    assert_int_equal(fs_remove_tree(ws), 0);
    assert_int_equal(access(ws, F_OK), -1);
    assert_int_equal(victim_files(), VICTIM_FILES + 1);
    assert_int_equal(fs_remove_tree(ws), 0); /* already gone */
    /* A top that is itself a symlink is removed as one. */
    assert_int_equal(symlink(victim, ws), 0);
    assert_int_equal(fs_remove_tree(ws), 0);
    assert_int_equal(access(ws, F_OK), -1);
    assert_int_equal(victim_files(), VICTIM_FILES + 1);
}

static void test_a_mount_inside_is_not_crossed(void **state)
{
    char mnt[512], inside[512];
    (void)state;
    /* A mount namespace of our own, so that nothing is left mounted on the host if this fails. */
    if (geteuid() != 0 || unshare(CLONE_NEWNS) != 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        skip();
    make_workspace();
    snprintf(mnt, sizeof mnt, "%s/d/mnt", ws);
    assert_int_equal(mkdir(mnt, 0755), 0);
    if (mount(victim, mnt, NULL, MS_BIND, NULL) != 0)
        skip(); /* no mount namespace rights here */
    snprintf(inside, sizeof inside, "%s/f0", mnt);
    assert_int_equal(access(inside, F_OK), 0);
    assert_int_equal(fs_remove_tree(ws), -1);
    assert_int_equal(errno, EXDEV);
    assert_int_equal(victim_files(), VICTIM_FILES + 1); /* the bind mount's files were left */
    assert_int_equal(umount2(mnt, MNT_DETACH), 0);
    assert_int_equal(fs_remove_tree(ws), 0);
}

static void test_depth_is_bounded(void **state)
{
    char p[8192];
    int n;
    (void)state;
    assert_int_equal(mkdir(ws, 0755), 0);
    int fd = open(ws, O_RDONLY | O_DIRECTORY);
    for (int i = 0; i < FS_REMOVE_MAX_DEPTH + 10; i++) {
        assert_int_equal(mkdirat(fd, "d", 0755), 0);
        int next = openat(fd, "d", O_RDONLY | O_DIRECTORY);
        close(fd);
        fd = next;
    }
    close(fd);
    assert_int_equal(fs_remove_tree(ws), -1);
    assert_int_equal(errno, ELOOP);
    /* What is left is the part below the bound; removing again from further down works. */
    n = snprintf(p, sizeof p, "%s", ws);
    for (int i = 0; i < 200; i++)
        n += snprintf(p + n, sizeof p - (size_t)n, "/d");
    assert_int_equal(fs_remove_tree(p), 0);
    assert_int_equal(fs_remove_tree(ws), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exchanging_a_directory_for_a_symlink_never_reaches_the_victim),
        cmocka_unit_test(test_symlinks_are_removed_as_links_and_a_missing_tree_is_fine),
        cmocka_unit_test(test_a_mount_inside_is_not_crossed),
        cmocka_unit_test(test_depth_is_bounded),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
