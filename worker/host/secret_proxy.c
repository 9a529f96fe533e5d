/*
 * secret_proxy.c: the brokering egress proxy (secret_proxy.h): the listener, one thread per
 * connection, TLS on both sides (GnuTLS), and the HTTP/1.1 relay that puts secret values on the
 * wire (secret_proxy_http.h). Nothing here logs a header value: only names, hosts and paths.
 */
#include "host/secret_proxy.h"
#include "host/secret_proxy_http.h"

#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <linux/netfilter_ipv4.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define CERT_CACHE_MAX 4096
#define CERT_VALID_S (90 * 86400)
#define CERT_RENEW_S (30 * 86400)
#define CONNECT_TIMEOUT_MS 10000
#define BUF_CAP (SP_HEAD_MAX + 1024)
/* How long an upstream may keep silent: a model API answering without streaming can think for
 * minutes before its first byte. */
#define UPSTREAM_IDLE_MS 600000

struct cert_entry {
    char name[272]; /* "dns <name>" or "ip <address>" */
    gnutls_certificate_credentials_t cred;
    time_t issued;
};

struct retired {
    struct retired *next;
    gnutls_certificate_credentials_t cred;
};

struct end {
    int fd;
    gnutls_session_t tls;
    char *buf;
    size_t off, len;
    int idle_ms;
};

struct conn {
    struct conn *next;
    struct secret_proxy *sp;
    struct end c, u;
    struct in_addr peer, dst;
    uint16_t dport;
    char sandbox_id[SECRET_PROXY_ID_LEN], app_id[SECRET_PROXY_ID_LEN];
    struct secret_set set;
    char sni[256];
    bool tls;
    char err[160];
};

struct secret_proxy {
    struct secret_proxy_params p;
    char *upstream_ca_file;
    int lfd;
    int wake[2];
    uint16_t port;
    pthread_t acceptor;
    pthread_mutex_t lock;
    pthread_cond_t idle;
    bool stopping;
    struct conn *conns;
    size_t nconns;
    struct cert_entry *certs;
    size_t ncerts;
    struct retired *retired;
    gnutls_certificate_credentials_t upstream_cred;
    struct secret_proxy_stats stats;
};

static const gnutls_datum_t alpn_http11 = {(unsigned char *)"http/1.1", 8};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void stat_add(struct secret_proxy *sp, uint64_t *field)
{
    pthread_mutex_lock(&sp->lock);
    (*field)++;
    pthread_mutex_unlock(&sp->lock);
}

/* Also TCP_NODELAY: a head and its body go out in separate writes, and Nagle's algorithm would
 * hold the second until the peer's delayed ACK (tens of milliseconds per request). */
static void set_timeouts(int fd, int ms)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/* ---- certificates shown to Sandboxes ---- */

static gnutls_certificate_credentials_t cert_for(struct secret_proxy *sp, const char *dns,
                                                 const char *ip)
{
    char key[272];
    snprintf(key, sizeof key, "%s %s", dns ? "dns" : "ip", dns ? dns : ip);
    time_t now = time(NULL);
    pthread_mutex_lock(&sp->lock);
    for (size_t i = 0; i < sp->ncerts; i++)
        if (strcmp(sp->certs[i].name, key) == 0 && now - sp->certs[i].issued < CERT_RENEW_S) {
            gnutls_certificate_credentials_t c = sp->certs[i].cred;
            pthread_mutex_unlock(&sp->lock);
            return c;
        }
    pthread_mutex_unlock(&sp->lock);

    char *cert = NULL, *pkey = NULL, err[256];
    const char *names[1] = {dns}, *ips[1] = {ip};
    if (pki_issue_server_cert(sp->p.pki, ip ? ips : NULL, ip ? 1 : 0, dns ? names : NULL,
                              dns ? 1 : 0, CERT_VALID_S, &cert, &pkey, err, sizeof err) != 0) {
        log_warn("secret proxy: cannot issue a certificate for %s: %s", key, err);
        return NULL;
    }
    gnutls_certificate_credentials_t cred = NULL;
    gnutls_datum_t cd = {(unsigned char *)cert, (unsigned)strlen(cert)};
    gnutls_datum_t kd = {(unsigned char *)pkey, (unsigned)strlen(pkey)};
    int rc = gnutls_certificate_allocate_credentials(&cred);
    if (rc == 0)
        rc = gnutls_certificate_set_x509_key_mem(cred, &cd, &kd, GNUTLS_X509_FMT_PEM);
    explicit_bzero(pkey, strlen(pkey));
    free(pkey);
    free(cert);
    if (rc < 0) {
        log_warn("secret proxy: certificate for %s: %s", key, gnutls_strerror(rc));
        if (cred)
            gnutls_certificate_free_credentials(cred);
        return NULL;
    }
    pthread_mutex_lock(&sp->lock);
    struct cert_entry *slot = NULL;
    for (size_t i = 0; i < sp->ncerts && !slot; i++)
        if (strcmp(sp->certs[i].name, key) == 0)
            slot = &sp->certs[i];
    if (slot) { /* renewed (or issued twice at once): the old one may serve sessions still */
        struct retired *r = malloc(sizeof *r);
        if (r) {
            r->cred = slot->cred;
            r->next = sp->retired;
            sp->retired = r;
            slot->cred = cred;
            slot->issued = now;
        } else {
            gnutls_certificate_free_credentials(cred);
            cred = slot->cred;
        }
    } else if (sp->ncerts < CERT_CACHE_MAX) {
        slot = &sp->certs[sp->ncerts++];
        snprintf(slot->name, sizeof slot->name, "%s", key);
        slot->cred = cred;
        slot->issued = now;
    } else {
        gnutls_certificate_free_credentials(cred);
        cred = NULL;
        log_warn("secret proxy: %d certificates cached: %s refused", CERT_CACHE_MAX, key);
    }
    pthread_mutex_unlock(&sp->lock);
    return cred;
}

