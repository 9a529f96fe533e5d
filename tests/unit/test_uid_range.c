/*
 * test_uid_range.c: unit.worker.host.uid_range: the per-Sandbox uid allocator
 * (worker/host/uid_range.c) on the real host-wide directory, with uids of a range no Sandbox uses
 * (150000 + pid % 1000 * 4): range parsing; distinct uids until the range is exhausted, then a
 * clear error; release by the owner only; reap's release by Sandbox id; a stale entry (old, no
 * process of its uid) is taken over, by exactly one of several racing boots; a young entry or one
 * whose uid has a process is not. Needs root (skipped otherwise).
 */
#include "host/uid_range.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static int64_t base;

static void entry_path(int64_t uid, char *out, size_t len)
{
    snprintf(out, len, "%s/%lld", UID_RANGE_DIR, (long long)uid);
}

static void remove_entry(int64_t uid)
{
    char path[64];
    entry_path(uid, path, sizeof path);
    unlink(path);
}

/* Plants an entry owned by owner, aged seconds old. */
static void plant(int64_t uid, const char *owner, int age)
{
    char path[64];
    entry_path(uid, path, sizeof path);
    remove_entry(uid);
    assert_int_equal(symlink(owner, path), 0);
    struct timeval tv[2];
    gettimeofday(&tv[0], NULL);
    tv[0].tv_sec -= age;
    tv[1] = tv[0];
    assert_int_equal(lutimes(path, tv), 0);
}

static void test_parse(void **state)
{
    (void)state;
    struct uid_range r;
    char err[256];
    assert_int_equal(uid_range_parse("200000-265535", &r, err, sizeof err), 0);
    assert_int_equal(r.first, 200000);
    assert_int_equal(r.last, 265535);
    assert_int_equal(uid_range_parse("off", &r, err, sizeof err), 0);
    assert_false(uid_range_on(&r));
    assert_int_equal(uid_range_parse("", &r, err, sizeof err), 0);
    assert_false(uid_range_on(&r));
    const char *bad[] = {"5", "10-5", "0-3", "a-b", "1-", "-4", "1-4294967295", "1-2x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(uid_range_parse(bad[i], &r, err, sizeof err), -1);
        assert_non_null(strstr(err, "sandbox_uid_range"));
    }
}

static void test_distinct_until_exhausted_and_release(void **state)
{
    (void)state;
    struct uid_range r = {base, base + 2};
    char err[256];
    int64_t a, b, c, d;
    assert_int_equal(uid_range_acquire(&r, "sbx_test_a", &a, err, sizeof err), 0);
    assert_int_equal(uid_range_acquire(&r, "sbx_test_b", &b, err, sizeof err), 0);
    assert_int_equal(uid_range_acquire(&r, "sbx_test_c", &c, err, sizeof err), 0);
    assert_true(a != b && b != c && a != c);
    assert_int_equal(uid_range_acquire(&r, "sbx_test_d", &d, err, sizeof err), -1);
    assert_non_null(strstr(err, "no free Sandbox uid: all 3 uids"));
    /* Only the owner releases; then the uid is free again. */
    uid_range_release(a, "sbx_test_b");
    assert_int_equal(uid_range_acquire(&r, "sbx_test_d", &d, err, sizeof err), -1);
    uid_range_release(a, "sbx_test_a");
    assert_int_equal(uid_range_acquire(&r, "sbx_test_d", &d, err, sizeof err), 0);
    assert_int_equal(d, a);
    /* reap: by Sandbox id alone. */
    assert_int_equal(uid_range_release_owner("sbx_test_b"), 1);
    assert_int_equal(uid_range_release_owner("sbx_test_b"), 0);
    uid_range_release(c, "sbx_test_c");
    uid_range_release(d, "sbx_test_d");
}

static void test_stale_entry_taken_over_by_one(void **state)
{
    (void)state;
    struct uid_range r = {base + 3, base + 3};
    char err[256];
    int64_t uid;
    /* Young: may be a Sandbox still booting. */
    plant(base + 3, "sbx_gone", 5);
    assert_int_equal(uid_range_acquire(&r, "sbx_new", &uid, err, sizeof err), -1);
    /* Old, but a process runs as the uid: in use. */
    plant(base + 3, "sbx_gone", 3600);
    int hold[2], ready[2];
    assert_int_equal(pipe(hold), 0);
    assert_int_equal(pipe(ready), 0);
    pid_t user = fork();
    if (user == 0) {
        char c = 'u';
        close(hold[1]);
        close(ready[0]);
        if (syscall(SYS_setresuid, (uid_t)(base + 3), (uid_t)(base + 3), (uid_t)(base + 3)) != 0)
            _exit(1);
        if (write(ready[1], &c, 1) != 1)
            _exit(1);
        ssize_t ignored = read(hold[0], &c, 1);
        (void)ignored;
        _exit(0);
    }
    close(hold[0]);
    close(ready[1]);
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1); /* the child has changed its uid */
    close(ready[0]);
    assert_int_equal(uid_range_acquire(&r, "sbx_new", &uid, err, sizeof err), -1);
    close(hold[1]);
    waitpid(user, NULL, 0);
    /* Old and unused: taken over, by exactly one of four racing boots. */
    plant(base + 3, "sbx_gone", 3600);
    pid_t racers[4];
    for (int i = 0; i < 4; i++) {
        racers[i] = fork();
        if (racers[i] == 0) {
            char id[32], e[256];
            int64_t got;
            snprintf(id, sizeof id, "sbx_racer_%d", i);
            _exit(uid_range_acquire(&r, id, &got, e, sizeof e) == 0 ? 0 : 1);
        }
    }
    int winners = 0;
    for (int i = 0; i < 4; i++) {
        int status;
        waitpid(racers[i], &status, 0);
        winners += WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    assert_int_equal(winners, 1);
    char path[64], owner[64];
    entry_path(base + 3, path, sizeof path);
    ssize_t n = readlink(path, owner, sizeof owner - 1);
    assert_true(n > 0);
    owner[n] = '\0';
    assert_non_null(strstr(owner, "sbx_racer_"));
    remove_entry(base + 3);
}

int main(void)
{
    if (geteuid() != 0) {
        printf("unit.worker.host.uid_range needs root\n");
        return 77;
    }
    base = 150000 + (getpid() % 1000) * 4;
    for (int i = 0; i < 4; i++)
        remove_entry(base + i);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_distinct_until_exhausted_and_release),
        cmocka_unit_test(test_stale_entry_taken_over_by_one),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    for (int i = 0; i < 4; i++)
        remove_entry(base + i);
    return rc;
}
