/*
 * test_firewall_dumps.c: reading the firewall's sets while another writer changes them. A set of
 * hundreds of elements comes back from the kernel in several parts, each a walk of the set; a
 * change or a hash resize between two walks used to give some elements twice and others not at
 * all, silently. Each test keeps a base of elements no one touches and, in a second thread with
 * a netlink socket of its own (as another worker would), adds and removes hundreds more; every
 * read that succeeds must hold the whole base. It makes a network namespace of its own (root
 * needed) before anything else, so it never touches the host's `table inet sbx`.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "clock.h"
#include "host/firewall.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define APP_ID "app_dumps"
/* CHANGES: the other writer's changes the reads must run beside, over two full cycles of its
 * additions and removals (and so over its set's resizes both ways). */
enum { BASE = 400, CHURN = 400, TOTAL = BASE + CHURN, READS = 100, CHANGES = 4 * CHURN + 400 };
enum { WHOLE_MIN = 20 }; /* whole reads that must get through beside the other writer */

static char ids[TOTAL][32], ifnames[TOTAL][IFNAMSIZ];
static struct fw_sandbox sandboxes[TOTAL];
static atomic_bool stop;
static atomic_long churn_ops;

static void sandboxes_make(void)
{
    for (unsigned k = 0; k < TOTAL; k++) {
        snprintf(ids[k], sizeof ids[k], "sbx_dump%04u", k);
        snprintf(ifnames[k], sizeof ifnames[k], FW_IFNAME_PREFIX "%u", k);
        sandboxes[k].sandbox_id = ids[k];
        sandboxes[k].ifname = ifnames[k];
        sandboxes[k].addr.s_addr = htonl((10u << 24) | (213u << 16) | (k * 4 + 2));
    }
}

/* The slot of an element's address, or -1 outside the test's range. */
static int slot_of(struct in_addr a)
{
    uint32_t low = ntohl(a.s_addr) & 0xffff;
    return low % 4 == 2 && low / 4 < TOTAL ? (int)(low / 4) : -1;
}

struct churn {
    bool allowlist; /* also put each churned Sandbox under the App's allowlist */
};

/* Another writer: adds the churned Sandboxes one transaction at a time, then removes them, a
 * fifth of a millisecond apart (thousands of changes a second, far beyond a real host's rate), so
 * the set grows and shrinks across its hash's resize points. */
static void *churn_run(void *arg)
{
    const struct churn *c = arg;
    char err[512];
    struct fw *fw = fw_open(err, sizeof err);
    if (!fw) {
        fprintf(stderr, "churn: fw_open: %s\n", err);
        return NULL;
    }
    while (!atomic_load(&stop)) {
        for (unsigned k = BASE; k < TOTAL && !atomic_load(&stop); k++) {
            if (fw_sandbox_add(fw, &sandboxes[k], err, sizeof err) == 0 && c->allowlist)
                fw_sandbox_set_egress(fw, &sandboxes[k], FW_EGRESS_ALLOWLIST, APP_ID, err,
                                      sizeof err);
            atomic_fetch_add(&churn_ops, 1);
            usleep(200);
        }
        for (unsigned k = BASE; k < TOTAL && !atomic_load(&stop); k++) {
            fw_sandbox_remove(fw, &sandboxes[k], err, sizeof err);
            atomic_fetch_add(&churn_ops, 1);
            usleep(200);
        }
    }
    fw_close(fw);
    return NULL;
}

static struct fw *fw;

static int setup(void **state)
{
    (void)state;
    char err[512];
    sandboxes_make();
    fw = fw_init("10.213.0.0/16", err, sizeof err);
    if (!fw) {
        fprintf(stderr, "fw_init: %s\n", err);
        return -1;
    }
    if (fw_app_policy_set(fw, APP_ID, NULL, 0, err, sizeof err) != 0) {
        fprintf(stderr, "fw_app_policy_set: %s\n", err);
        return -1;
    }
    for (unsigned k = 0; k < BASE; k++)
        if (fw_sandbox_add(fw, &sandboxes[k], err, sizeof err) != 0 ||
            fw_sandbox_set_egress(fw, &sandboxes[k], FW_EGRESS_ALLOWLIST, APP_ID, err,
                                  sizeof err) != 0) {
            fprintf(stderr, "base Sandbox %u: %s\n", k, err);
            return -1;
        }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char err[512];
    if (fw && fw_destroy(fw, err, sizeof err) != 0)
        fprintf(stderr, "fw_destroy: %s\n", err);
    fw_close(fw);
    return 0;
}

