/*
 * sbxctl_http.c: the smallest HTTP/1.1 client that lets sbxctl ask the gateway for an action
 * (one request per connection, "Connection: close", the response read to EOF), over TLS (GnuTLS)
 * when the gateway serves HTTPS. sbxctl never
 * changes the database itself: actions go through the gateway so they are authorised, audited and
 * carried out by the owning worker like any other request.
 */
#include "sbxctl.h"

#include <errno.h>
#include <arpa/inet.h>
#include <gnutls/gnutls.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* Splits "host:port" (or "[v6]:port") into its parts. */
static int split_listen(const char *listen, char *host, size_t hostlen, char *port, size_t portlen)
{
    const char *colon = strrchr(listen, ':');
    if (!colon || colon == listen || !colon[1])
        return -1;
    const char *h = listen;
    size_t hl = (size_t)(colon - listen);
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl >= hostlen || strlen(colon + 1) >= portlen)
        return -1;
    memcpy(host, h, hl);
    host[hl] = '\0';
    /* The gateway listening on every address is reached on loopback. */
    if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "*") == 0 || host[0] == '\0')
        snprintf(host, hostlen, "127.0.0.1");
    else if (strcmp(host, "::") == 0)
        snprintf(host, hostlen, "::1");
    snprintf(port, portlen, "%s", colon + 1);
    return 0;
}

static int connect_to(const char *host, const char *port, char *err, size_t errlen)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "%s:%s: %s", host, port, gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0)
            continue;
        struct timeval tv = {10, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            break;
        snprintf(err, errlen, "connect to %s:%s: %s (is sbx-gateway running?)", host, port,
                 strerror(errno));
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

/* The host of url ("scheme://host[:port][/...]", host maybe "[v6]"), every-address hosts as
 * split_listen maps them; -1 when there is none. */
static int url_host(const char *url, char *host, size_t hostlen)
{
    const char *h = strstr(url, "://");
    size_t n;
    if (!h)
        return -1;
    h += 3;
    if (*h == '[') {
        h++;
        n = strcspn(h, "]");
        if (h[n] != ']')
            return -1;
    } else {
        n = strcspn(h, ":/?#");
    }
    if (n == 0 || n >= hostlen)
        return -1;
    memcpy(host, h, n);
    host[n] = '\0';
    if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "*") == 0)
        snprintf(host, hostlen, "127.0.0.1");
    else if (strcmp(host, "::") == 0)
        snprintf(host, hostlen, "::1");
    return 0;
}

int ctl_gateway(const struct ctl *ctl, struct ctl_gateway *g, char *err, size_t errlen)
{
    memset(g, 0, sizeof *g);
    if (split_listen(ctl->cfg.listen, g->host, sizeof g->host, g->port, sizeof g->port) != 0) {
        snprintf(err, errlen, "listen \"%s\" is not host:port", ctl->cfg.listen);
        return -1;
    }
    g->https = ctl->cfg.tls_cert_file[0] != '\0';
    /* The name clients know the gateway by (public_url) is the one its certificate is for; it
     * defaults to the listen address. */
    if (url_host(ctl->cfg.public_url, g->name, sizeof g->name) != 0)
        snprintf(g->name, sizeof g->name, "%s", g->host);
    return 0;
}

/* One connection to the gateway: a socket, with a TLS session over it for HTTPS. */
struct conn {
    int fd;
    gnutls_session_t tls;
    gnutls_certificate_credentials_t cred;
};

static void conn_close(struct conn *c)
{
    if (c->tls)
        gnutls_deinit(c->tls);
    if (c->cred)
        gnutls_certificate_free_credentials(c->cred);
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->tls = NULL;
    c->cred = NULL;
}

