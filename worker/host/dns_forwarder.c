/*
 * dns_forwarder.c: the forwarder of dns_forwarder.h: a UDP socket, a thread that polls it and one
 * socket per query waiting upstream, the DNS wire format it needs (the question's name, the
 * answer's A records) and the firewall calls.
 */
#include "host/dns_forwarder.h"

#include "host/conntrack_origin.h"

#include <arpa/inet.h>
#include <ctype.h>
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

#define DNS_MAX_MSG 4096
#define UPSTREAM_TIMEOUT_MS 2000
#define MEMBERS_REFRESH_MS 500
#define MAX_PORTS 64
#define MAX_ANSWER_ADDRS 32
/* Queries waiting for a resolver at once, in all and from one Sandbox: past either bound a query
 * is answered SERVFAIL at once, so that one Sandbox's slow lookups never hold up another's. */
#define DNS_MAX_PENDING 256
#define DNS_MAX_PENDING_PER_CLIENT 16

struct pending;

struct dns_forwarder {
    struct fw *fw;
    struct dns_forwarder_params p;
    struct in_addr upstream[8];
    int fd;
    pthread_t thread;
    atomic_bool stop;
    struct fw_egress_member *members;
    size_t nmembers;
    int64_t members_at;
    atomic_uint_fast64_t forwarded, refused, failed;
    struct pending *pending[DNS_MAX_PENDING]; /* the thread's own */
    size_t npending;
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- wire format ---- */

int dns_question_name(const unsigned char *m, size_t len, char *name, size_t namelen,
                      uint16_t *qtype)
{
    if (len < 12 || (m[2] & 0x80) || ((m[2] >> 3) & 0x0f) != 0 || (m[4] << 8 | m[5]) != 1)
        return -1; /* not a standard query with one question */
    size_t off = 12, n = 0;
    while (off < len && m[off] != 0) {
        size_t l = m[off];
        if ((l & 0xc0) || off + 1 + l > len || n + l + 2 > namelen)
            return -1;
        if (n)
            name[n++] = '.';
        /* A host name's characters only: a label holding a dot (or a NUL) would read as another
         * name than the one the resolver is asked for, and could pass for an allowed one. */
        for (size_t i = 0; i < l; i++) {
            unsigned char c = m[off + 1 + i];
            if (!isalnum(c) && c != '-' && c != '_')
                return -1;
            name[n++] = (char)tolower(c);
        }
        off += 1 + l;
    }
    if (off + 5 > len || n == 0)
        return -1;
    name[n] = '\0';
    if (qtype)
        *qtype = (uint16_t)(m[off + 1] << 8 | m[off + 2]);
    return (int)(off + 5); /* the end of the question */
}

static size_t skip_name(const unsigned char *m, size_t len, size_t off)
{
    while (off < len) {
        if ((m[off] & 0xc0) == 0xc0)
            return off + 2 <= len ? off + 2 : 0;
        if (m[off] == 0)
            return off + 1;
        off += 1 + (size_t)m[off];
    }
    return 0;
}

size_t dns_answer_a_records(const unsigned char *m, size_t len, struct in_addr *addrs,
                            uint32_t *ttls, size_t max)
{
    if (len < 12)
        return 0;
    size_t qd = (size_t)(m[4] << 8 | m[5]), an = (size_t)(m[6] << 8 | m[7]), off = 12, n = 0;
    for (size_t i = 0; i < qd && off; i++) {
        off = skip_name(m, len, off);
        off = off && off + 4 <= len ? off + 4 : 0;
    }
    for (size_t i = 0; i < an && off && n < max; i++) {
        off = skip_name(m, len, off);
        if (!off || off + 10 > len)
            break;
        uint16_t type = (uint16_t)(m[off] << 8 | m[off + 1]);
        uint16_t cls = (uint16_t)(m[off + 2] << 8 | m[off + 3]);
        uint32_t ttl = (uint32_t)m[off + 4] << 24 | (uint32_t)m[off + 5] << 16 |
                       (uint32_t)m[off + 6] << 8 | m[off + 7];
        size_t rdlen = (size_t)(m[off + 8] << 8 | m[off + 9]);
        off += 10;
        if (off + rdlen > len)
            break;
        if (type == 1 && cls == 1 && rdlen == 4) {
            memcpy(&addrs[n].s_addr, m + off, 4);
            ttls[n++] = ttl;
        }
        off += rdlen;
    }
    return n;
}

size_t dns_query_a(unsigned char *out, size_t cap, uint16_t id, const char *name)
{
    const unsigned char hdr[12] = {(unsigned char)(id >> 8), (unsigned char)id, 0x01, 0, 0, 1};
    size_t n = sizeof hdr;
    if (cap < n + 5)
        return 0;
    memcpy(out, hdr, n);
    for (const char *p = name; *p;) {
        size_t l = strcspn(p, ".");
        if (l == 0 || l > 63 || n + 1 + l + 5 > cap)
            return 0;
        out[n++] = (unsigned char)l;
        memcpy(out + n, p, l);
        n += l;
        p += l + (p[l] == '.');
    }
    const unsigned char tail[5] = {0, 0, 1, 0, 1}; /* the root label, type A, class IN */
    memcpy(out + n, tail, sizeof tail);
    return n + sizeof tail;
}

/* The query turned into an answer with rcode and no records (REFUSED 5, SERVFAIL 2). */
static size_t error_answer(unsigned char *m, size_t qend, int rcode)
{
    m[2] |= 0x80;                         /* QR */
    m[3] = (unsigned char)(0x80 | rcode); /* RA, rcode */
    memset(m + 6, 0, 6);                  /* no answer, authority or additional records */
    return qend;
}

/* ---- serving ---- */

/* The App whose allowlist the Sandbox at client is under, from the firewall's own map. */
static const struct fw_egress_member *member_of(struct dns_forwarder *f, struct in_addr client)
{
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < f->nmembers; i++)
            if (f->members[i].addr.s_addr == client.s_addr)
                return &f->members[i];
        int64_t now = mono_ms();
        if (pass == 1 || now - f->members_at < MEMBERS_REFRESH_MS)
            break;
        f->members_at = now;
        struct fw_egress_member *v;
        size_t n;
        char err[256];
        if (fw_egress_members(f->fw, &v, &n, err, sizeof err) != 0)
            break;
        free(f->members);
        f->members = v;
        f->nmembers = n;
    }
    return NULL;
}

