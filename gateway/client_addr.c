/*
 * client_addr.c: the client address of a request, through trusted proxies (see client_addr.h).
 */
#include "client_addr.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#define XFF_MAX 4096 /* bytes of X-Forwarded-For looked at (the right-most end) */

struct proxy_net {
    int family; /* AF_INET or AF_INET6 */
    uint8_t addr[16];
    int prefix_bits;
};

struct trusted_proxies {
    size_t n;
    struct proxy_net nets[];
};

/* addr (text, IPv4 or IPv6, without brackets or port) to family and bytes; false if it is none. */
static bool parse_ip(const char *s, int *family, uint8_t out[16])
{
    if (inet_pton(AF_INET, s, out) == 1) {
        *family = AF_INET;
        return true;
    }
    if (inet_pton(AF_INET6, s, out) == 1) {
        *family = AF_INET6;
        /* An IPv4-mapped IPv6 address is the IPv4 address (a dual-stack listener's peers). */
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(out, mapped, 12) == 0) {
            memmove(out, out + 12, 4);
            *family = AF_INET;
        }
        return true;
    }
    return false;
}

struct trusted_proxies *trusted_proxies_parse(const char *list, char *err, size_t errlen)
{
    size_t cap = 1;
    for (const char *p = list; *p; p++)
        cap += *p == ',';
    struct trusted_proxies *tp = calloc(1, sizeof *tp + cap * sizeof tp->nets[0]);
    if (!tp) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[64], *slash;
        while (len > 0 && isspace((unsigned char)*p))
            p++, len--;
        while (len > 0 && isspace((unsigned char)p[len - 1]))
            len--;
        if (len == 0 || len >= sizeof item) {
            snprintf(err, errlen, "trusted_proxies: \"%.*s\" is not an address or CIDR",
                     (int)(len < 64 ? len : 64), p);
            free(tp);
            return NULL;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        struct proxy_net *net = &tp->nets[tp->n];
        slash = strchr(item, '/');
        if (slash)
            *slash = '\0';
        int max = 0;
        bool ok = parse_ip(item, &net->family, net->addr);
        if (ok) {
            max = net->family == AF_INET ? 32 : 128;
            net->prefix_bits = max;
            if (slash) {
                char *num_end;
                long bits = strtol(slash + 1, &num_end, 10);
                ok = slash[1] != '\0' && *num_end == '\0' && bits >= 0 && bits <= max;
                net->prefix_bits = (int)bits;
            }
        }
        if (!ok) {
            if (slash)
                *slash = '/';
            snprintf(err, errlen, "trusted_proxies: \"%s\" is not an address or CIDR", item);
            free(tp);
            return NULL;
        }
        tp->n++;
        if (!end)
            break;
        p = end + 1;
    }
    return tp;
}

void trusted_proxies_free(struct trusted_proxies *tp)
{
    free(tp);
}

static bool net_contains(const struct proxy_net *net, int family, const uint8_t addr[16])
{
    int bits = net->prefix_bits;
    if (net->family != family)
        return false;
    if (memcmp(net->addr, addr, (size_t)(bits / 8)) != 0)
        return false;
    if (bits % 8 == 0)
        return true;
    uint8_t mask = (uint8_t)(0xff << (8 - bits % 8));
    return (net->addr[bits / 8] & mask) == (addr[bits / 8] & mask);
}

bool trusted_proxies_match(const struct trusted_proxies *tp, const char *addr)
{
    uint8_t bytes[16];
    int family;
    if (!tp || tp->n == 0 || !parse_ip(addr, &family, bytes))
        return false;
    for (size_t i = 0; i < tp->n; i++)
        if (net_contains(&tp->nets[i], family, bytes))
            return true;
    return false;
}

/* One X-Forwarded-For entry (trimmed; "[v6]" or "[v6]:port" or "v4:port" accepted) as a
 * canonical address in out; false when it is not an address. */
