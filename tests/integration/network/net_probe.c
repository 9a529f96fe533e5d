/*
 * net_probe.c: the packets of the network tests. A server that answers TCP and UDP (saying which
 * address it saw the client come from, to prove masquerading), and probes that try TCP, UDP and
 * ICMP echo to an address and say what happened, by exit status:
 *   0 answered, 1 timed out (silently dropped), 2 refused or unreachable, 3 other error.
 *
 *   net_probe serve --pidfile F [--tcp P,P,...] [--udp P,...]   (returns once listening)
 *   net_probe tcp ADDR PORT [--timeout MS] [--bind ADDR]
 *   net_probe udp ADDR PORT [--timeout MS] [--bind ADDR] [--sport PORT] [--count N]
 *   net_probe icmp ADDR [--timeout MS]
 *   net_probe tcp-hold ADDR PORT GOFILE [--timeout MS]  an open connection, before and after GOFILE
 *   net_probe dns NAME SERVER [--timeout MS]   one DNS query (A, over UDP) to SERVER:53; prints
 *                                              "rcode=N a.b.c.d/ttl ..." when answered
 *   net_probe flood ADDR PORT COUNT   COUNT UDP datagrams to ADDR:PORT, each from a new socket (a
 *                                     new flow each); exit 0 once sent
 *   net_probe lookup NAME    getaddrinfo (IPv4), as any program of an image resolves: prints the
 *                            addresses, exit 0; 2 when the name did not resolve
 * ADDR may be IPv4 or IPv6 (with %ifname for link-local).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/icmp6.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { ANSWERED = 0, TIMEOUT = 1, REFUSED = 2, OTHER = 3 };

static int resolve(const char *host, int port, int type, struct sockaddr_storage *ss,
                   socklen_t *len)
{
    /* Raw sockets have no ports: resolve as datagram, the address is the same. */
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = type == SOCK_RAW ? SOCK_DGRAM : type,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
    struct addrinfo *ai;
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    int rc = getaddrinfo(host, portstr, &hints, &ai);
    if (rc != 0) {
        fprintf(stderr, "net_probe: %s: %s\n", host, gai_strerror(rc));
        return -1;
    }
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

static void addr_str(const struct sockaddr *sa, char *out, size_t outlen)
{
    const void *a = sa->sa_family == AF_INET
                        ? (const void *)&((const struct sockaddr_in *)sa)->sin_addr
                        : (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
    inet_ntop(sa->sa_family, a, out, (socklen_t)outlen);
    /* IPv4 clients of a dual-stack socket appear as ::ffff:a.b.c.d */
    if (strncmp(out, "::ffff:", 7) == 0 && strchr(out, '.'))
        memmove(out, out + 7, strlen(out + 7) + 1);
}

static int outcome_of(int err)
{
    if (err == ECONNREFUSED || err == EHOSTUNREACH || err == ENETUNREACH || err == EACCES ||
        err == EPERM)
        return REFUSED;
    return OTHER;
}

static int report(int outcome, const char *what)
{
    static const char *const names[] = {"answered", "timeout", "refused", "error"};
    printf("%s: %s\n", names[outcome], what);
    return outcome;
}

static int probe_tcp(const char *host, int port, int timeout_ms, const char *bind_addr)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (resolve(host, port, SOCK_STREAM, &ss, &len) < 0)
        return OTHER;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return report(OTHER, strerror(errno));
    if (bind_addr) {
        struct sockaddr_storage bs;
        socklen_t blen;
        if (resolve(bind_addr, 0, SOCK_STREAM, &bs, &blen) < 0 ||
            bind(fd, (struct sockaddr *)&bs, blen) < 0)
            return report(OTHER, "bind");
    }
    if (connect(fd, (struct sockaddr *)&ss, len) < 0 && errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        return report(outcome_of(e), strerror(e));
    }
    struct pollfd p = {fd, POLLOUT, 0};
    if (poll(&p, 1, timeout_ms) == 0) {
        close(fd);
        return report(TIMEOUT, "no answer to SYN");
    }
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
    if (soerr) {
        close(fd);
        return report(outcome_of(soerr), strerror(soerr));
    }
    /* Connected: the server's greeting says which address it saw. */
    char buf[256] = {0};
    p.events = POLLIN;
    if (poll(&p, 1, timeout_ms) == 1) {
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        if (n > 0)
            buf[n] = '\0';
    }
    close(fd);
    buf[strcspn(buf, "\n")] = '\0';
    return report(ANSWERED, buf);
}

