/*
 * fuzz_agent_channel.c: libFuzzer target for the worker's end of the agent channel
 * (worker/sandbox/agent_channel.c), which reads what untrusted agent code writes. The input is
 * written to one end of a socketpair and the channel reads the other under a real libevent loop.
 * The first byte picks the line limit (so the over-limit path is reached with small inputs) and
 * whether the owner frees the channel from inside on_line, as the worker does when a reply ends
 * a Sandbox. Each delivered line must be a JSON object; the channel must report closed exactly
 * once, and not after being freed.
 */
#include "sandbox/agent_channel.h"
#include "fuzz_common.h"

#include <event2/event.h>
#include <fcntl.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <unistd.h>

struct fuzz_owner {
    struct agent_channel *channel;
    struct event_base *base;
    bool free_on_line;
    int lines, closes;
};

static void on_line(void *arg, json_t *line)
{
    struct fuzz_owner *o = arg;
    FUZZ_CHECK(o->channel != NULL && o->closes == 0);
    FUZZ_CHECK(json_is_object(line));
    o->lines++;
    if (o->free_on_line && o->lines == 2) {
        agent_channel_free(o->channel);
        o->channel = NULL;
        event_base_loopbreak(o->base);
    }
}

static void on_closed(void *arg, const char *reason)
{
    struct fuzz_owner *o = arg;
    FUZZ_CHECK(o->channel != NULL);
    FUZZ_CHECK(reason != NULL && reason[0] != '\0');
    o->closes++;
    FUZZ_CHECK(o->closes == 1);
    event_base_loopbreak(o->base);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1 || size > 60000) /* must fit in the socket buffer: written before reading */
        return 0;
    int sv[2];
    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
    int sndbuf = 1 << 20;
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);

    struct fuzz_owner o = {.base = event_base_new(), .free_on_line = data[0] & 0x80};
    FUZZ_CHECK(o.base != NULL);
    size_t max_line = 8 + (size_t)(data[0] & 0x7f) * 16;
    struct agent_channel_handlers h = {on_line, on_closed, &o};
    o.channel = agent_channel_new(o.base, sv[0], max_line, &h);
    FUZZ_CHECK(o.channel != NULL);

    size_t off = 1;
    while (off < size) {
        ssize_t w = write(sv[1], data + off, size - off);
        FUZZ_CHECK(w > 0);
        off += (size_t)w;
    }
    close(sv[1]); /* EOF after the bytes: the channel must report closed */
    /* A bounded number of loop turns: each reads at most the socket's backlog. */
    for (int turn = 0; turn < 64 && o.channel && o.closes == 0; turn++)
        event_base_loop(o.base, EVLOOP_ONCE);
    if (o.channel)
        FUZZ_CHECK(o.closes == 1); /* everything was read and EOF seen */
    agent_channel_free(o.channel);
    event_base_free(o.base);
    return 0;
}