/* A DNS name as SNI may carry one: letters, digits, '-', '.', '_'; lower-cased in place. */
static bool valid_name(char *n)
{
    size_t l = strlen(n);
    if (l == 0 || l > 253)
        return false;
    for (char *c = n; *c; c++) {
        if (*c >= 'A' && *c <= 'Z')
            *c = (char)(*c - 'A' + 'a');
        else if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' || *c == '.' ||
                   *c == '_'))
            return false;
    }
    return true;
}

/* After the ClientHello: the certificate for its SNI name (or the address dialled). */
static int on_client_hello(gnutls_session_t s)
{
    struct conn *c = gnutls_session_get_ptr(s);
    char name[256];
    size_t len = sizeof name - 1;
    unsigned type = 0;
    c->sni[0] = '\0';
    if (gnutls_server_name_get(s, name, &len, &type, 0) == 0 && type == GNUTLS_NAME_DNS) {
        name[len < sizeof name ? len : sizeof name - 1] = '\0';
        if (!valid_name(name))
            return GNUTLS_E_UNRECOGNIZED_NAME;
        snprintf(c->sni, sizeof c->sni, "%s", name);
    }
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &c->dst, ip, sizeof ip);
    gnutls_certificate_credentials_t cred =
        cert_for(c->sp, c->sni[0] ? c->sni : NULL, c->sni[0] ? NULL : ip);
    if (!cred)
        return GNUTLS_E_CERTIFICATE_ERROR;
    return gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, cred);
}

/* ---- I/O on one side of a connection ---- */