/* UDP "ping"s to host:port: one, or count of them (a flood), from bind_addr:sport when given;
 * then waits for an answer. */
static int probe_udp(const char *host, int port, int timeout_ms, const char *bind_addr, int sport,
                     int count)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (resolve(host, port, SOCK_DGRAM, &ss, &len) < 0)
        return OTHER;
    int fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return report(OTHER, strerror(errno));
    if (bind_addr || sport > 0) {
        struct sockaddr_storage bs;
        socklen_t blen;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (resolve(bind_addr ? bind_addr : "0.0.0.0", sport, SOCK_DGRAM, &bs, &blen) < 0 ||
            bind(fd, (struct sockaddr *)&bs, blen) < 0)
            return report(OTHER, "bind");
    }
    if (connect(fd, (struct sockaddr *)&ss, len) < 0)
        return report(OTHER, strerror(errno));
    for (int i = 0; i < (count > 0 ? count : 1); i++)
        if (send(fd, "ping", 4, 0) < 0) {
            int e = errno;
            close(fd);
            return report(outcome_of(e), strerror(e));
        }
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) == 0) {
        close(fd);
        return report(TIMEOUT, "no UDP answer");
    }
    char buf[256];
    ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
    int e = errno;
    close(fd);
    if (n < 0)
        return report(outcome_of(e), strerror(e));
    buf[n] = '\0';
    return report(ANSWERED, buf);
}

/* A DNS query for NAME (type A, class IN, recursion desired) into q; its length. */
static size_t dns_query(const char *name, uint16_t id, unsigned char *q, size_t cap)
{
    size_t n = 0;
    unsigned char hdr[12] = {id >> 8, id & 0xff, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0};
    memcpy(q, hdr, sizeof hdr);
    n = sizeof hdr;
    for (const char *p = name; *p && n + 70 < cap;) {
        size_t l = strcspn(p, ".");
        if (l == 0 || l > 63)
            return 0;
        q[n++] = (unsigned char)l;
        memcpy(q + n, p, l);
        n += l;
        p += l;
        if (*p == '.')
            p++;
    }
    q[n++] = 0;
    unsigned char tail[4] = {0, 1, 0, 1};
    memcpy(q + n, tail, 4);
    return n + 4;
}

/* Skips a (possibly compressed) name at off; the offset after it, 0 when malformed. */
static size_t dns_skip_name(const unsigned char *m, size_t len, size_t off)
{
    while (off < len) {
        if ((m[off] & 0xc0) == 0xc0)
            return off + 2 <= len ? off + 2 : 0;
        if (m[off] == 0)
            return off + 1;
        off += 1 + m[off];
    }
    return 0;
}

static int probe_dns(const char *name, const char *server, int timeout_ms)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (resolve(server, 53, SOCK_DGRAM, &ss, &len) < 0)
        return OTHER;
    unsigned char q[512], a[1500];
    uint16_t id = (uint16_t)(getpid() ^ time(NULL));
    size_t qn = dns_query(name, id, q, sizeof q);
    int fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (qn == 0 || fd < 0 || connect(fd, (struct sockaddr *)&ss, len) < 0)
        return report(OTHER, "cannot send a query");
    if (send(fd, q, qn, 0) < 0) {
        int e = errno;
        close(fd);
        return report(outcome_of(e), strerror(e));
    }
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) == 0) {
        close(fd);
        return report(TIMEOUT, "no DNS answer");
    }
    ssize_t n = recv(fd, a, sizeof a, 0);
    int e = errno;
    close(fd);
    if (n < 0)
        return report(outcome_of(e), strerror(e));
    if (n < 12 || a[0] != q[0] || a[1] != q[1])
        return report(OTHER, "not an answer to the query");
    char out[1024];
    size_t o = (size_t)snprintf(out, sizeof out, "rcode=%d", a[3] & 0x0f);
    size_t off = dns_skip_name(a, (size_t)n, 12);
    off = off ? off + 4 : 0;
    int answers = a[6] << 8 | a[7];
    for (int i = 0; off && i < answers && o < sizeof out - 40; i++) {
        off = dns_skip_name(a, (size_t)n, off);
        if (!off || off + 10 > (size_t)n)
            break;
        int type = a[off] << 8 | a[off + 1];
        uint32_t ttl = (uint32_t)a[off + 4] << 24 | a[off + 5] << 16 | a[off + 6] << 8 | a[off + 7];
        int rdlen = a[off + 8] << 8 | a[off + 9];
        off += 10;
        if (off + (size_t)rdlen > (size_t)n)
            break;
        if (type == 1 && rdlen == 4)
            o += (size_t)snprintf(out + o, sizeof out - o, " %d.%d.%d.%d/%u", a[off], a[off + 1],
                                  a[off + 2], a[off + 3], ttl);
        off += (size_t)rdlen;
    }
    return report(ANSWERED, out);
}

