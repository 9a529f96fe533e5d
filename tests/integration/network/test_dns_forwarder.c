/*
 * test_dns_forwarder.c: sbx's DNS forwarder (worker/host/dns_forwarder.c) against a resolver this
 * test runs, in a network namespace of its own (run under `unshare --net`): two "Sandboxes" (two
 * addresses on lo, under an allowlist in a real `table inet sbx`) send it queries. Proves that a
 * lookup the resolver is slow to answer holds up no other query, from the same Sandbox or
 * another; that one Sandbox's queries waiting upstream are bounded (past the bound: SERVFAIL at
 * once, and another Sandbox is still served); that a resolver whose port is closed passes the
 * query to the next one at once; that a name the App does not allow is REFUSED without leaving
 * the host; and that queries still waiting when the forwarder stops are answered SERVFAIL.
 * Over TCP: an answer too large for UDP comes back whole, asked upstream over TCP (a closed
 * resolver port passes it to the next there too); a name not allowed is REFUSED (its refusal
 * says TCP) without leaving the host, and a connection from an address that is no allowlist
 * Sandbox's is closed at once; queries pipelined on one connection are answered in order; a
 * connection that stalls half-way holds up no other, one Sandbox's connections are bounded; and
 * a TCP query waiting at stop gets SERVFAIL.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "host/dns_forwarder.h"
#include "host/firewall.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
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
static int resolver_tcp_fd = -1;
static atomic_int tcp_queries_seen;
static int held_tcp[16]; /* connections of never.test queries, never answered */
static int nheld_tcp;
#define BIG_RECORDS 40 /* big.test: 40 A records, 11.11.12.1 ...: over UDP's 512 bytes */

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

/* big.test's answer: BIG_RECORDS A records. */
static size_t answer_big(const unsigned char *q, size_t qlen, unsigned char *a)
{
    memcpy(a, q, qlen);
    a[2] |= 0x80;
    a[3] = 0x80;
    a[6] = 0;
    a[7] = BIG_RECORDS;
    size_t n = qlen;
    for (int i = 0; i < BIG_RECORDS; i++) {
        const unsigned char rr[] = {0xc0, 0x0c, 0, 1, 0,  1,  0,  0,
                                    0,    60,   0, 4, 11, 11, 12, (unsigned char)(i + 1)};
        memcpy(a + n, rr, sizeof rr);
        n += sizeof rr;
    }
    return n;
}

static bool read_full(int fd, unsigned char *buf, size_t len)
{
    for (size_t got = 0; got < len;) {
        ssize_t n = read(fd, buf + got, len - got);
        if (n <= 0)
            return false;
        got += (size_t)n;
    }
    return true;
}

/* One TCP query to the resolver: fast.test and big.test answered, never.test held open. */
static void resolver_tcp_conn(int c)
{
    unsigned char len[2], q[512], a[1200];
    struct timeval tv = {1, 0};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char name[256];
    size_t ql;
    if (!read_full(c, len, 2) || (ql = (size_t)(len[0] << 8 | len[1])) > sizeof q ||
        !read_full(c, q, ql) || dns_question_name(q, ql, name, sizeof name, NULL) < 0) {
        close(c);
        return;
    }
    tcp_queries_seen++;
    size_t al = 0;
    if (strcmp(name, "fast.test") == 0)
        al = answer_a(q, ql, a + 2);
    else if (strcmp(name, "big.test") == 0)
        al = answer_big(q, ql, a + 2);
    if (!al && nheld_tcp < 16) {
        held_tcp[nheld_tcp++] = c;
        return;
    }
    a[0] = (unsigned char)(al >> 8);
    a[1] = (unsigned char)al;
    if (al)
        (void)!write(c, a, al + 2);
    close(c);
}