static ssize_t end_recv(struct end *e, char *buf, size_t n, int idle_ms)
{
    for (;;) {
        ssize_t r;
        if (e->tls) {
            r = gnutls_record_recv(e->tls, buf, n);
            if (r == GNUTLS_E_INTERRUPTED)
                continue;
            /* Also what a post-handshake message (a TLS 1.3 session ticket) leaves behind: wait
             * for data, up to the idle time. */
            if (r == GNUTLS_E_AGAIN) {
                struct pollfd pfd = {.fd = e->fd, .events = POLLIN};
                if (gnutls_record_check_pending(e->tls) > 0 || poll(&pfd, 1, idle_ms) > 0)
                    continue;
                return -1;
            }
            if (r == GNUTLS_E_PREMATURE_TERMINATION)
                return 0;
            return r < 0 ? -1 : r;
        }
        r = recv(e->fd, buf, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        return r;
    }
}

static int end_send(struct end *e, const char *buf, size_t n)
{
    while (n > 0) {
        ssize_t w;
        if (e->tls) {
            w = gnutls_record_send(e->tls, buf, n);
            if (w == GNUTLS_E_INTERRUPTED)
                continue;
            if (w == GNUTLS_E_AGAIN) { /* a send timeout, unless the socket can take more */
                struct pollfd pfd = {.fd = e->fd, .events = POLLOUT};
                if (poll(&pfd, 1, e->idle_ms) > 0)
                    continue;
                return -1;
            }
        } else {
            w = send(e->fd, buf, n, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR)
                continue;
        }
        if (w <= 0)
            return -1;
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads more into e->buf. >0 bytes, 0 at the end, -1 on an error or a timeout. */
static ssize_t end_fill(struct end *e)
{
    if (e->off == e->len)
        e->off = e->len = 0;
    if (e->len == BUF_CAP) {
        memmove(e->buf, e->buf + e->off, e->len - e->off);
        e->len -= e->off;
        e->off = 0;
        if (e->len == BUF_CAP)
            return -1;
    }
    ssize_t r = end_recv(e, e->buf + e->len, BUF_CAP - e->len, e->idle_ms);
    if (r > 0)
        e->len += (size_t)r;
    return r;
}

/* A head at e->buf + e->off, *hlen bytes long. 1, 0 at a clean end before any byte, -1 on an
 * error, -2 when the head is longer than SP_HEAD_MAX. */
static int read_head(struct end *e, size_t *hlen)
{
    size_t scanned = 0;
    for (;;) {
        size_t have = e->len - e->off;
        size_t from = scanned > 3 ? scanned - 3 : 0;
        size_t h = sp_head_end(e->buf + e->off + from, have - from);
        if (h) {
            *hlen = from + h;
            return *hlen > SP_HEAD_MAX ? -2 : 1;
        }
        scanned = have;
        if (have >= SP_HEAD_MAX)
            return -2;
        if (e->off > 0 && e->len == BUF_CAP) {
            memmove(e->buf, e->buf + e->off, have);
            e->off = 0;
            e->len = have;
        }
        ssize_t r = end_fill(e);
        if (r == 0)
            return e->len - e->off == 0 ? 0 : -1;
        if (r < 0)
            return -1;
    }
}

/* Relays one body from `from` to `to` as it arrives: each read is sent on at once. */
static int relay_body(struct end *from, struct end *to, enum sp_body kind, uint64_t length,
                      uint64_t *count)
{
    struct sp_chunked ch = {0};
    uint64_t left = length;
    if (kind == SP_BODY_NONE || (kind == SP_BODY_LENGTH && left == 0))
        return 0;
    for (;;) {
        if (from->off == from->len) {
            ssize_t r = end_fill(from);
            if (r == 0)
                return kind == SP_BODY_UNTIL_CLOSE ? 0 : -1;
            if (r < 0)
                return -1;
        }
        const char *p = from->buf + from->off;
        size_t have = from->len - from->off, take = have;
        bool done = false;
        if (kind == SP_BODY_LENGTH) {
            take = have < left ? have : (size_t)left;
            left -= take;
            done = left == 0;
        } else if (kind == SP_BODY_CHUNKED) {
            long n = sp_chunked_scan(&ch, p, have, &done);
            if (n < 0)
                return -1;
            take = (size_t)n;
        }
        if (end_send(to, p, take) != 0)
            return -1;
        from->off += take;
        *count += take;
        if (done)
            return 0;
    }
}

/* The proxy's own answer (problem+json); the connection closes after it. */
static void reply(struct conn *c, int status, const char *title, const char *code,
                  const char *detail)
{
    char body[512], msg[1024];
    int bl = snprintf(body, sizeof body,
                      "{\"type\":\"about:blank\",\"title\":\"%s\",\"status\":%d,\"code\":\"%s\","
                      "\"detail\":\"%s\"}",
                      title, status, code, detail);
    int ml = snprintf(msg, sizeof msg,
                      "HTTP/1.1 %d %s\r\nContent-Type: application/problem+json\r\n"
                      "Content-Length: %d\r\nConnection: close\r\n\r\n%s",
                      status, title, bl, body);
    if (ml > 0 && (size_t)ml < sizeof msg)
        end_send(&c->c, msg, (size_t)ml);
}

/* ---- upstream ---- */

static int connect_upstream(struct conn *c, const char *host, int *verify_failed)
{
    struct secret_proxy *sp = c->sp;
    *verify_failed = 0;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(c->err, sizeof c->err, "socket: %s", strerror(errno));
        return -1;
    }
    set_timeouts(fd, CONNECT_TIMEOUT_MS);
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_addr = c->dst, .sin_port = htons(c->dport)};
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        snprintf(c->err, sizeof c->err, "cannot connect to the upstream: %s", strerror(errno));
        close(fd);
        return -1;
    }
    set_timeouts(fd, c->u.idle_ms);
    pthread_mutex_lock(&sp->lock);
    c->u.fd = fd;
    bool stopping = sp->stopping;
    pthread_mutex_unlock(&sp->lock);
    if (stopping)
        return -1;
    if (!c->tls)
        return 0;
    gnutls_session_t s;
    if (gnutls_init(&s, GNUTLS_CLIENT | GNUTLS_NO_SIGNAL) < 0)
        return -1;
    c->u.tls = s;
    gnutls_set_default_priority(s);
    gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, sp->upstream_cred);
    gnutls_server_name_set(s, GNUTLS_NAME_DNS, host, strlen(host));
    gnutls_session_set_verify_cert(s, host, 0);
    gnutls_alpn_set_protocols(s, &alpn_http11, 1, 0);
    gnutls_transport_set_int(s, fd);
    gnutls_handshake_set_timeout(s, CONNECT_TIMEOUT_MS);
    int rc;
    do
        rc = gnutls_handshake(s);
    while (rc < 0 && !gnutls_error_is_fatal(rc));
    if (rc == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR) {
        *verify_failed = 1;
        gnutls_datum_t out = {0};
        unsigned st = gnutls_session_get_verify_cert_status(s);
        if (gnutls_certificate_verification_status_print(st, GNUTLS_CRT_X509, &out, 0) == 0) {
            snprintf(c->err, sizeof c->err, "upstream certificate not trusted: %s",
                     (char *)out.data);
            gnutls_free(out.data);
        } else {
            snprintf(c->err, sizeof c->err, "upstream certificate not trusted");
        }
        for (char *q = c->err; *q; q++)
            if (*q == '"' || *q == '\\' || (unsigned char)*q < ' ')
                *q = ' ';
        return -1;
    }
    if (rc < 0) {
        snprintf(c->err, sizeof c->err, "TLS with the upstream failed: %s", gnutls_strerror(rc));
        return -1;
    }
    return 0;
}

