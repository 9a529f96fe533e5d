/*
 * agent_channel.c: JSON lines over a bufferevent (agent_channel.h). A line that does not parse,
 * or one longer than the reply limit, means the agent side cannot be trusted any more: the
 * channel reports it closed and the worker replaces the Sandbox. Lines are written to the socket
 * at once when nothing is queued (no wait for the loop's next turn); the rest is buffered.
 */
#include "sandbox/agent_channel.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/util.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

struct agent_channel {
    struct bufferevent *bev;
    size_t max_line;
    struct agent_channel_handlers h;
    bool closed;
    bool in_read;      /* channel_read is running: a free from a callback must wait for it */
    bool free_pending; /* agent_channel_free was called from such a callback */
};

static void channel_close(struct agent_channel *c, const char *reason)
{
    if (c->closed)
        return;
    c->closed = true;
    bufferevent_disable(c->bev, EV_READ | EV_WRITE);
    c->h.on_closed(c->h.arg, reason);
}

static void channel_read(struct bufferevent *bev, void *arg)
{
    struct agent_channel *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    c->in_read = true;
    while (!c->free_pending && !c->closed) {
        size_t len;
        char *line = evbuffer_readln(in, &len, EVBUFFER_EOL_LF);
        if (!line) {
            if (evbuffer_get_length(in) > c->max_line)
                channel_close(c, "agent line longer than the reply limit");
            break;
        }
        if (len > c->max_line) {
            free(line);
            channel_close(c, "agent line longer than the reply limit");
            break;
        }
        if (len == 0) {
            free(line);
            continue;
        }
        json_error_t err;
        /* Duplicate keys are valid JSON (RFC 8259 only says names SHOULD be unique): the last
         * one wins, as sbx-agent, which relays the App's lines, does not refuse them either. */
        json_t *obj = json_loadb(line, len, 0, &err);
        free(line);
        if (!json_is_object(obj)) {
            json_decref(obj);
            channel_close(c, "agent wrote a line that is not a JSON object");
            break;
        }
        c->h.on_line(c->h.arg, obj);
        json_decref(obj);
    }
    c->in_read = false;
    if (c->free_pending)
        agent_channel_free(c);
}

static void channel_event(struct bufferevent *bev, short what, void *arg)
{
    struct agent_channel *c = arg;
    (void)bev;
    if (what & BEV_EVENT_EOF)
        channel_close(c, "agent channel closed");
    else if (what & BEV_EVENT_ERROR)
        channel_close(c, "agent channel error");
}

struct agent_channel *agent_channel_new(struct event_base *base, int fd, size_t max_line,
                                        const struct agent_channel_handlers *h)
{
    struct agent_channel *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    /* Sends write directly (agent_channel_send): they must never block the loop. */
    if (evutil_make_socket_nonblocking(fd) != 0) {
        free(c);
        return NULL;
    }
    c->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!c->bev) {
        free(c);
        return NULL;
    }
    c->max_line = max_line;
    c->h = *h;
    bufferevent_setcb(c->bev, channel_read, NULL, channel_event, c);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    return c;
}

int agent_channel_send(struct agent_channel *c, const char *line, size_t len)
{
    if (c->closed)
        return -1;
    /* Out at once when nothing is queued before it: bufferevent_write only arms the write event,
     * so the line would leave on the loop's next turn, after whatever store commit the caller
     * makes next (the message would wait for the Sandbox's `running` commit). What the socket
     * does not take now, and any error, goes through the bufferevent as before (an error is then
     * reported by channel_event). Order is kept: a direct write only when the buffer is empty. */
    struct evbuffer *out = bufferevent_get_output(c->bev);
    size_t sent = 0;
    if (evbuffer_get_length(out) == 0) {
        struct iovec iov[2] = {{(void *)line, len}, {(void *)"\n", 1}};
        ssize_t n;
        do
            n = writev(bufferevent_getfd(c->bev), iov, 2);
        while (n < 0 && errno == EINTR);
        if (n > 0)
            sent = (size_t)n;
    }
    if (sent >= len + 1)
        return 0;
    if (sent < len && bufferevent_write(c->bev, line + sent, len - sent) != 0)
        return -1;
    if (bufferevent_write(c->bev, "\n", 1) != 0)
        return -1;
    return 0;
}

void agent_channel_free(struct agent_channel *c)
{
    if (!c)
        return;
    if (c->in_read) {
        /* Called from a line or close callback inside channel_read: it frees on its way out. */
        c->free_pending = true;
        bufferevent_disable(c->bev, EV_READ | EV_WRITE);
        return;
    }
    bufferevent_free(c->bev);
    free(c);
}
