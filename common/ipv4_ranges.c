/*
 * ipv4_ranges.c: the table of IPv4 ranges no Sandbox may reach (ipv4_ranges.h) and the overlap
 * test against it.
 */
#include "ipv4_ranges.h"

#include <arpa/inet.h>
#include <stdint.h>

const struct ipv4_range ipv4_blocked_ranges[] = {
    {"10.0.0.0", 8, IPV4_RANGE_PRIVATE},         {"172.16.0.0", 12, IPV4_RANGE_PRIVATE},
    {"192.168.0.0", 16, IPV4_RANGE_PRIVATE},     {"169.254.0.0", 16, IPV4_RANGE_METADATA},
    {"0.0.0.0", 8, IPV4_RANGE_SPECIAL},          {"100.64.0.0", 10, IPV4_RANGE_SPECIAL},
    {"127.0.0.0", 8, IPV4_RANGE_SPECIAL},        {"192.0.0.0", 24, IPV4_RANGE_SPECIAL},
    {"192.0.2.0", 24, IPV4_RANGE_SPECIAL},       {"198.18.0.0", 15, IPV4_RANGE_SPECIAL},
    {"198.51.100.0", 24, IPV4_RANGE_SPECIAL},    {"203.0.113.0", 24, IPV4_RANGE_SPECIAL},
    {"224.0.0.0", 4, IPV4_RANGE_SPECIAL},        {"240.0.0.0", 4, IPV4_RANGE_SPECIAL},
    {"255.255.255.255", 32, IPV4_RANGE_SPECIAL},
};
const size_t ipv4_blocked_range_count = sizeof ipv4_blocked_ranges / sizeof ipv4_blocked_ranges[0];

static uint32_t mask_of(int len)
{
    return len <= 0 ? 0 : len >= 32 ? 0xffffffffu : ~0u << (32 - len);
}

/* Two prefixes overlap when they agree on the bits of the shorter one. */
const struct ipv4_range *ipv4_blocked_overlap(struct in_addr net, int len)
{
    uint32_t a = ntohl(net.s_addr);
    for (size_t i = 0; i < ipv4_blocked_range_count; i++) {
        struct in_addr r;
        inet_pton(AF_INET, ipv4_blocked_ranges[i].net, &r);
        int shorter = len < ipv4_blocked_ranges[i].len ? len : ipv4_blocked_ranges[i].len;
        uint32_t m = mask_of(shorter);
        if ((a & m) == (ntohl(r.s_addr) & m))
            return &ipv4_blocked_ranges[i];
    }
    return NULL;
}

const char *ipv4_range_kind_name(enum ipv4_range_kind kind)
{
    switch (kind) {
    case IPV4_RANGE_PRIVATE:
        return "private";
    case IPV4_RANGE_METADATA:
        return "metadata";
    case IPV4_RANGE_SPECIAL:
        return "special";
    }
    return "?";
}