/* Opens the answer's addresses for the App, on each of its ports, for TTL + grace. */
static int open_addresses(struct dns_forwarder *f, const char *app_id, const unsigned char *a,
                          size_t alen, const uint16_t *ports, size_t nports)
{
    struct in_addr addrs[MAX_ANSWER_ADDRS];
    uint32_t ttls[MAX_ANSWER_ADDRS];
    size_t na = dns_answer_a_records(a, alen, addrs, ttls, MAX_ANSWER_ADDRS);
    if (na == 0)
        return 0;
    struct fw_name_addr *v = calloc(na * nports, sizeof *v);
    if (!v)
        return -1;
    size_t n = 0;
    for (size_t i = 0; i < na; i++)
        for (size_t k = 0; k < nports; k++) {
            uint32_t ttl = ttls[i] > DNS_TTL_MAX_S ? DNS_TTL_MAX_S : ttls[i];
            v[n++] = (struct fw_name_addr){addrs[i], ports[k], ttl * 1000 + f->p.grace_ms};
        }
    char err[256];
    int rc = fw_app_names_add(f->fw, app_id, v, n, err, sizeof err);
    free(v);
    return rc;
}

/* Where the Sandbox sent a query (the resolver it named), from the flow the firewall's redirect
 * made: local is the address the query arrived on. 0.0.0.0 when conntrack cannot say. */
static struct in_addr addressed_to(const struct dns_forwarder *f, struct in_addr local,
                                   const struct sockaddr_in *from)
{
    struct in_addr dst = {0};
    if (local.s_addr && conntrack_udp_original_dst(local, f->p.port, from->sin_addr,
                                                   ntohs(from->sin_port), &dst) != 0)
        dst.s_addr = 0;
    return dst;
}

/* ---- queries waiting for an upstream answer ---- */

/* An allowed query sent upstream: its own connected socket (a fresh source port each, so an
 * answer can only come from the resolver asked), the client to answer and what to open. */
struct pending {
    int s;
    size_t upstream; /* the index in f->upstream being asked */
    int64_t deadline;
    struct sockaddr_in from;
    unsigned char q[DNS_MAX_MSG];
    size_t qlen, qend;
    char app_id[FW_OWNER_LEN];
    uint16_t ports[MAX_PORTS];
    size_t nports;
};

static void answer_error(struct dns_forwarder *f, const unsigned char *q, size_t qend,
                         const struct sockaddr_in *to, int rcode)
{
    unsigned char a[DNS_MAX_MSG];
    memcpy(a, q, qend);
    size_t alen = error_answer(a, qend, rcode);
    sendto(f->fd, a, alen, 0, (const struct sockaddr *)to, sizeof *to);
}

/* Sends p's query to the resolvers from p->upstream on, until one takes it: 0, or -1 when none
 * is left (p->s closed). */
