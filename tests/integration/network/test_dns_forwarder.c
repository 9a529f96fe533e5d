/*
 * test_dns_forwarder.c: sbx's DNS forwarder (worker/host/dns_forwarder.c) against a resolver this
 * test runs, in a network namespace of its own (run under `unshare --net`): two "Sandboxes" (two
 * addresses on lo, under an allowlist in a real `table inet sbx`) send it queries. Proves that a
 * lookup the resolver is slow to answer holds up no other query, from the same Sandbox or
 * another; that one Sandbox's queries waiting upstream are bounded (past the bound: SERVFAIL at
 * once, and another Sandbox is still served); that a resolver whose port is closed passes the
 * query to the next one at once; that a name the App does not allow is REFUSED without leaving
 * the host; and that queries still waiting when the forwarder stops are answered SERVFAIL.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "host/dns_forwarder.h"
#include "host/firewall.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FWD_PORT 5300
#define APP_ID "app_dnstest"
#define CLIENT_A "10.99.0.6" /* outside net_pool: not masqueraded on the way to lo */
#define CLIENT_B "10.99.0.10"
#define RESOLVER "127.0.0.53"
#define CLOSED_RESOLVER "127.0.0.54" /* nothing listens there */

static struct fw *fw;
static struct dns_forwarder *fwd; /* the running test's, stopped by stop_forwarder */

/* ---- the resolver: fast.test answers at once, slow.test when released, never.test never ---- */

static int resolver_fd = -1;
static pthread_t resolver_thread;
static atomic_bool resolver_stop;
static pthread_mutex_t slow_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char slow_q[512];
static size_t slow_len;
static struct sockaddr_in slow_from;
static atomic_int queries_seen;

static size_t answer_a(const unsigned char *q, size_t qlen, unsigned char *a)
{
    static const unsigned char rr[] = {0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 11, 11, 11, 11};
    memcpy(a, q, qlen);
    a[2] |= 0x80; /* QR */
    a[3] = 0x80;  /* RA, NOERROR */
    a[6] = 0;
    a[7] = 1; /* one answer */
    memcpy(a + qlen, rr, sizeof rr);
    return qlen + sizeof rr;
}

static void *resolver_main(void *arg)
{
    (void)arg;
    unsigned char q[512], a[600];
    while (!resolver_stop) {
        struct pollfd p = {resolver_fd, POLLIN, 0};
        if (poll(&p, 1, 100) != 1)
            continue;
        struct sockaddr_in from;
        socklen_t fl = sizeof from;
        ssize_t n = recvfrom(resolver_fd, q, sizeof q, 0, (struct sockaddr *)&from, &fl);
        char name[256];
        if (n < 12 || dns_question_name(q, (size_t)n, name, sizeof name, NULL) < 0)
            continue;
        queries_seen++;
        if (strcmp(name, "fast.test") == 0) {
            size_t al = answer_a(q, (size_t)n, a);
            sendto(resolver_fd, a, al, 0, (struct sockaddr *)&from, fl);
        } else if (strcmp(name, "slow.test") == 0) {
            pthread_mutex_lock(&slow_lock);
            memcpy(slow_q, q, (size_t)n);
            slow_len = (size_t)n;
            slow_from = from;
            pthread_mutex_unlock(&slow_lock);
        }
    }
    return NULL;
}

static bool slow_held(void)
{
    pthread_mutex_lock(&slow_lock);
    bool held = slow_len > 0;
    pthread_mutex_unlock(&slow_lock);
    return held;
}

/* Answers the slow.test query the resolver holds; false when it holds none. */
static bool release_slow(void)
{
    unsigned char a[600];
    pthread_mutex_lock(&slow_lock);
    bool had = slow_len > 0;
    if (had) {
        size_t al = answer_a(slow_q, slow_len, a);
        sendto(resolver_fd, a, al, 0, (struct sockaddr *)&slow_from, sizeof slow_from);
        slow_len = 0;
    }
    pthread_mutex_unlock(&slow_lock);
    return had;
}

/* ---- the forwarder's callbacks ---- */

static atomic_int refused_calls;
static char refused_name[256];

static bool allow(const char *app_id, const char *qname, uint16_t *ports, size_t *nports, void *arg)
{
    (void)arg;
    size_t l = strlen(qname);
    if (strcmp(app_id, APP_ID) != 0 || l < 5 || strcmp(qname + l - 5, ".test") != 0)
        return false;
    ports[0] = 443;
    *nports = 1;
    return true;
}

static void refused(const char *ifname, struct in_addr client, struct in_addr dst,
                    const char *app_id, const char *qname, void *arg)
{
    (void)ifname, (void)client, (void)dst, (void)arg;
    if (strcmp(app_id, APP_ID) == 0)
        snprintf(refused_name, sizeof refused_name, "%s", qname);
    refused_calls++;
}