static bool xff_entry(const char *s, size_t len, char out[CLIENT_ADDR_LEN])
{
    char item[64];
    uint8_t bytes[16];
    int family;
    while (len > 0 && isspace((unsigned char)*s))
        s++, len--;
    while (len > 0 && isspace((unsigned char)s[len - 1]))
        len--;
    if (len == 0 || len >= sizeof item)
        return false;
    memcpy(item, s, len);
    item[len] = '\0';
    char *a = item;
    if (a[0] == '[') {
        char *close = strchr(a, ']');
        if (!close)
            return false;
        *close = '\0';
        a++;
    } else if (strchr(a, '.') && strchr(a, ':') == strrchr(a, ':') && strchr(a, ':')) {
        *strchr(a, ':') = '\0'; /* v4:port */
    }
    if (!parse_ip(a, &family, bytes))
        return false;
    return inet_ntop(family, bytes, out, CLIENT_ADDR_LEN) != NULL;
}

void client_addr_resolve(const struct trusted_proxies *tp, const char *peer, const char *xff,
                         char out[CLIENT_ADDR_LEN])
{
    snprintf(out, CLIENT_ADDR_LEN, "%s", peer);
    if (!xff || !trusted_proxies_match(tp, peer))
        return;
    size_t len = strlen(xff);
    const char *start = len > XFF_MAX ? xff + len - XFF_MAX : xff;
    const char *end = xff + len;
    /* Right to left: each hop that is a trusted proxy vouches for the one before it. */
    while (end > start) {
        const char *comma = end;
        while (comma > start && comma[-1] != ',')
            comma--;
        char addr[CLIENT_ADDR_LEN];
        if (!xff_entry(comma, (size_t)(end - comma), addr))
            return; /* not an address: the last hop known is the client */
        snprintf(out, CLIENT_ADDR_LEN, "%s", addr);
        if (!trusted_proxies_match(tp, addr))
            return;
        end = comma > start ? comma - 1 : start;
    }
}

struct xff_collect {
    char buf[XFF_MAX + 1];
    size_t len;
};

/* Joins every X-Forwarded-For header with ", " (RFC 9110: the same as one list), keeping the
 * right-most XFF_MAX bytes. */
static enum MHD_Result collect_xff(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    struct xff_collect *c = cls;
    (void)kind;
    if (!key || strcasecmp(key, "X-Forwarded-For") != 0 || !value)
        return MHD_YES;
    size_t vlen = strlen(value), need = (c->len ? 1 : 0) + vlen;
    if (need > XFF_MAX) {
        value += need - XFF_MAX;
        vlen = XFF_MAX;
        c->len = 0;
        need = vlen;
    } else if (c->len + need > XFF_MAX) {
        size_t drop = c->len + need - XFF_MAX;
        memmove(c->buf, c->buf + drop, c->len - drop);
        c->len -= drop;
    }
    if (c->len)
        c->buf[c->len++] = ',';
    memcpy(c->buf + c->len, value, vlen);
    c->len += vlen;
    c->buf[c->len] = '\0';
    return MHD_YES;
}

void client_addr_of(const struct trusted_proxies *tp, struct MHD_Connection *conn,
                    char out[CLIENT_ADDR_LEN])
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    char peer[CLIENT_ADDR_LEN] = "unknown";
    if (ci && ci->client_addr) {
        const struct sockaddr *sa = ci->client_addr;
        uint8_t bytes[16];
        int family;
        if (sa->sa_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, peer,
                      sizeof peer);
        else if (sa->sa_family == AF_INET6 &&
                 inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr,
                           peer, sizeof peer) &&
                 parse_ip(peer, &family, bytes))
            inet_ntop(family, bytes, peer, sizeof peer); /* an IPv4-mapped peer as IPv4 */
    }
    if (!tp || tp->n == 0) {
        snprintf(out, CLIENT_ADDR_LEN, "%s", peer);
        return;
    }
    struct xff_collect *c = malloc(sizeof *c);
    if (!c) {
        snprintf(out, CLIENT_ADDR_LEN, "%s", peer);
        return;
    }
    c->len = 0;
    c->buf[0] = '\0';
    MHD_get_connection_values(conn, MHD_HEADER_KIND, collect_xff, c);
    client_addr_resolve(tp, peer, c->len ? c->buf : NULL, out);
    free(c);
}
