/*
 * test_channel.c: line I/O on a Sandbox's agent channel for the integration tests
 * (test_channel.h).
 */
#include "test_channel.h"
#include "clock.h"
#include "drivers/shared.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int test_channel_open(struct test_channel *ch, int fd, const char *label, size_t cap)
{
    if (!ch->line) {
        if (!(ch->line = malloc(cap)))
            return -1;
        ch->cap = cap;
    }
    ch->fd = fd;
    ch->label = label;
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
    int64_t deadline = clock_mono_ms() + timeout_ms;
    for (;;) {
        size_t len;
        if (driver_read_line(ch->fd, deadline, NULL, NULL, ch->line, ch->cap, &len) !=
            DRIVER_LINE_OK)
            return NULL;
        fprintf(stderr, "  %s: %.600s\n", ch->label, ch->line);
        json_t *msg = json_loadb(ch->line, len, 0, NULL);
        if (json_is_object(msg) && json_object_get(msg, key))
            return msg;
        json_decref(msg);
    }
}

void test_channel_free(struct test_channel *ch)
{
    free(ch->line);
    ch->line = NULL;
    ch->cap = 0;
}