/* The TLS handshake on c->fd, the gateway's certificate verified for g->name. */
static int tls_start(const struct ctl *ctl, const struct ctl_gateway *g, struct conn *c, char *err,
                     size_t errlen)
{
    int r;
    if ((r = gnutls_certificate_allocate_credentials(&c->cred)) < 0)
        goto fail;
    if (ctl->ca_file[0]) {
        r = gnutls_certificate_set_x509_trust_file(c->cred, ctl->ca_file, GNUTLS_X509_FMT_PEM);
        if (r <= 0) {
            snprintf(err, errlen, "CA file %s: %s", ctl->ca_file,
                     r == 0 ? "no PEM certificate in it" : gnutls_strerror(r));
            return -1;
        }
    } else if ((r = gnutls_certificate_set_x509_system_trust(c->cred)) < 0) {
        goto fail;
    }
    if ((r = gnutls_init(&c->tls, GNUTLS_CLIENT)) < 0 ||
        (r = gnutls_priority_set_direct(c->tls, "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2",
                                        NULL)) < 0 ||
        (r = gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, c->cred)) < 0)
        goto fail;
    /* SNI carries DNS names only; an address is checked against the certificate's IP SANs. */
    struct in6_addr any;
    if (inet_pton(AF_INET, g->name, &any) != 1 && inet_pton(AF_INET6, g->name, &any) != 1 &&
        (r = gnutls_server_name_set(c->tls, GNUTLS_NAME_DNS, g->name, strlen(g->name))) < 0)
        goto fail;
    gnutls_session_set_verify_cert(c->tls, g->name, 0);
    gnutls_transport_set_int(c->tls, c->fd);
    gnutls_handshake_set_timeout(c->tls, GNUTLS_DEFAULT_HANDSHAKE_TIMEOUT);
    do {
        r = gnutls_handshake(c->tls);
    } while (r < 0 && !gnutls_error_is_fatal(r) && r != GNUTLS_E_AGAIN);
    if (r == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR) {
        gnutls_datum_t why = {0};
        unsigned status = gnutls_session_get_verify_cert_status(c->tls);
        gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &why, 0);
        while (why.data && why.size > 0 && why.data[why.size - 1] == ' ')
            why.data[--why.size] = '\0';
        snprintf(err, errlen,
                 "the gateway's certificate (%s:%s) is not trusted for %s: %s (trust its CA "
                 "with --ca-file or SBXCTL_CA_FILE)",
                 g->host, g->port, g->name, why.data ? (const char *)why.data : "?");
        gnutls_free(why.data);
        return -1;
    }
    if (r < 0)
        goto fail;
    return 0;
fail:
    snprintf(err, errlen, "TLS with %s:%s: %s", g->host, g->port, gnutls_strerror(r));
    return -1;
}

/* Connects to the gateway (and does the TLS handshake for HTTPS); -1 with err. */
static int conn_open(const struct ctl *ctl, const struct ctl_gateway *g, struct conn *c, char *err,
                     size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->fd = connect_to(g->host, g->port, err, errlen);
    if (c->fd < 0)
        return -1;
    if (g->https && tls_start(ctl, g, c, err, errlen) != 0) {
        conn_close(c);
        return -1;
    }
    return 0;
}

static int send_all(struct conn *c, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n =
            c->tls ? gnutls_record_send(c->tls, buf, len) : send(c->fd, buf, len, MSG_NOSIGNAL);
        if ((n < 0 && !c->tls && errno == EINTR) || n == GNUTLS_E_INTERRUPTED)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Like recv(): bytes read, 0 at the end, -1 on an error (a timeout too; errno EINTR when a
 * signal interrupted it: the caller decides whether to go on). */
static ssize_t conn_recv(struct conn *c, char *buf, size_t len)
{
    if (!c->tls)
        return recv(c->fd, buf, len, 0);
    ssize_t r = gnutls_record_recv(c->tls, buf, len);
    if (r == GNUTLS_E_INTERRUPTED)
        errno = EINTR;
    else if (r < 0)
        errno = EIO;
    return r >= 0 ? r : -1;
}

/* Reads until EOF (the server closes: we asked for Connection: close), at most 1 MiB. */
static char *read_all(struct conn *c, size_t *len)
{
    size_t cap = 8192, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            if (cap >= (1 << 20))
                break;
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                return NULL;
            }
            buf = bigger;
            cap *= 2;
        }
        ssize_t r = conn_recv(c, buf + n, cap - n - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            free(buf);
            return NULL;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    if (buf)
        buf[n] = '\0';
    *len = n;
    return buf;
}

