/*
 * burst_client.c: the burst scenario's load generator (tools/bench/bench.mjs, burst). Node's
 * fetch, which the scenario used before, took about 40 % of this 2-core machine's CPU during a
 * burst (perf, SBX_BENCH_PERF_BURST), more than the gateway, the worker and the agents together,
 * so the burst measured its own client as much as sbx. This one does the same with one thread and
 * poll(): one keep-alive connection per Session, all connected before the clock starts; then every
 * Session gets its message at once (POST .../messages), and each connection long-polls its
 * message (GET .../messages/{id}?wait=30) until it is completed or failed.
 *
 *   sbx-bench-burst HOST PORT KEY SESSION_ID...
 *
 * Prints "start <Unix time in ms when the first POST went out>", one line per Session,
 * "<ms from the start to the final answer> <state> <message id>", in the order given, then
 * "total <ms>". Exits 1 on any HTTP or connection error (said on
 * stderr), 2 on bad arguments. Responses must carry Content-Length (the gateway's do).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUF_MAX 65536
#define ID_MAX 64
#define BODY "{\"body\":{\"burst\":true}}"

enum phase { POSTING, POLLING, DONE };

struct conn {
    int fd;
    const char *session_id;
    enum phase phase;
    char message_id[ID_MAX];
    char state[16];
    char buf[BUF_MAX];
    size_t len;
    double done_ms;
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static int connect_to(const char *host, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "burst: %s is not an IPv4 address\n", host);
        return -1;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0 ||
        connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        fprintf(stderr, "burst: connect %s:%d: %s\n", host, port, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* Writes all of a request (the connection is blocking: requests are small). */
static int send_all(int fd, const char *req, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, req, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fprintf(stderr, "burst: write: %s\n", strerror(errno));
            return -1;
        }
        req += n;
        len -= (size_t)n;
    }
    return 0;
}

