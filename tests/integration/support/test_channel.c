/*
 * test_channel.c: line I/O on a Sandbox's agent channel for the integration tests
 * (test_channel.h).
 */
#include "test_channel.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int test_channel_open(struct test_channel *ch, int fd, const char *label, size_t cap)
{
    if (!ch->buf) {
        if (!(ch->buf = malloc(cap)))
            return -1;
        ch->cap = cap;
    }
    ch->fd = fd;
    ch->label = label;
    ch->len = 0;
    return 0;
}

static int write_all(int fd, const char *data, size_t len)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(fd, data + off, len - off);
        if (n > 0) {
            off += (size_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            poll(&p, 1, 100);
        } else {
            return -1;
        }
    }
    return 0;
}

int test_channel_send(struct test_channel *ch, const char *line)
{
    return write_all(ch->fd, line, strlen(line)) == 0 ? write_all(ch->fd, "\n", 1) : -1;
}

json_t *test_channel_read_until(struct test_channel *ch, const char *key, int timeout_ms)
{
    int64_t deadline = mono_ms() + timeout_ms;
    for (;;) {
        char *nl = ch->len ? memchr(ch->buf, '\n', ch->len) : NULL;
        if (nl) {
            *nl = '\0';
            json_t *msg = json_loads(ch->buf, 0, NULL);
            size_t used = (size_t)(nl - ch->buf) + 1;
            fprintf(stderr, "  %s: %.600s\n", ch->label, ch->buf);
            memmove(ch->buf, ch->buf + used, ch->len - used);
            ch->len -= used;
            if (msg && json_is_object(msg) && json_object_get(msg, key))
                return msg;
            json_decref(msg);
            continue;
        }
        int64_t left = deadline - mono_ms();
        if (left <= 0 || ch->len == ch->cap)
            return NULL;
        struct pollfd p = {.fd = ch->fd, .events = POLLIN};
        poll(&p, 1, (int)left);
        ssize_t n = read(ch->fd, ch->buf + ch->len, ch->cap - ch->len);
        if (n == 0)
            return NULL;
        if (n > 0)
            ch->len += (size_t)n;
    }
}

void test_channel_free(struct test_channel *ch)
{
    free(ch->buf);
    ch->buf = NULL;
    ch->len = ch->cap = 0;
}