/* Runs reads until READS have succeeded beside CHANGES of the other writer's, or for 8 s at most,
 * and then, if fewer than WHOLE_MIN succeeded, on under the same churn until they have, for 30 s
 * in all: the writer's pace is fixed, so on a loaded machine (a sanitizer build beside other
 * work) each read is slower and more of them are refused as torn. read() returns 1 for a whole
 * read, 0 for a refused one, and fails the test for a read that lost an element. */
static void reads_under_churn(bool allowlist, int (*read)(void))
{
    struct churn c = {allowlist};
    atomic_store(&stop, false);
    atomic_store(&churn_ops, 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, churn_run, &c), 0);
    int whole = 0, refused = 0;
    int64_t start = clock_mono_ms();
    while (
        ((whole < READS || atomic_load(&churn_ops) < CHANGES) && clock_mono_ms() < start + 8000) ||
        (whole < WHOLE_MIN && clock_mono_ms() < start + 30000)) {
        if (read())
            whole++;
        else
            refused++;
    }
    atomic_store(&stop, true);
    pthread_join(t, NULL);
    long ops = atomic_load(&churn_ops);
    printf("%d whole reads, %d refused as torn, beside %ld changes by the other writer\n", whole,
           refused, ops);
    /* The other writer did change the sets while they were read, and reads still got through. */
    assert_true(ops >= CHANGES);
    assert_true(whole >= WHOLE_MIN);
}

/* A read may be refused only by the bounded retry ("torn"); anything else fails the test. */
static int refused(const char *call, const char *err)
{
    if (!strstr(err, "torn")) {
        fprintf(stderr, "%s: %s\n", call, err);
        fail();
    }
    return 0;
}

/* Counts an element of the untouched base once, and fails the test for one seen twice. */
static void base_count(int slot, bool seen[BASE], size_t *base)
{
    if (slot >= BASE)
        return;
    assert_false(seen[slot]);
    seen[slot] = true;
    (*base)++;
}

static void base_whole(size_t base, const char *what)
{
    if (base != BASE)
        fprintf(stderr, "a read held %zu of the %d untouched %s\n", base, BASE, what);
    assert_int_equal(base, BASE);
}

static int read_elements(void)
{
    struct fw_element *v;
    size_t n, base = 0;
    char err[512];
    if (fw_elements(fw, &v, &n, err, sizeof err) != 0)
        return refused("fw_elements", err);
    bool seen[BASE] = {false};
    for (size_t i = 0; i < n; i++) {
        int s = slot_of(v[i].addr);
        if (s < 0)
            continue;
        assert_string_equal(v[i].ifname, ifnames[s]);
        assert_string_equal(v[i].owner, ids[s]);
        base_count(s, seen, &base);
    }
    free(v);
    base_whole(base, "Sandboxes");
    return 1;
}

static int read_members(void)
{
    struct fw_egress_member *v;
    size_t n, base = 0;
    char err[512];
    if (fw_egress_members(fw, &v, &n, err, sizeof err) != 0)
        return refused("fw_egress_members", err);
    bool seen[BASE] = {false};
    for (size_t i = 0; i < n; i++) {
        int s = slot_of(v[i].addr);
        if (s < 0)
            continue;
        assert_string_equal(v[i].ifname, ifnames[s]);
        assert_string_equal(v[i].app_id, APP_ID);
        base_count(s, seen, &base);
    }
    free(v);
    base_whole(base, "members");
    return 1;
}

static void test_elements_whole_under_another_writer(void **state)
{
    (void)state;
    reads_under_churn(false, read_elements);
}

static void test_members_whole_under_another_writer(void **state)
{
    (void)state;
    reads_under_churn(true, read_members);
}

int main(void)
{
    if (unshare(CLONE_NEWNET) != 0) {
        perror("unshare(CLONE_NEWNET), which needs root");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elements_whole_under_another_writer),
        cmocka_unit_test(test_members_whole_under_another_writer),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