static int flood(const char *host, int port, long count)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (resolve(host, port, SOCK_DGRAM, &ss, &len) < 0)
        return OTHER;
    long sent = 0;
    for (long i = 0; i < count; i++) {
        int fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return report(OTHER, strerror(errno));
        if (sendto(fd, "x", 1, 0, (struct sockaddr *)&ss, len) == 1)
            sent++;
        close(fd);
    }
    char msg[64];
    snprintf(msg, sizeof msg, "sent %ld of %ld", sent, count);
    return report(ANSWERED, msg);
}

static int probe_lookup(const char *name)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai;
    int rc = getaddrinfo(name, NULL, &hints, &ai);
    if (rc != 0)
        return report(REFUSED, gai_strerror(rc));
    char out[512];
    size_t o = 0;
    out[0] = '\0';
    for (struct addrinfo *i = ai; i && o < sizeof out - 20; i = i->ai_next) {
        char a[INET6_ADDRSTRLEN];
        addr_str(i->ai_addr, a, sizeof a);
        o += (size_t)snprintf(out + o, sizeof out - o, "%s%s", o ? " " : "", a);
    }
    freeaddrinfo(ai);
    return report(ANSWERED, out);
}

static int probe_icmp(const char *host, int timeout_ms)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (resolve(host, 0, SOCK_RAW, &ss, &len) < 0)
        return OTHER;
    int v6 = ss.ss_family == AF_INET6;
    int fd = socket(ss.ss_family, SOCK_RAW | SOCK_CLOEXEC, v6 ? IPPROTO_ICMPV6 : IPPROTO_ICMP);
    if (fd < 0)
        return report(OTHER, strerror(errno));
    uint16_t id = (uint16_t)getpid();
    unsigned char pkt[64] = {0};
    if (v6) {
        struct icmp6_hdr *h = (struct icmp6_hdr *)pkt;
        h->icmp6_type = ICMP6_ECHO_REQUEST;
        h->icmp6_id = htons(id);
        h->icmp6_seq = htons(1); /* the kernel computes ICMPv6 checksums */
    } else {
        struct icmphdr *h = (struct icmphdr *)pkt;
        h->type = ICMP_ECHO;
        h->un.echo.id = htons(id);
        h->un.echo.sequence = htons(1);
        uint32_t sum = 0;
        for (size_t i = 0; i < sizeof(pkt); i += 2)
            sum += (uint32_t)(pkt[i] << 8 | pkt[i + 1]);
        while (sum >> 16)
            sum = (sum & 0xffff) + (sum >> 16);
        h->checksum = htons((uint16_t)~sum);
    }
    if (sendto(fd, pkt, sizeof(pkt), 0, (struct sockaddr *)&ss, len) < 0) {
        int e = errno;
        close(fd);
        return report(outcome_of(e), strerror(e));
    }
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        int left = timeout_ms - (int)((now.tv_sec - start.tv_sec) * 1000 +
                                      (now.tv_nsec - start.tv_nsec) / 1000000);
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, left) == 0) {
            close(fd);
            return report(TIMEOUT, "no echo reply");
        }
        unsigned char buf[1500];
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n <= 0)
            continue;
        if (v6) {
            const struct icmp6_hdr *h = (const struct icmp6_hdr *)buf;
            if (n >= 8 && h->icmp6_type == ICMP6_ECHO_REPLY && ntohs(h->icmp6_id) == id)
                break;
            if (n >= 8 && h->icmp6_type == ICMP6_DST_UNREACH) {
                close(fd);
                return report(REFUSED, "unreachable");
            }
        } else {
            size_t ihl = (size_t)(buf[0] & 0x0f) * 4; /* raw IPv4 sockets see the IP header */
            const struct icmphdr *h = (const struct icmphdr *)(buf + ihl);
            if ((size_t)n >= ihl + 8 && h->type == ICMP_ECHOREPLY && ntohs(h->un.echo.id) == id)
                break;
            if ((size_t)n >= ihl + 8 && h->type == ICMP_DEST_UNREACH) {
                close(fd);
                return report(REFUSED, "unreachable");
            }
        }
    }
    close(fd);
    return report(ANSWERED, "echo reply");
}