/* Plain HTTP has no certificate to prove the peer: a secret goes only to an address its Host
 * name resolves to (from the host), so a Host header cannot send it to an address of the agent's
 * choosing. */
static bool address_is_hosts(struct in_addr dst, const char *host)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0)
        return false;
    bool ok = false;
    for (struct addrinfo *a = res; a && !ok; a = a->ai_next)
        ok = ((struct sockaddr_in *)a->ai_addr)->sin_addr.s_addr == dst.s_addr;
    freeaddrinfo(res);
    return ok;
}

/* A kept-alive upstream connection the server closed while idle (its keep-alive timeout): seen
 * before the next request is sent on it, so that request goes on a new connection rather than
 * failing with a 502. Anything readable between two answers means the same: nothing is owed. */
static bool upstream_gone(struct conn *c)
{
    if (c->u.fd < 0)
        return false;
    if (c->u.off < c->u.len || (c->u.tls && gnutls_record_check_pending(c->u.tls) > 0))
        return true;
    struct pollfd pfd = {.fd = c->u.fd, .events = POLLIN};
    return poll(&pfd, 1, 0) != 0;
}

static void drop_upstream(struct conn *c)
{
    pthread_mutex_lock(&c->sp->lock);
    int fd = c->u.fd;
    c->u.fd = -1;
    pthread_mutex_unlock(&c->sp->lock);
    if (c->u.tls) {
        gnutls_deinit(c->u.tls);
        c->u.tls = NULL;
    }
    close(fd);
    c->u.off = c->u.len = 0;
}

/* ---- one connection ---- */

static void record_init(struct conn *c, struct secret_proxy_record *r, enum secret_proxy_kind k,
                        const struct sp_request *req, const char *host)
{
    memset(r, 0, sizeof *r);
    r->kind = k;
    snprintf(r->sandbox_id, sizeof r->sandbox_id, "%s", c->sandbox_id);
    snprintf(r->app_id, sizeof r->app_id, "%s", c->app_id);
    snprintf(r->host, sizeof r->host, "%s", host);
    r->destination = c->dst;
    r->port = c->dport;
    if (req) {
        snprintf(r->method, sizeof r->method, "%s", req->method);
        snprintf(r->path, sizeof r->path, "%s", req->path);
    }
}

static void report(struct conn *c, const struct secret_proxy_record *r)
{
    if (c->sp->p.report)
        c->sp->p.report(r, c->sp->p.report_arg);
}

static void names_of(const struct sp_rewrite *rw, char *out, size_t outlen)
{
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < rw->nused && o < outlen; i++)
        o += (size_t)snprintf(out + o, outlen - o, "%s%s", i ? "," : "", rw->used[i]->name);
}