static int pending_send(struct dns_forwarder *f, struct pending *p)
{
    for (; p->upstream < f->p.nupstream; p->upstream++) {
        if (p->s >= 0)
            close(p->s);
        struct sockaddr_in to = {
            .sin_family = AF_INET, .sin_port = htons(53), .sin_addr = f->upstream[p->upstream]};
        p->s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (p->s >= 0 && connect(p->s, (struct sockaddr *)&to, sizeof to) == 0 &&
            send(p->s, p->q, p->qlen, 0) == (ssize_t)p->qlen) {
            p->deadline = mono_ms() + UPSTREAM_TIMEOUT_MS;
            return 0;
        }
    }
    if (p->s >= 0)
        close(p->s);
    p->s = -1;
    return -1;
}

/* Ends p: answers its client with the upstream's answer a (alen > 0, after opening its
 * addresses) or SERVFAIL, and frees it. */
static void pending_finish(struct dns_forwarder *f, struct pending *p, const unsigned char *a,
                           size_t alen)
{
    /* Counted before the answer goes out, so a client that has it sees it counted. */
    if (alen && open_addresses(f, p->app_id, a, alen, p->ports, p->nports) == 0) {
        f->forwarded++;
        sendto(f->fd, a, alen, 0, (const struct sockaddr *)&p->from, sizeof p->from);
    } else {
        f->failed++;
        answer_error(f, p->q, p->qend, &p->from, 2);
    }
    if (p->s >= 0)
        close(p->s);
    free(p);
}

/* p's socket is readable (or in error: the resolver's port unreachable). The answer, or the next
 * resolver; true when p is finished. An answer to another query id is not p's: ignored. */
static bool pending_readable(struct dns_forwarder *f, struct pending *p)
{
    unsigned char a[DNS_MAX_MSG];
    ssize_t n = recv(p->s, a, sizeof a, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return false;
    if (n >= 12 && a[0] == p->q[0] && a[1] == p->q[1]) {
        pending_finish(f, p, a, (size_t)n);
        return true;
    }
    if (n >= 0)
        return false;
    p->upstream++;
    if (pending_send(f, p) == 0)
        return false;
    pending_finish(f, p, NULL, 0);
    return true;
}

static size_t pending_of_client(const struct dns_forwarder *f, struct in_addr client)
{
    size_t n = 0;
    for (size_t i = 0; i < f->npending; i++)
        n += f->pending[i]->from.sin_addr.s_addr == client.s_addr;
    return n;
}

/* One query from a Sandbox: REFUSED at once unless its App allows the name; an allowed one is
 * sent upstream and answered when the answer comes (pending), or SERVFAIL at once when too
 * many of this Sandbox's (or everyone's) queries are waiting already. */
static void serve_query(struct dns_forwarder *f, const unsigned char *q, size_t qlen,
                        const struct sockaddr_in *from, struct in_addr local)
{
    char name[256];
    uint16_t qtype = 0;
    int qend = dns_question_name(q, qlen, name, sizeof name, &qtype);
    if (qend < 0)
        return; /* not a query we answer: dropped, as a resolver drops garbage */
    const struct fw_egress_member *m = member_of(f, from->sin_addr);
    uint16_t ports[MAX_PORTS];
    size_t nports = 0;
    if (!m || !f->p.allow(m->app_id, name, ports, &nports, f->p.arg)) {
        if (m && f->p.refused)
            f->p.refused(m->ifname, from->sin_addr, addressed_to(f, local, from), m->app_id, name,
                         f->p.arg);
        f->refused++;
        answer_error(f, q, (size_t)qend, from, 5);
        return;
    }
    struct pending *p = NULL;
    if (f->npending < DNS_MAX_PENDING &&
        pending_of_client(f, from->sin_addr) < DNS_MAX_PENDING_PER_CLIENT)
        p = malloc(sizeof *p);
    if (!p) {
        f->failed++;
        answer_error(f, q, (size_t)qend, from, 2);
        return;
    }
    p->s = -1;
    p->upstream = 0;
    p->from = *from;
    memcpy(p->q, q, qlen);
    p->qlen = qlen;
    p->qend = (size_t)qend;
    snprintf(p->app_id, sizeof p->app_id, "%s", m->app_id);
    memcpy(p->ports, ports, nports * sizeof *ports);
    p->nports = nports;
    if (pending_send(f, p) != 0) {
        pending_finish(f, p, NULL, 0);
        return;
    }
    f->pending[f->npending++] = p;
}

/* Reads the queries waiting on the forwarder's socket, at most 64 before the pending ones are
 * looked at again (and stopping is), however fast they come. */
static void read_queries(struct dns_forwarder *f)
{
    unsigned char q[DNS_MAX_MSG];
    for (int k = 0; k < 64; k++) {
        struct sockaddr_in from;
        char cbuf[CMSG_SPACE(sizeof(struct in_pktinfo))];
        struct iovec iov = {q, sizeof q};
        struct msghdr mh = {.msg_name = &from,
                            .msg_namelen = sizeof from,
                            .msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = cbuf,
                            .msg_controllen = sizeof cbuf};
        ssize_t n = recvmsg(f->fd, &mh, MSG_DONTWAIT);
        if (n < 0)
            return;
        struct in_addr local = {0}; /* the query's destination after the redirect */
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
            if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
                struct in_pktinfo pi;
                memcpy(&pi, CMSG_DATA(c), sizeof pi);
                local = pi.ipi_addr;
            }
        if (n >= 12 && from.sin_family == AF_INET)
            serve_query(f, q, (size_t)n, &from, local);
    }
}