int ctl_http(const struct ctl *ctl, const char *method, const char *path, int *status, char **body,
             char *err, size_t errlen)
{
    char req[1200];
    struct ctl_gateway g;
    struct conn c;
    const char *host = g.host, *port = g.port;
    if (ctl->cfg.admin_token[0] == '\0') {
        snprintf(err, errlen,
                 "no admin token: set SBX_ADMIN_TOKEN (or admin_token in the config "
                 "file) to the token the gateway printed on first start");
        return -1;
    }
    if (ctl_gateway(ctl, &g, err, errlen) != 0)
        return -1;
    int len = snprintf(req, sizeof req,
                       "%s %s HTTP/1.1\r\nHost: %s:%s\r\nAuthorization: Bearer %s\r\n"
                       "User-Agent: sbxctl\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                       method, path, g.https ? g.name : host, port, ctl->cfg.admin_token);
    if (len < 0 || (size_t)len >= sizeof req) {
        snprintf(err, errlen, "request too long");
        return -1;
    }
    if (conn_open(ctl, &g, &c, err, errlen) != 0)
        return -1;
    size_t n = 0;
    char *resp = NULL;
    if (send_all(&c, req, (size_t)len) == 0)
        resp = read_all(&c, &n);
    conn_close(&c);
    if (!resp) {
        snprintf(err, errlen, "no answer from %s:%s: %s", host, port, strerror(errno));
        return -1;
    }
    int code = 0;
    if (sscanf(resp, "HTTP/1.%*d %d", &code) != 1 || code < 100) {
        snprintf(err, errlen, "not an HTTP answer from %s:%s", host, port);
        free(resp);
        return -1;
    }
    /* The gateway answers with Content-Length; a body after the header block is all we need. */
    char *start = strstr(resp, "\r\n\r\n");
    *status = code;
    *body = strdup(start ? start + 4 : "");
    free(resp);
    return 0;
}

int ctl_http_stream(const struct ctl *ctl, const char *path, int64_t last_event_id,
                    void (*on_event)(void *arg, const char *id, const char *data), void *arg,
                    volatile sig_atomic_t *stop, char *err, size_t errlen)
{
    char req[1400];
    struct ctl_gateway g;
    struct conn c;
    const char *host = g.host, *port = g.port;
    if (ctl->cfg.admin_token[0] == '\0') {
        snprintf(err, errlen, "no admin token");
        return -1;
    }
    if (ctl_gateway(ctl, &g, err, errlen) != 0)
        return -1;
    /* HTTP/1.0: the gateway sends the stream as it comes, without chunked framing, and closes
     * the connection when it ends. */
    int len = snprintf(req, sizeof req,
                       "GET %s HTTP/1.0\r\nHost: %s:%s\r\nAuthorization: Bearer %s\r\n"
                       "User-Agent: sbxctl\r\nAccept: text/event-stream\r\n"
                       "Last-Event-ID: %lld\r\n\r\n",
                       path, g.https ? g.name : host, port, ctl->cfg.admin_token,
                       (long long)last_event_id);
    if (len < 0 || (size_t)len >= sizeof req) {
        snprintf(err, errlen, "request too long");
        return -1;
    }
    if (conn_open(ctl, &g, &c, err, errlen) != 0)
        return -1;
    /* An idle stream is quiet between keep-alive comments: no receive timeout. */
    struct timeval forever = {0, 0};
    setsockopt(c.fd, SOL_SOCKET, SO_RCVTIMEO, &forever, sizeof forever);
    if (send_all(&c, req, (size_t)len) != 0) {
        snprintf(err, errlen, "cannot send to %s:%s: %s", host, port, strerror(errno));
        conn_close(&c);
        return -1;
    }
    /* Lines: first the status and headers, then the stream's fields until a blank line ends an
     * event (text/event-stream). */
    char buf[65536], id[32] = "";
    char *data = NULL;
    size_t have = 0, data_len = 0;
    bool in_body = false, status_ok = false;
    int rc = 0;
    while (!*stop) {
        ssize_t r = conn_recv(&c, buf + have, sizeof buf - 1 - have);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (!status_ok) {
                snprintf(err, errlen, "no stream from %s:%s", host, port);
                rc = -1;
            } else if (!*stop) {
                snprintf(err, errlen, "the gateway closed the stream");
                rc = -1;
            }
            break;
        }
        have += (size_t)r;
        buf[have] = '\0';
        char *line = buf, *nl;
        while ((nl = memchr(line, '\n', have - (size_t)(line - buf)))) {
            *nl = '\0';
            if (nl > line && nl[-1] == '\r')
                nl[-1] = '\0';
            if (!in_body) {
                int code = 0;
                if (!status_ok && sscanf(line, "HTTP/1.%*d %d", &code) == 1) {
                    if (code != 200) {
                        snprintf(err, errlen, "the gateway answered %d", code);
                        rc = -1;
                        goto out;
                    }
                    status_ok = true;
                } else if (line[0] == '\0') {
                    in_body = status_ok;
                }
            } else if (line[0] == '\0') {
                if (data)
                    on_event(arg, id, data);
                free(data);
                data = NULL;
                data_len = 0;
            } else if (strncmp(line, "id:", 3) == 0) {
                snprintf(id, sizeof id, "%s", line + 3 + (line[3] == ' '));
            } else if (strncmp(line, "data:", 5) == 0) {
                const char *v = line + 5 + (line[5] == ' ');
                size_t vl = strlen(v);
                char *grown = realloc(data, data_len + vl + 2);
                if (!grown) {
                    rc = -1;
                    goto out;
                }
                data = grown;
                if (data_len)
                    data[data_len++] = '\n';
                memcpy(data + data_len, v, vl + 1);
                data_len += vl;
            } /* comments (": keep-alive"), retry: and event: need nothing here */
            line = nl + 1;
        }
        have -= (size_t)(line - buf);
        memmove(buf, line, have);
        if (have == sizeof buf - 1) {
            snprintf(err, errlen, "a line of the stream is too long");
            rc = -1;
            break;
        }
    }
out:
    free(data);
    conn_close(&c);
    return rc;
}