/* Serves one request; true to read the next one on this connection. */
static bool serve_request(struct conn *c)
{
    struct secret_proxy *sp = c->sp;
    size_t hlen;
    int hr = read_head(&c->c, &hlen);
    if (hr == 0 || hr == -1)
        return false;
    if (hr == -2) {
        reply(c, 431, "Request Header Fields Too Large", "header-too-large",
              "the request's head is over 64 KiB");
        return false;
    }
    const char *head = c->c.buf + c->c.off;
    struct sp_request req;
    if (sp_parse_request(head, hlen, &req) != 0) {
        reply(c, 400, "Bad Request", "bad-request", "the proxy cannot read this request");
        return false;
    }
    stat_add(sp, &sp->stats.requests);
    int64_t t0 = mono_ms();
    const char *host = req.host;
    if (c->tls && c->sni[0]) {
        if (req.host[0] && strcmp(req.host, c->sni) != 0) {
            reply(c, 421, "Misdirected Request", "misdirected",
                  "the Host header names another host than the TLS server name");
            return false;
        }
        host = c->sni;
    }
    struct sp_rewrite rw;
    if (sp_rewrite(&c->set, host, head, hlen, &rw) != 0) {
        reply(c, 500, "Internal Server Error", "internal", "out of memory");
        return false;
    }
    struct secret_proxy_record rec;
    bool misuse = rw.misused != NULL;
    if (!misuse && rw.nused > 0 && !c->tls && !address_is_hosts(c->dst, host)) {
        misuse = true;
        rw.misused = rw.used[0];
    }
    if (misuse) {
        record_init(c, &rec, SECRET_PROXY_MISUSE, &req, host);
        snprintf(rec.secrets, sizeof rec.secrets, "%s", rw.misused->name);
        rec.status = 403;
        snprintf(rec.error, sizeof rec.error, "%s",
                 rw.head ? "the address is not one the host name resolves to"
                         : "a placeholder sent to a host its secret does not name");
        sp_rewrite_free(&rw);
        stat_add(sp, &sp->stats.misuses);
        reply(c, 403, "Forbidden", "secret-misuse",
              "a placeholder of this Sandbox was sent to a host its secret does not name");
        rec.duration_ms = mono_ms() - t0;
        report(c, &rec);
        return false;
    }
    record_init(c, &rec, SECRET_PROXY_REQUEST, &req, host);
    names_of(&rw, rec.secrets, sizeof rec.secrets);
    if (rw.nused)
        stat_add(sp, &sp->stats.brokered);
    c->c.off += hlen;
    bool keep = false;
    if (upstream_gone(c))
        drop_upstream(c);
    if (c->u.fd < 0) {
        int verify_failed = 0;
        if (!host[0] && c->tls) {
            snprintf(c->err, sizeof c->err, "no server name: neither SNI nor Host");
        } else if (connect_upstream(c, host, &verify_failed) == 0) {
            goto connected;
        }
        stat_add(sp, &sp->stats.upstream_failures);
        reply(c, 502, "Bad Gateway", verify_failed ? "upstream-untrusted" : "upstream-unreachable",
              c->err);
        rec.status = 502;
        snprintf(rec.error, sizeof rec.error, "%s", c->err);
        if (rw.nused || verify_failed) {
            rec.duration_ms = mono_ms() - t0;
            report(c, &rec);
        }
        sp_rewrite_free(&rw);
        return false;
    }
connected:
    if (end_send(&c->u, rw.head, rw.len) != 0)
        goto out;
    rec.bytes_up += rw.len;
    sp_rewrite_free(&rw);
    if (relay_body(&c->c, &c->u, req.body, req.length, &rec.bytes_up) != 0)
        goto out;
    struct sp_response resp;
    for (;;) {
        hr = read_head(&c->u, &hlen);
        if (hr != 1) {
            if (rec.bytes_down == 0) {
                reply(c, 502, "Bad Gateway", "upstream-failed",
                      "the upstream closed or sent an unreadable answer");
                rec.status = 502;
            }
            goto out;
        }
        if (sp_parse_response(c->u.buf + c->u.off, hlen, strcmp(req.method, "HEAD") == 0, &resp) !=
            0) {
            reply(c, 502, "Bad Gateway", "upstream-failed", "the upstream's answer is unreadable");
            rec.status = 502;
            goto out;
        }
        if (end_send(&c->c, c->u.buf + c->u.off, hlen) != 0)
            goto out;
        c->u.off += hlen;
        rec.bytes_down += hlen;
        rec.status = resp.status;
        if (resp.status == 101)
            goto out; /* protocol upgrades are not relayed */
        if (resp.status >= 200)
            break;
    }
    if (relay_body(&c->u, &c->c, resp.body, resp.length, &rec.bytes_down) != 0)
        goto out;
    keep = !req.close && !resp.close;
out:
    sp_rewrite_free(&rw);
    rec.duration_ms = mono_ms() - t0;
    if (rec.secrets[0])
        report(c, &rec);
    return keep;
}

static void conn_close_end(struct end *e)
{
    if (e->tls) {
        gnutls_deinit(e->tls);
        e->tls = NULL;
    }
    free(e->buf);
    e->buf = NULL;
}

