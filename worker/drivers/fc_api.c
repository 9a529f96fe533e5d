/*
 * fc_api.c: the HTTP/1.1-over-Unix-socket client of Firecracker's API (see fc_api.h).
 *
 * Every wait is bounded by one deadline per request: a wedged VMM must turn into an error the
 * worker can act on, never into a worker thread blocked forever.
 */
#include "clock.h"
#include "drivers/fc_api.h"

#include <jansson.h>

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* Firecracker's answers are small JSON documents; anything bigger is not Firecracker. */
#define FC_RESPONSE_MAX (1024 * 1024)

static int remaining_ms(long long deadline)
{
    long long left = deadline - clock_mono_ms();
    return left > 0 ? (int)left : 0;
}

void fc_response_clear(struct fc_response *resp)
{
    free(resp->body);
    resp->body = NULL;
    resp->body_len = 0;
    resp->status = 0;
}

/* Waits until fd is ready for events or the deadline passes. Returns 0, or -1 on timeout/error. */
static int wait_fd(int fd, short events, long long deadline)
{
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = events};
        int left = remaining_ms(deadline);
        if (left == 0)
            return -1;
        int n = poll(&pfd, 1, left);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

static int connect_unix(const char *sock_path, long long deadline, char *err, size_t errlen)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(sock_path) >= sizeof addr.sun_path) {
        snprintf(err, errlen, "API socket path too long (%zu bytes): %s", strlen(sock_path),
                 sock_path);
        return -1;
    }
    strcpy(addr.sun_path, sock_path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    /* A non-blocking Unix connect fails with EAGAIN when the listener's backlog is full;
     * that is transient, so retry until the deadline. */
    for (;;) {
        if (connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0)
            return fd;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN && remaining_ms(deadline) > 0) {
            struct timespec pause = {0, 10 * 1000 * 1000};
            nanosleep(&pause, NULL);
            continue;
        }
        snprintf(err, errlen, "connect %s: %s", sock_path, strerror(errno));
        close(fd);
        return -1;
    }
}

