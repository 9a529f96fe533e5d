/*
 * dns_forwarder.c: the forwarder of dns_forwarder.h: a UDP socket and a TCP listener, a thread
 * that polls them, the Sandboxes' TCP connections and one socket per query waiting upstream, the
 * DNS wire format it needs (the question's name, the answer's A records) and the firewall calls.
 */
#include "host/dns_forwarder.h"

#include "host/conntrack_origin.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <linux/netfilter_ipv4.h>
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
/* DNS over TCP (RFC 7766), for the answers too large for UDP: a message is a 2-byte length and
 * up to 65535 bytes. Connections at once, in all and from one Sandbox; one whose query is not in
 * (or whose answer is not taken) within TCP_IDLE_MS is closed. One query of a connection is
 * served at a time; the next is read once its answer is out. */
#define TCP_MSG_MAX 65535
#define TCP_MAX_CLIENTS 64
#define TCP_MAX_CLIENTS_PER_SANDBOX 4
#define TCP_IDLE_MS 10000

struct pending;
struct tcp_client;

struct dns_forwarder {
    struct fw *fw;
    struct dns_forwarder_params p;
    struct in_addr upstream[8];
    int fd;     /* UDP */
    int tcp_fd; /* the TCP listener */
    pthread_t thread;
    atomic_bool stop;
    struct fw_egress_member *members;
    size_t nmembers;
    int64_t members_at;   /* the last read of the members */
    int64_t miss_read_at; /* the last read for a client not among them */
    atomic_uint_fast64_t forwarded, refused, failed;
    struct pending *pending[DNS_MAX_PENDING]; /* the thread's own */
    size_t npending;
    struct tcp_client *clients[TCP_MAX_CLIENTS]; /* the thread's own */
    size_t nclients;
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

/* The firewall's members, read again: the allowlist Sandboxes (with their App) first, then the
 * Sandboxes with secrets under no allowlist (app_id empty). */
static void members_read(struct dns_forwarder *f)
{
    struct fw_egress_member *v, *sp;
    size_t n, nsp;
    char err[256];
    if (fw_egress_members(f->fw, &v, &n, err, sizeof err) != 0)
        return;
    if (fw_secret_proxy_members(f->fw, &sp, &nsp, err, sizeof err) != 0) {
        sp = NULL; /* the allowlist Sandboxes are served still */
        nsp = 0;
    }
    struct fw_egress_member *all = realloc(v, (n + nsp + 1) * sizeof *all);
    if (!all) {
        free(v);
        free(sp);
        return;
    }
    for (size_t i = 0; i < nsp; i++)
        all[n++] = sp[i];
    free(sp);
    free(f->members);
    f->members = all;
    f->nmembers = n;
}

/* The member the Sandbox at client is, from the firewall's own sets: under an allowlist (its App
 * in app_id), or with secrets under the public policy (app_id empty). Read again when older than
 * MEMBERS_REFRESH_MS, found or not, so that a Sandbox moved under an allowlist or out of one is
 * served as such within that; and on a miss unless a miss made a read within MEMBERS_REFRESH_MS
 * (a bound against lookups from addresses that are no member), so that a Sandbox that has just
 * started is found at its first lookup even right after a read made for another's. */
static const struct fw_egress_member *member_of(struct dns_forwarder *f, struct in_addr client)
{
    int64_t now = mono_ms();
    bool read = now - f->members_at >= MEMBERS_REFRESH_MS;
    for (int pass = 0; pass < 2; pass++) {
        if (read) {
            f->members_at = now;
            members_read(f);
        }
        for (size_t i = 0; i < f->nmembers; i++)
            if (f->members[i].addr.s_addr == client.s_addr)
                return &f->members[i];
        if (read || now - f->miss_read_at < MEMBERS_REFRESH_MS) {
            if (read)
                f->miss_read_at = now;
            return NULL;
        }
        read = true;
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
    if (na == 0 || nports == 0)
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

/* Where the Sandbox sent a UDP query (the resolver it named), from the flow the firewall's
 * redirect made: local is the address the query arrived on. 0.0.0.0 when conntrack cannot say. */
static struct in_addr addressed_to(const struct dns_forwarder *f, struct in_addr local,
                                   const struct sockaddr_in *from)
{
    struct in_addr dst = {0};
    if (local.s_addr && conntrack_udp_original_dst(local, f->p.port, from->sin_addr,
                                                   ntohs(from->sin_port), &dst) != 0)
        dst.s_addr = 0;
    return dst;
}

/* ---- the Sandboxes' TCP connections ---- */

/* One Sandbox's connection: the query being read (its 2-byte length first), the answer being
 * written, and whether a query of it waits upstream (then nothing more is read from it). */
struct tcp_client {
    int fd;
    struct sockaddr_in from;
    struct in_addr dst; /* where the Sandbox connected to before the redirect (0.0.0.0: unknown) */
    unsigned char in[2 + DNS_MAX_MSG];
    size_t inlen;
    unsigned char *out; /* 2-byte length and the answer; NULL when none is being written */
    size_t outlen, outoff;
    bool waiting;    /* a query of it is pending upstream */
    bool closing;    /* its peer is gone or misbehaved: freed once nothing waits for it */
    int64_t idle_at; /* closed at this time unless a query or the answer's write moves on */
};

/* Queues an answer (or a query's error) for c, and writes what the socket takes now. */
static void tcp_client_answer(struct tcp_client *c, const unsigned char *a, size_t alen)
{
    if (c->closing || c->out || alen > TCP_MSG_MAX || !(c->out = malloc(alen + 2))) {
        c->closing = true;
        return;
    }
    c->out[0] = (unsigned char)(alen >> 8);
    c->out[1] = (unsigned char)alen;
    memcpy(c->out + 2, a, alen);
    c->outlen = alen + 2;
    c->outoff = 0;
    c->idle_at = mono_ms() + TCP_IDLE_MS;
    ssize_t n = send(c->fd, c->out, c->outlen, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno != EAGAIN && errno != EINTR)
        c->closing = true;
    else if (n > 0)
        c->outoff = (size_t)n;
    if (c->outoff == c->outlen) {
        free(c->out);
        c->out = NULL;
    }
}

static void tcp_client_free(struct tcp_client *c)
{
    close(c->fd);
    free(c->out);
    free(c);
}

static size_t clients_of(const struct dns_forwarder *f, struct in_addr addr)
{
    size_t n = 0;
    for (size_t i = 0; i < f->nclients; i++)
        n += f->clients[i]->from.sin_addr.s_addr == addr.s_addr;
    return n;
}

/* Takes the connections waiting on the listener, within the bounds (past them a connection is
 * closed at once: the client's resolver library moves on to its next server or gives up). Only
 * from a Sandbox the forwarder serves (member_of): anyone else could only be REFUSED, and must not
 * hold one of the Sandboxes' connections meanwhile. */
static void accept_clients(struct dns_forwarder *f)
{
    for (int k = 0; k < 16; k++) {
        struct sockaddr_in from;
        socklen_t fl = sizeof from;
        int fd = accept4(f->tcp_fd, (struct sockaddr *)&from, &fl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        struct tcp_client *c = NULL;
        if (from.sin_family == AF_INET && f->nclients < TCP_MAX_CLIENTS &&
            clients_of(f, from.sin_addr) < TCP_MAX_CLIENTS_PER_SANDBOX &&
            member_of(f, from.sin_addr))
            c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->from = from;
        /* The redirect's original destination, which conntrack keeps for the connection. */
        struct sockaddr_in orig;
        socklen_t ol = sizeof orig;
        if (getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &orig, &ol) == 0 && orig.sin_family == AF_INET)
            c->dst = orig.sin_addr;
        c->idle_at = mono_ms() + TCP_IDLE_MS;
        f->clients[f->nclients++] = c;
    }
}

/* ---- queries waiting for an upstream answer ---- */

/* An allowed query sent upstream: its own socket (a fresh source port each, so an answer can only
 * come from the resolver asked), the client to answer and what to open. A query that came over
 * TCP is asked over TCP (it came that way because its answer did not fit in UDP): connect, send
 * the query with its length, read the answer's length and the answer. */
struct pending {
    int s;
    size_t upstream; /* the index in f->upstream being asked */
    int64_t deadline;
    struct sockaddr_in from;   /* the Sandbox (UDP: the address to answer) */
    struct tcp_client *client; /* the connection to answer on; NULL for UDP */
    bool connecting;           /* TCP: the connect to the resolver is in progress */
    unsigned char *a;          /* TCP: the answer being read, its length first */
    size_t alen;
    unsigned char q[DNS_MAX_MSG];
    size_t qlen, qend;
    char app_id[FW_OWNER_LEN];
    uint16_t ports[MAX_PORTS];
    size_t nports;
};

/* Sends an answer a of alen bytes to the Sandbox at to (UDP) or on c (TCP). */
static void send_answer(struct dns_forwarder *f, const struct sockaddr_in *to, struct tcp_client *c,
                        const unsigned char *a, size_t alen)
{
    if (c)
        tcp_client_answer(c, a, alen);
    else
        sendto(f->fd, a, alen, 0, (const struct sockaddr *)to, sizeof *to);
}

static void answer_error(struct dns_forwarder *f, const unsigned char *q, size_t qend,
                         const struct sockaddr_in *to, struct tcp_client *c, int rcode)
{
    unsigned char a[DNS_MAX_MSG];
    memcpy(a, q, qend);
    size_t alen = error_answer(a, qend, rcode);
    send_answer(f, to, c, a, alen);
}

/* Sends (UDP) or starts sending (TCP: the connect) p's query to the resolvers from p->upstream
 * on, until one takes it: 0, or -1 when none is left (p->s closed). */
static int pending_send(struct dns_forwarder *f, struct pending *p)
{
    for (; p->upstream < f->p.nupstream; p->upstream++) {
        if (p->s >= 0)
            close(p->s);
        free(p->a);
        p->a = NULL;
        p->alen = 0;
        struct sockaddr_in to = {
            .sin_family = AF_INET, .sin_port = htons(53), .sin_addr = f->upstream[p->upstream]};
        if (p->client) {
            p->s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
            if (p->s >= 0 &&
                (connect(p->s, (struct sockaddr *)&to, sizeof to) == 0 || errno == EINPROGRESS)) {
                p->connecting = true;
                p->deadline = mono_ms() + UPSTREAM_TIMEOUT_MS;
                return 0;
            }
            continue;
        }
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
        send_answer(f, &p->from, p->client, a, alen);
    } else {
        f->failed++;
        answer_error(f, p->q, p->qend, &p->from, p->client, 2);
    }
    if (p->client)
        p->client->waiting = false;
    if (p->s >= 0)
        close(p->s);
    free(p->a);
    free(p);
}

/* The next resolver for p, or SERVFAIL when there is none; true when p is finished. */
static bool pending_next(struct dns_forwarder *f, struct pending *p)
{
    p->upstream++;
    if (pending_send(f, p) == 0)
        return false;
    pending_finish(f, p, NULL, 0);
    return true;
}

/* p's UDP socket is readable (or in error: the resolver's port unreachable). The answer, or the
 * next resolver; true when p is finished. An answer to another query id is not p's: ignored. */
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
    return pending_next(f, p);
}

/* p's TCP socket is ready: the connect done (send the query), or answer bytes in. A refused or
 * reset connection, an answer cut short or one to another id moves on to the next resolver. */
static bool pending_tcp_ready(struct dns_forwarder *f, struct pending *p, short revents)
{
    if (p->connecting) {
        int err = 0;
        socklen_t el = sizeof err;
        if (getsockopt(p->s, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0)
            return pending_next(f, p);
        if (!(revents & POLLOUT))
            return false;
        unsigned char m[2 + DNS_MAX_MSG];
        m[0] = (unsigned char)(p->qlen >> 8);
        m[1] = (unsigned char)p->qlen;
        memcpy(m + 2, p->q, p->qlen);
        /* A fresh connection's send buffer takes a query whole. */
        if (send(p->s, m, p->qlen + 2, MSG_NOSIGNAL) != (ssize_t)(p->qlen + 2))
            return pending_next(f, p);
        p->connecting = false;
        return false;
    }
    if (!p->a && !(p->a = malloc(2 + TCP_MSG_MAX)))
        return pending_next(f, p);
    size_t want = p->alen < 2 ? 2 : 2 + (size_t)(p->a[0] << 8 | p->a[1]);
    ssize_t n = recv(p->s, p->a + p->alen, want - p->alen, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return false;
    if (n <= 0)
        return pending_next(f, p);
    p->alen += (size_t)n;
    if (p->alen < 2 || p->alen < 2 + (size_t)(p->a[0] << 8 | p->a[1]))
        return false;
    size_t len = p->alen - 2;
    if (len < 12 || p->a[2] != p->q[0] || p->a[3] != p->q[1])
        return pending_next(f, p);
    unsigned char *a = p->a;
    p->a = NULL; /* pending_finish frees p */
    pending_finish(f, p, a + 2, len);
    free(a);
    return true;
}

static size_t pending_of_client(const struct dns_forwarder *f, struct in_addr client)
{
    size_t n = 0;
    for (size_t i = 0; i < f->npending; i++)
        n += f->pending[i]->from.sin_addr.s_addr == client.s_addr;
    return n;
}

/* One query from a Sandbox, over UDP (c NULL: local is the address it arrived on) or on the
 * connection c: REFUSED at once unless its App allows the name; an allowed one is sent upstream
 * and answered when the answer comes (pending), or SERVFAIL at once when too many of this
 * Sandbox's (or everyone's) queries are waiting already. */
static void serve_query(struct dns_forwarder *f, const unsigned char *q, size_t qlen,
                        const struct sockaddr_in *from, struct in_addr local, struct tcp_client *c)
{
    char name[256];
    uint16_t qtype = 0;
    int qend = dns_question_name(q, qlen, name, sizeof name, &qtype);
    if (qend < 0) {
        /* Not a query we answer: a datagram is dropped, as a resolver drops garbage; a
         * connection that sent one is closed. */
        if (c)
            c->closing = true;
        return;
    }
    const struct fw_egress_member *m = member_of(f, from->sin_addr);
    uint16_t ports[MAX_PORTS];
    size_t nports = 0;
    /* A Sandbox with secrets under the public policy (no App in its member): every name is
     * asked, and nothing needs opening (its public egress reaches any address already). */
    bool public = m && !m->app_id[0];
    if (!m || (!public && !f->p.allow(m->app_id, name, ports, &nports, f->p.arg))) {
        if (m && f->p.refused)
            f->p.refused(m->ifname, from->sin_addr, c ? c->dst : addressed_to(f, local, from),
                         c ? IPPROTO_TCP : IPPROTO_UDP, m->app_id, name, f->p.arg);
        f->refused++;
        answer_error(f, q, (size_t)qend, from, c, 5);
        return;
    }
    struct pending *p = NULL;
    if (f->npending < DNS_MAX_PENDING &&
        pending_of_client(f, from->sin_addr) < DNS_MAX_PENDING_PER_CLIENT)
        p = calloc(1, sizeof *p);
    if (!p) {
        f->failed++;
        answer_error(f, q, (size_t)qend, from, c, 2);
        return;
    }
    p->s = -1;
    p->from = *from;
    p->client = c;
    memcpy(p->q, q, qlen);
    p->qlen = qlen;
    p->qend = (size_t)qend;
    snprintf(p->app_id, sizeof p->app_id, "%s", m->app_id);
    memcpy(p->ports, ports, nports * sizeof *ports);
    p->nports = nports;
    if (c)
        c->waiting = true;
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
            serve_query(f, q, (size_t)n, &from, local, NULL);
    }
}

/* c is readable or writable: the rest of its answer out, then its next query in (once its
 * answer is out and none of its queries waits upstream). */
static void tcp_client_ready(struct dns_forwarder *f, struct tcp_client *c, short revents,
                             int64_t now)
{
    if (revents & (POLLERR | POLLNVAL)) {
        c->closing = true;
        return;
    }
    if (c->out) {
        ssize_t n =
            send(c->fd, c->out + c->outoff, c->outlen - c->outoff, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
            c->closing = true;
            return;
        }
        if (n > 0) {
            c->outoff += (size_t)n;
            c->idle_at = now + TCP_IDLE_MS;
        }
        if (c->outoff < c->outlen)
            return;
        free(c->out);
        c->out = NULL;
    }
    if (c->waiting || !(revents & (POLLIN | POLLHUP)))
        return;
    size_t want = c->inlen < 2 ? 2 : 2 + (size_t)(c->in[0] << 8 | c->in[1]);
    ssize_t n = recv(c->fd, c->in + c->inlen, want - c->inlen, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        c->closing = true; /* the Sandbox closed it, or it broke */
        return;
    }
    c->inlen += (size_t)n;
    c->idle_at = now + TCP_IDLE_MS;
    if (c->inlen == 2) {
        size_t len = (size_t)(c->in[0] << 8 | c->in[1]);
        if (len < 12 || len > DNS_MAX_MSG)
            c->closing = true; /* no query is that short, and none of ours that long */
        return;
    }
    if (c->inlen < want)
        return;
    c->inlen = 0;
    serve_query(f, c->in + 2, want - 2, &c->from, (struct in_addr){0}, c);
}

/* The thread: one poll() over the forwarder's sockets, the Sandboxes' connections and every
 * pending query's socket, so a resolver that is slow for one name delays only the queries
 * waiting for it. */
static void *serve(void *arg)
{
    struct dns_forwarder *f = arg;
    struct pollfd pfd[2 + DNS_MAX_PENDING + TCP_MAX_CLIENTS];
    while (!f->stop) {
        int64_t now = mono_ms(), wait = 200; /* f->stop is looked at this often */
        pfd[0] = (struct pollfd){f->fd, POLLIN, 0};
        pfd[1] = (struct pollfd){f->tcp_fd, POLLIN, 0};
        size_t n = f->npending, nc = f->nclients;
        for (size_t i = 0; i < n; i++) {
            struct pending *p = f->pending[i];
            pfd[2 + i] = (struct pollfd){p->s, p->connecting ? POLLOUT : POLLIN, 0};
            if (p->deadline - now < wait)
                wait = p->deadline - now;
        }
        for (size_t i = 0; i < nc; i++) {
            struct tcp_client *c = f->clients[i];
            /* Not polled at all while a query of it waits upstream: a hang-up would wake the
             * poll at once, again and again, and is seen once the answer is written. */
            pfd[2 + n + i] = (struct pollfd){c->waiting ? -1 : c->fd, c->out ? POLLOUT : POLLIN, 0};
            if (!c->waiting && c->idle_at - now < wait)
                wait = c->idle_at - now;
        }
        if (poll(pfd, 2 + n + nc, wait < 0 ? 0 : (int)wait) < 0 && errno != EINTR)
            continue;
        now = mono_ms();
        /* Pending queries first (the new ones read below are not in pfd yet), compacting the
         * array over the finished ones. */
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) {
            struct pending *p = f->pending[i];
            bool done = false;
            if (pfd[2 + i].revents)
                done = p->client ? pending_tcp_ready(f, p, pfd[2 + i].revents)
                                 : pending_readable(f, p);
            if (!done && p->deadline <= now)
                done = pending_next(f, p);
            if (!done)
                f->pending[kept++] = p;
        }
        f->npending = kept;
        /* Then the connections (a query read here may add a pending one at the end), and the
         * ones to close: gone, misbehaving or idle, once no query of theirs waits. */
        for (size_t i = 0; i < nc; i++) {
            struct tcp_client *c = f->clients[i];
            if (pfd[2 + n + i].revents && !c->closing)
                tcp_client_ready(f, c, pfd[2 + n + i].revents, now);
        }
        kept = 0;
        for (size_t i = 0; i < f->nclients; i++) {
            struct tcp_client *c = f->clients[i];
            if (!c->waiting && (c->closing || c->idle_at <= now))
                tcp_client_free(c);
            else
                f->clients[kept++] = c;
        }
        f->nclients = kept;
        if (pfd[0].revents & POLLIN)
            read_queries(f);
        if (pfd[1].revents & POLLIN)
            accept_clients(f);
    }
    /* Stopping: whoever still waits gets SERVFAIL, as if no resolver had answered (on a
     * connection, as far as its socket takes it now). */
    for (size_t i = 0; i < f->npending; i++)
        pending_finish(f, f->pending[i], NULL, 0);
    f->npending = 0;
    for (size_t i = 0; i < f->nclients; i++)
        tcp_client_free(f->clients[i]);
    f->nclients = 0;
    return NULL;
}

/* The forwarder's TCP listener on 0.0.0.0:port, or -1 with errno. */
static int tcp_listener(uint16_t port)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_port = htons(port)};
    int on = 1;
    if (s < 0)
        return -1;
    /* A restarted worker binds again while its predecessor's connections are in TIME_WAIT. */
    if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
        bind(s, (struct sockaddr *)&at, sizeof at) != 0 || listen(s, 64) != 0) {
        int e = errno;
        close(s);
        errno = e;
        return -1;
    }
    return s;
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
    f->tcp_fd = -1;
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
    /* Whoever holds the UDP port holds the TCP one: the same worker's, or nobody's. */
    if ((f->tcp_fd = tcp_listener(p->port)) < 0) {
        int e = errno;
        snprintf(err, errlen, "DNS forwarder: TCP port %u: %s", (unsigned)p->port, strerror(e));
        close(f->fd);
        free(f);
        errno = e;
        return NULL;
    }
    int rc = pthread_create(&f->thread, NULL, serve, f);
    if (rc != 0) {
        snprintf(err, errlen, "DNS forwarder: thread: %s", strerror(rc));
        close(f->fd);
        close(f->tcp_fd);
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
    close(f->tcp_fd);
    free(f->members);
    free(f);
}

void dns_forwarder_stats(struct dns_forwarder *f, struct dns_forwarder_stats *out)
{
    out->forwarded = f->forwarded;
    out->refused = f->refused;
    out->failed = f->failed;
}