static void *resolver_main(void *arg)
{
    (void)arg;
    unsigned char q[512], a[600];
    while (!resolver_stop) {
        struct pollfd pt[2] = {{resolver_fd, POLLIN, 0}, {resolver_tcp_fd, POLLIN, 0}};
        if (poll(pt, 2, 100) < 1)
            continue;
        if (pt[1].revents & POLLIN) {
            int c = accept(resolver_tcp_fd, NULL, NULL);
            if (c >= 0)
                resolver_tcp_conn(c);
        }
        if (!(pt[0].revents & POLLIN))
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
static int refused_protocol;

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

static void refused(const char *ifname, struct in_addr client, struct in_addr dst, int protocol,
                    const char *app_id, const char *qname, void *arg)
{
    (void)ifname, (void)client, (void)dst, (void)arg;
    if (strcmp(app_id, APP_ID) == 0) {
        snprintf(refused_name, sizeof refused_name, "%s", qname);
        refused_protocol = protocol;
    }
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

/* An answer's id, rcode and number of A records (up to 64). */
static void answer_parse(const unsigned char *a, size_t n, struct answer *out)
{
    struct in_addr addrs[64];
    uint32_t ttls[64];
    out->id = (uint16_t)(a[0] << 8 | a[1]);
    out->rcode = a[3] & 0x0f;
    out->addrs = dns_answer_a_records(a, n, addrs, ttls, 64);
}

/* The next answer to s within ms; false when none came. */
static bool next_answer(int s, int ms, struct answer *out)
{
    unsigned char a[4096];
    struct pollfd p = {s, POLLIN, 0};
    if (poll(&p, 1, ms) != 1)
        return false;
    ssize_t n = recv(s, a, sizeof a, 0);
    assert_true(n >= 12);
    answer_parse(a, (size_t)n, out);
    return true;
}

/* The next answer on s within ms (next_answer, or tcp_answer below), which must be id's with
 * rcode; its number of A records. */
static size_t expect_from(bool (*next)(int, int, struct answer *), int s, int ms, uint16_t id,
                          int rcode)
{
    struct answer ans = {0}; /* assert_true does not return when next fails */
    assert_true(next(s, ms, &ans));
    assert_int_equal(ans.id, id);
    assert_int_equal(ans.rcode, rcode);
    return ans.addrs;
}

static size_t expect_answer(int s, int ms, uint16_t id, int rcode)
{
    return expect_from(next_answer, s, ms, id, rcode);
}

/* ---- the Sandboxes' side over TCP ---- */

/* A connection from addr to the forwarder. */
static int tcp_client(const char *addr)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in at = {.sin_family = AF_INET};
    inet_pton(AF_INET, addr, &at.sin_addr);
    assert_true(s >= 0);
    assert_int_equal(bind(s, (struct sockaddr *)&at, sizeof at), 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(FWD_PORT)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    assert_int_equal(connect(s, (struct sockaddr *)&to, sizeof to), 0);
    return s;
}

static void tcp_query(int s, uint16_t id, const char *name)
{
    unsigned char q[302];
    size_t n = dns_query_a(q + 2, sizeof q - 2, id, name);
    assert_true(n > 0);
    q[0] = (unsigned char)(n >> 8);
    q[1] = (unsigned char)n;
    assert_int_equal(write(s, q, n + 2), (ssize_t)(n + 2));
}

/* The next answer on the connection s within ms; false when none came, or the forwarder closed
 * the connection. */
static bool tcp_answer(int s, int ms, struct answer *out)
{
    unsigned char len[2], a[4096];
    struct pollfd p = {s, POLLIN, 0};
    if (poll(&p, 1, ms) != 1)
        return false;
    struct timeval tv = {2, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    size_t n;
    if (!read_full(s, len, 2) || (n = (size_t)(len[0] << 8 | len[1])) > sizeof a ||
        !read_full(s, a, n) || n < 12)
        return false;
    answer_parse(a, n, out);
    return true;
}

static size_t expect_tcp_answer(int s, int ms, uint16_t id, int rcode)
{
    return expect_from(tcp_answer, s, ms, id, rcode);
}

/* True when the forwarder closed s (EOF within ms). */
static bool closed_by_peer(int s, int ms)
{
    struct pollfd p = {s, POLLIN, 0};
    char c;
    return poll(&p, 1, ms) == 1 && read(s, &c, 1) == 0;
}

/* Waits up to 2 s for the resolver to have seen one query more than before (counter: UDP's or
 * TCP's), and asserts it did. */
static void expect_resolver_asked(atomic_int *counter, int before)
{
    for (int i = 0; i < 200 && *counter == before; i++)
        usleep(10000);
    assert_int_equal(*counter, before + 1);
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
    /* Over TCP: its refused connection passes the query on too. */
    int c = tcp_client(CLIENT_A);
    seen = tcp_queries_seen;
    tcp_query(c, 0x5556, "fast.test");
    expect_tcp_answer(c, 1500, 0x5556, 0);
    assert_int_equal(tcp_queries_seen, seen + 1);
    close(c);
}

/* A refused lookup was recorded once more than calls before, for exfiltrate.example over
 * protocol. */
static void expect_refusal_recorded(int calls, int protocol)
{
    assert_int_equal(refused_calls, calls + 1);
    assert_string_equal(refused_name, "exfiltrate.example");
    assert_int_equal(refused_protocol, protocol);
}

/* Over UDP and over TCP: REFUSED, recorded with its protocol, and never sent to the resolver. */
static void test_name_not_allowed_is_refused_here(void **state)
{
    (void)state;
    const char *up[] = {RESOLVER};
    start_forwarder(up, 1);
    int a = client(CLIENT_A);
    int seen = queries_seen, tcp_seen = tcp_queries_seen, calls = refused_calls;
    query(a, 0x6666, "exfiltrate.example");
    assert_int_equal(expect_answer(a, 1500, 0x6666, 5), 0);
    expect_refusal_recorded(calls, IPPROTO_UDP);
    close(a);
    int c = tcp_client(CLIENT_B);
    tcp_query(c, 0x8222, "exfiltrate.example");
    assert_int_equal(expect_tcp_answer(c, 2000, 0x8222, 5), 0);
    expect_refusal_recorded(calls + 1, IPPROTO_TCP);
    close(c);
    assert_int_equal(queries_seen, seen); /* neither left the host */
    assert_int_equal(tcp_queries_seen, tcp_seen);
    /* From an address that is no allowlist Sandbox's: closed at once, holding no connection. */
    int x = tcp_client("127.0.0.1");
    assert_true(closed_by_peer(x, 2000));
    close(x);
}

/* A UDP and a TCP query still waiting upstream: both get SERVFAIL, and the connection closes. */
static void test_stop_answers_the_waiting(void **state)
{
    (void)state;
    const char *up[] = {RESOLVER};
    start_forwarder(up, 1);
    int b = client(CLIENT_B), c = tcp_client(CLIENT_B);
    int seen = queries_seen, tcp_seen = tcp_queries_seen;
    query(b, 0x7777, "never.test");
    tcp_query(c, 0x8444, "never.test");
    expect_resolver_asked(&queries_seen, seen);
    expect_resolver_asked(&tcp_queries_seen, tcp_seen);
    stop_forwarder(NULL);
    expect_answer(b, 1500, 0x7777, 2);
    expect_tcp_answer(c, 2000, 0x8444, 2);
    assert_true(closed_by_peer(c, 2000));
    close(b);
    close(c);
}

static void test_tcp_answer_too_large_for_udp(void **state)
{
    (void)state;
    const char *up[] = {RESOLVER};
    struct dns_forwarder *f = start_forwarder(up, 1);
    int c = tcp_client(CLIENT_A);
    int seen = tcp_queries_seen, useen = queries_seen;
    tcp_query(c, 0x8111, "big.test");
    /* Every record (the answer is 672 bytes: a UDP answer stops at 512), asked over TCP. */
    assert_int_equal(expect_tcp_answer(c, 2000, 0x8111, 0), BIG_RECORDS);
    assert_int_equal(tcp_queries_seen, seen + 1);
    assert_int_equal(queries_seen, useen);
    /* Its addresses opened for the App, as for a UDP answer. */
    assert_int_equal(system("nft list set inet sbx names_" APP_ID " | grep -q '11.11.12.1 . 443'"),
                     0);
    /* Pipelined on the same connection: answered in order. */
    tcp_query(c, 0x8112, "fast.test");
    tcp_query(c, 0x8113, "big.test");
    assert_int_equal(expect_tcp_answer(c, 2000, 0x8112, 0), 1);
    assert_int_equal(expect_tcp_answer(c, 2000, 0x8113, 0), BIG_RECORDS);
    struct dns_forwarder_stats st;
    dns_forwarder_stats(f, &st);
    assert_int_equal(st.forwarded, 3);
    assert_int_equal(st.failed, 0);
    close(c);
}

static void test_tcp_stalled_connection_holds_up_nothing(void **state)
{
    (void)state;
    const char *up[] = {RESOLVER};
    start_forwarder(up, 1);
    /* One connection sends half a length and stops; a second waits upstream for never.test. */
    int stalled = tcp_client(CLIENT_A), waiting = tcp_client(CLIENT_A);
    assert_int_equal(write(stalled, "\0", 1), 1);
    int seen = tcp_queries_seen;
    tcp_query(waiting, 0x8333, "never.test");
    expect_resolver_asked(&tcp_queries_seen, seen);
    /* The same Sandbox's third connection, another Sandbox's, and UDP are served meanwhile. */
    int a = tcp_client(CLIENT_A), b = tcp_client(CLIENT_B), u = client(CLIENT_B);
    tcp_query(a, 0x8334, "fast.test");
    tcp_query(b, 0x8335, "fast.test");
    query(u, 0x8336, "fast.test");
    assert_int_equal(expect_tcp_answer(a, 2000, 0x8334, 0), 1);
    assert_int_equal(expect_tcp_answer(b, 2000, 0x8335, 0), 1);
    assert_int_equal(expect_answer(u, 2000, 0x8336, 0), 1);
    /* CLIENT_A has three connections; a fourth is taken, a fifth closed at once. */
    int d = tcp_client(CLIENT_A), e = tcp_client(CLIENT_A);
    assert_true(closed_by_peer(e, 2000));
    tcp_query(d, 0x8337, "fast.test");
    assert_int_equal(expect_tcp_answer(d, 2000, 0x8337, 0), 1);
    /* never.test gets SERVFAIL when the resolver's 2 s are up, on its own connection. */
    assert_int_equal(expect_tcp_answer(waiting, 4000, 0x8333, 2), 0);
    close(stalled);
    close(waiting);
    close(a);
    close(b);
    close(u);
    close(d);
    close(e);
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
    resolver_tcp_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int on = 1;
    if (resolver_tcp_fd < 0 ||
        setsockopt(resolver_tcp_fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
        bind(resolver_tcp_fd, (struct sockaddr *)&at, sizeof at) != 0 ||
        listen(resolver_tcp_fd, 16) != 0) {
        perror("resolver (TCP)");
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
    close(resolver_tcp_fd);
    for (int i = 0; i < nheld_tcp; i++)
        close(held_tcp[i]);
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
        cmocka_unit_test_teardown(test_tcp_answer_too_large_for_udp, stop_forwarder),
        cmocka_unit_test_teardown(test_tcp_stalled_connection_holds_up_nothing, stop_forwarder),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
