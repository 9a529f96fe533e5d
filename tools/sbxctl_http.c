/*
 * sbxctl_http.c: the smallest HTTP/1.1 client that lets sbxctl ask the gateway for an action
 * (one request per connection, "Connection: close", the response read to EOF). sbxctl never
 * changes the database itself: actions go through the gateway so they are authorised, audited and
 * carried out by the owning worker like any other request.
 */
#include "sbxctl.h"

#include <errno.h>
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

static int send_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Reads until EOF (the server closes: we asked for Connection: close), at most 1 MiB. */
static char *read_all(int fd, size_t *len)
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
        ssize_t r = recv(fd, buf + n, cap - n - 1, 0);
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
    char host[128], port[16], req[1024];
    if (ctl->cfg.admin_token[0] == '\0') {
        snprintf(err, errlen,
                 "no admin token: set SBX_ADMIN_TOKEN (or admin_token in the config "
                 "file) to the token the gateway printed on first start");
        return -1;
    }
    if (split_listen(ctl->cfg.listen, host, sizeof host, port, sizeof port) != 0) {
        snprintf(err, errlen, "listen \"%s\" is not host:port", ctl->cfg.listen);
        return -1;
    }
    int len = snprintf(req, sizeof req,
                       "%s %s HTTP/1.1\r\nHost: %s:%s\r\nAuthorization: Bearer %s\r\n"
                       "User-Agent: sbxctl\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                       method, path, host, port, ctl->cfg.admin_token);
    if (len < 0 || (size_t)len >= sizeof req) {
        snprintf(err, errlen, "request too long");
        return -1;
    }
    int fd = connect_to(host, port, err, errlen);
    if (fd < 0)
        return -1;
    size_t n = 0;
    char *resp = NULL;
    if (send_all(fd, req, (size_t)len) == 0)
        resp = read_all(fd, &n);
    close(fd);
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
    char host[128], port[16], req[1200];
    if (ctl->cfg.admin_token[0] == '\0') {
        snprintf(err, errlen, "no admin token");
        return -1;
    }
    if (split_listen(ctl->cfg.listen, host, sizeof host, port, sizeof port) != 0) {
        snprintf(err, errlen, "listen \"%s\" is not host:port", ctl->cfg.listen);
        return -1;
    }
    /* HTTP/1.0: the gateway sends the stream as it comes, without chunked framing, and closes
     * the connection when it ends. */
    int len = snprintf(req, sizeof req,
                       "GET %s HTTP/1.0\r\nHost: %s:%s\r\nAuthorization: Bearer %s\r\n"
                       "User-Agent: sbxctl\r\nAccept: text/event-stream\r\n"
                       "Last-Event-ID: %lld\r\n\r\n",
                       path, host, port, ctl->cfg.admin_token, (long long)last_event_id);
    if (len < 0 || (size_t)len >= sizeof req) {
        snprintf(err, errlen, "request too long");
        return -1;
    }
    int fd = connect_to(host, port, err, errlen);
    if (fd < 0)
        return -1;
    /* An idle stream is quiet between keep-alive comments: no receive timeout. */
    struct timeval forever = {0, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &forever, sizeof forever);
    if (send_all(fd, req, (size_t)len) != 0) {
        snprintf(err, errlen, "cannot send to %s:%s: %s", host, port, strerror(errno));
        close(fd);
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
        ssize_t r = read(fd, buf + have, sizeof buf - 1 - have);
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
    close(fd);
    return rc;
}
