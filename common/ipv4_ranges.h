/*
 * ipv4_ranges.h: the IPv4 ranges a Sandbox may never reach, whatever its App's egress policy:
 * RFC 1918 private networks, 169.254/16 (cloud metadata) and the other special-use ranges.
 *
 * One table for everyone who must agree on it: the worker's firewall (which drops them), the
 * gateway (which refuses an egress allow entry inside them with 422) and the settings (a DNS
 * resolver inside them could never be reached).
 */
#ifndef SBX_IPV4_RANGES_H
#define SBX_IPV4_RANGES_H

#include <netinet/in.h>
#include <stddef.h>

enum ipv4_range_kind {
    IPV4_RANGE_PRIVATE,  /* 10/8, 172.16/12, 192.168/16 */
    IPV4_RANGE_METADATA, /* 169.254/16 */
    IPV4_RANGE_SPECIAL,  /* 0/8, 100.64/10, 127/8, 192.0.0/24, TEST-NETs, 198.18/15, 224/4, ... */
};

struct ipv4_range {
    const char *net; /* "a.b.c.d" */
    int len;
    enum ipv4_range_kind kind;
};

/* Every blocked range, private first, then metadata, then the special-use ones. */
extern const struct ipv4_range ipv4_blocked_ranges[];
extern const size_t ipv4_blocked_range_count;

/* The first blocked range that shares an address with net/len (network order), or NULL when the
 * prefix lies entirely in public address space. */
const struct ipv4_range *ipv4_blocked_overlap(struct in_addr net, int len);

/* "private", "metadata", "special". */
const char *ipv4_range_kind_name(enum ipv4_range_kind kind);

#endif