/* The thread: one poll() over the forwarder's socket and every pending query's, so a resolver
 * that is slow for one name delays only the queries waiting for it. */
static void *serve(void *arg)
{
    struct dns_forwarder *f = arg;
    struct pollfd pfd[DNS_MAX_PENDING + 1];
    while (!f->stop) {
        int64_t now = mono_ms(), wait = 200; /* f->stop is looked at this often */
        pfd[0] = (struct pollfd){f->fd, POLLIN, 0};
        for (size_t i = 0; i < f->npending; i++) {
            pfd[i + 1] = (struct pollfd){f->pending[i]->s, POLLIN, 0};
            if (f->pending[i]->deadline - now < wait)
                wait = f->pending[i]->deadline - now;
        }
        size_t n = f->npending;
        if (poll(pfd, n + 1, wait < 0 ? 0 : (int)wait) < 0 && errno != EINTR)
            continue;
        now = mono_ms();
        /* Pending queries first (the new ones read below are not in pfd yet), compacting the
         * array over the finished ones. */
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) {
            struct pending *p = f->pending[i];
            bool done = false;
            if (pfd[i + 1].revents)
                done = pending_readable(f, p);
            if (!done && p->deadline <= now) {
                p->upstream++;
                if (pending_send(f, p) != 0) {
                    pending_finish(f, p, NULL, 0);
                    done = true;
                }
            }
            if (!done)
                f->pending[kept++] = p;
        }
        f->npending = kept;
        if (pfd[0].revents & POLLIN)
            read_queries(f);
    }
    /* Stopping: whoever still waits gets SERVFAIL, as if no resolver had answered. */
    for (size_t i = 0; i < f->npending; i++)
        pending_finish(f, f->pending[i], NULL, 0);
    f->npending = 0;
    return NULL;
}

struct dns_forwarder *dns_forwarder_start(struct fw *fw, const struct dns_forwarder_params *p,
                                          char *err, size_t errlen)
{
    struct dns_forwarder *f = calloc(1, sizeof *f);
    if (!f) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    f->fw = fw;
    f->p = *p;
    f->p.nupstream = p->nupstream > 8 ? 8 : p->nupstream;
    memcpy(f->upstream, p->upstream, f->p.nupstream * sizeof *f->upstream);
    f->p.upstream = f->upstream;
    f->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_port = htons(p->port)};
    int on = 1;
    if (f->fd < 0 || setsockopt(f->fd, IPPROTO_IP, IP_PKTINFO, &on, sizeof on) != 0 ||
        bind(f->fd, (struct sockaddr *)&at, sizeof at) != 0) {
        int e = errno;
        snprintf(err, errlen, "DNS forwarder: UDP port %u: %s", (unsigned)p->port, strerror(e));
        if (f->fd >= 0)
            close(f->fd);
        free(f);
        errno = e;
        return NULL;
    }
    int rc = pthread_create(&f->thread, NULL, serve, f);
    if (rc != 0) {
        snprintf(err, errlen, "DNS forwarder: thread: %s", strerror(rc));
        close(f->fd);
        free(f);
        errno = rc;
        return NULL;
    }
    return f;
}

void dns_forwarder_stop(struct dns_forwarder *f)
{
    if (!f)
        return;
    f->stop = true;
    pthread_join(f->thread, NULL);
    close(f->fd);
    free(f->members);
    free(f);
}

void dns_forwarder_stats(struct dns_forwarder *f, struct dns_forwarder_stats *out)
{
    out->forwarded = f->forwarded;
    out->refused = f->refused;
    out->failed = f->failed;
}
