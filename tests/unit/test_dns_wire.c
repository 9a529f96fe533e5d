/*
 * test_dns_wire.c: the DNS wire format sbx's forwarder reads (worker/host/dns_forwarder.c): the
 * question's name of a query, in lower case, and nothing from what is not one standard query; the
 * A records of an answer with their TTLs, through compressed names and a CNAME, and nothing read
 * past the end of a truncated message.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "host/dns_forwarder.h"

#include <arpa/inet.h>
#include <string.h>

/* api.Example.COM, type A, id 0x1234, RD */
static const unsigned char query[] = {0x12, 0x34, 0x01, 0x00, 0,   1,   0,   0,   0,   0,   0,
                                      0,    3,    'a',  'p',  'i', 7,   'E', 'x', 'a', 'm', 'p',
                                      'l',  'e',  3,    'C',  'O', 'M', 0,   0,   1,   0,   1};

static void test_query_a(void **state)
{
    (void)state;
    unsigned char q[512];
    assert_int_equal(dns_query_a(q, sizeof q, 0x1234, "api.Example.COM"), sizeof query);
    assert_memory_equal(q, query, sizeof query);
    /* What does not fit, and names that are not a sequence of 1-63 byte labels. */
    assert_int_equal(dns_query_a(q, sizeof query - 1, 0x1234, "api.Example.COM"), 0);
    assert_int_equal(dns_query_a(q, sizeof q, 1, "a..b"), 0);
    assert_int_equal(dns_query_a(q, sizeof q, 1, ".a"), 0);
    char longlabel[70];
    memset(longlabel, 'x', 64);
    longlabel[64] = '\0';
    assert_int_equal(dns_query_a(q, sizeof q, 1, longlabel), 0);
    longlabel[63] = '\0';
    assert_int_equal(dns_query_a(q, sizeof q, 1, longlabel), 12 + 1 + 63 + 5);
}

static void test_question_name(void **state)
{
    (void)state;
    char name[256];
    uint16_t qtype = 0;
    int end = dns_question_name(query, sizeof query, name, sizeof name, &qtype);
    assert_int_equal(end, (int)sizeof query);
    assert_string_equal(name, "api.example.com");
    assert_int_equal(qtype, 1);

    unsigned char m[sizeof query];
    memcpy(m, query, sizeof m);
    m[2] |= 0x80; /* an answer, not a query */
    assert_int_equal(dns_question_name(m, sizeof m, name, sizeof name, NULL), -1);
    memcpy(m, query, sizeof m);
    m[2] = 0x28; /* opcode 5 (UPDATE) */
    assert_int_equal(dns_question_name(m, sizeof m, name, sizeof name, NULL), -1);
    memcpy(m, query, sizeof m);
    m[5] = 2; /* two questions */
    assert_int_equal(dns_question_name(m, sizeof m, name, sizeof name, NULL), -1);
    memcpy(m, query, sizeof m);
    m[12] = 0xc0; /* a compression pointer in the question */
    assert_int_equal(dns_question_name(m, sizeof m, name, sizeof name, NULL), -1);
    memcpy(m, query, sizeof m);
    m[14] = '.'; /* "a.i" as one label: it would read as the name a.i.example.com */
    assert_int_equal(dns_question_name(m, sizeof m, name, sizeof name, NULL), -1);
    memcpy(m, query, sizeof m);
    m[19] = '\0'; /* a NUL inside the label "Example" */
    assert_int_equal(dns_question_name(m, sizeof m, name, sizeof name, NULL), -1);
    for (size_t len = 0; len < sizeof query; len++) /* truncated anywhere */
        assert_int_equal(dns_question_name(query, len, name, sizeof name, NULL), -1);
    assert_int_equal(dns_question_name(query, sizeof query, name, 8, NULL), -1); /* no room */
}

static void test_answer_records(void **state)
{
    (void)state;
    /* the query's question, then: api.example.com CNAME edge.example.net (ttl 300),
     * edge... A 11.11.11.11 (ttl 60), edge... A 11.11.11.12 (ttl 30), an AAAA (ignored) */
    unsigned char m[512];
    memcpy(m, query, sizeof query);
    m[2] |= 0x80;
    m[7] = 4;
    size_t n = sizeof query;
    const unsigned char cname[] = {0xc0, 12,  0,   5,   0,   1,   0,   0,   1,   44,
                                   0,    18,  4,   'e', 'd', 'g', 'e', 7,   'e', 'x',
                                   'a',  'm', 'p', 'l', 'e', 3,   'n', 'e', 't', 0};
    memcpy(m + n, cname, sizeof cname);
    size_t edge = n + 12;
    n += sizeof cname;
    const unsigned char a1[] = {
        0xc0, (unsigned char)edge, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 11, 11, 11, 11};
    const unsigned char a2[] = {
        0xc0, (unsigned char)edge, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 11, 11, 11, 12};
    unsigned char aaaa[28] = {0xc0, (unsigned char)edge, 0, 28, 0, 1, 0, 0, 0, 60, 0, 16};
    memcpy(m + n, a1, sizeof a1);
    n += sizeof a1;
    memcpy(m + n, a2, sizeof a2);
    n += sizeof a2;
    memcpy(m + n, aaaa, sizeof aaaa);
    n += sizeof aaaa;
    struct in_addr addrs[8];
    uint32_t ttls[8];
    assert_int_equal(dns_answer_a_records(m, n, addrs, ttls, 8), 2);
    char a[INET_ADDRSTRLEN];
    assert_string_equal(inet_ntop(AF_INET, &addrs[0], a, sizeof a), "11.11.11.11");
    assert_int_equal(ttls[0], 60);
    assert_string_equal(inet_ntop(AF_INET, &addrs[1], a, sizeof a), "11.11.11.12");
    assert_int_equal(ttls[1], 30);
    assert_int_equal(dns_answer_a_records(m, n, addrs, ttls, 1), 1); /* at most max */
    for (size_t len = 0; len < n; len++) /* truncated: never more than what is whole */
        assert_true(dns_answer_a_records(m, len, addrs, ttls, 8) <= 2);
    assert_int_equal(
        dns_answer_a_records(m, sizeof query + sizeof cname + sizeof a1 - 1, addrs, ttls, 8), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_query_a),
        cmocka_unit_test(test_question_name),
        cmocka_unit_test(test_answer_records),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