static void *conn_main(void *arg)
{
    struct conn *c = arg;
    struct secret_proxy *sp = c->sp;
    if (c->tls) {
        gnutls_session_t s;
        if (gnutls_init(&s, GNUTLS_SERVER | GNUTLS_NO_SIGNAL) == 0) {
            c->c.tls = s;
            gnutls_set_default_priority(s);
            gnutls_session_set_ptr(s, c);
            gnutls_handshake_set_post_client_hello_function(s, on_client_hello);
            gnutls_alpn_set_protocols(s, &alpn_http11, 1, GNUTLS_ALPN_SERVER_PRECEDENCE);
            gnutls_transport_set_int(s, c->c.fd);
            gnutls_handshake_set_timeout(s, CONNECT_TIMEOUT_MS);
            int rc;
            do
                rc = gnutls_handshake(s);
            while (rc < 0 && !gnutls_error_is_fatal(rc));
            if (rc == 0)
                while (serve_request(c)) {
                }
        }
    } else {
        while (serve_request(c)) {
        }
    }
    if (c->c.tls)
        gnutls_bye(c->c.tls, GNUTLS_SHUT_WR);
    pthread_mutex_lock(&sp->lock);
    for (struct conn **pp = &sp->conns; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    int cfd = c->c.fd, ufd = c->u.fd;
    c->c.fd = c->u.fd = -1;
    pthread_mutex_unlock(&sp->lock);
    conn_close_end(&c->c);
    conn_close_end(&c->u);
    close(cfd);
    if (ufd >= 0)
        close(ufd);
    secret_set_clear(&c->set);
    free(c);
    pthread_mutex_lock(&sp->lock);
    sp->nconns--;
    pthread_cond_broadcast(&sp->idle);
    pthread_mutex_unlock(&sp->lock);
    return NULL;
}

/* ---- accepting ---- */

static void accept_one(struct secret_proxy *sp, int fd)
{
    struct sockaddr_in peer, orig;
    socklen_t pl = sizeof peer, ol = sizeof orig;
    if (getpeername(fd, (struct sockaddr *)&peer, &pl) != 0 ||
        getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &orig, &ol) != 0 ||
        (ntohs(orig.sin_port) != 443 && ntohs(orig.sin_port) != 80) ||
        orig.sin_port == htons(sp->port)) {
        close(fd); /* not redirected here by the firewall */
        return;
    }
    struct conn *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return;
    }
    c->sp = sp;
    c->c.fd = fd;
    c->u.fd = -1;
    c->c.idle_ms = sp->p.idle_ms;
    c->u.idle_ms = sp->p.idle_ms > UPSTREAM_IDLE_MS ? sp->p.idle_ms : UPSTREAM_IDLE_MS;
    c->peer = peer.sin_addr;
    c->dst = orig.sin_addr;
    c->dport = ntohs(orig.sin_port);
    c->tls = c->dport == 443;
    if (!sp->p.lookup ||
        sp->p.lookup(sp->p.lookup_arg, c->peer, c->sandbox_id, c->app_id, &c->set) != 0) {
        close(fd);
        free(c);
        return;
    }
    c->c.buf = malloc(BUF_CAP);
    c->u.buf = malloc(BUF_CAP);
    pthread_mutex_lock(&sp->lock);
    size_t mine = 0;
    for (struct conn *o = sp->conns; o; o = o->next)
        mine += o->peer.s_addr == c->peer.s_addr;
    bool refuse = !c->c.buf || !c->u.buf || mine >= sp->p.max_per_sandbox ||
                  sp->nconns >= sp->p.max_total || sp->stopping;
    if (refuse) {
        sp->stats.refused_bound++;
    } else {
        c->next = sp->conns;
        sp->conns = c;
        sp->nconns++;
        sp->stats.connections++;
    }
    pthread_mutex_unlock(&sp->lock);
    if (!refuse) {
        set_timeouts(fd, sp->p.idle_ms);
        pthread_attr_t attr;
        pthread_t th;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        int rc = pthread_create(&th, &attr, conn_main, c);
        pthread_attr_destroy(&attr);
        if (rc == 0)
            return;
        pthread_mutex_lock(&sp->lock);
        for (struct conn **pp = &sp->conns; *pp; pp = &(*pp)->next)
            if (*pp == c) {
                *pp = c->next;
                break;
            }
        sp->nconns--;
        pthread_mutex_unlock(&sp->lock);
    }
    close(fd);
    free(c->c.buf);
    free(c->u.buf);
    secret_set_clear(&c->set);
    free(c);
}

