/*
 * egress_log.c: the NFLOG reader of egress_log.h, on libnetfilter_log.
 */
#include "host/egress_log.h"

#include "host/firewall.h"

#include <arpa/inet.h>
#include <errno.h>
#include <libnetfilter_log/libnetfilter_log.h>
#include <netinet/ip.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct egress_log {
    struct nflog_handle *h;
    struct nflog_g_handle *g;
    void (*cb)(const struct egress_denial *, void *);
    void *arg;
    int count;
};

static int fail(char *err, size_t errlen, const char *what)
{
    snprintf(err, errlen, "NFLOG group %d: %s: %s", FW_NFLOG_GROUP, what, strerror(errno));
    return -1;
}

const char *egress_proto_name(uint8_t proto, char buf[8])
{
    switch (proto) {
    case IPPROTO_TCP:
        return "tcp";
    case IPPROTO_UDP:
        return "udp";
    case IPPROTO_ICMP:
        return "icmp";
    default:
        snprintf(buf, 8, "%u", (unsigned)proto);
        return buf;
    }
}

/* One logged packet: its prefix names the rule, its payload starts at the IPv4 header. */
static int on_packet(struct nflog_g_handle *g, struct nfgenmsg *msg, struct nflog_data *nfd,
                     void *data)
{
    (void)g;
    (void)msg;
    struct egress_log *l = data;
    const char *prefix = nflog_get_prefix(nfd);
    char *payload = NULL;
    int len = nflog_get_payload(nfd, &payload);
    if (!prefix || strncmp(prefix, FW_NFLOG_PREFIX, strlen(FW_NFLOG_PREFIX)) != 0 || len < 20 ||
        !payload || (payload[0] >> 4) != 4)
        return 0; /* not one of sbx's IPv4 drops */
    struct egress_denial d = {0};
    snprintf(d.reason, sizeof d.reason, "%.*s", (int)strcspn(prefix + strlen(FW_NFLOG_PREFIX), " "),
             prefix + strlen(FW_NFLOG_PREFIX));
    uint32_t indev = nflog_get_indev(nfd);
    if (!indev || !if_indextoname(indev, d.ifname))
        d.ifname[0] = '\0';
    const unsigned char *ip = (const unsigned char *)payload;
    size_t ihl = (size_t)(ip[0] & 0x0f) * 4;
    d.proto = ip[9];
    memcpy(&d.src.s_addr, ip + 12, 4);
    memcpy(&d.dst.s_addr, ip + 16, 4);
    if ((d.proto == IPPROTO_TCP || d.proto == IPPROTO_UDP) && (size_t)len >= ihl + 4)
        d.dport = (uint16_t)(ip[ihl + 2] << 8 | ip[ihl + 3]);
    l->count++;
    l->cb(&d, l->arg);
    return 0;
}

struct egress_log *egress_log_open(char *err, size_t errlen)
{
    struct egress_log *l = calloc(1, sizeof *l);
    if (!l) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    l->h = nflog_open();
    if (!l->h) {
        fail(err, errlen, "nflog_open (CAP_NET_ADMIN needed)");
        free(l);
        return NULL;
    }
    /* Older kernels want the family bound for NFLOG to work at all; newer ones ignore it. */
    nflog_unbind_pf(l->h, AF_INET);
    nflog_bind_pf(l->h, AF_INET);
    l->g = nflog_bind_group(l->h, FW_NFLOG_GROUP);
    if (!l->g) {
        int e = errno;
        fail(err, errlen, e == EBUSY ? "bound by another process of this host" : "bind");
        nflog_close(l->h);
        free(l);
        errno = e;
        return NULL;
    }
    if (nflog_set_mode(l->g, NFULNL_COPY_PACKET, FW_NFLOG_SNAPLEN) < 0 ||
        nflog_callback_register(l->g, on_packet, l) < 0) {
        int e = errno;
        fail(err, errlen, "set mode");
        egress_log_close(l);
        errno = e;
        return NULL;
    }
    /* A flood must fill our buffer and lose log entries, never slow the kernel down. */
    int bufsize = 4 << 20;
    setsockopt(nflog_fd(l->h), SOL_SOCKET, SO_RCVBUFFORCE, &bufsize, sizeof bufsize);
    return l;
}

int egress_log_fd(const struct egress_log *l)
{
    return nflog_fd(l->h);
}

int egress_log_read(struct egress_log *l, void (*cb)(const struct egress_denial *d, void *arg),
                    void *arg, size_t *lost, char *err, size_t errlen)
{
    char buf[65536] __attribute__((aligned));
    l->cb = cb;
    l->arg = arg;
    l->count = 0;
    for (;;) {
        ssize_t n = recv(nflog_fd(l->h), buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == ENOBUFS) { /* overflowed: entries lost; the socket goes on */
            if (lost)
                (*lost)++;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return l->count;
        if (n <= 0)
            return fail(err, errlen, "receive");
        nflog_handle_packet(l->h, buf, (int)n);
    }
}

void egress_log_close(struct egress_log *l)
{
    if (!l)
        return;
    if (l->g)
        nflog_unbind_group(l->g);
    nflog_close(l->h);
    free(l);
}