static int send_post(struct conn *c, const char *host, const char *key)
{
    char req[1024];
    int n = snprintf(req, sizeof req,
                     "POST /v1/sessions/%s/messages HTTP/1.1\r\nHost: %s\r\n"
                     "Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     c->session_id, host, key, strlen(BODY), BODY);
    return n < 0 || (size_t)n >= sizeof req ? -1 : send_all(c->fd, req, (size_t)n);
}

static int send_poll(struct conn *c, const char *host, const char *key)
{
    char req[1024];
    int n = snprintf(req, sizeof req,
                     "GET /v1/sessions/%s/messages/%s?wait=30 HTTP/1.1\r\nHost: %s\r\n"
                     "Authorization: Bearer %s\r\n\r\n",
                     c->session_id, c->message_id, host, key);
    return n < 0 || (size_t)n >= sizeof req ? -1 : send_all(c->fd, req, (size_t)n);
}

/* The string value of "name" in a JSON text (the first one: the Message's own fields come
 * before any nested object of the same name in the gateway's rendering). */
static bool json_string_field(const char *json, const char *name, char *out, size_t outlen)
{
    char pat[32];
    snprintf(pat, sizeof pat, "\"%s\":\"", name);
    const char *p = strstr(json, pat);
    if (!p)
        return false;
    p += strlen(pat);
    const char *end = strchr(p, '"');
    if (!end || (size_t)(end - p) >= outlen)
        return false;
    memcpy(out, p, (size_t)(end - p));
    out[end - p] = '\0';
    return true;
}

/* One whole response in c->buf: its status and body (NUL-terminated in place); consumes it.
 * 0 when more bytes are needed, 1 with a response, -1 on a malformed one. */
static int take_response(struct conn *c, int *status, char *body, size_t bodylen)
{
    c->buf[c->len] = '\0';
    char *hend = strstr(c->buf, "\r\n\r\n");
    if (!hend)
        return c->len >= BUF_MAX - 1 ? -1 : 0;
    size_t head = (size_t)(hend - c->buf) + 4, clen = 0;
    bool have_len = false;
    if (sscanf(c->buf, "HTTP/1.%*d %d", status) != 1)
        return -1;
    for (char *line = strstr(c->buf, "\r\n"); line && line < hend; line = strstr(line + 2, "\r\n"))
        if (strncasecmp(line + 2, "Content-Length:", 15) == 0) {
            clen = strtoul(line + 17, NULL, 10);
            have_len = true;
        }
    if (!have_len || clen >= bodylen)
        return -1;
    if (c->len < head + clen)
        return 0;
    memcpy(body, c->buf + head, clen);
    body[clen] = '\0';
    memmove(c->buf, c->buf + head + clen, c->len - head - clen);
    c->len -= head + clen;
    return 1;
}

/* Handles one response; -1 on an error (said on stderr). */
static int on_response(struct conn *c, int status, const char *body, const char *host,
                       const char *key, double t0)
{
    if (c->phase == POSTING) {
        if (status != 202 || !json_string_field(body, "id", c->message_id, sizeof c->message_id)) {
            fprintf(stderr, "burst: POST to %s: %d %s\n", c->session_id, status, body);
            return -1;
        }
        c->phase = POLLING;
        return send_poll(c, host, key);
    }
    if (status != 200 || !json_string_field(body, "state", c->state, sizeof c->state)) {
        fprintf(stderr, "burst: GET %s: %d %s\n", c->message_id, status, body);
        return -1;
    }
    if (strcmp(c->state, "completed") == 0 || strcmp(c->state, "failed") == 0) {
        c->phase = DONE;
        c->done_ms = now_ms() - t0;
        return 0;
    }
    return send_poll(c, host, key); /* the wait ended first: poll again */
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s HOST PORT KEY SESSION_ID...\n", argv[0]);
        return 2;
    }
    const char *host = argv[1], *key = argv[3];
    int port = atoi(argv[2]);
    size_t n = (size_t)(argc - 4);
    struct conn *conns = calloc(n, sizeof *conns);
    struct pollfd *fds = calloc(n, sizeof *fds);
    static char body[BUF_MAX];
    if (!conns || !fds) {
        fprintf(stderr, "burst: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        conns[i].session_id = argv[4 + i];
        if ((conns[i].fd = connect_to(host, port)) < 0)
            return 1;
        fds[i] = (struct pollfd){conns[i].fd, POLLIN, 0};
    }
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    double t0 = now_ms();
    for (size_t i = 0; i < n; i++)
        if (send_post(&conns[i], host, key) != 0)
            return 1;
    for (size_t left = n; left > 0;) {
        int ready = poll(fds, n, 60000);
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready <= 0) {
            fprintf(stderr, "burst: %s (%zu answers missing)\n",
                    ready == 0 ? "no answer for 60 s" : strerror(errno), left);
            return 1;
        }
        for (size_t i = 0; i < n; i++) {
            struct conn *c = &conns[i];
            if (!fds[i].revents)
                continue;
            ssize_t r = read(c->fd, c->buf + c->len, BUF_MAX - 1 - c->len);
            if (r <= 0) {
                fprintf(stderr, "burst: %s: connection %s\n", c->session_id,
                        r == 0 ? "closed" : strerror(errno));
                return 1;
            }
            c->len += (size_t)r;
            int status = 0, got;
            while (c->phase != DONE && (got = take_response(c, &status, body, sizeof body)) != 0) {
                if (got < 0) {
                    fprintf(stderr, "burst: %s: a malformed response\n", c->session_id);
                    return 1;
                }
                if (on_response(c, status, body, host, key, t0) != 0)
                    return 1;
                if (c->phase == DONE) {
                    left--;
                    fds[i].fd = -1; /* poll ignores it from now on */
                }
            }
        }
    }
    double total = 0;
    printf("start %lld\n", (long long)wall.tv_sec * 1000 + wall.tv_nsec / 1000000);
    for (size_t i = 0; i < n; i++) {
        printf("%.3f %s %s\n", conns[i].done_ms, conns[i].state, conns[i].message_id);
        if (conns[i].done_ms > total)
            total = conns[i].done_ms;
        close(conns[i].fd);
    }
    printf("total %.3f\n", total);
    free(conns);
    free(fds);
    return 0;
}
