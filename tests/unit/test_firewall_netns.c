/*
 * test_firewall_netns.c: the address arithmetic of worker/host/links.c: net_pool parsing, and how a
 * Sandbox address recorded in the store maps back to its slot, interface and host side (what
 * terminate and reap rely on to remove exactly that Sandbox's state).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "host/links.h"

#include <arpa/inet.h>
#include <string.h>

static void test_pool_parse(void **state)
{
    (void)state;
    struct net_pool p;
    char err[256];
    assert_int_equal(net_pool_parse("10.213.0.0/16", &p, err, sizeof(err)), 0);
    assert_int_equal(p.len, 16);
    assert_int_equal(p.slots, 16384);
    assert_int_equal(net_pool_parse("10.213.0.0/30", &p, err, sizeof(err)), 0);
    assert_int_equal(p.slots, 1);
    assert_int_equal(net_pool_parse("10.213.0.0/31", &p, err, sizeof(err)), -1);
    assert_int_equal(net_pool_parse("10.213.0.1/16", &p, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "host bits"));
    assert_int_equal(net_pool_parse("10.213.0.0", &p, err, sizeof(err)), -1);
    assert_int_equal(net_pool_parse("nonsense/16", &p, err, sizeof(err)), -1);
    assert_int_equal(net_pool_parse("10.213.0.0/16x", &p, err, sizeof(err)), -1);
}

static void test_link_of_address(void **state)
{
    (void)state;
    struct net_pool p;
    char err[256], a[INET_ADDRSTRLEN];
    assert_int_equal(net_pool_parse("10.213.0.0/16", &p, err, sizeof(err)), 0);
    struct net_link l;
    assert_int_equal(net_link_of_address(&p, "sbx_a", "10.213.1.6", &l), 0);
    assert_int_equal(l.slot, 65); /* (256 + 4) / 4 */
    assert_string_equal(l.ifname, "sbx65");
    assert_string_equal(l.sandbox_id, "sbx_a");
    assert_int_equal(l.prefix_len, 30);
    inet_ntop(AF_INET, &l.host_addr, a, sizeof(a));
    assert_string_equal(a, "10.213.1.5");
    net_link_sandbox_address(&l, a, sizeof(a));
    assert_string_equal(a, "10.213.1.6");
    struct fw_sandbox fs = net_link_fw(&l);
    assert_string_equal(fs.ifname, "sbx65");
    assert_string_equal(fs.sandbox_id, "sbx_a");
    assert_int_equal(fs.addr.s_addr, l.sandbox_addr.s_addr);
    /* The last slot of the pool. */
    assert_int_equal(net_link_of_address(&p, "sbx_a", "10.213.255.254", &l), 0);
    assert_string_equal(l.ifname, "sbx16383");
    /* Not a Sandbox address: the host side, the network, the broadcast, outside the pool. */
    assert_int_equal(net_link_of_address(&p, "sbx_a", "10.213.1.5", &l), -1);
    assert_int_equal(net_link_of_address(&p, "sbx_a", "10.213.1.4", &l), -1);
    assert_int_equal(net_link_of_address(&p, "sbx_a", "10.213.1.7", &l), -1);
    assert_int_equal(net_link_of_address(&p, "sbx_a", "10.214.0.2", &l), -1);
    assert_int_equal(net_link_of_address(&p, "sbx_a", "10.212.255.254", &l), -1);
    assert_int_equal(net_link_of_address(&p, "sbx_a", "", &l), -1);
    assert_int_equal(net_link_of_address(&p, "sbx_a", NULL, &l), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_parse),
        cmocka_unit_test(test_link_of_address),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