static struct dns_forwarder *start_forwarder(const char *const *resolvers, size_t n)
{
    struct in_addr up[4];
    for (size_t i = 0; i < n; i++)
        assert_int_equal(inet_pton(AF_INET, resolvers[i], &up[i]), 1);
    struct dns_forwarder_params p = {up, n, FWD_PORT, 5000, allow, refused, NULL};
    char err[256];
    fwd = dns_forwarder_start(fw, &p, err, sizeof err);
    if (!fwd)
        fail_msg("dns_forwarder_start: %s", err);
    return fwd;
}

/* After each test, also one that failed half-way: the port is free for the next. */
static int stop_forwarder(void **state)
{
    (void)state;
    dns_forwarder_stop(fwd);
    fwd = NULL;
    return 0;
}

/* ---- the Sandboxes' side ---- */

static int client(const char *addr)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in at = {.sin_family = AF_INET};
    inet_pton(AF_INET, addr, &at.sin_addr);
    assert_true(s >= 0);
    assert_int_equal(bind(s, (struct sockaddr *)&at, sizeof at), 0);
    return s;
}

static void query(int s, uint16_t id, const char *name)
{
    unsigned char q[300];
    size_t n = dns_query_a(q, sizeof q, id, name);
    assert_true(n > 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(FWD_PORT)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    assert_int_equal(sendto(s, q, n, 0, (struct sockaddr *)&to, sizeof to), (ssize_t)n);
}

struct answer {
    uint16_t id;
    int rcode;
    size_t addrs;
};

/* The next answer to s within ms; false when none came. */
static bool next_answer(int s, int ms, struct answer *out)
{
    unsigned char a[4096];
    struct pollfd p = {s, POLLIN, 0};
    if (poll(&p, 1, ms) != 1)
        return false;
    ssize_t n = recv(s, a, sizeof a, 0);
    assert_true(n >= 12);
    struct in_addr addrs[4];
    uint32_t ttls[4];
    out->id = (uint16_t)(a[0] << 8 | a[1]);
    out->rcode = a[3] & 0x0f;
    out->addrs = dns_answer_a_records(a, (size_t)n, addrs, ttls, 4);
    return true;
}

/* The next answer to s within ms, which must be id's with rcode; its number of A records. */
static size_t expect_answer(int s, int ms, uint16_t id, int rcode)
{
    struct answer ans;
    assert_true(next_answer(s, ms, &ans));
    assert_int_equal(ans.id, id);
    assert_int_equal(ans.rcode, rcode);
    return ans.addrs;
}

/* ---- tests ---- */

static void test_slow_lookup_holds_up_no_other(void **state)
{
    (void)state;
    const char *up[] = {RESOLVER};
    struct dns_forwarder *f = start_forwarder(up, 1);
    int a = client(CLIENT_A), b = client(CLIENT_B);

    query(a, 0x1111, "slow.test");
    /* The resolver holds slow.test; the other queries, from the same Sandbox and another, are
     * answered meanwhile. One forwarder serving one query at a time answered slow.test first
     * (SERVFAIL, after its 2 s timeout), and only then these. */
    for (int i = 0; i < 200 && !slow_held(); i++)
        usleep(10000);
    assert_true(slow_held());
    query(b, 0x2222, "fast.test");
    query(a, 0x3333, "fast.test");
    assert_int_equal(expect_answer(b, 1500, 0x2222, 0), 1);
    expect_answer(a, 1500, 0x3333, 0); /* not slow.test's answer: that one is still held */
    assert_true(release_slow());
    assert_int_equal(expect_answer(a, 1500, 0x1111, 0), 1);

    struct dns_forwarder_stats st;
    dns_forwarder_stats(f, &st);
    assert_int_equal(st.forwarded, 3);
    assert_int_equal(st.failed, 0);
    close(a);
    close(b);
}

static void test_one_sandbox_cannot_fill_the_forwarder(void **state)
{
    (void)state;
    const char *up[] = {RESOLVER};
    struct dns_forwarder *f = start_forwarder(up, 1);
    int a = client(CLIENT_A), b = client(CLIENT_B);
    struct answer ans;

    /* 20 lookups the resolver never answers: 16 wait, the last 4 are SERVFAIL at once. */
    for (uint16_t i = 0; i < 20; i++)
        query(a, (uint16_t)(100 + i), "never.test");
    for (uint16_t i = 16; i < 20; i++) {
        expect_answer(a, 1500, 100 + i, 2);
    }
    /* Another Sandbox is served while they wait. */
    query(b, 0x4444, "fast.test");
    expect_answer(b, 1500, 0x4444, 0);
    /* The 16 end in SERVFAIL when the resolver's time is up, each answered once. */
    bool seen[16] = {false};
    for (int i = 0; i < 16; i++) {
        assert_true(next_answer(a, 5000, &ans));
        assert_true(ans.id >= 100 && ans.id < 116);
        assert_false(seen[ans.id - 100]);
        seen[ans.id - 100] = true;
        assert_int_equal(ans.rcode, 2);
    }
    assert_false(next_answer(a, 300, &ans));
    struct dns_forwarder_stats st;
    dns_forwarder_stats(f, &st);
    assert_int_equal(st.failed, 20);
    assert_int_equal(st.forwarded, 1);
    close(a);
    close(b);
}

static void test_closed_resolver_passes_to_the_next(void **state)
{
    (void)state;
    const char *up[] = {CLOSED_RESOLVER, RESOLVER};
    start_forwarder(up, 2);
    int a = client(CLIENT_A);
    int seen = queries_seen;
    query(a, 0x5555, "fast.test");
    /* Well before the first resolver's 2 s: its closed port says so at once. */
    expect_answer(a, 1500, 0x5555, 0);
    assert_int_equal(queries_seen, seen + 1);
    close(a);
}

static void test_name_not_allowed_is_refused_here(void **state)
{
    (void)state;
    const char *up[] = {RESOLVER};
    start_forwarder(up, 1);
    int a = client(CLIENT_A);
    int seen = queries_seen, calls = refused_calls;
    query(a, 0x6666, "exfiltrate.example");
    assert_int_equal(expect_answer(a, 1500, 0x6666, 5), 0);
    assert_int_equal(refused_calls, calls + 1);
    assert_string_equal(refused_name, "exfiltrate.example");
    assert_int_equal(queries_seen, seen); /* never left the host */
    close(a);
}

static void test_stop_answers_the_waiting(void **state)
{
    (void)state;
    const char *up[] = {RESOLVER};
    start_forwarder(up, 1);
    int b = client(CLIENT_B);
    int seen = queries_seen;
    query(b, 0x7777, "never.test");
    for (int i = 0; i < 200 && queries_seen == seen; i++)
        usleep(10000);
    assert_int_equal(queries_seen, seen + 1);
    stop_forwarder(NULL);
    expect_answer(b, 1500, 0x7777, 2);
    close(b);
}

/* ---- the namespace: lo up with the Sandboxes' addresses, the table with both under the App's
 * allowlist, and the resolver ---- */

static int setup(void **state)
{
    (void)state;
    char err[256];
    if (system("ip link set lo up && ip addr add " CLIENT_A "/32 dev lo && ip addr add " CLIENT_B
               "/32 dev lo") != 0)
        return -1;
    fw = fw_init("10.213.0.0/16", err, sizeof err);
    if (!fw) {
        fprintf(stderr, "fw_init: %s\n", err);
        return -1;
    }
    if (fw_app_policy_set(fw, APP_ID, NULL, 0, err, sizeof err) != 0) {
        fprintf(stderr, "fw_app_policy_set: %s\n", err);
        return -1;
    }
    const char *addrs[] = {CLIENT_A, CLIENT_B}, *ifs[] = {"sbx1", "sbx2"},
               *ids[] = {"sbx_dnstesta", "sbx_dnstestb"};
    for (int i = 0; i < 2; i++) {
        struct fw_sandbox sb = {.sandbox_id = ids[i], .ifname = ifs[i]};
        inet_pton(AF_INET, addrs[i], &sb.addr);
        if (fw_sandbox_add(fw, &sb, err, sizeof err) != 0 ||
            fw_sandbox_set_egress(fw, &sb, FW_EGRESS_ALLOWLIST, APP_ID, err, sizeof err) != 0) {
            fprintf(stderr, "Sandbox %s: %s\n", ids[i], err);
            return -1;
        }
    }
    resolver_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_port = htons(53)};
    inet_pton(AF_INET, RESOLVER, &at.sin_addr);
    if (resolver_fd < 0 || bind(resolver_fd, (struct sockaddr *)&at, sizeof at) != 0) {
        perror("resolver");
        return -1;
    }
    return pthread_create(&resolver_thread, NULL, resolver_main, NULL) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    resolver_stop = true;
    pthread_join(resolver_thread, NULL);
    close(resolver_fd);
    fw_close(fw);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_slow_lookup_holds_up_no_other, stop_forwarder),
        cmocka_unit_test_teardown(test_one_sandbox_cannot_fill_the_forwarder, stop_forwarder),
        cmocka_unit_test_teardown(test_closed_resolver_passes_to_the_next, stop_forwarder),
        cmocka_unit_test_teardown(test_name_not_allowed_is_refused_here, stop_forwarder),
        cmocka_unit_test_teardown(test_stop_answers_the_waiting, stop_forwarder),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