static int write_all(int fd, const char *buf, size_t len, long long deadline, char *err,
                     size_t errlen)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (wait_fd(fd, POLLOUT, deadline) == 0)
                continue;
            snprintf(err, errlen, "timed out sending the request");
            return -1;
        }
        snprintf(err, errlen, "send: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* A growing receive buffer, always NUL-terminated. */
struct recv_buf {
    char *data;
    size_t len;
    size_t cap;
};

/* Reads what is available into rb. Returns bytes read, 0 at EOF, -1 on error or timeout. */
static ssize_t recv_some(int fd, struct recv_buf *rb, long long deadline, char *err, size_t errlen)
{
    if (rb->cap - rb->len < 4096 + 1) {
        size_t cap = rb->cap ? rb->cap * 2 : 8192;
        if (cap > FC_RESPONSE_MAX + 8192) {
            snprintf(err, errlen, "response larger than %d bytes", FC_RESPONSE_MAX);
            return -1;
        }
        char *grown = realloc(rb->data, cap);
        if (!grown) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        rb->data = grown;
        rb->cap = cap;
    }
    for (;;) {
        ssize_t n = recv(fd, rb->data + rb->len, rb->cap - rb->len - 1, 0);
        if (n >= 0) {
            rb->len += (size_t)n;
            rb->data[rb->len] = '\0';
            return n;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (wait_fd(fd, POLLIN, deadline) == 0)
                continue;
            snprintf(err, errlen, "timed out waiting for the response");
            return -1;
        }
        snprintf(err, errlen, "recv: %s", strerror(errno));
        return -1;
    }
}

/* Finds "Content-Length:" among the header lines [headers, end). Returns -1 when absent. */
static long long header_content_length(const char *headers, const char *end)
{
    const char *line = headers;
    while (line < end) {
        const char *eol = strstr(line, "\r\n");
        if (!eol || eol > end)
            eol = end;
        static const char name[] = "content-length:";
        if ((size_t)(eol - line) > sizeof name - 1 && strncasecmp(line, name, sizeof name - 1) == 0)
            return strtoll(line + sizeof name - 1, NULL, 10);
        line = eol + 2;
    }
    return -1;
}

static int parse_status_line(const char *data, int *status)
{
    int major, minor, code;
    if (sscanf(data, "HTTP/%d.%d %d", &major, &minor, &code) != 3 || code < 100 || code > 599)
        return -1;
    *status = code;
    return 0;
}

static int read_response(int fd, long long deadline, struct fc_response *resp, char *err,
                         size_t errlen)
{
    struct recv_buf rb = {0};
    char *header_end = NULL;
    while (!(header_end = rb.data ? strstr(rb.data, "\r\n\r\n") : NULL)) {
        ssize_t n = recv_some(fd, &rb, deadline, err, errlen);
        if (n <= 0) {
            if (n == 0)
                snprintf(err, errlen, "connection closed before a complete response");
            free(rb.data);
            return -1;
        }
    }
    int status;
    if (parse_status_line(rb.data, &status) != 0) {
        snprintf(err, errlen, "malformed status line: %.60s", rb.data);
        free(rb.data);
        return -1;
    }
    size_t body_start = (size_t)(header_end + 4 - rb.data);
    long long content_length = header_content_length(rb.data, header_end + 2);
    bool no_body = status == 204 || status == 304 || status < 200;
    if (no_body)
        content_length = 0;
    if (content_length > FC_RESPONSE_MAX) {
        snprintf(err, errlen, "response body of %lld bytes is too large", content_length);
        free(rb.data);
        return -1;
    }
    /* Without Content-Length the body ends when the server closes the connection. */
    while (content_length < 0 || rb.len - body_start < (size_t)content_length) {
        ssize_t n = recv_some(fd, &rb, deadline, err, errlen);
        if (n < 0) {
            free(rb.data);
            return -1;
        }
        if (n == 0) {
            if (content_length < 0)
                break;
            snprintf(err, errlen, "connection closed after %zu of %lld body bytes",
                     rb.len - body_start, content_length);
            free(rb.data);
            return -1;
        }
    }
    size_t body_len = content_length >= 0 ? (size_t)content_length : rb.len - body_start;
    memmove(rb.data, rb.data + body_start, body_len);
    rb.data[body_len] = '\0';
    resp->status = status;
    resp->body = rb.data;
    resp->body_len = body_len;
    return 0;
}

int fc_api_request(const char *sock_path, const char *method, const char *path,
                   const char *json_body, int timeout_ms, struct fc_response *resp, char *err,
                   size_t errlen)
{
    long long deadline = clock_mono_ms() + timeout_ms;
    char local_err[256];
    memset(resp, 0, sizeof *resp);
    int fd = connect_unix(sock_path, deadline, local_err, sizeof local_err);
    if (fd < 0) {
        snprintf(err, errlen, "%s %s: %s", method, path, local_err);
        return -1;
    }
    size_t body_len = json_body ? strlen(json_body) : 0;
    char head[512];
    int head_len;
    if (json_body)
        head_len = snprintf(head, sizeof head,
                            "%s %s HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n"
                            "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                            method, path, body_len);
    else
        head_len = snprintf(head, sizeof head,
                            "%s %s HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n\r\n",
                            method, path);
    int rc = -1;
    if (head_len < 0 || (size_t)head_len >= sizeof head)
        snprintf(local_err, sizeof local_err, "request line too long");
    else if (write_all(fd, head, (size_t)head_len, deadline, local_err, sizeof local_err) == 0 &&
             write_all(fd, json_body ? json_body : "", body_len, deadline, local_err,
                       sizeof local_err) == 0 &&
             read_response(fd, deadline, resp, local_err, sizeof local_err) == 0)
        rc = 0;
    close(fd);
    if (rc != 0)
        snprintf(err, errlen, "%s %s: %s", method, path, local_err);
    return rc;
}

void fc_api_fault_message(const char *body, char *out, size_t outlen)
{
    json_t *doc = json_loads(body ? body : "", JSON_DECODE_ANY, NULL);
    const char *fault = doc ? json_string_value(json_object_get(doc, "fault_message")) : NULL;
    snprintf(out, outlen, "%s", fault ? fault : (body && body[0] ? body : "(no body)"));
    json_decref(doc);
}

int fc_api_put(const char *sock_path, const char *path, const char *json_body, int timeout_ms,
               char *err, size_t errlen)
{
    struct fc_response resp;
    if (fc_api_request(sock_path, "PUT", path, json_body, timeout_ms, &resp, err, errlen) != 0)
        return -1;
    int rc = 0;
    if (resp.status < 200 || resp.status > 299) {
        char fault[512];
        fc_api_fault_message(resp.body, fault, sizeof fault);
        snprintf(err, errlen, "PUT %s: HTTP %d: %s", path, resp.status, fault);
        rc = -1;
    }
    fc_response_clear(&resp);
    return rc;
}