/* Connects, reads the greeting, and checks an echo; then waits until the file `go` exists and
 * checks an echo again on the same connection: whether an open connection still works after
 * something changed in between. */
static int probe_tcp_hold(const char *host, int port, const char *go, int timeout_ms)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (resolve(host, port, SOCK_STREAM, &ss, &len) < 0)
        return OTHER;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    char buf[256];
    if (connect(fd, (struct sockaddr *)&ss, len) < 0 || read(fd, buf, sizeof(buf)) <= 0 ||
        write(fd, "1", 1) != 1 || read(fd, buf, sizeof(buf)) != 1) {
        close(fd);
        return report(OTHER, "first exchange failed");
    }
    printf("open\n");
    while (access(go, F_OK) != 0)
        usleep(10000);
    ssize_t r = -1;
    if (write(fd, "2", 1) == 1)
        r = read(fd, buf, sizeof(buf));
    close(fd);
    return r == 1 ? report(ANSWERED, "the open connection still works")
                  : report(TIMEOUT, "the open connection is cut");
}

/* ---- server ---- */

static int listen_on(int port, int type)
{
    int fd = socket(AF_INET6, type | SOCK_CLOEXEC, 0);
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    struct sockaddr_in6 a = {
        .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port), .sin6_addr = in6addr_any};
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        (type == SOCK_STREAM && listen(fd, 64) < 0) ||
        (type == SOCK_DGRAM &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof(one)) < 0)) {
        fprintf(stderr, "net_probe serve: port %d: %s\n", port, strerror(errno));
        exit(OTHER);
    }
    return fd;
}

/* Answers from the address the datagram was sent to (IPV6_PKTINFO), as a client's connected
 * socket and conntrack expect, not from the primary address of the outgoing interface. */
static void udp_echo(int fd)
{
    char buf[256], ps[64], msg[200];
    struct sockaddr_in6 peer;
    char cbuf[CMSG_SPACE(sizeof(struct in6_pktinfo))];
    struct iovec iov = {buf, sizeof(buf)};
    struct msghdr mh = {.msg_name = &peer,
                        .msg_namelen = sizeof(peer),
                        .msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = cbuf,
                        .msg_controllen = sizeof(cbuf)};
    if (recvmsg(fd, &mh, 0) < 0)
        return;
    struct in6_pktinfo info = {0};
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO)
            memcpy(&info, CMSG_DATA(c), sizeof(info));
    addr_str((struct sockaddr *)&peer, ps, sizeof(ps));
    int m = snprintf(msg, sizeof(msg), "echo from %s", ps);
    iov = (struct iovec){msg, (size_t)m};
    memset(cbuf, 0, sizeof(cbuf));
    mh.msg_controllen = sizeof(cbuf);
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = IPPROTO_IPV6;
    c->cmsg_type = IPV6_PKTINFO;
    c->cmsg_len = CMSG_LEN(sizeof(info));
    info.ipi6_ifindex = 0;
    memcpy(CMSG_DATA(c), &info, sizeof(info));
    if (sendmsg(fd, &mh, 0) < 0)
        perror("net_probe serve: udp reply");
}

/* TCP clients get a greeting, then have what they send echoed until they close; up to 64 at once.
 * fds has room for the listeners and the clients (types[i] == 0 marks a client). */