static void *accept_main(void *arg)
{
    struct secret_proxy *sp = arg;
    struct pollfd pfd[2] = {{.fd = sp->lfd, .events = POLLIN},
                            {.fd = sp->wake[0], .events = POLLIN}};
    for (;;) {
        if (poll(pfd, 2, -1) < 0 && errno != EINTR)
            break;
        if (pfd[1].revents)
            break;
        if (pfd[0].revents & POLLIN) {
            int fd = accept4(sp->lfd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0)
                accept_one(sp, fd);
            else if (errno == EMFILE || errno == ENFILE)
                poll(NULL, 0, 100); /* let connections end */
        }
    }
    return NULL;
}

struct secret_proxy *secret_proxy_start(const struct secret_proxy_params *p, char *err,
                                        size_t errlen)
{
    struct secret_proxy *sp = calloc(1, sizeof *sp);
    if (!sp) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    sp->p = *p;
    sp->lfd = sp->wake[0] = sp->wake[1] = -1;
    if (!sp->p.max_per_sandbox)
        sp->p.max_per_sandbox = SECRET_PROXY_MAX_PER_SANDBOX;
    if (!sp->p.max_total)
        sp->p.max_total = SECRET_PROXY_MAX_TOTAL;
    if (sp->p.idle_ms <= 0)
        sp->p.idle_ms = 120000;
    pthread_mutex_init(&sp->lock, NULL);
    pthread_cond_init(&sp->idle, NULL);
    sp->certs = calloc(CERT_CACHE_MAX, sizeof *sp->certs);
    int rc = sp->certs ? gnutls_certificate_allocate_credentials(&sp->upstream_cred) : -1;
    if (rc < 0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (!p->no_system_ca) {
        rc = gnutls_certificate_set_x509_system_trust(sp->upstream_cred);
        if (rc < 0)
            log_warn("secret proxy: the host's CA store cannot be read: %s", gnutls_strerror(rc));
    }
    if (p->upstream_ca_file && *p->upstream_ca_file) {
        rc = gnutls_certificate_set_x509_trust_file(sp->upstream_cred, p->upstream_ca_file,
                                                    GNUTLS_X509_FMT_PEM);
        if (rc <= 0) {
            snprintf(err, errlen, "upstream_ca_file %s: %s", p->upstream_ca_file,
                     rc < 0 ? gnutls_strerror(rc) : "no certificate in it");
            goto fail;
        }
    }
    sp->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_addr = p->listen, .sin_port = htons(p->port)};
    if (sp->lfd < 0 || setsockopt(sp->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(sp->lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(sp->lfd, 512) != 0) {
        snprintf(err, errlen, "secret proxy: cannot listen on port %u: %s", p->port,
                 strerror(errno));
        goto fail;
    }
    socklen_t sl = sizeof sa;
    getsockname(sp->lfd, (struct sockaddr *)&sa, &sl);
    sp->port = ntohs(sa.sin_port);
    if (pipe2(sp->wake, O_CLOEXEC) != 0 || pthread_create(&sp->acceptor, NULL, accept_main, sp)) {
        snprintf(err, errlen, "secret proxy: cannot start: %s", strerror(errno));
        goto fail;
    }
    return sp;
fail:
    if (sp->lfd >= 0)
        close(sp->lfd);
    if (sp->wake[0] >= 0) {
        close(sp->wake[0]);
        close(sp->wake[1]);
    }
    if (sp->upstream_cred)
        gnutls_certificate_free_credentials(sp->upstream_cred);
    free(sp->certs);
    free(sp);
    return NULL;
}

uint16_t secret_proxy_port(const struct secret_proxy *sp)
{
    return sp->port;
}

void secret_proxy_stop(struct secret_proxy *sp)
{
    if (!sp)
        return;
    pthread_mutex_lock(&sp->lock);
    sp->stopping = true;
    pthread_mutex_unlock(&sp->lock);
    if (write(sp->wake[1], "x", 1) < 0) {
        /* the acceptor sees the listener shut down instead */
    }
    shutdown(sp->lfd, SHUT_RDWR);
    pthread_join(sp->acceptor, NULL);
    pthread_mutex_lock(&sp->lock);
    for (struct conn *c = sp->conns; c; c = c->next) {
        shutdown(c->c.fd, SHUT_RDWR);
        if (c->u.fd >= 0)
            shutdown(c->u.fd, SHUT_RDWR);
    }
    while (sp->nconns > 0)
        pthread_cond_wait(&sp->idle, &sp->lock);
    pthread_mutex_unlock(&sp->lock);
    close(sp->lfd);
    close(sp->wake[0]);
    close(sp->wake[1]);
    for (size_t i = 0; i < sp->ncerts; i++)
        gnutls_certificate_free_credentials(sp->certs[i].cred);
    while (sp->retired) {
        struct retired *r = sp->retired;
        sp->retired = r->next;
        gnutls_certificate_free_credentials(r->cred);
        free(r);
    }
    free(sp->certs);
    gnutls_certificate_free_credentials(sp->upstream_cred);
    pthread_mutex_destroy(&sp->lock);
    pthread_cond_destroy(&sp->idle);
    free(sp);
}

void secret_proxy_stats(struct secret_proxy *sp, struct secret_proxy_stats *out)
{
    pthread_mutex_lock(&sp->lock);
    *out = sp->stats;
    pthread_mutex_unlock(&sp->lock);
}

/* ---- the registry ---- */

int secret_set_copy(struct secret_set *dst, const struct secret_set *src)
{
    memset(dst, 0, sizeof *dst);
    if (!src->n)
        return 0;
    dst->v = calloc(src->n, sizeof *dst->v);
    if (!dst->v)
        return -1;
    for (size_t i = 0; i < src->n; i++) {
        const struct secret_binding *s = &src->v[i];
        struct secret_binding *d = &dst->v[i];
        dst->n = i + 1;
        memcpy(d->placeholder, s->placeholder, sizeof d->placeholder);
        d->name = strdup(s->name);
        d->value = malloc(s->value_len ? s->value_len : 1);
        d->hosts = calloc(s->n_hosts ? s->n_hosts : 1, sizeof *d->hosts);
        if (!d->name || !d->value || !d->hosts)
            goto fail;
        memcpy(d->value, s->value, s->value_len);
        d->value_len = s->value_len;
        for (; d->n_hosts < s->n_hosts; d->n_hosts++)
            if (!(d->hosts[d->n_hosts] = strdup(s->hosts[d->n_hosts])))
                goto fail;
    }
    return 0;
fail:
    secret_set_clear(dst);
    return -1;
}

struct reg_entry {
    struct in_addr addr;
    char sandbox_id[SECRET_PROXY_ID_LEN], app_id[SECRET_PROXY_ID_LEN];
    struct secret_set set;
};

struct secret_proxy_registry {
    pthread_mutex_t lock;
    struct reg_entry *v;
    size_t n, cap;
};

struct secret_proxy_registry *secret_proxy_registry_new(void)
{
    struct secret_proxy_registry *r = calloc(1, sizeof *r);
    if (r)
        pthread_mutex_init(&r->lock, NULL);
    return r;
}

void secret_proxy_registry_free(struct secret_proxy_registry *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++)
        secret_set_clear(&r->v[i].set);
    free(r->v);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

int secret_proxy_registry_put(struct secret_proxy_registry *r, struct in_addr addr,
                              const char *sandbox_id, const char *app_id,
                              const struct secret_set *set)
{
    struct reg_entry e = {.addr = addr};
    snprintf(e.sandbox_id, sizeof e.sandbox_id, "%s", sandbox_id);
    snprintf(e.app_id, sizeof e.app_id, "%s", app_id);
    if (secret_set_copy(&e.set, set) != 0)
        return -1;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->n; i++)
        if (r->v[i].addr.s_addr == addr.s_addr) {
            secret_set_clear(&r->v[i].set);
            r->v[i] = e;
            pthread_mutex_unlock(&r->lock);
            return 0;
        }
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        struct reg_entry *v = realloc(r->v, cap * sizeof *v);
        if (!v) {
            pthread_mutex_unlock(&r->lock);
            secret_set_clear(&e.set);
            return -1;
        }
        r->v = v;
        r->cap = cap;
    }
    r->v[r->n++] = e;
    pthread_mutex_unlock(&r->lock);
    return 0;
}

void secret_proxy_registry_remove(struct secret_proxy_registry *r, struct in_addr addr)
{
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->n; i++)
        if (r->v[i].addr.s_addr == addr.s_addr) {
            secret_set_clear(&r->v[i].set);
            r->v[i] = r->v[--r->n];
            break;
        }
    pthread_mutex_unlock(&r->lock);
}

int secret_proxy_registry_lookup(void *registry, struct in_addr peer,
                                 char sandbox_id[SECRET_PROXY_ID_LEN],
                                 char app_id[SECRET_PROXY_ID_LEN], struct secret_set *copy)
{
    struct secret_proxy_registry *r = registry;
    int rc = -1;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->n; i++)
        if (r->v[i].addr.s_addr == peer.s_addr) {
            memcpy(sandbox_id, r->v[i].sandbox_id, SECRET_PROXY_ID_LEN);
            memcpy(app_id, r->v[i].app_id, SECRET_PROXY_ID_LEN);
            rc = secret_set_copy(copy, &r->v[i].set);
            break;
        }
    pthread_mutex_unlock(&r->lock);
    return rc;
}
