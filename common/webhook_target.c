/*
 * webhook_target.c: the webhook URL and address policy (see webhook_target.h).
 */
#include "webhook_target.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct v4_range {
    uint32_t net;
    int bits;
};

/* Not public: this network, private, shared (CGNAT), loopback, link-local (cloud metadata),
 * IETF protocol assignments, benchmarking, multicast, reserved and broadcast. */
static const struct v4_range blocked_v4[] = {
    {0x00000000, 8},  {0x0a000000, 8},  {0x64400000, 10}, {0x7f000000, 8},
    {0xa9fe0000, 16}, {0xac100000, 12}, {0xc0000000, 24}, {0xc0a80000, 16},
    {0xc6120000, 15}, {0xe0000000, 4},  {0xf0000000, 4},
};

static bool v4_allowed(uint32_t a)
{
    for (size_t i = 0; i < sizeof blocked_v4 / sizeof blocked_v4[0]; i++) {
        uint32_t mask = 0xffffffffu << (32 - blocked_v4[i].bits);
        if ((a & mask) == blocked_v4[i].net)
            return false;
    }
    return true;
}

bool webhook_address_allowed(const struct sockaddr *sa, bool allow_private)
{
    if (allow_private)
        return sa->sa_family == AF_INET || sa->sa_family == AF_INET6;
    if (sa->sa_family == AF_INET)
        return v4_allowed(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
    if (sa->sa_family != AF_INET6)
        return false;
    const uint8_t *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
    /* Addresses that carry an IPv4 address a translator or tunnel delivers to are judged by
     * that address: IPv4-mapped (::ffff:0:0/96), IPv4-compatible (::/96, deprecated but routed
     * by some stacks), NAT64's well-known prefix (64:ff9b::/96) and 6to4 (2002::/16, the IPv4
     * address in bytes 2 to 5). */
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t compat[12] = {0};
    static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
    if (memcmp(b, mapped, 12) == 0 || memcmp(b, compat, 12) == 0 || memcmp(b, nat64, 12) == 0)
        return v4_allowed((uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 | (uint32_t)b[14] << 8 |
                          b[15]);
    if (b[0] == 0x20 && b[1] == 0x02)
        return v4_allowed((uint32_t)b[2] << 24 | (uint32_t)b[3] << 16 | (uint32_t)b[4] << 8 | b[5]);
    /* NAT64 for local use (64:ff9b:1::/48, RFC 8215) and Teredo (2001::/32) reach addresses
     * this cannot judge: refused. */
    if (b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && b[4] == 0 && b[5] == 1)
        return false;
    if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0)
        return false;
    if ((b[0] & 0xfe) == 0xfc) /* fc00::/7 unique local */
        return false;
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) /* fe80::/10 link-local */
        return false;
    if (b[0] == 0xff) /* multicast */
        return false;
    return true;
}

int webhook_url_check(const char *url, bool allow_private, char *why, size_t whylen)
{
    const char *p;
    char host[256], port[8] = "";
    size_t len = strlen(url);

    if (len == 0 || len >= 2048) {
        snprintf(why, whylen, "the URL must have 1 to 2047 characters");
        return -1;
    }
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)url[i] <= ' ' || (unsigned char)url[i] >= 0x7f) {
            snprintf(why, whylen, "the URL must be ASCII without spaces or control characters");
            return -1;
        }
    if (strncasecmp(url, "https://", 8) == 0) {
        p = url + 8;
        snprintf(port, sizeof port, "443");
    } else if (strncasecmp(url, "http://", 7) == 0) {
        p = url + 7;
        snprintf(port, sizeof port, "80");
    } else {
        snprintf(why, whylen, "the URL must start with http:// or https://");
        return -1;
    }
    size_t auth_len = strcspn(p, "/?#");
    if (memchr(p, '@', auth_len)) {
        snprintf(why, whylen, "the URL must not carry user info (user@host)");
        return -1;
    }
    const char *host_start = p, *host_end;
    if (*p == '[') {
        host_end = memchr(p, ']', auth_len);
        if (!host_end) {
            snprintf(why, whylen, "the URL's IPv6 address has no closing ]");
            return -1;
        }
        host_start = p + 1;
        p = host_end + 1;
    } else {
        host_end = p;
        while (host_end < p + auth_len && *host_end != ':')
            host_end++;
        p = host_end;
    }
    size_t hlen = (size_t)(host_end - host_start);
    if (hlen == 0 || hlen >= sizeof host) {
        snprintf(why, whylen, "the URL has no host");
        return -1;
    }
    memcpy(host, host_start, hlen);
    host[hlen] = '\0';
    const char *auth_end = p + strcspn(p, "/?#");
    if (p < auth_end) {
        if (*p != ':' || p + 1 == auth_end || auth_end - (p + 1) > 5) {
            snprintf(why, whylen, "the URL's port must be a number from 1 to 65535");
            return -1;
        }
        long v = 0;
        for (const char *q = p + 1; q < auth_end; q++) {
            if (!isdigit((unsigned char)*q)) {
                snprintf(why, whylen, "the URL's port must be a number from 1 to 65535");
                return -1;
            }
            v = v * 10 + (*q - '0');
        }
        if (v < 1 || v > 65535) {
            snprintf(why, whylen, "the URL's port must be a number from 1 to 65535");
            return -1;
        }
        snprintf(port, sizeof port, "%ld", v);
    }
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        snprintf(why, whylen, "the URL's host %s does not resolve: %s", host, gai_strerror(rc));
        return -1;
    }
    int out = 0;
    for (struct addrinfo *a = res; a; a = a->ai_next)
        if (!webhook_address_allowed(a->ai_addr, allow_private)) {
            char text[INET6_ADDRSTRLEN] = "?";
            const void *addr = a->ai_family == AF_INET
                                   ? (const void *)&((struct sockaddr_in *)a->ai_addr)->sin_addr
                                   : (const void *)&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr;
            inet_ntop(a->ai_family, addr, text, sizeof text);
            snprintf(why, whylen,
                     "the URL's host %s is %s, a loopback, private, link-local or otherwise "
                     "non-public address (the operator setting webhook_allow_private allows it)",
                     host, text);
            out = -1;
            break;
        }
    freeaddrinfo(res);
    return out;
}