static void serve_loop(struct pollfd *fds, int *types, int n)
{
    int listeners = n;
    for (;;) {
        if (poll(fds, (nfds_t)n, -1) < 0)
            continue;
        for (int i = 0; i < n; i++) {
            if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            struct sockaddr_storage peer, local;
            socklen_t pl = sizeof(peer), ll = sizeof(local);
            char ps[64], ls[64], msg[200];
            if (types[i] == 0) { /* a client */
                ssize_t r = read(fds[i].fd, msg, sizeof(msg));
                if (r <= 0 || write(fds[i].fd, msg, (size_t)r) != r) {
                    close(fds[i].fd);
                    fds[i--] = fds[--n];
                    types[i + 1] = types[n];
                }
            } else if (types[i] == SOCK_STREAM) {
                int c = accept4(fds[i].fd, (struct sockaddr *)&peer, &pl, SOCK_CLOEXEC);
                if (c < 0)
                    continue;
                getsockname(c, (struct sockaddr *)&local, &ll);
                addr_str((struct sockaddr *)&peer, ps, sizeof(ps));
                addr_str((struct sockaddr *)&local, ls, sizeof(ls));
                int m = snprintf(msg, sizeof(msg), "hello %s from %s\n", ls, ps);
                if (write(c, msg, (size_t)m) < 0 || n >= listeners + 64) {
                    close(c);
                    continue;
                }
                fds[n] = (struct pollfd){c, POLLIN, 0};
                types[n++] = 0;
            } else {
                udp_echo(fds[i].fd);
            }
        }
    }
}

static int add_ports(const char *list, int type, struct pollfd *fds, int *types, int n)
{
    char *copy = strdup(list), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t && n < 32; t = strtok_r(NULL, ",", &save)) {
        fds[n] = (struct pollfd){listen_on(atoi(t), type), POLLIN, 0};
        types[n++] = type;
    }
    free(copy);
    return n;
}

static int serve(int argc, char **argv)
{
    struct pollfd fds[32 + 64];
    int types[32 + 64], n = 0;
    const char *pidfile = NULL;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--tcp") == 0)
            n = add_ports(argv[i + 1], SOCK_STREAM, fds, types, n);
        else if (strcmp(argv[i], "--udp") == 0)
            n = add_ports(argv[i + 1], SOCK_DGRAM, fds, types, n);
        else if (strcmp(argv[i], "--pidfile") == 0)
            pidfile = argv[i + 1];
    }
    /* Bound and listening before the parent returns: callers need no wait. */
    pid_t pid = fork();
    if (pid < 0)
        return OTHER;
    if (pid > 0) {
        if (pidfile) {
            FILE *f = fopen(pidfile, "w");
            if (!f)
                return OTHER;
            fprintf(f, "%d\n", (int)pid);
            fclose(f);
        }
        return 0;
    }
    setsid();
    int devnull = open("/dev/null", O_RDWR);
    dup2(devnull, 0);
    dup2(devnull, 1);
    serve_loop(fds, types, n);
    return 0;
}

static int opt_int(int argc, char **argv, const char *name, int def)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return atoi(argv[i + 1]);
    return def;
}

static const char *opt_str(int argc, char **argv, const char *name)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return argv[i + 1];
    return NULL;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && strcmp(argv[1], "serve") == 0)
        return serve(argc, argv);
    int timeout = opt_int(argc, argv, "--timeout", 800);
    if (argc >= 4 && strcmp(argv[1], "tcp") == 0)
        return probe_tcp(argv[2], atoi(argv[3]), timeout, opt_str(argc, argv, "--bind"));
    if (argc >= 4 && strcmp(argv[1], "udp") == 0)
        return probe_udp(argv[2], atoi(argv[3]), timeout, opt_str(argc, argv, "--bind"),
                         opt_int(argc, argv, "--sport", 0), opt_int(argc, argv, "--count", 1));
    if (argc >= 5 && strcmp(argv[1], "tcp-hold") == 0)
        return probe_tcp_hold(argv[2], atoi(argv[3]), argv[4], timeout);
    if (argc >= 3 && strcmp(argv[1], "icmp") == 0)
        return probe_icmp(argv[2], timeout);
    if (argc >= 4 && strcmp(argv[1], "dns") == 0)
        return probe_dns(argv[2], argv[3], timeout);
    if (argc >= 5 && strcmp(argv[1], "flood") == 0)
        return flood(argv[2], atoi(argv[3]), atol(argv[4]));
    if (argc >= 3 && strcmp(argv[1], "lookup") == 0)
        return probe_lookup(argv[2]);
    fprintf(stderr, "usage: net_probe serve|tcp|udp|icmp ... (see the comment at the top)\n");
    return OTHER;
}
